"""The registry's behaviour, the same on every backend (embedded, moto, moto server)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import orjson
import pytest

from caseshelf.domain.errors import Conflict, Forbidden, NotFound
from caseshelf.domain.identity import Identity
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.registry import RegisterResult, RegistryService, parse_dataset, parse_head
from tests.conftest import Backend
from tests.contract.test_blobstore_contract import http

pytestmark = [pytest.mark.contract, pytest.mark.services]

ALICE = Identity("acme", "alice")
BOB = Identity("acme", "bob")
ADMIN = Identity("acme", "root", frozenset({"admin"}))
OTHER = Identity("globex", "eve")
SHARED_ADMIN = Identity("_shared", "ops", frozenset({"admin"}))
SHARED_USER = Identity("_shared", "intruder")


def cases(n: int, *, changed: set[int] | frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    """Cases shaped like grade-school math rows; `changed` ones get another answer."""
    return [
        {
            "id": f"q{i:05d}",
            "inputs": {"user": f"Natalia sold clips to {i} of her friends in April. How many?"},
            "expectations": {"ground_truth": str(i * 2 + (1 if i in changed else 0))},
            "tags": ["even" if i % 2 == 0 else "odd"],
        }
        for i in range(n)
    ]


def dataset(
    version: str | None = "1.0.0", *, name: str = "gsm", n: int = 5, **kw: Any
) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": name, "cases": cases(n), **kw}
    if version is not None:
        doc["version"] = version
    return doc


def register(svc: RegistryService, who: Identity, doc: dict[str, Any]) -> RegisterResult:
    return svc.register(who, parse_dataset(doc))


@pytest.fixture
def registry(backend: Backend) -> RegistryService:
    return backend.services.registry


def test_register_and_read_back(registry: RegistryService) -> None:
    # When a dataset version is registered
    res = register(registry, ALICE, dataset(description="math", tags=["math"]))
    # Then it is created and readable by label and by digest
    assert res.created
    rec = res.record
    assert (rec.name, rec.version, rec.case_count, rec.created_by) == ("gsm", "1.0.0", 5, "alice")
    assert rec.content_digest.startswith("sha256:") and len(rec.content_digest) == 71
    assert registry.get_version(ALICE, "gsm", "1.0.0") == rec
    assert registry.get_version(ALICE, "gsm", rec.content_digest) == rec
    assert registry.get_version(ALICE, "gsm", "latest") == rec
    page = registry.list_cases(ALICE, "gsm", "latest")
    assert [c["id"] for c in page.items] == [f"q{i:05d}" for i in range(5)]
    assert page.items[3]["expectations"] == {"ground_truth": "6"}


def test_reregistering_the_same_content_is_idempotent(registry: RegistryService) -> None:
    first = register(registry, ALICE, dataset())
    # Key order and defaults do not change the content
    again = dataset()
    again["cases"] = [dict(reversed(list(c.items()))) for c in again["cases"]]
    second = register(registry, BOB, again)
    assert (first.created, second.created) == (True, False)
    assert second.record == first.record


def test_other_content_under_a_taken_label_conflicts_naming_both_digests(
    registry: RegistryService,
) -> None:
    first = register(registry, ALICE, dataset())
    with pytest.raises(Conflict) as err:
        register(registry, ALICE, dataset(n=6))
    digests = err.value.fields["digests"]
    assert digests[0] == first.record.content_digest
    assert digests[1] != digests[0] and digests[1].startswith("sha256:")
    assert digests[0] in str(err.value) and digests[1] in str(err.value)


def test_bump(registry: RegistryService) -> None:
    assert register(registry, ALICE, dataset(None, bump="minor")).record.version == "1.0.0"
    assert register(registry, ALICE, dataset(None, n=6, bump="minor")).record.version == "1.1.0"
    assert register(registry, ALICE, dataset(None, n=7, bump="patch")).record.version == "1.1.1"
    assert register(registry, ALICE, dataset(None, n=8, bump="major")).record.version == "2.0.0"
    assert registry.get_version(ALICE, "gsm", "latest").version == "2.0.0"


def test_a_bump_with_the_latest_versions_content_registers_nothing(
    registry: RegistryService,
) -> None:
    # Given a dataset whose latest live version holds some content
    first = register(registry, ALICE, dataset(None, n=4, bump="minor"))
    # When the same content is registered again with a bump (a re-run pipeline, say)
    again = register(registry, ALICE, dataset(None, n=4, bump="patch"))
    # Then nothing new is registered: the answer is the latest version, not created
    assert (again.created, again.record.version) == (False, first.record.version)
    assert [r.version for r in registry.list_versions(ALICE, "gsm").items] == ["1.0.0"]
    # But new content still bumps, and an explicit new label is honoured even for old content
    assert register(registry, ALICE, dataset(None, n=5, bump="patch")).record.version == "1.0.1"
    assert register(registry, ALICE, dataset("9.0.0", n=4)).created


def test_version_tags(registry: RegistryService) -> None:
    register(registry, ALICE, dataset("1.0.0"))
    register(registry, ALICE, dataset("1.1.0", n=6))
    # When a version is tagged, the tag resolves to it
    rec = registry.set_version_tags(ALICE, "gsm", "1.0.0", ["stable", "prod"])
    assert rec.version_tags == ("stable", "prod")
    assert registry.get_version(ALICE, "gsm", "stable").version == "1.0.0"
    # PUT replaces the list; [] clears it
    registry.set_version_tags(ALICE, "gsm", "1.0.0", ["prod"])
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "gsm", "stable")
    registry.set_version_tags(ALICE, "gsm", "1.0.0", [])
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "gsm", "prod")
    # Tags never touch the content
    assert registry.get_version(ALICE, "gsm", "1.0.0").content_digest == rec.content_digest
    # An unknown version cannot be tagged
    with pytest.raises(NotFound):
        registry.set_version_tags(ALICE, "gsm", "9.9.9", ["x"])


def test_tombstone_and_revive_by_creator_or_admin(registry: RegistryService) -> None:
    register(registry, ALICE, dataset("1.0.0"))
    register(registry, ALICE, dataset("1.1.0", n=6))
    # Another user of the tenant may neither delete nor revive
    with pytest.raises(Forbidden):
        registry.delete_version(BOB, "gsm", "1.1.0")
    # The creator may: the version leaves listings and `latest`, but stays readable on request
    gone = registry.delete_version(ALICE, "gsm", "1.1.0")
    assert gone.deleted_at is not None and gone.deleted_by == "alice"
    assert registry.get_version(ALICE, "gsm", "latest").version == "1.0.0"
    assert [r.version for r in registry.list_versions(ALICE, "gsm").items] == ["1.0.0"]
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "gsm", "1.1.0")
    assert registry.get_version(ALICE, "gsm", "1.1.0", include_deleted=True).version == "1.1.0"
    listed = registry.list_versions(ALICE, "gsm", include_deleted=True).items
    assert [r.version for r in listed] == ["1.1.0", "1.0.0"]
    # A deleted version cannot be tagged
    with pytest.raises(NotFound):
        registry.set_version_tags(ALICE, "gsm", "1.1.0", ["x"])
    with pytest.raises(Forbidden):
        registry.revive_version(BOB, "gsm", "1.1.0")
    # An admin may revive, and delete what others created
    assert registry.revive_version(ADMIN, "gsm", "1.1.0").live
    assert registry.get_version(ALICE, "gsm", "latest").version == "1.1.0"
    assert registry.delete_version(ADMIN, "gsm", "1.0.0").deleted_by == "root"


def test_reregistering_a_tombstoned_version_revives_it(registry: RegistryService) -> None:
    register(registry, ALICE, dataset())
    registry.delete_version(ALICE, "gsm", "1.0.0")
    res = register(registry, ALICE, dataset())
    assert not res.created and res.record.live
    assert registry.get_version(ALICE, "gsm", "latest").version == "1.0.0"


def test_shared_tenant_fallback_and_admin_only_writes(registry: RegistryService) -> None:
    # Only an admin writes to _shared
    with pytest.raises(Forbidden):
        register(registry, SHARED_USER, dataset(name="common"))
    shared = register(registry, SHARED_ADMIN, dataset(name="common")).record
    # Every tenant reads it through the fallback
    assert registry.get_version(ALICE, "common", "latest") == shared
    assert registry.get_version(OTHER, "common", "1.0.0").tenant == "_shared"
    assert registry.list_cases(OTHER, "common", "latest").items[0]["id"] == "q00000"
    # ... but cannot change it: writes go to the caller's own tenant only
    with pytest.raises(NotFound):
        registry.delete_version(ALICE, "common", "1.0.0")
    with pytest.raises(NotFound):
        registry.set_version_tags(ADMIN, "common", "1.0.0", ["x"])
    # A tenant's own dataset of the same name wins over the shared one
    own = register(registry, ALICE, dataset(name="common", n=3)).record
    assert registry.get_version(ALICE, "common", "latest") == own
    assert registry.get_version(OTHER, "common", "latest") == shared
    # The shared listing is separate from the own one
    assert [d.id for d in registry.list_datasets(OTHER, shared=True).items] == ["common"]
    assert registry.list_datasets(OTHER).items == []


def test_another_tenants_dataset_does_not_exist(registry: RegistryService) -> None:
    register(registry, ALICE, dataset(name="secret"))
    for call in (
        lambda: registry.get_version(OTHER, "secret", "latest"),
        lambda: registry.get_version(OTHER, "secret", "1.0.0", include_deleted=True),
        lambda: registry.list_versions(OTHER, "secret"),
        lambda: registry.summary(OTHER, "secret"),
        lambda: registry.list_cases(OTHER, "secret", "latest"),
        lambda: registry.download(OTHER, "secret", "latest"),
        lambda: registry.set_version_tags(OTHER, "secret", "1.0.0", ["x"]),
        lambda: registry.delete_version(OTHER, "secret", "1.0.0"),
    ):
        with pytest.raises(NotFound):
            call()
    assert registry.list_datasets(OTHER).items == []
    # And the owner's view is untouched by the attempts
    assert registry.get_version(ALICE, "secret", "latest").live


def test_list_datasets_and_summary(registry: RegistryService) -> None:
    for name in ("c-set", "a-set", "b-set"):
        register(registry, ALICE, dataset(name=name))
    register(registry, ALICE, dataset("1.1.0", name="a-set", n=6))
    first = registry.list_datasets(ALICE, limit=2)
    assert [d.id for d in first.items] == ["a-set", "b-set"]
    assert first.items[0].latest is not None and first.items[0].latest.version == "1.1.0"
    assert first.items[0].version_count == 2
    rest = registry.list_datasets(ALICE, limit=2, cursor=first.next_cursor)
    assert [d.id for d in rest.items] == ["c-set"] and rest.next_cursor is None
    summary = registry.summary(ALICE, "a-set")
    assert (summary.tenant, summary.version_count) == ("acme", 2)


def test_cases_page_with_a_cursor(registry: RegistryService) -> None:
    register(registry, ALICE, dataset(n=23))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = registry.list_cases(ALICE, "gsm", "latest", cursor=cursor, limit=10)
        seen += [c["id"] for c in page.items]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 3
    assert seen == [f"q{i:05d}" for i in range(23)]


def test_download_is_a_registrable_document(backend: Backend, registry: RegistryService) -> None:
    # Given a version with a companion file and a shared file
    doc = dataset(
        produced_by={"recipe": "gsm8k", "score": 0.5},
        shared_files=[{"dest": "README.md", "text": "# shared\n"}],
    )
    doc["cases"][0]["files"] = {"tests/test_a.py": {"text": "assert True\n"}}
    rec = register(registry, ALICE, doc).record
    # When it is downloaded
    got = registry.download(ALICE, "gsm", "latest")
    assert got.filename == "gsm-1.0.0.json"
    if backend.name == "embedded":
        assert got.url is None and got.body is not None
        body = got.body
    else:
        # On AWS the answer is a presigned URL to fetch, which saves the file under that name
        assert got.body is None and got.url is not None
        assert "response-content-disposition=attachment" in got.url
        assert "gsm-1.0.0.json" in unquote(got.url)
        body = http("GET", got.url)
    # Then it holds everything, bodies inline, and registers elsewhere to the same digest
    parsed = orjson.loads(body)
    assert parsed["id"] == "gsm" and len(parsed["cases"]) == 5
    assert parsed["cases"][0]["files"] == {"tests/test_a.py": {"text": "assert True\n"}}
    assert parsed["produced_by"] == {"recipe": "gsm8k", "score": 0.5}
    copy = register(registry, OTHER, parsed).record
    assert copy.content_digest == rec.content_digest


def test_v2_with_one_percent_changed_writes_about_one_percent(registry: RegistryService) -> None:
    # Given v1 of 2,000 cases
    n = 2000
    v1 = register(registry, ALICE, {"id": "big", "version": "1", "cases": cases(n)})
    # When v2 changes 1% of them
    changed = set(range(0, n, 100))
    v2 = register(
        registry, ALICE, {"id": "big", "version": "2", "cases": cases(n, changed=changed)}
    )
    # Then it writes about 1% of v1's case bytes, and reuses the rest
    ratio = v2.stats.case_bytes_written / v1.stats.case_bytes_written
    assert 0.005 <= ratio <= 0.03
    assert v2.stats.cases_reused == n - len(changed)
    # And both versions read back right
    page = registry.list_cases(ALICE, "big", "2", limit=2)
    assert [c["expectations"]["ground_truth"] for c in page.items] == ["1", "2"]
    page = registry.list_cases(ALICE, "big", "1", limit=2)
    assert [c["expectations"]["ground_truth"] for c in page.items] == ["0", "2"]


def test_an_explicit_base_is_the_version_dedup_reuses(registry: RegistryService) -> None:
    # Given v1, then a v2 in which every case changed (so v2, the latest, shares nothing with v1)
    n = 200
    v1 = register(registry, ALICE, {"id": "big", "version": "1", "cases": cases(n)})
    every = set(range(n))
    register(registry, ALICE, {"id": "big", "version": "2", "cases": cases(n, changed=every)})
    # When v3 (v1 with two cases changed) names v1 as its base
    doc = {"id": "big", "version": "3", "base": "1", "cases": cases(n, changed={0, 100})}
    v3 = register(registry, ALICE, doc)
    # Then the unchanged cases are reused from v1 and only the changed ones are written
    assert v3.stats.cases_reused == n - 2
    assert v3.stats.case_bytes_written <= v1.stats.case_bytes_written * 0.03
    got = registry.list_cases(ALICE, "big", "3", limit=2).items
    assert [c["expectations"]["ground_truth"] for c in got] == ["1", "2"]
    # And without a base, dedup runs against the latest live version instead
    plain = register(registry, ALICE, {**doc, "version": "4", "base": None})
    assert plain.stats.cases_reused == n  # v3 is now the latest, with the same cases
    # A base that does not exist is not found, and nothing is registered
    with pytest.raises(NotFound):
        register(registry, ALICE, {**doc, "version": "5", "base": "9.9.9"})
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "big", "5")


def race(backend: Backend, docs: list[dict[str, Any]]) -> list[RegisterResult | Exception]:
    """Register each document from its own thread and service instance, all at once."""
    barrier = threading.Barrier(len(docs))
    services = [backend.rebuild().registry for _ in docs]

    def one(i: int) -> RegisterResult | Exception:
        body = parse_dataset(docs[i])
        barrier.wait()
        try:
            return services[i].register(ALICE, body)
        except Conflict as exc:
            return exc

    with ThreadPoolExecutor(len(docs)) as pool:
        return list(pool.map(one, range(len(docs))))


def test_race_of_one_label_with_different_content(backend: Backend) -> None:
    docs = [dataset(n=5), dataset(n=6)]
    registry = backend.services.registry
    digests = [registry.validate(ALICE, parse_dataset(d)).content_digest for d in docs]
    # When two registrations of one label with different content run at once
    outcomes = race(backend, docs)
    # Then exactly one wins and the other gets a conflict naming both digests
    won = [o for o in outcomes if isinstance(o, RegisterResult)]
    lost = [o for o in outcomes if isinstance(o, Conflict)]
    assert len(won) == 1 and len(lost) == 1
    assert won[0].created
    winner = outcomes.index(won[0])
    assert lost[0].fields["digests"] == [digests[winner], digests[1 - winner]]
    stored = registry.get_version(ALICE, "gsm", "1.0.0")
    assert stored.content_digest == digests[winner]


def test_race_of_one_label_with_the_same_content(backend: Backend) -> None:
    outcomes = race(backend, [dataset(), dataset()])
    assert all(isinstance(o, RegisterResult) for o in outcomes)
    results = [o for o in outcomes if isinstance(o, RegisterResult)]
    assert sorted(r.created for r in results) == [False, True]
    assert results[0].record.content_digest == results[1].record.content_digest


class CrashingIndex:
    """An index whose commit fails once, as if the process died just before it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.crashes = 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put_version(self, rec: VersionRecord) -> None:
        if self.crashes:
            self.crashes -= 1
            raise RuntimeError("injected crash before the commit")
        self.inner.put_version(rec)


