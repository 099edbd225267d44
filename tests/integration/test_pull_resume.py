"""A pull killed or failed part way is gone on with by the next pull of the same export into the
same destination: only the files not already staged and verified are downloaded again. Real
files: the export is in a `LocalBlobStore`, read through a store that counts its GETs and fails
one key once."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BackendUnavailable
from caseshelf.domain.export import MANIFEST_NAME, parse_manifest
from caseshelf.domain.identity import Identity
from caseshelf.ports import ObjectInfo
from caseshelf.services.exports import ExportRequest
from caseshelf.services.pull import pull
from caseshelf.services.registry import parse_dataset
from caseshelf.services.staging import SOURCE, STAGING_PREFIX

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")


class Killed(BaseException):
    """The process going away in the middle of a download (as an interrupt does)."""


class Flaky:
    """A store that counts the GETs of files (not the manifest) and fails `fail_on` once."""

    def __init__(self, store: LocalBlobStore, fail_on: str | None = None, error: Any = Killed):
        self.store, self.fail_on, self.error = store, fail_on, error
        self.gets: list[str] = []

    def get(self, key: str) -> bytes:
        if key == self.fail_on:
            self.fail_on = None
            raise self.error(f"injected failure reading {key}")
        if not key.endswith("/" + MANIFEST_NAME):
            self.gets.append(key)
        return self.store.get(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return self.store.list(prefix)


def _dataset(version: str, n: int = 8) -> dict[str, Any]:
    return {
        "id": "demo",
        "version": version,
        "cases": [
            {
                "id": f"c{i}",
                "inputs": {"user": f"question {i} of {version}"},
                "expectations": {"ground_truth": str(i)},
                "files": {"data/notes.txt": {"text": f"notes {i} {version}\n"}},
            }
            for i in range(n)
        ],
    }


@pytest.fixture
def bucket(tmp_path: Path) -> LocalBlobStore:
    """Two exports in a store of real files: `exp-a/` (1.0.0) and `exp-b/` (2.0.0)."""
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    store = LocalBlobStore(tmp_path / "bucket")
    svc.exports.store_for_bucket = lambda bucket: store
    for version, prefix in [("1.0.0", "exp-a"), ("2.0.0", "exp-b")]:
        svc.registry.register(ME, parse_dataset(_dataset(version)))
        svc.exports.export_version(
            ME, "demo", version, ExportRequest(bundle=True), to=f"s3://b/{prefix}"
        )
    return store


def _files(store: LocalBlobStore, prefix: str) -> list[str]:
    """The export's file keys in the order a pull asks for them (the listing's)."""
    manifest = parse_manifest(store.get(prefix + MANIFEST_NAME))
    keys = [i.key for i in store.list(prefix) if i.key[len(prefix) :] in manifest.files]
    assert len(keys) == len(manifest.files) > 10
    return keys


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _staging(dest: Path) -> list[Path]:
    return [p for p in dest.iterdir() if p.name.startswith(STAGING_PREFIX)]


def _interrupted(store: LocalBlobStore, prefix: str, dest: Path, k: int) -> tuple[Path, int]:
    """A pull of `prefix` killed on its k-th file: its staging directory, and the files it got."""
    flaky = Flaky(store, fail_on=_files(store, prefix)[k])
    with pytest.raises(Killed):
        pull(flaky, prefix, dest, concurrency=1)  # type: ignore[arg-type]
    assert not (dest / MANIFEST_NAME).exists()
    [staging] = _staging(dest)
    assert [p.name for p in dest.iterdir()] == [staging.name]  # nothing else, nothing complete
    return staging, len(flaky.gets)


def test_a_pull_killed_part_way_downloads_only_the_rest_on_the_next_run(
    bucket: LocalBlobStore, tmp_path: Path
) -> None:
    # Given a pull killed on its 5th file of many (one download at a time)
    dest = tmp_path / "test_data"
    files = _files(bucket, "exp-a/")
    staging, got_before = _interrupted(bucket, "exp-a/", dest, 4)
    assert got_before >= 4  # the four before it, at least, were written and verified
    staged = {p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()}
    assert len(staged - {SOURCE}) == got_before
    # When it runs again
    counted = Flaky(bucket)
    got = pull(counted, "exp-a/", dest, concurrency=1)  # type: ignore[arg-type]
    # Then only the files the first run did not get are downloaded, each once
    assert got.resumed == got_before and got.file_count == len(files)
    assert len(counted.gets) == len(files) - got_before == len(set(counted.gets))
    assert got.requests == 1 + len(counted.gets)
    # And the destination is complete and equals an uninterrupted pull, nothing hidden left
    whole = pull(bucket, "exp-a/", tmp_path / "whole")
    assert _tree(dest) == _tree(whole.dest)
    assert [p.name for p in dest.iterdir() if p.name.startswith(".")] == []


def test_a_pull_failed_on_storage_keeps_what_it_verified_for_the_next_run(
    bucket: LocalBlobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given storage that stays unavailable for one file through every attempt of the pull
    monkeypatch.setattr("caseshelf.services.objectio.OBJECT_PAUSE_SECONDS", 0.0)
    dest = tmp_path / "test_data"
    key = _files(bucket, "exp-a/")[3]
    flaky = Flaky(bucket)
    real = flaky.get
    flaky.get = lambda k: (_ for _ in ()).throw(BackendUnavailable(k)) if k == key else real(k)  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        pull(flaky, "exp-a/", dest, concurrency=1)  # type: ignore[arg-type]
    assert not (dest / MANIFEST_NAME).exists() and len(_staging(dest)) == 1
    # When storage is back, the next pull goes on with the files the failed one verified
    counted = Flaky(bucket)
    got = pull(counted, "exp-a/", dest, concurrency=1)  # type: ignore[arg-type]
    assert got.resumed == len(flaky.gets) >= 3
    assert key in counted.gets and len(counted.gets) == got.file_count - got.resumed
    assert _tree(dest) == _tree(pull(bucket, "exp-a/", tmp_path / "whole").dest)


def test_the_leftover_of_another_export_is_removed_and_not_reused(
    bucket: LocalBlobStore, tmp_path: Path
) -> None:
    # Given what a killed pull of one export left in the destination
    dest = tmp_path / "test_data"
    old, _ = _interrupted(bucket, "exp-a/", dest, 5)
    # When another export is pulled into it
    counted = Flaky(bucket)
    got = pull(counted, "exp-b/", dest, concurrency=4)  # type: ignore[arg-type]
    # Then the leftover is gone, every file of the other export is downloaded, and it is complete
    assert not old.exists() and got.resumed == 0
    assert sorted(counted.gets) == sorted(_files(bucket, "exp-b/"))
    assert _tree(dest) == _tree(pull(bucket, "exp-b/", tmp_path / "whole").dest)
    assert [p.name for p in dest.iterdir() if p.name.startswith(".")] == []


def test_a_corrupted_leftover_file_is_downloaded_again(
    bucket: LocalBlobStore, tmp_path: Path
) -> None:
    # Given a killed pull, and one of the files it staged changed since (same size, other bytes)
    dest = tmp_path / "test_data"
    staging, got_before = _interrupted(bucket, "exp-a/", dest, 6)
    first = _files(bucket, "exp-a/")[0]
    bad = staging / first[len("exp-a/") :]
    body = bad.read_bytes()
    bad.write_bytes(bytes([body[0] ^ 1]) + body[1:])
    # When it runs again
    counted = Flaky(bucket)
    got = pull(counted, "exp-a/", dest, concurrency=2)  # type: ignore[arg-type]
    # Then that file is downloaded again with the ones never fetched, and all of it verifies
    assert first in counted.gets and got.resumed == got_before - 1
    assert len(counted.gets) == got.file_count - got.resumed
    manifest = parse_manifest((dest / MANIFEST_NAME).read_bytes())
    for rel, (digest, size) in manifest.files.items():
        data = (dest / rel).read_bytes()
        assert ("sha256:" + hashlib.sha256(data).hexdigest(), len(data)) == (digest, size), rel


def test_a_leftover_holding_a_symlink_or_a_stray_file_is_not_resumed(
    bucket: LocalBlobStore, tmp_path: Path
) -> None:
    # Given two killed pulls' leftovers, one with a symlink planted in it, one with a stray file
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not yours")
    for name, plant in [
        ("link", lambda s, rel: (s / rel).unlink() or os.symlink(outside, s / rel)),
        ("stray", lambda s, rel: (s / "stray.txt").write_bytes(b"?")),
    ]:
        dest = tmp_path / name
        staging, _ = _interrupted(bucket, "exp-a/", dest, 4)
        plant(staging, _files(bucket, "exp-a/")[0][len("exp-a/") :])
        # When the pull runs again
        counted = Flaky(bucket)
        got = pull(counted, "exp-a/", dest)  # type: ignore[arg-type]
        # Then the leftover is removed, not gone on with: everything is downloaded, nothing
        # is written through the link, and the result is complete
        assert not staging.exists() and got.resumed == 0, name
        assert len(counted.gets) == got.file_count
        assert outside.read_bytes() == b"not yours"
        assert not (dest / "stray.txt").exists()
        assert _tree(dest) == _tree(pull(bucket, "exp-a/", tmp_path / f"whole-{name}").dest)


def test_a_bundle_pull_goes_on_with_a_killed_per_file_pull_of_the_same_export(
    bucket: LocalBlobStore, tmp_path: Path
) -> None:
    dest = tmp_path / "test_data"
    _, got_before = _interrupted(bucket, "exp-a/", dest, 4)
    got = pull(bucket, "exp-a/", dest, bundle=True)
    assert got.resumed == got_before and got.requests == 2
    assert _tree(dest) == _tree(pull(bucket, "exp-a/", tmp_path / "whole").dest)
    assert [p.name for p in dest.iterdir() if p.name.startswith(".")] == []
