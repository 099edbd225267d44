"""Dataset files read a window of cases at a time (`stream_dataset`, `stream_dataset_from`):
the same document `load_dataset` gives, errors naming the line, legacy shapes folded in."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from caseshelf.domain.errors import BadRequest
from caseshelf.services import loaders
from caseshelf.services.loaders import load_dataset, stream_dataset, stream_dataset_from

pytestmark = pytest.mark.integration


def lines(n: int) -> str:
    return "".join(
        json.dumps({"id": f"c{i}", "inputs": {"user": f"q{i}"}}) + "\n" for i in range(n)
    )


def test_a_jsonl_file_streams_in_windows_the_cases_load_dataset_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaders, "STREAM_CASES", 7)
    path = tmp_path / "cases.jsonl"
    path.write_text(lines(30) + "\n\n", encoding="utf-8")
    stream = stream_dataset(path)
    windows = list(stream.batches)
    assert [len(w) for w in windows] == [7, 7, 7, 7, 2]
    assert stream.head == {}
    whole, _ = load_dataset(path)
    assert [c for w in windows for c in w] == whole["cases"]


def test_a_bad_line_is_named_in_whichever_window_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaders, "STREAM_CASES", 5)
    path = tmp_path / "cases.jsonl"
    path.write_text(lines(12) + "{not json\n", encoding="utf-8")
    with pytest.raises(BadRequest, match="line 13") as exc:
        list(stream_dataset(path).batches)
    assert exc.value.fields["row"] == 13


def test_legacy_shapes_are_folded_in_and_noted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loaders, "STREAM_CASES", 2)
    path = tmp_path / "cases.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"c{i}", "prompt": f"q{i}"}) + "\n" for i in range(5)),
        encoding="utf-8",
    )
    stream = stream_dataset(path)
    got = [c for w in stream.batches for c in w]
    assert got[4]["inputs"] == {"user": "q4"}
    assert len(stream.notices) == 1 and "dataset.legacy_item" in stream.notices[0]


def test_a_document_is_split_into_its_head_and_its_cases(tmp_path: Path) -> None:
    doc = {"id": "demo", "version": "1.0.0", "cases": [{"id": "a"}, {"id": "b"}]}
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    stream = stream_dataset(path)
    assert stream.head == {"id": "demo", "version": "1.0.0"}
    assert [c["id"] for w in stream.batches for c in w] == ["a", "b"]
    with pytest.raises(BadRequest, match="cases: Field required"):
        stream_dataset_from(io.BytesIO(b'{"id": "demo"}'), "demo.json")


def test_an_upload_is_read_from_its_stream_alone() -> None:
    stream = stream_dataset_from(io.BytesIO(lines(3).encode()), "cases.jsonl")
    assert [c["id"] for w in stream.batches for c in w] == ["c0", "c1", "c2"]
    lab = (
        b"apiVersion: lab/v1\nkind: Dataset\nmetadata: {name: x}\nspec: {path: ../../etc/x.yaml}\n"
    )
    with pytest.raises(BadRequest, match=r"spec\.path"):
        stream_dataset_from(io.BytesIO(lab), "x.yaml")
