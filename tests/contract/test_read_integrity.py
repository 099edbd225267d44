"""Every read is checked against the digest the manifest records: one flipped byte in a pack or
a blob is an error naming the object on every read path (cases, download, file, export, diff),
never served; `verify` names what is damaged or missing, and gc deletes nothing while a
referenced object is missing. On the embedded store and on moto."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.bootstrap import Services, build, load_settings
from caseshelf.domain.errors import Corrupt
from caseshelf.domain.identity import Identity
from caseshelf.services.gc import collect_garbage
from caseshelf.services.registry import parse_dataset
from caseshelf.services.verify import dataset_versions, verify_versions
from tests.conftest import aws_backend
from tests.moto_infra import make_moto_dynamodb_atomic

pytestmark = pytest.mark.contract

ME = Identity("team-a", "alice")


@pytest.fixture(params=["embedded", "moto"])
def svc(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Services]:
    if request.param == "embedded":
        settings = load_settings({}, home=str(tmp_path / "home"))
        store = LocalBlobStore(tmp_path / "home" / "objects")
        yield build(settings, store=store, index=SqliteIndex(tmp_path / "home" / "i.sqlite"))
        return
    request.getfixturevalue("aws_env")
    from moto import mock_aws

    make_moto_dynamodb_atomic()
    with mock_aws():
        yield aws_backend("moto", None).services


def register(svc: Services, version: str, *cases: dict[str, Any]) -> Any:
    body = parse_dataset({"id": "demo", "version": version, "cases": list(cases)})
    return svc.registry.register(ME, body).record


CASES = (
    {"id": "a", "inputs": {"user": "one"}},
    {"id": "b", "inputs": {"user": "two"}, "files": {"notes.md": {"text": "a note"}}},
    {"id": "c", "inputs": {"user": "three"}},
)


def flip(svc: Services, key: str, at: int) -> None:
    data = bytearray(svc.store.get(key))
    data[at] ^= 0x01
    svc.store.put(key, bytes(data))


def keys(svc: Services, area: str) -> list[str]:
    return [o.key for o in svc.store.list(f"t/{ME.tenant}/{area}/")]


def verify(svc: Services) -> Any:
    return verify_versions(svc.store, dataset_versions(svc.index, [ME.tenant]))


def test_a_flipped_byte_in_a_pack_is_never_served(svc: Services) -> None:
    rec = register(svc, "1.0.0", *CASES)
    assert verify(svc).ok
    (pack,) = keys(svc, "packs")
    offset = svc.store.get(pack).index(b'"two"') + 1  # inside case b's record
    flip(svc, pack, offset)

    # The listing names the object and the case; the download and an export fail the same way
    with pytest.raises(Corrupt, match=rf"case 'b'.*{pack}"):
        svc.registry.list_cases(ME, "demo", "1.0.0")
    with pytest.raises(Corrupt, match=pack):
        svc.registry.download(ME, "demo", "1.0.0")
    with pytest.raises(Corrupt, match=pack):
        svc.exports.export_version(ME, "demo", "1.0.0", to=None)
    # Cases in the same pack whose bytes are intact still read
    assert next(c for _, c in svc.registry.case_records(rec, [0]))["id"] == "a"

    # And verify reports the pack as corrupt, naming the case
    report = verify(svc)
    assert not report.ok
    (problem,) = report.problems
    assert problem.kind == "corrupt" and problem.key == pack and "case 'b'" in problem.detail


def test_a_flipped_byte_in_a_file_body_is_never_served(svc: Services) -> None:
    rec = register(svc, "1.0.0", *CASES)
    (blob,) = keys(svc, "blobs")
    flip(svc, blob, 0)
    digest = svc.registry.list_cases(ME, "demo", "1.0.0").items[1]["files"]["notes.md"]["digest"]
    with pytest.raises(Corrupt, match=blob):
        svc.registry.file_body(rec, digest)
    with pytest.raises(Corrupt, match=blob):
        svc.registry.download(ME, "demo", "1.0.0")
    assert [p.key for p in verify(svc).problems] == [blob]


def test_a_diff_reads_are_checked_too(svc: Services) -> None:
    register(svc, "1.0.0", *CASES)
    register(svc, "2.0.0", CASES[0], {"id": "c", "inputs": {"user": "THREE"}})
    v1_pack = next(k for k in keys(svc, "packs") if b'"three"' in svc.store.get(k))
    data = svc.store.get(v1_pack)
    flip(svc, v1_pack, data.index(b'"three"') + 1)
    for k in keys(svc, "packs"):  # and the superseded copy kept with v2, if any
        got = svc.store.get(k)
        if k != v1_pack and b'"three"' in got:
            flip(svc, k, got.index(b'"three"') + 1)
    with pytest.raises(Corrupt, match="case 'c'"):
        svc.diff.diff_versions(ME, "demo", "1.0.0", "2.0.0")


def test_a_missing_pack_is_named_by_reads_verify_and_gc(svc: Services) -> None:
    register(svc, "1.0.0", *CASES)
    (pack,) = keys(svc, "packs")
    svc.store.delete(pack)
    stray = f"t/{ME.tenant}/packs/{'0' * 64}"
    svc.store.put(stray, b"orphan\n")

    with pytest.raises(Corrupt, match=f"{pack} is missing"):
        svc.registry.list_cases(ME, "demo", "1.0.0")
    report = verify(svc)
    assert [(p.kind, p.key) for p in report.problems] == [("missing", pack)]

    # gc names the missing object and the version, and deletes nothing of that tenant
    gc = collect_garbage(svc.store, svc.index, now=time.time() + 3600, grace_seconds=0, delete=True)
    assert gc.missing == [{"key": pack, "referenced_by": "dataset demo@1.0.0"}]
    assert gc.orphans == [] and svc.store.exists(stray)
    assert any(pack in p for p in gc.problems)


@pytest.fixture
def whole_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of an export takes its pack whole (`WholePacks`), however small the version."""
    from caseshelf.services import windowread

    monkeypatch.setattr(windowread, "WHOLE_PACK_MIN_BYTES", 0)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "case-dirs"])
