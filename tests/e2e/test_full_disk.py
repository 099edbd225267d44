"""A full disk under the embedded store (a real, small tmpfs): every registration and upload at
every fill level is answered (201, or 507 naming the store and the room it needed; never a 500,
never a dropped connection), a failed registration leaves no lease, `verify` stays clean and
SQLite's integrity check ok, and once space is freed (the filler, and `gc`) the retry succeeds."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.sqlite import RESERVE_BYTES, SqliteIndex
from caseshelf.adapters.sqlite_stamp import INDEX_FILE
from caseshelf.devserver import DevServer
from caseshelf.domain.errors import StorageFull
from caseshelf.services.fence import FENCE_SK, fence_pk
from tests.helpers import dev_server
from tests.helpers import http_call as call
from tests.helpers import run_cli as caseshelf
from tests.tmpfs import fill, free_bytes, tmpfs

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

KIB = 1024
# Free space left before each attempt, from roomy to none.
LEVELS = [3072 * KIB, 1024 * KIB, 512 * KIB, 256 * KIB, 64 * KIB, 16 * KIB, 0]


def dataset(name: str, cases: int = 200, seed: str = "") -> dict[str, Any]:
    """About 300 KiB of cases that do not compress away (hex of random bytes)."""
    return {
        "id": name,
        "version": "1.0.0",
        "cases": [
            {"id": f"c{i}", "inputs": {"user": os.urandom(700).hex() + seed}} for i in range(cases)
        ],
    }


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "24m") as path:
        yield path


@pytest.fixture
def server(disk: Path) -> Iterator[DevServer]:
    with dev_server(disk / "home") as srv:
        yield srv


def leases(home: Path, tenant: str = "acme") -> dict[str, Any]:
    with sqlite3.connect(home / INDEX_FILE) as conn:
        row = conn.execute(
            "SELECT doc FROM items WHERE pk=? AND sk=?", (fence_pk(tenant), FENCE_SK)
        ).fetchone()
    return json.loads(row[0])["writers"] if row else {}


def test_registrations_and_uploads_fail_cleanly_on_a_full_disk_and_recover(
    server: DevServer, disk: Path, tmp_path: Path
) -> None:
    home = disk / "home"
    assert call(f"{server.url}/datasets", "POST", dataset("base", 20)).status == 201
    answers: list[int] = []
    uploads: list[int] = []
    for n, level in enumerate(LEVELS):
        fill(disk, level, name=f"filler-{n}")
        # A registration at this fill level is answered: registered, or 507 naming the store
        got = call(f"{server.url}/datasets", "POST", dataset(f"d{n}"))
        answers.append(got.status)
        assert got.status in (201, 507), got.body
        if got.status == 507:
            assert got.json["type"].endswith("storage-full"), got.json
            assert str(home) in got.json["detail"] and "free" in got.json["detail"]
        # And its lease is gone at once: nothing in flight for gc to wait for
        assert leases(home) == {}
        # An upload of ~600 KiB through the presigned URL is answered too, never dropped
        up = call(f"{server.url}/uploads", "POST", {"filename": "rows.jsonl", "recipe": "gsm8k"})
        assert up.status in (201, 507), up.body
        if up.status == 507:
            uploads.append(up.status)
        else:
            put = call(up.json["upload_url"], "PUT", raw=os.urandom(300 * KIB).hex().encode())
            uploads.append(put.status)
            assert put.status in (200, 507), put.body
            if put.status == 507:
                assert "free" in put.json["detail"], put.json
        server.wait_for_workers(60)
    assert answers[-1] == 507 and uploads[-1] == 507
    # Then the store verifies clean and SQLite's integrity check is ok
    verified = caseshelf(tmp_path / "cli", "verify", "--all", env={"CASESHELF_HOME": str(home)})
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with sqlite3.connect(home / INDEX_FILE) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # And gc runs on the full disk, nothing in flight stopping it
    gc = caseshelf(
        tmp_path / "cli",
        *("gc", "--delete", "--grace-hours", "0", "--json"),
        env={"CASESHELF_HOME": str(home)},
    )
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert "in flight" not in gc.stdout + gc.stderr
    # When the filler is removed, the registration that failed succeeds
    for filler in disk.glob("filler-*"):
        filler.unlink()
    failed = [n for n, status in enumerate(answers) if status == 507]
    retry = call(f"{server.url}/datasets", "POST", dataset(f"d{failed[0]}", seed="again"))
    assert retry.status == 201, retry.body
    assert free_bytes(disk) > 0


def test_the_cli_names_the_store_and_the_room_in_one_line(disk: Path, tmp_path: Path) -> None:
    home = disk / "home"
    env = {"CASESHELF_HOME": str(home)}
    (tmp_path / "small.json").write_text(json.dumps(dataset("small", 5)))
    assert caseshelf(tmp_path / "cli", "register", tmp_path / "small.json", env=env).returncode == 0
    (tmp_path / "big.json").write_text(json.dumps(dataset("big")))
    fill(disk, 50 * KIB)
    got = caseshelf(tmp_path / "cli", "register", tmp_path / "big.json", env=env)
    assert got.returncode == 1
    lines = got.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in got.stderr, got.stderr
    assert str(home) in lines[-1] and "free" in lines[-1]
    assert leases(home, "local") == {}


def test_the_index_keeps_room_to_release_what_a_full_disk_stopped(disk: Path) -> None:
    # Given an index on a disk that then fills up completely
    index = SqliteIndex(disk / "index.sqlite")
    index.put_item("p", "small", {"n": 0})  # the first write creates the index and its reserve
    assert index.reserve is not None and index.reserve.stat().st_size == RESERVE_BYTES
    fill(disk, 0)
    # When a write needs room: the reserve is given up for it, and it goes through
    index.put_item("p", "one", {"x": "a" * (256 << 10)})
    assert not index.reserve.exists()
    # And a write larger than what is left is StorageFull naming the index, nothing half-done
    with pytest.raises(StorageFull, match=r"index\.sqlite") as caught:
        index.put_item("p", "two", {"x": "b" * (8 << 20)})
    assert caught.value.fields["path"] == str(disk / "index.sqlite")
    assert index.get_item("p", "two") is None and index.get_item("p", "one") is not None
    index.update_item("p", "small", {"n": 1})  # (no transaction was left open)
    # When space is freed, writes go through and the reserve is made again
    (disk / "filler").unlink()
    index.put_item("p", "two", {"x": "b"})
    assert index.reserve.exists()
    with sqlite3.connect(disk / "index.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_streamed_object_on_a_full_disk_is_storage_full_and_leaves_nothing(disk: Path) -> None:
    from caseshelf.adapters.localfs import LocalBlobStore
    from caseshelf.services.objectio import write_pieces

    # Given a store on a disk with little room left
    store = LocalBlobStore(disk / "objects")
    fill(disk, 64 << 10)
    pieces = (b"x" * (256 << 10) for _ in range(64))  # 16 MiB, more than is free
    # When an object is streamed into it (as a download document or an export part is)
    with pytest.raises(StorageFull) as caught:
        write_pieces(store, "t/acme/exports/downloads/big.json", pieces)
    # Then the error names the object, and neither it nor a temporary file is left
    assert "exports/downloads/big.json" in caught.value.detail
    assert not store.exists("t/acme/exports/downloads/big.json")
    assert [p.name for p in (disk / "objects").rglob("*") if p.is_file()] == []
