"""A version's download document is rendered a window of cases at a time and streamed to the
store (a multipart upload on S3): byte for byte the document the whole version makes, and it
registers with the same content digest."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from caseshelf.domain import layout
from caseshelf.domain.canonical import canonical_json
from caseshelf.domain.identity import Identity
from caseshelf.services.objectio import write_pieces
from caseshelf.services.registry import parse_dataset
from caseshelf.services.registry import reads as registry_reads
from tests.conftest import Backend

pytestmark = pytest.mark.contract

ME = Identity("acme", "alice", frozenset())


def document(n: int, *, files: bool) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for i in range(n):
        case: dict[str, Any] = {"id": f"c{i:04d}", "inputs": {"user": f'q "{i}" é'}}
        if files:
            case["files"] = {
                "data/in.txt": {"text": f"input {i}\n"},
                "bin/blob": {"base64": base64.b64encode(bytes([i % 256, 0, 255])).decode()},
            }
        cases.append(case)
    doc: dict[str, Any] = {"id": "dl", "version": "1.0.0", "cases": cases, "tags": ["t"]}
    if files:
        doc["shared_files"] = [{"dest": "GRADING.md", "text": "Answer with a number.\n"}]
    return doc


@pytest.mark.parametrize("files", [False, True], ids=["plain", "with-files"])
def test_the_streamed_document_is_the_whole_one(
    backend: Backend, files: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a version spanning several render windows
    monkeypatch.setattr(registry_reads, "RENDER_WINDOW_CASES", 7)
    monkeypatch.setattr(registry_reads, "RENDER_WINDOW_FILES", 5)
    reg = backend.services.registry
    rec = reg.register(ME, parse_dataset(document(23, files=files))).record
    # When it is downloaded (the document streamed to the store)
    reg.download(ME, "dl", "1.0.0")
    stored = backend.store.get(layout.download_key("acme", rec.content_digest))
    # Then it is the canonical JSON of the whole document, with every case and file inline
    doc = orjson.loads(stored)
    assert canonical_json(doc) == stored
    assert [c["id"] for c in doc["cases"]] == [f"c{i:04d}" for i in range(23)]
    assert doc["cases"][3].get("files", {}).get("data/in.txt") == (
        {"text": "input 3\n"} if files else None
    )
    assert len(doc["shared_files"]) == (1 if files else 0)
    # And it registers anywhere as the same content
    again = reg.register(Identity("other", "bob", frozenset()), parse_dataset(doc))
    assert again.record.content_digest == rec.content_digest


def test_a_stream_larger_than_a_multipart_part_is_stored_whole(backend: Backend) -> None:
    # Given pieces adding up to more than boto3's multipart threshold (8 MiB)
    pieces = [bytes([65 + i % 26]) * (1 << 20) for i in range(10)] + [b"end"]
    # When they are streamed to the store
    write_pieces(backend.store, "t/acme/exports/downloads/big.json", iter(pieces))
    # Then the object is the pieces joined
    assert backend.store.get("t/acme/exports/downloads/big.json") == b"".join(pieces)