def test_a_crash_before_the_commit_leaves_nothing_visible(backend: Backend) -> None:
    # Given a registry whose index dies at the commit point
    crashing = backend.rebuild(index=CrashingIndex(backend.index)).registry
    # When a registration crashes after writing its packs and manifest
    with pytest.raises(RuntimeError, match="injected crash"):
        register(crashing, ALICE, dataset())
    assert list(backend.store.list("t/acme/packs/")), "packs are written before the commit"
    assert list(backend.store.list("t/acme/manifests/"))
    # Then no version is visible
    registry = backend.services.registry
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "gsm", "latest")
    assert registry.list_datasets(ALICE).items == []
    assert backend.index.list_versions("acme", "dataset", "gsm") == []
    # And the retry succeeds, reusing what was already written
    res = register(crashing, ALICE, dataset())
    assert res.created
    assert res.stats.case_bytes_written == 0  # the same pack is already there
    assert [c["id"] for c in registry.list_cases(ALICE, "gsm", "latest").items][:2] == [
        "q00000",
        "q00001",
    ]


# Racing bumpers per backend: every lost label costs a round trip, so moto gets fewer.
BUMPERS = {"embedded": 32, "moto_server": 10}


def test_concurrent_bumps_of_different_content_all_register(backend: Backend) -> None:
    # Given many registrations of different content, each asking for the next minor label
    bumpers = BUMPERS[backend.name]
    docs = [dataset(None, n=3 + i, bump="minor") for i in range(bumpers)]
    # When they all run at once (one thread and one service instance each)
    outcomes = race(backend, docs)
    # Then none fails for contention alone: each took a label of its own
    failed = [o for o in outcomes if isinstance(o, Exception)]
    assert failed == []
    results = [o for o in outcomes if isinstance(o, RegisterResult)]
    assert all(r.created for r in results)
    labels = sorted((r.record.version for r in results), key=lambda v: int(v.split(".")[1]))
    assert labels == [f"1.{i}.0" for i in range(bumpers)]
    registry = backend.services.registry
    for r in results:
        stored = registry.get_version(ALICE, "gsm", r.record.version)
        assert stored.content_digest == r.record.content_digest


