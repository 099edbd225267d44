"""The Index contract, one suite for every backend (SQLite, DynamoDB on moto, moto server)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from caseshelf.domain.errors import BadRequest, Conflict, NotFound
from caseshelf.domain.versions import VersionRecord
from tests.conftest import Backend

pytestmark = pytest.mark.contract

DIGEST = "sha256:" + "a" * 64
ODD_JSON: dict[str, Any] = {
    "recipe": "gsm8k",
    "revision": "e53f048856ff4f594e959d75785d2c2d37b678ee",
    "score": 0.1,
    "tiny": 1e-300,
    "big": 2**62,
    "negative": -7,
    "flags": [True, False, None],
    "nested": {"ünïcødé": "日本語 ✓", "empty": {}, "list": [], "float_list": [1.5, 2.0, -0.0]},
}


def record(
    tenant: str = "acme", name: str = "ds", version: str = "1.0.0", **kw: Any
) -> VersionRecord:
    base = VersionRecord(
        tenant=tenant,
        kind="dataset",
        name=name,
        version=version,
        content_digest=DIGEST,
        manifest_key=f"t/{tenant}/manifests/{'a' * 64}.json",
        case_count=3,
        bytes=123,
        created_at="2026-11-30T10:00:00.000Z",
        created_by="alice",
        seq=1_700_000_000_000_000,
    )
    return replace(base, **kw)


def test_version_round_trips_exactly(backend: Backend) -> None:
    # Given a version row whose provenance and extra hold awkward JSON
    rec = record(
        description="a dataset — with ünïcødé",
        tags=("math", "grade-school"),
        version_tags=("stable",),
        produced_by=ODD_JSON,
        extra={"note": 0.25, "list": [1, "two", 3.5]},
    )
    # When it is committed and read back
    backend.index.put_version(rec)
    got = backend.index.get_version("acme", "dataset", "ds", "1.0.0")
    # Then every field is what was written, floats and key order included
    assert got == rec
    assert got is not None and got.produced_by is not None
    assert type(got.produced_by["score"]) is float
    assert list(got.produced_by) == list(ODD_JSON)


def test_missing_version_is_none(backend: Backend) -> None:
    assert backend.index.get_version("acme", "dataset", "ds", "1.0.0") is None
    assert backend.index.list_versions("acme", "dataset", "ds") == []


def test_put_version_is_conditional(backend: Backend) -> None:
    # Given a committed version
    backend.index.put_version(record())
    # When the same label is committed again with other content
    other = record(content_digest="sha256:" + "b" * 64, created_by="bob")
    with pytest.raises(Conflict):
        backend.index.put_version(other)
    # Then the first one stands
    got = backend.index.get_version("acme", "dataset", "ds", "1.0.0")
    assert got is not None and got.content_digest == DIGEST and got.created_by == "alice"


def test_racing_commits_of_one_label_have_one_winner(backend: Backend) -> None:
    # Given several writers ready to commit the same label with different content
    n = 6
    barrier = threading.Barrier(n)

    def commit(i: int) -> str:
        rec = record(content_digest=f"sha256:{i:064x}", created_by=f"writer{i}")
        barrier.wait()
        try:
            backend.index.put_version(rec)
            return "won"
        except Conflict:
            return "lost"

    # When they commit at once
    with ThreadPoolExecutor(n) as pool:
        outcomes = list(pool.map(commit, range(n)))
    # Then exactly one wins and its row is the one stored
    assert outcomes.count("won") == 1
    winner = outcomes.index("won")
    got = backend.index.get_version("acme", "dataset", "ds", "1.0.0")
    assert got is not None and got.created_by == f"writer{winner}"


def test_list_versions_returns_every_version_including_tombstones(backend: Backend) -> None:
    labels = ["1.0.0", "1.1.0", "2.0.0-rc.1", "draft"]
    for i, label in enumerate(labels):
        backend.index.put_version(record(version=label, seq=i))
    backend.index.put_version(record(name="ds2"))  # another dataset: not listed
    backend.index.put_version(record(name="ds", tenant="other"))  # another tenant: not listed
    backend.index.update_version("acme", "dataset", "ds", "1.1.0", {"deleted_at": "x"})
    got = backend.index.list_versions("acme", "dataset", "ds")
    assert sorted(r.version for r in got) == sorted(labels)
    assert {r.version: r.deleted_at for r in got}["1.1.0"] == "x"


def test_recipes_and_datasets_do_not_mix(backend: Backend) -> None:
    backend.index.put_version(record(kind="recipe", name="gsm8k"))
    assert backend.index.get_version("acme", "dataset", "gsm8k", "1.0.0") is None
    assert backend.index.list_datasets("acme", "dataset").items == []
    [entry] = backend.index.list_datasets("acme", "recipe").items
    assert (entry.kind, entry.name) == ("recipe", "gsm8k")


def test_update_version(backend: Backend) -> None:
    # Given a version
    backend.index.put_version(record())
    # When its mutable metadata changes
    got = backend.index.update_version(
        "acme",
        "dataset",
        "ds",
        "1.0.0",
        {"version_tags": ["stable", "prod"], "deleted_at": "2026-11-30T11:00:00.000Z"},
    )
    # Then the answer and the stored row both carry the change, and nothing else moved
    assert got.version_tags == ("stable", "prod")
    assert got.deleted_at == "2026-11-30T11:00:00.000Z"
    assert backend.index.get_version("acme", "dataset", "ds", "1.0.0") == got
    assert replace(got, version_tags=(), deleted_at=None) == record()
    # And clearing works too
    cleared = backend.index.update_version(
        "acme", "dataset", "ds", "1.0.0", {"deleted_at": None, "version_tags": []}
    )
    assert cleared.live and cleared.version_tags == ()


def test_update_version_of_a_missing_version(backend: Backend) -> None:
    with pytest.raises(NotFound):
        backend.index.update_version("acme", "dataset", "ds", "9.9.9", {"version_tags": []})


def test_update_version_refuses_immutable_fields(backend: Backend) -> None:
    backend.index.put_version(record())
    with pytest.raises(ValueError, match="content_digest"):
        backend.index.update_version(
            "acme", "dataset", "ds", "1.0.0", {"content_digest": "sha256:" + "b" * 64}
        )


def test_dataset_row_keeps_first_creation_and_latest_update(backend: Backend) -> None:
    backend.index.put_version(record(version="1.0.0", created_at="2026-01-01T00:00:00.000Z"))
    backend.index.put_version(record(version="1.1.0", created_at="2026-02-01T00:00:00.000Z"))
    [entry] = backend.index.list_datasets("acme", "dataset").items
    assert (entry.tenant, entry.kind, entry.name) == ("acme", "dataset", "ds")
    assert entry.created_at == "2026-01-01T00:00:00.000Z"
    assert entry.updated_at == "2026-02-01T00:00:00.000Z"


def test_failed_commit_leaves_the_dataset_row_alone(backend: Backend) -> None:
    backend.index.put_version(record(created_at="2026-01-01T00:00:00.000Z"))
    with pytest.raises(Conflict):
        backend.index.put_version(record(created_at="2026-05-05T00:00:00.000Z"))
    [entry] = backend.index.list_datasets("acme", "dataset").items
    assert entry.updated_at == "2026-01-01T00:00:00.000Z"


def test_list_datasets_pages_with_a_cursor(backend: Backend) -> None:
    # Given five datasets of one tenant, and some of another
    names = ["alpha", "bravo", "charlie", "delta", "echo"]
    for name in reversed(names):
        backend.index.put_version(record(name=name))
    backend.index.put_version(record(tenant="other", name="zulu"))
    # When they are listed two at a time
    pages = []
    cursor = None
    while True:
        page = backend.index.list_datasets("acme", "dataset", cursor=cursor, limit=2)
        pages.append([e.name for e in page.items])
        cursor = page.next_cursor
        if cursor is None:
            break
    # Then each comes once, in name order, and the last page says it is the last
    assert pages == [["alpha", "bravo"], ["charlie", "delta"], ["echo"]]
    # And a page that ends exactly at the end has no next cursor
    assert backend.index.list_datasets("acme", "dataset", limit=5).next_cursor is None
    assert backend.index.list_datasets("nobody", "dataset").items == []


def test_list_datasets_rejects_a_forged_cursor(backend: Backend) -> None:
    backend.index.put_version(record())
    with pytest.raises(BadRequest):
        backend.index.list_datasets("acme", "dataset", cursor="zzzz")


def test_list_tenants(backend: Backend) -> None:
    backend.index.put_version(record(tenant="beta"))
    backend.index.put_version(record(tenant="alpha", name="a"))
    backend.index.put_version(record(tenant="alpha", name="b"))
    backend.index.put_version(record(tenant="gamma", kind="recipe", name="r"))
    backend.index.put_item("JOB#1", "JOB", {"state": "done"})
    assert backend.index.list_tenants() == ["alpha", "beta", "gamma"]


def test_auxiliary_items(backend: Backend) -> None:
    index = backend.index
    # Given nothing under a key
    assert index.get_item("JOB#1", "JOB") is None
    # When a document is put, it comes back exactly
    doc = {"state": "pending", "detail": ODD_JSON, "expires_at": 1_900_000_000}
    index.put_item("JOB#1", "JOB", doc)
    assert index.get_item("JOB#1", "JOB") == doc
    # A conditional put of a present key is a conflict; a plain put replaces
    with pytest.raises(Conflict):
        index.put_item("JOB#1", "JOB", {"state": "other"}, if_absent=True)
    assert index.get_item("JOB#1", "JOB") == doc
    index.put_item("JOB#1", "JOB", {"state": "replaced"})
    assert index.get_item("JOB#1", "JOB") == {"state": "replaced"}
    index.put_item("JOB#2", "JOB", {"state": "new"}, if_absent=True)
    assert index.get_item("JOB#2", "JOB") == {"state": "new"}


def test_rows_of_a_partition_are_listed_in_order_and_deleted(backend: Backend) -> None:
    index = backend.index
    # Given rows under one partition key (the running jobs' rows), put out of order
    assert index.list_items("RUNNING#part-jobs") == []
    for sk, doc in (("JOB#b", {"n": 2}), ("JOB#a", {"n": 1, "detail": ODD_JSON}), ("JOB#c", {})):
        index.put_item("RUNNING#part-jobs", sk, doc)
    index.put_item("RUNNING#queued-jobs", "JOB#z", {"n": 9})
    # When listed, they come back in sort-key order with their documents, and only them
    assert index.list_items("RUNNING#part-jobs") == [
        ("JOB#a", {"n": 1, "detail": ODD_JSON}),
        ("JOB#b", {"n": 2}),
        ("JOB#c", {}),
    ]
    # And a row deleted (twice: an absent row is no error) is gone; the others stay
    index.delete_item("RUNNING#part-jobs", "JOB#b")
    index.delete_item("RUNNING#part-jobs", "JOB#b")
    assert [sk for sk, _ in index.list_items("RUNNING#part-jobs")] == ["JOB#a", "JOB#c"]
    assert index.list_items("RUNNING#queued-jobs") == [("JOB#z", {"n": 9})]


def test_update_item_with_expectations(backend: Backend) -> None:
    index = backend.index
    index.put_item("JOB#1", "JOB", {"state": "pending", "tries": 0})
    # A met expectation applies the change and answers the merged row
    got = index.update_item(
        "JOB#1", "JOB", {"state": "running", "by": "w1"}, expect={"state": "pending"}
    )
    assert got == {"state": "running", "tries": 0, "by": "w1"}
    # An unmet one is a conflict and changes nothing
    with pytest.raises(Conflict):
        index.update_item(
            "JOB#1", "JOB", {"state": "running", "by": "w2"}, expect={"state": "pending"}
        )
    assert index.get_item("JOB#1", "JOB") == got
    # An attribute that is absent is expected as None
    index.update_item("JOB#1", "JOB", {"result": 1.5}, expect={"result": None})
    assert index.get_item("JOB#1", "JOB") == {**got, "result": 1.5}
    # Without expectations it merges
    assert index.update_item("JOB#1", "JOB", {"tries": 1})["tries"] == 1
    # A missing row is not found, with or without expectations
    with pytest.raises(NotFound):
        index.update_item("JOB#9", "JOB", {"state": "x"})
    with pytest.raises(NotFound):
        index.update_item("JOB#9", "JOB", {"state": "x"}, expect={"state": "pending"})


def test_racing_claims_of_one_item_have_one_winner(backend: Backend) -> None:
    # Given a pending job and several workers that claim it at once
    backend.index.put_item("JOB#1", "JOB", {"state": "pending"})
    n = 6
    barrier = threading.Barrier(n)

    def claim(i: int) -> bool:
        barrier.wait()
        try:
            backend.index.update_item(
                "JOB#1", "JOB", {"state": "running", "by": i}, expect={"state": "pending"}
            )
            return True
        except Conflict:
            return False

    with ThreadPoolExecutor(n) as pool:
        won = list(pool.map(claim, range(n)))
    # Then exactly one claim holds, and the row says whose
    assert won.count(True) == 1
    assert backend.index.get_item("JOB#1", "JOB") == {"state": "running", "by": won.index(True)}
