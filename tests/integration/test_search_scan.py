"""A text search of a version with no search index kept is a scan of its stored records
(`caseshelf.services.search_scan`); once the index is kept (a version's numbers make it), the
index answers. Every page (its cases, their order, its cursor, the span it covered) is the same
either way."""

from __future__ import annotations

from typing import Any

import pytest

from caseshelf.client import Client
from caseshelf.domain import layout
from caseshelf.domain.browse import id_matches, needle_of
from caseshelf.domain.errors import Corrupt
from caseshelf.services.search_index import index_key

pytestmark = pytest.mark.integration

TEXTS = [
    "Straße",  # folds to "strasse"
    "STRASSE",
    "Kelvin \u212a",  # the Kelvin sign folds to "k"
    "ΣΟΦΟΣ",  # the final sigma folds as any sigma
    'she said "truth": yes',  # a quote and a colon inside a value
    "back\\slash",
    "two\nlines",
    "plain",
]


def cases() -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = [
        {
            "id": f"t{i}",
            "inputs": {"user": t},
            "expectations": {"ground_truth": str(i)},
            "metadata": {"id": f"truth-{i}", "n": i},
        }
        for i, t in enumerate(TEXTS)
    ]
    body += [
        {
            "id": f"pad{i:04d}",
            "inputs": {"user": "filler" if i % 97 else f"common word {i}"},
            "expectations": {"ground_truth": "x"},
            "tags": ["truth"] if i % 500 == 0 else [],
        }
        for i in range(3000)
    ]
    body.append({"id": "last", "inputs": {"user": "rare"}, "files": {"docs/x.md": {"text": "a"}}})
    return body


SEARCHES = [
    ("strasse", "text"),
    ("ss", "any"),
    ("k", "text"),
    ("σοφοσ", "text"),
    ("truth", "text"),  # a key of every case, a nested id's value, a tag
    ("truth", "any"),
    ('"truth": yes', "text"),  # a quote: every record read
    ("back\\slash", "text"),
    ("lines", "text"),
    ("common word", "any"),
    ("word", "text"),
    ("rare", "any"),
    ("x.md", "text"),
    ("ground", "text"),  # only in keys
    ("pad000", "any"),
]


def pages(local: Client, q: str, by: str, limit: int) -> list[tuple[Any, ...]]:
    out, cursor = [], None
    while True:
        page = local.search_cases("scan@1.1.0", q, by=by, limit=limit, cursor=cursor)
        ids = tuple(c["id"] for c in page.items)
        out.append((ids, page.next_cursor, page.scanned_from, page.scanned_to))
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def test_the_scan_and_the_index_answer_the_same_pages(local: Client) -> None:
    # Given a version whose cases mostly reuse its base's records (two packs, interleaved),
    # read in small ranged reads
    body = cases()
    local.register("scan", cases=body, version="1.0.0")
    for i in range(0, len(body), 7):
        body[i] = {**body[i], "metadata": {"edited": f"edit {i}"}}
    local.register("scan", cases=body, version="1.1.0")
    services = local.transport.services  # type: ignore[attr-defined]
    services.registry.read_gap = 64
    rec = services.registry.get_version(
        local.transport.identity,  # type: ignore[attr-defined]
        "scan",
        "1.1.0",
    )
    key = index_key(rec.tenant, rec.content_digest)
    # When every search is paged with no index kept (the scan)
    scanned = {(q, by, n): pages(local, q, by, n) for q, by in SEARCHES for n in (2, 50)}
    assert not services.registry.store.exists(key)
    # And again once the version's numbers have made its index
    local.stats("scan@1.1.0")
    assert services.registry.store.exists(key)
    indexed = {(q, by, n): pages(local, q, by, n) for q, by in SEARCHES for n in (2, 50)}
    # Then every page is the same
    assert indexed == scanned
    # And the searches found what they should (not only the same nothing)
    first = scanned[("strasse", "text", 50)][0][0]
    assert first == ("t0", "t1")
    truth = [ids for page in scanned[("truth", "text", 50)] for ids in page[0]]
    assert truth == [f"t{i}" for i in range(1, 7)]  # the nested ids (t0, t7 edited), no key
    assert scanned[("ground", "text", 50)] == [((), None, 0, len(body))]
    assert scanned[("σοφοσ", "text", 50)][0][0] == ("t3",)
    kelvin = [ids for page in scanned[("k", "text", 50)] for ids in page[0]]
    assert kelvin[0] == "t2"
    # And a search by id finds what `id_matches` finds, page by page
    for q in ("PAD00", "d0", "t", "\u212a"):
        found = [ids for page in pages(local, q, "id", 7) for ids in page[0]]
        assert found == [c["id"] for c in body if id_matches(c["id"], needle_of(q))], q


def test_the_scan_refuses_a_damaged_record_it_would_answer(local: Client) -> None:
    # Given a version whose one matching record is damaged in its pack
    local.register("dmg", cases=cases(), version="1.0.0")
    services = local.transport.services  # type: ignore[attr-defined]
    registry = services.registry
    rec = registry.get_version(
        local.transport.identity,  # type: ignore[attr-defined]
        "dmg",
        "1.0.0",
    )
    manifest = registry.manifest(rec)
    last = len(manifest) - 1
    loc = manifest.location(last)
    pack = layout.pack_key(rec.tenant, loc.container)
    data = bytearray(registry.store.get(pack))
    at = data.index(b'"rare"', loc.offset)
    data[at + 1 : at + 5] = b"RARE"
    registry.store.put(pack, bytes(data), content_type="application/octet-stream")
    # When a search finds it, then it is refused as damaged, naming the case
    with pytest.raises(Corrupt) as err:
        local.search_cases("dmg@1.0.0", "rare", by="text")
    assert "'last'" in str(err.value)
