"""A download document cut into its records without parsing it (`document_content`): the same
records and content digest as parsing it (`fetched_content`), or None where the cut cannot be
made, never another digest passed off as the document's."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from caseshelf.domain.cached import document_content, fetched_content
from caseshelf.domain.canonical import canonical_json

pytestmark = pytest.mark.unit

ODD = 'a "quoted" },{"id":"x"} \\ line\nbreak, é ✓ ],"description":'


def document(cases: list[dict[str, Any]], **rest: Any) -> bytes:
    return canonical_json(
        {"id": "d", "version": "1.0.0", "description": "", **rest, "cases": cases}
    )


def parsed(body: bytes) -> tuple[list[bytes], str]:
    content, got = fetched_content(orjson.loads(body))
    return content.records, got.content_digest


def cut(body: bytes) -> tuple[list[bytes], str]:
    got = document_content(body)
    assert got is not None
    return got[0].records, got[1]


@pytest.mark.parametrize(
    "cases",
    [
        [],
        [{"id": "only"}],
        [{"id": f"c{i}", "inputs": {"user": f"q {i}"}, "tags": ["t"]} for i in range(50)],
        # strings that look like the separators, ids with escapes, nested lists of objects
        [{"id": 'a"b\\c', "inputs": {"user": ODD}}, {"id": ODD, "metadata": {"k": [ODD]}}],
        [
            {
                "expectations": {"ground_truth": "4"},
                "id": f"chat-{i}",
                "inputs": {"messages": [{"content": "hi", "role": "user"}, {"role": "x"}]},
                "metadata": {"refs": [{"name": "r1"}, {"name": "r2"}], "id": "meta"},
            }
            for i in range(5)
        ],
    ],
)
def test_the_cut_is_the_parse(cases: list[dict[str, Any]]) -> None:
    body = document(cases, tags=["x"], description='desc ],"description":')
    assert cut(body) == parsed(body)


def test_shared_files_come_back_by_digest() -> None:
    body = document([{"id": "a"}], shared_files=[{"dest": "README", "text": "read me"}])
    got = document_content(body)
    assert got is not None
    content, digest = got
    assert digest == parsed(body)[1]
    assert list(content.files.values()) == [b"read me"]
    assert content.shared_files[0]["dest"] == "README"


def test_where_it_cannot_cut_it_says_so_or_its_digest_differs() -> None:
    # inline case files are not the stored records: the caller parses the document
    with_files = document([{"id": "a", "files": {"x.txt": {"text": "hi"}}}])
    assert document_content(with_files) is None
    # not a download document at all
    assert document_content(b'{"id":"d"}') is None
    assert document_content(b"") is None
    # an id nested in a key sorted before the case's own: no digest passes for the version's
    nested = document([{"expectations": {"id": "e"}, "id": "a"}, {"id": "b"}])
    got = document_content(nested)
    assert got is None or got[1] != parsed(nested)[1]
    # lists of objects whose first key is one a case starts with: the same
    lists = document([{"id": "a", "metadata": {"x": [{"id": "1"}, {"id": "2"}]}}])
    got = document_content(lists)
    assert got is None or got[1] != parsed(lists)[1]
    # a document whose bytes are not canonical (spaces): never its parse's digest by luck
    spaced = orjson.dumps(
        orjson.loads(document([{"id": "a"}, {"id": "b"}])), option=orjson.OPT_INDENT_2
    )
    got = document_content(spaced)
    assert got is None or got[1] != parsed(document([{"id": "a"}, {"id": "b"}]))[1]
