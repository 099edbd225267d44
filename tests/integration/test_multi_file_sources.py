"""Sources of several files: a directory, a glob and a list, read in a stable order, each row
carrying its file (`_file`) and its row in that file (`_row`); on the real MMLU CSVs."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from caseshelf.adapters.sources import SourceReader, UrlPolicy, smart_opener
from caseshelf.domain.errors import BadRequest, Forbidden, NotFound
from caseshelf.domain.mapping import RowMapper
from caseshelf.domain.recipe import CsvSource, JsonlSource, parse_recipe

pytestmark = pytest.mark.integration

MMLU_COLUMNS = ["question", "A", "B", "C", "D", "answer"]


@pytest.fixture
def reader() -> SourceReader:
    return SourceReader(smart_opener())


def mmlu(url: str | list[str]) -> CsvSource:
    return CsvSource(kind="csv", url=url, header=False, columns=MMLU_COLUMNS)


def test_a_directory_reads_its_files_in_name_order(reader: SourceReader, shared_data: Path) -> None:
    rows = list(reader.rows(mmlu(str(shared_data / "mmlu" / "test"))))
    assert len(rows) == 200
    assert [i for i, _ in rows] == list(range(200))
    first, last = rows[0][1], rows[-1][1]
    assert (first["_file"], first["_row"]) == ("abstract_algebra_test", 0)
    assert (last["_file"], last["_row"]) == ("global_facts_test", 99)
    assert first["question"].startswith("Find the degree for the given field extension")


def test_a_glob_and_a_list(reader: SourceReader, shared_data: Path) -> None:
    root = shared_data / "mmlu"
    rows = list(reader.rows(mmlu(f"{root}/*/abstract_algebra_*.csv")))
    # sorted by path: dev, test, val
    assert [r["_file"] for _, r in rows[:1]] == ["abstract_algebra_dev"]
    assert {r["_file"] for _, r in rows} == {
        "abstract_algebra_dev",
        "abstract_algebra_test",
        "abstract_algebra_val",
    }
    assert len(rows) == 5 + 100 + 11
    # a list is read in the order given
    listed = [str(root / "val" / "abstract_algebra_val.csv"), str(root / "dev")]
    rows = list(reader.rows(mmlu(listed)))
    files = [r["_file"] for _, r in rows]
    assert files[0] == "abstract_algebra_val" and files[-1] == "machine_learning_dev"
    assert len(rows) == 11 + 5 + 5


def test_compressed_files_in_a_directory_and_hidden_ones_left_out(
    tmp_path: Path, reader: SourceReader
) -> None:
    (tmp_path / "b.jsonl").write_text('{"q": "b0"}\n')
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"q": "a0"}\n{"q": "a1"}\n'))
    (tmp_path / ".hidden.jsonl").write_text('{"q": "h"}\n')
    (tmp_path / "notes.txt").write_text("not rows")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.jsonl").write_text('{"q": "c0"}\n')
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "b.jsonl")
    rows = list(reader.rows(JsonlSource(kind="jsonl", url=str(tmp_path))))
    assert [(r["q"], r["_file"], r["_row"]) for _, r in rows] == [
        ("a0", "a", 0),
        ("a1", "a", 1),
        ("b0", "b", 0),
        ("c0", "c", 0),
    ]


def test_what_a_multi_file_source_refuses(tmp_path: Path, reader: SourceReader) -> None:
    with pytest.raises(NotFound, match="no file matches this pattern"):
        list(reader.rows(JsonlSource(kind="jsonl", url=f"{tmp_path}/*.jsonl")))
    with pytest.raises(NotFound, match=r"no \.jsonl/\.ndjson file in this directory"):
        list(reader.rows(JsonlSource(kind="jsonl", url=str(tmp_path))))
    (tmp_path / "a.jsonl").write_text('{"q": "a", "_file": "mine"}\n')
    with pytest.raises(BadRequest, match="row 0 has its own '_file' field"):
        list(reader.rows(JsonlSource(kind="jsonl", url=str(tmp_path))))
    # over the API (fenced), no local directory or glob is read
    fenced = SourceReader(smart_opener(), UrlPolicy(allow_local=False))
    with pytest.raises(Forbidden, match="local paths are not readable"):
        list(fenced.rows(JsonlSource(kind="jsonl", url=[str(tmp_path), "https://x.test/a"])))


def test_ids_and_tags_from_the_file_name(reader: SourceReader, shared_data: Path) -> None:
    recipe = parse_recipe(
        {
            "id": "mmlu",
            "version": "1.0.0",
            "category": "qa",
            "source": {"kind": "csv", "header": False, "columns": MMLU_COLUMNS},
            "mapping": {
                "id_template": "{_file|replace:_test:}-{_row}",
                "task_field": "question",
                "answer_field": "answer",
                "tag_fields": ["_file|replace:_test:"],
            },
        }
    )
    mapper = RowMapper(recipe)
    cases = [mapper(row, i) for i, row in reader.rows(mmlu(str(shared_data / "mmlu" / "test")))]
    assert cases[0]["id"] == "abstract_algebra-0" and cases[0]["tags"] == ["abstract_algebra"]
    assert cases[100]["id"] == "global_facts-0" and cases[100]["tags"] == ["global_facts"]
    assert len({c["id"] for c in cases}) == 200
