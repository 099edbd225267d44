"""Reading a jsonl file in blocks and chunks, and the rows a reader finds in them: what an
import in several processes (`num_proc`) relies on for the ids and errors of a single pass; which
sources are shared and how the setting is chosen; record batches and the first problem of an
import in row order."""

import orjson
import pytest

from caseshelf.adapters import sources
from caseshelf.adapters.sources import SourceReader, UrlPolicy, smart_opener
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.recipe import CsvSource, JsonlSource

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")
RECIPE = {
    "id": "mini",
    "version": "1.0.0",
    "category": "qa",
    "source": {"kind": "jsonl"},
    "mapping": {
        "task_field": "q",
        "answer_field": "a|after:####|strip",
        "tag_fields": ["level"],
        "details_fields": {"solution": "{a}"},
    },
}


@pytest.fixture
def svc(tmp_path):
    return build(load_settings({}, home=str(tmp_path / "home")))


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": 1}\n{"a": 2}\n',
        b'{"a": 1}\n{"a": 2}',
        b'\n\n{"a": 1}\r\n\r\n  \n\t{"a": 2}\n \x0b\n',
        b'  {"a": 1}\n\x0c\n{"a": 2}\n\t',
        b'{"a": 1}\n   ',
        b"",
        b"  \n",
        b"\n",
        b" ",
    ],
)
def test_a_counted_block_has_the_lines_and_rows_a_reader_finds(tmp_path, data):
    # Given a block after one row, with or without blank and whitespace-only lines
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"x": 0}\n' + data)
    # When its rows are counted without parsing them, and read
    counted = sources.Tally(1, 1)
    sources.count_rows(path, 9, 9 + len(data), counted)
    read = sources.Tally(1, 1)
    rows = list(sources._jsonl_part(path, "rows", 9, None, read))
    # Then the count is where a reader ends
    assert counted == read
    assert read.rows == 1 + len(rows)


def test_counting_a_line_that_never_ends_refuses_it_as_reading_does(tmp_path, monkeypatch):
    # (a line past the limit is never held whole, by a reader or a counter)
    monkeypatch.setattr(sources, "READ_CHUNK", 8)
    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 100)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"q": "a"}\n{"q": "' + b"x" * 500 + b'"}\n')
    with pytest.raises(TooLarge, match="longer than 100 bytes"):
        sources.count_rows(path, 0, path.stat().st_size, sources.Tally())


def test_blocks_start_just_past_a_line_end(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"aaaa\nbb\ncccccccc\nd\n")
    assert sources.block_starts(path, 21, 3) == [0, 5, 17, 21]
    assert sources.block_starts(path, 21, 100) == [0, 21]
    path.write_bytes(b'{"q": "a"}\n')
    assert sources.block_starts(path, 11, 1) == [0, 11]
    path.write_bytes(b'{"q": "a"}\n{"q": "b"}')
    assert sources.block_starts(path, 21, 1) == [0, 11, 21]


def test_only_a_plain_local_jsonl_file_of_several_blocks_is_shared(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "SPLIT_BLOCK_BYTES", 8)
    reader = SourceReader(smart_opener())
    big = tmp_path / "big.jsonl"
    big.write_bytes(b'{"a": 1}\n' * 10)
    jsonl = JsonlSource(kind="jsonl", url=str(big))
    # A plain local jsonl file of several blocks, with num_proc above 1 and no limit
    assert reader.offload(jsonl, num_proc=2) is not None
    # Not by default, nor with a limit, nor for any other source
    assert reader.offload(jsonl) is None
    assert reader.offload(jsonl, num_proc=2, limit=5) is None
    assert reader.offload(CsvSource(kind="csv", url=str(big)), num_proc=2) is None
    assert reader.offload(JsonlSource(kind="jsonl", text="{}\n" * 10), num_proc=2) is None
    remote = JsonlSource(kind="jsonl", url="https://example.org/x.jsonl")
    assert reader.offload(remote, num_proc=2) is None
    missing = JsonlSource(kind="jsonl", url=str(tmp_path / "missing.jsonl"))
    assert reader.offload(missing, num_proc=2) is None
    gz = tmp_path / "big.jsonl.gz"
    gz.write_bytes(big.read_bytes())
    assert reader.offload(JsonlSource(kind="jsonl", url=str(gz)), num_proc=2) is None
    fenced = SourceReader(smart_opener(), UrlPolicy(allow_local=False))
    assert fenced.offload(jsonl, num_proc=2) is None
    # Nor a file of one block
    monkeypatch.setattr(sources, "SPLIT_BLOCK_BYTES", 1 << 20)
    assert reader.offload(jsonl, num_proc=2) is None


def test_num_proc_is_one_unless_set_and_always_one_on_aws_and_in_a_lambda(tmp_path):
    assert load_settings({}).num_proc == 1
    assert load_settings({"CASESHELF_NUM_PROC": "2"}).num_proc == 2
    assert load_settings({}, num_proc=4).num_proc == 4
    lam = {"AWS_LAMBDA_FUNCTION_NAME": "caseshelf-importer", "CASESHELF_NUM_PROC": "2"}
    assert load_settings(lam).num_proc == 1
    assert load_settings(lam, num_proc=4).num_proc == 1
    aws = {"CASESHELF_BACKEND": "aws", "CASESHELF_BUCKET": "b", "CASESHELF_TABLE": "t"}
    assert load_settings({**aws, "CASESHELF_NUM_PROC": "2"}).num_proc == 1
    with pytest.raises(BadRequest, match="setting CASESHELF_NUM_PROC") as exc:
        load_settings({"CASESHELF_NUM_PROC": "0"})
    assert exc.value.fields["field"] == "num_proc"
    svc = build(load_settings({}, home=str(tmp_path / "home"), num_proc=3))
    assert svc.imports.num_proc == 3