def test_a_bump_gives_up_only_after_its_bounded_attempts(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an index whose every version write loses to a (phantom) racer
    import caseshelf.services.registry.commit as registry_module

    monkeypatch.setattr(registry_module, "BUMP_ATTEMPTS", 3)
    monkeypatch.setattr(registry_module, "_bump_pause", lambda attempt: None)

    class AlwaysTaken(CrashingIndex):
        def put_version(self, rec: VersionRecord) -> None:
            self.calls = getattr(self, "calls", 0) + 1
            raise Conflict("taken", id=rec.name, version=rec.version)

    index = AlwaysTaken(backend.index)
    registry = backend.rebuild(index=index).registry  # type: ignore[arg-type]
    # Then the bump stops after the bound and says so
    with pytest.raises(Conflict, match="after 3 attempts"):
        register(registry, ALICE, dataset(None, bump="minor"))
    assert index.calls == 3


def test_a_new_version_inherits_the_metadata_its_input_leaves_out(
    registry: RegistryService,
) -> None:
    # Given 1.0.0 with a description, tags and provenance
    provenance = {"via": "import", "source": {"kind": "jsonl", "url": "test.jsonl"}}
    first = dataset(description="grade-school math", tags=["math", "qa"], produced_by=provenance)
    register(registry, ALICE, first)
    # When the next version comes as cases only (a bump), it keeps all three
    got = register(registry, ALICE, {"id": "gsm", "bump": "minor", "cases": cases(5, changed={1})})
    rec = got.record
    assert rec.version == "1.1.0"
    assert (rec.description, rec.tags, rec.produced_by) == (
        "grade-school math",
        ("math", "qa"),
        provenance,
    )
    # the same cases again with nothing set are the same content: no new version
    again = {"id": "gsm", "bump": "minor", "cases": cases(5, changed={1})}
    same = register(registry, ALICE, again)
    assert not same.created and same.record.version == "1.1.0"
    # What the input sets wins, an empty list included; `base` names where the rest comes from
    doc = {"id": "gsm", "version": "2.0.0", "cases": cases(4), "description": "new", "tags": []}
    rec = register(registry, ALICE, {**doc, "base": "1.0.0"}).record
    assert (rec.description, rec.tags, rec.produced_by) == ("new", (), provenance)
    # validate answers the digest register would commit
    check = registry.validate(
        ALICE, parse_dataset({"id": "gsm", "bump": "patch", "cases": cases(4)})
    )
    rec = register(registry, ALICE, {"id": "gsm", "bump": "patch", "cases": cases(4)}).record
    assert check.content_digest == rec.content_digest and rec.description == "new"


def test_a_streamed_registration_inherits_the_metadata_too(registry: RegistryService) -> None:
    # Given 1.0.0 with a description and tags (a file or upload read a window at a time next)
    register(registry, ALICE, dataset(description="grade-school math", tags=["math"]))
    head = parse_head({"id": "gsm", "bump": "minor"})
    checked = registry.validate_stream(ALICE, head, [cases(5, changed={2})])
    got = registry.register_stream(ALICE, head, [cases(5, changed={2})])
    assert got.record.version == "1.1.0" and got.record.content_digest == checked.content_digest
    assert (got.record.description, got.record.tags) == ("grade-school math", ("math",))