def test_an_export_reading_whole_packs_never_serves_a_flipped_byte(
    svc: Services, whole_packs: None, fmt: str, tmp_path: Path
) -> None:
    from caseshelf.services.exports import ExportRequest

    register(svc, "1.0.0", *CASES)
    (pack,) = keys(svc, "packs")
    flip(svc, pack, svc.store.get(pack).index(b'"two"') + 1)  # inside case b's record

    # The pack no longer hashes to its key, so each record is checked: b's is named
    with pytest.raises(Corrupt, match=rf"case 'b'.*{pack}"):
        svc.exports.export_version(
            ME, "demo", "1.0.0", ExportRequest(format=fmt), to=str(tmp_path / "out")
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_an_export_serves_intact_records_of_a_pack_damaged_between_them(
    svc: Services, whole_packs: None, fmt: str, tmp_path: Path
) -> None:
    import orjson
    import pyarrow.parquet as pq

    from caseshelf.services.exports import ExportRequest

    plain = [{"id": c["id"], "inputs": c["inputs"]} for c in CASES]
    register(svc, "1.0.0", *plain)
    (pack,) = keys(svc, "packs")
    flip(svc, pack, svc.store.get(pack).index(b"\n"))  # the newline after case a's record

    svc.exports.export_version(
        ME, "demo", "1.0.0", ExportRequest(format=fmt), to=str(tmp_path / "out")
    )
    if fmt == "parquet":
        rows = pq.read_table(tmp_path / "out" / "cases.parquet").to_pylist()
    else:
        lines = (tmp_path / "out" / "cases.jsonl").read_bytes().splitlines()
        rows = [orjson.loads(line) for line in lines]
    assert [(r["id"], r["input"]) for r in rows] == [("a", "one"), ("b", "two"), ("c", "three")]