def test_batches_close_at_a_row_count_or_a_byte_size():
    from caseshelf.domain.mapping import record_batches
    from caseshelf.domain.recipe import parse_recipe

    recipe = parse_recipe(RECIPE)
    rows = [(i, {"q": "x" * 100, "a": "#### 1", "level": "easy"}) for i in range(10)]
    by_rows = list(record_batches(iter(rows), recipe, max_case_bytes=10_000, batch_rows=4))
    by_bytes = list(record_batches(iter(rows), recipe, max_case_bytes=10_000, batch_bytes=500))
    assert [len(b.ids) for b in by_rows] == [4, 4, 2]  # (the first batch is at most 100)
    assert all(len(b.ids) <= 3 for b in by_bytes) and sum(len(b.ids) for b in by_bytes) == 10
    assert b"".join(b.data for b in by_rows) == b"".join(b.data for b in by_bytes)
    first = by_rows[0]
    assert first.data.split(b"\n")[:-1] and len(first.data) == sum(first.lengths) + 4
    assert first.tags == [["easy"]] * 4


@pytest.mark.parametrize("chunk", [1, 5, 7, 64, 1 << 20])
def test_jsonl_read_in_chunks_keeps_rows_and_line_numbers(tmp_path, monkeypatch, chunk):
    # Given lines that straddle chunk edges, blank lines, CRLF and no final newline
    monkeypatch.setattr(sources, "READ_CHUNK", chunk)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"q": "a"}\r\n\n  \n{"q": "b\\u00e9"}\n{"q": "c"}')
    reader = SourceReader(smart_opener())
    # Then every row comes out once, in order, numbered by row
    got = list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))
    assert got == [(0, {"q": "a"}), (1, {"q": "b\u00e9"}), (2, {"q": "c"})]
    # And a bad line is named by its line number, blank lines counted
    path.write_bytes(b'{"q": "a"}\n\n{"q": "b"}\n[1]\n')
    with pytest.raises(BadRequest, match="line 4: a row must be a JSON object"):
        list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))


def test_a_line_longer_than_many_chunks_is_read_whole_and_one_that_never_ends_is_refused(
    tmp_path, monkeypatch
):
    # Given rows far longer than a read, between short ones, and no final newline
    monkeypatch.setattr(sources, "READ_CHUNK", 8)
    long_q = "x" * 500
    path = tmp_path / "rows.jsonl"
    long_row = orjson.dumps({"q": long_q})
    path.write_bytes(b'{"q": "a"}\n' + long_row + b'\n{"q": "b"}\n' + long_row)
    reader = SourceReader(smart_opener())
    # Then each long row comes out whole, numbered in order
    got = list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))
    assert got == [(0, {"q": "a"}), (1, {"q": long_q}), (2, {"q": "b"}), (3, {"q": long_q})]
    # And a line that goes on past the limit is refused while it is read, not held
    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 100)
    with pytest.raises(TooLarge, match="longer than 100 bytes"):
        list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))


@pytest.mark.parametrize("batch_rows", [1, 3, 1000])
def test_the_first_problem_in_row_order_is_the_one_reported(svc, batch_rows):
    # (the mapper checks sizes and the ids of a batch; the registry every id of the import)
    from caseshelf.domain.mapping import record_batches
    from caseshelf.domain.recipe import parse_recipe

    recipe = parse_recipe({**RECIPE, "mapping": {**RECIPE["mapping"], "id_field": "id"}})

    def rows(*specs):
        out = []
        for i, (cid, q) in enumerate(specs):
            row = {"id": cid, "q": q, "a": "#### 1", "level": "easy"}
            if q is None:
                del row["q"]  # a row that does not map
            out.append((i, row))
        return iter(out)

    def first_error(*specs, limit=200):
        batches = record_batches(rows(*specs), recipe, max_case_bytes=limit, batch_rows=batch_rows)
        with pytest.raises((BadRequest, TooLarge)) as exc:
            svc.registry.register_records(
                ME,
                name="mini",
                version=None,
                bump="minor",
                description="",
                tags=[],
                produced_by=None,
                records=batches,
            )
        assert svc.registry.index.list_versions(ME.tenant, "dataset", "mini") == []
        return exc.value.detail

    big = "x" * 300
    # A repeated id before a row that does not map, within a batch or across batches
    assert first_error(("a", "q"), ("b", "q"), ("a", "q"), ("c", None)) == (
        "rows 0 and 2 both map to case id 'a'"
    )
    # A case over the limit before a repeated id, and the other way round
    assert first_error(("a", "q"), ("b", big), ("a", "q")).startswith("row 1: case 'b' is")
    assert first_error(("a", "q"), ("a", "q"), ("b", big)) == "rows 0 and 1 both map to case id 'a'"
    # A row both over the limit and repeating an id is named by its size, wherever the
    # batches end
    assert first_error(("a", "q"), ("a", big), ("b", big)).startswith("row 1: case 'a' is")
    # A row that does not map before any other problem
    assert first_error(("a", None), ("a", big)).startswith("row 0: missing field 'q'")
    # A repeated id right before a case over the limit or a row that does not map, in the
    # same batch as those or not
    assert first_error(("a", "q"), ("b", "q"), ("a", "q"), ("c", big)) == (
        "rows 0 and 2 both map to case id 'a'"
    )
    assert first_error(("a", "q"), ("b", "q"), ("b", "q"), ("c", None)) == (
        "rows 1 and 2 both map to case id 'b'"
    )
    # Nothing wrong: every row comes out, in batches
    got = list(record_batches(rows(("a", "q"), ("b", "q")), recipe, max_case_bytes=200))
    assert [cid for b in got for cid in b.ids] == ["a", "b"]
