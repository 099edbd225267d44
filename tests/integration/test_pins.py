"""Datasets as code through the client, in process and over HTTP (one client path): pin, check
in one request, update, sync into the verified cache and load from it; and the batch route."""

from __future__ import annotations

from pathlib import Path

import pytest

import caseshelf
from caseshelf.client import Client
from caseshelf.client import pins as pins_module
from caseshelf.client.cache import Cache, CacheWarning
from caseshelf.domain.cached import VersionContent, document_content
from caseshelf.domain.errors import BadRequest, NotFound
from caseshelf.domain.lockfile import LockError
from tests.helpers import dev_server, http_call

pytestmark = pytest.mark.integration

V1 = [{"id": f"q{i}", "inputs": {"user": f"q {i}"}, "tags": ["easy" if i % 2 else "hard"]}
      for i in range(20)]  # fmt: skip
V2 = [*V1[:5], {"id": "q5", "inputs": {"user": "q 5 fixed"}, "tags": ["easy"]}, *V1[6:18]]
V2 += [{"id": "new", "inputs": {"user": "new"}}]


def seed(cs: Client) -> None:
    cs.register("gsm", cases=V1, version="1.1.0", description="maths")
    cs.register("gsm", cases=V2, version="1.2.0", description="maths")
    cs.tag("gsm@1.1.0", ["stable"])


@pytest.fixture
def repo(tmp_path: Path, cs: Client) -> Path:
    seed(cs)
    cs.cache = Cache(tmp_path / "cache")
    root = tmp_path / "evals"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'evals'\n")
    return root


def test_pin_check_update_sync_and_load(cs: Client, repo: Path) -> None:
    lock = repo / "caseshelf.lock"
    # Given a pin of the stable tag and of a subset of it
    out = cs.pin("gsm@stable", lock=lock)
    assert (out.pin.version, out.pin.cases) == ("1.1.0", 20)
    easy = cs.pin("gsm@1.1.0", name="gsm-easy", tags=["easy"], limit=4, lock=lock)
    assert easy.pin.subset is not None and easy.pin.subset.selected == 4
    # Then every pin verifies
    assert cs.check(lock=lock).ok
    # When the tag moves to 1.2.0
    cs.tag("gsm@1.2.0", ["stable"])
    # Then a plain check still passes, a strict one names who moved it and the diff's counts
    assert cs.check(lock=lock).ok
    strict = cs.check(strict=True, lock=lock)
    assert not strict.ok
    (line,) = strict.problems
    assert line.startswith("gsm: stable moved 1.1.0 -> 1.2.0 (by alice, ")
    assert line.endswith("; 1 changed, 1 added, 2 removed")
    # When the pins are updated, only the moved one changes
    up = cs.update(lock=lock)
    assert [(c.name, c.changed) for c in up.pins] == [("gsm", True), ("gsm-easy", False)]
    assert cs.check(strict=True, lock=lock).ok
    # And a sync caches every pinned version; a load is its cases, a subset its selection
    synced = cs.sync(lock=lock)
    assert [p.source for p in synced.pins] == ["registry", "registry"]
    assert [c["id"] for c in cs.load("gsm", lock=lock)] == [c["id"] for c in V2]
    want = cs.subset("gsm@1.1.0", tags=["easy"], limit=4, with_cases=True).cases
    assert cs.load("gsm-easy", lock=lock) == want
    assert [p.source for p in cs.sync(lock=lock).pins] == ["cache", "cache"]


def test_a_sampled_subset_loads_as_the_subset_route_selects_it(cs: Client, repo: Path) -> None:
    lock = repo / "caseshelf.lock"
    cs.pin("gsm@1.2.0", name="s", sample=7, seed="x", lock=lock)
    want = cs.subset("gsm@1.2.0", sample=7, seed="x", with_cases=True).cases
    assert cs.load("s", lock=lock) == want


def test_embedded_and_api_locks_pin_the_same_digests(tmp_path: Path) -> None:
    with caseshelf.connect(home=tmp_path / "a") as local:
        seed(local)
        a = local.pin("gsm@stable", lock=tmp_path / "a.lock").pin
    with dev_server(tmp_path / "b") as srv, caseshelf.connect(srv.url) as remote:
        seed(remote)
        b = remote.pin("gsm@stable", lock=tmp_path / "b.lock").pin
    assert (a.version, a.digest, a.cases) == (b.version, b.digest, b.cases)
    assert (a.registry, b.registry) == ("embedded", srv.url)


def test_check_fails_on_a_deleted_a_gone_and_a_rewritten_pin(cs: Client, repo: Path) -> None:
    lock = repo / "caseshelf.lock"
    cs.pin("gsm@1.1.0", lock=lock)
    cs.pin("gsm@1.2.0", name="other", lock=lock)
    cs.pin("gsm@1.2.0", name="third", lock=lock)
    cs.delete("gsm@1.1.0")
    text = lock.read_text()
    # `other` pinned to a version and digest the registry has not; `third` to 1.2.0 with
    # 1.1.0's digest
    digest_1 = cs.get("gsm@1.1.0", include_deleted=True).content_digest
    digest_2 = cs.get("gsm@1.2.0").content_digest
    head, third = text.split("[pins.third]")
    head = head.replace(digest_2, "sha256:" + "0" * 64).replace('"1.2.0"', '"9.9.9"')
    lock.write_text(head + "[pins.third]" + third.replace(digest_2, digest_1))
    out = cs.check(lock=lock)
    assert not out.ok
    assert [p.status for p in out.pins] == ["tombstoned", "gone", "mismatch"]
    assert out.problems[0].startswith("gsm: 1.1.0 (sha256:")
    assert "revive it" in out.problems[0]
    assert "the registry serves 1.2.0 as" in out.problems[2]
    assert f"caseshelf.lock:{out.pins[2].line}: third: the lock pins" in out.problems[2]


def test_a_bad_lock_stops_everything_and_rewrites_nothing(cs: Client, repo: Path) -> None:
    lock = repo / "caseshelf.lock"
    cs.pin("gsm@stable", lock=lock)
    bad = lock.read_text().replace("cases = 20", "casez = 20")
    lock.write_text(bad)
    for call in (
        lambda: cs.check(lock=lock),
        lambda: cs.pin("gsm@1.2.0", name="x", lock=lock),
        lambda: cs.update(lock=lock),
        lambda: cs.load("gsm", lock=lock),
    ):
        with pytest.raises(LockError) as err:
            call()
        assert err.value.fields["line"] == 9 and err.value.fields["pin"] == "gsm"
    assert lock.read_text() == bad
    lock.write_text(bad.replace("casez", "cases"))
    with pytest.raises(NotFound, match="has no pin 'nope'"):
        cs.load("nope", lock=lock)


def test_a_corrupted_cache_entry_is_fetched_again(cs: Client, repo: Path) -> None:
    lock = repo / "caseshelf.lock"
    pin = cs.pin("gsm@stable", lock=lock).pin
    cs.sync(lock=lock)
    cases = cs.cache.path_of(pin.digest) / "cases.jsonl"
    cases.write_bytes(cases.read_bytes().replace(b"q 3", b"q 4"))
    with pytest.warns(CacheWarning, match="did not verify"):
        got = cs.load("gsm", lock=lock)
    assert got == V1
    assert cs.cache.get(pin.digest) is not None  # cached again, whole


SHAPES = {
    # cut out of the document's bytes
    "plain": [
        {"id": f"p{i}", "inputs": {"user": f'say "{i}" ' + '},{"id":"x"}'}} for i in range(30)
    ],
    # parsed: inline case files, and lists of objects keyed like a case
    "files": [{"id": "f0", "files": {"a.txt": {"text": "hi"}, "b.bin": {"base64": "AAE="}}}],
    "nested": [{"id": "n0", "metadata": {"refs": [{"id": "r1"}, {"id": "r2"}]}}, {"id": "n1"}],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_sync_caches_what_a_load_caches_whatever_the_document(
    cs: Client, repo: Path, tmp_path: Path, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a version of this shape, pinned
    cs.register(shape, cases=SHAPES[shape], version="1.0.0", description="d")
    lock = repo / "caseshelf.lock"
    pin = cs.pin(f"{shape}@1.0.0", lock=lock).pin
    cuts: list[str | None] = []

    def cut(body: bytes) -> tuple[VersionContent, str] | None:
        got = document_content(body)
        cuts.append(None if got is None else got[1])
        return got

    monkeypatch.setattr(pins_module, "document_content", cut)
    # When one cache is filled by a sync and another by a load
    synced = cs.sync(lock=lock)
    assert [p.source for p in synced.pins] == ["registry"]
    # (the plain document was cut to the pin's digest; the others were not)
    assert (cuts == [pin.digest]) == (shape == "plain")
    by_sync = cs.cache.path_of(pin.digest)
    cs.cache = Cache(tmp_path / "cache-load")
    cases = cs.load(shape, lock=lock)
    by_load = cs.cache.path_of(pin.digest)
    # Then both entries are the same bytes, and they verify to the pinned version
    names = sorted(p.relative_to(by_load) for p in by_load.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(by_sync) for p in by_sync.rglob("*") if p.is_file())
    assert all((by_sync / n).read_bytes() == (by_load / n).read_bytes() for n in names)
    assert [c["id"] for c in cases] == [c["id"] for c in SHAPES[shape]]
    assert Cache(by_sync.parent.parent).get(pin.digest) is not None


def test_the_batch_route_answers_every_ref_and_bounds_a_request(cs: Client, repo: Path) -> None:
    digest = cs.get("gsm@1.1.0").content_digest
    refs = ["gsm@stable", "gsm@nope", "missing@1"] * 200
    got = cs.resolve_refs([*refs, {"ref": "gsm@latest", "version": "1.1.0", "digest": digest}])
    assert len(got) == 601
    assert got[0].version is not None and got[0].version.version == "1.1.0"
    assert got[0].moved is not None and got[0].moved.to_version == "1.1.0"
    assert got[1].problem is not None and got[1].problem.status == 404
    assert got[2].problem is not None and got[2].pinned_problem is None
    assert got[-1].pinned is not None and got[-1].pinned.version == "1.1.0"
    with pytest.raises(BadRequest):
        cs.resolve_refs(["not a ref"])


def test_the_batch_route_answers_413_over_its_bound(tmp_path: Path) -> None:
    with dev_server(tmp_path / "srv") as srv:
        body = {"refs": [{"ref": f"d{i}@1"} for i in range(501)]}
        got = http_call(srv.url + "/refs/resolve", "POST", body)
    assert got.status == 413
    assert "at most 500" in got.json["detail"] and "batches" in got.json["detail"]


def test_checking_or_loading_without_a_lock_names_where_it_looked(cs: Client, repo: Path) -> None:
    lock = repo / "caseshelf.lock"
    for call in (lambda: cs.check(lock=lock), lambda: cs.sync(lock=lock)):
        with pytest.raises(NotFound, match=r"no lock file at .*caseshelf pin ID@REF"):
            call()
    assert not lock.exists()
