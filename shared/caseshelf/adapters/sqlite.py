"""Index on SQLite: the same single-table logical rows as DynamoDB (`caseshelf.domain.keys`).

A full disk never leaves the index stuck: a write that fails with SQLITE_FULL (or ENOSPC) frees
the reserve file kept beside the database (`<db>.reserve`, `RESERVE_BYTES`) and is tried once
more, so the writes that follow a failure (a registration releasing its lease, gc marking its
sweep) go through; the reserve is made again once there is room. A write that still fails is
`StorageFull`, naming the database and the room, and its transaction is rolled back (SQLite may
have rolled it back already: the rollback is then skipped, never raised).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from caseshelf.adapters.sqlite_stamp import ensure_stamp
from caseshelf.domain import keys
from caseshelf.domain.errors import BadRequest, Conflict, NotFound, StorageFull
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import DatasetEntry, Page

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    pk TEXT NOT NULL,
    sk TEXT NOT NULL,
    doc BLOB NOT NULL,
    PRIMARY KEY (pk, sk)
) WITHOUT ROWID;
"""


T = TypeVar("T")
# Room kept free beside the database for the writes that must follow a full disk.
RESERVE_BYTES = 1 << 20
_SQLITE_FULL = 13


def _is_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, sqlite3.Error) and (
        getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL
        or "database or disk is full" in str(exc)
    )


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it does on SQLITE_FULL)."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _cursor_out(sk: str) -> str:
    return base64.urlsafe_b64encode(sk.encode()).decode().rstrip("=")


def _cursor_in(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(f"invalid cursor {cursor!r}", field="cursor") from None


class SqliteIndex:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self.reserve = Path(self.path + ".reserve") if self.path != ":memory:" else None
        self._make_reserve()

        def setup() -> None:
            conn = self._conn()
            conn.executescript(_SCHEMA)
            ensure_stamp(conn)

        self._write(setup)

    # -- a full disk -------------------------------------------------------------------------

    def _make_reserve(self) -> None:
        """Make the reserve file when it is missing and there is room (else leave it)."""
        if self.reserve is None or self.reserve.exists():
            return
        tmp = self.reserve.with_name(f"{self.reserve.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            with open(tmp, "wb") as fh:
                fallocate = getattr(os, "posix_fallocate", None)
                if fallocate is not None:
                    fallocate(fh.fileno(), 0, RESERVE_BYTES)
                else:
                    fh.write(bytes(RESERVE_BYTES))
                    fh.flush()
                os.fsync(fh.fileno())
            tmp.replace(self.reserve)
        except OSError as exc:
            if not _is_full(exc):
                raise
        finally:
            tmp.unlink(missing_ok=True)

    def _full(self, exc: BaseException) -> StorageFull:
        where = Path(self.path).parent
        free = shutil.disk_usage(where).free
        return StorageFull(
            f"the index at {self.path} cannot be written: the disk is full ({free:,} bytes "
            f"free; {RESERVE_BYTES:,} keep it writable); free space on that disk (or run "
            f"`caseshelf gc --delete`) and retry ({exc})",
            path=self.path,
            needed_bytes=RESERVE_BYTES,
            free_bytes=free,
        )

    def _write(self, fn: Callable[[], T]) -> T:
        """Run `fn` (a write, rolled back by itself on failure); on a full disk, free the
        reserve and run it once more, else raise `StorageFull`."""
        try:
            result = fn()
        except (sqlite3.Error, OSError) as exc:
            if not _is_full(exc):
                raise
            if self.reserve is None or not self.reserve.exists():
                raise self._full(exc) from None
            self.reserve.unlink(missing_ok=True)
            try:
                result = fn()
            except (sqlite3.Error, OSError) as again:
                if _is_full(again):
                    raise self._full(again) from None
                raise
        if self.reserve is not None and not self.reserve.exists():
            self._make_reserve()
        return result

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA busy_timeout=30000")
                conn.execute("PRAGMA synchronous=NORMAL")
            except BaseException:
                conn.close()
                raise
            self._local.conn = conn
        return conn

    # -- versions --------------------------------------------------------------------------

    def put_version(self, rec: VersionRecord) -> None:
        self._write(lambda: self._put_version(rec))

    def _put_version(self, rec: VersionRecord) -> None:
        conn = self._conn()
        pk = keys.version_pk(rec.tenant, rec.kind, rec.name)
        doc = orjson.dumps(keys.record_to_item(rec))
        conn.execute("BEGIN IMMEDIATE")
        try:
            try:
                conn.execute(
                    "INSERT INTO items (pk, sk, doc) VALUES (?, ?, ?)",
                    (pk, keys.version_sk(rec.version), doc),
                )
            except sqlite3.IntegrityError:
                raise Conflict(
                    f"{rec.name}@{rec.version} already exists", id=rec.name, version=rec.version
                ) from None
            tpk, esk = keys.tenant_pk(rec.tenant), keys.entity_sk(rec.kind, rec.name)
            row = conn.execute("SELECT doc FROM items WHERE pk=? AND sk=?", (tpk, esk)).fetchone()
            entry = orjson.loads(row[0]) if row else {"created_at": rec.created_at}
            entry.update(tenant=rec.tenant, kind=rec.kind, name=rec.name, updated_at=rec.created_at)
            conn.execute(
                "INSERT OR REPLACE INTO items (pk, sk, doc) VALUES (?, ?, ?)",
                (tpk, esk, orjson.dumps(entry)),
            )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def get_version(self, tenant: str, kind: str, name: str, version: str) -> VersionRecord | None:
        row = (
            self._conn()
            .execute(
                "SELECT doc FROM items WHERE pk=? AND sk=?",
                (keys.version_pk(tenant, kind, name), keys.version_sk(version)),
            )
            .fetchone()
        )
        return keys.item_to_record(orjson.loads(row[0])) if row else None

    def list_versions(self, tenant: str, kind: str, name: str) -> list[VersionRecord]:
        rows = (
            self._conn()
            .execute(
                "SELECT doc FROM items WHERE pk=? AND sk >= 'V#' AND sk < 'V$'",
                (keys.version_pk(tenant, kind, name),),
            )
            .fetchall()
        )
        return [keys.item_to_record(orjson.loads(r[0])) for r in rows]

    def update_version(
        self, tenant: str, kind: str, name: str, version: str, changes: dict[str, Any]
    ) -> VersionRecord:
        keys.check_version_changes(changes)
        pk, sk = keys.version_pk(tenant, kind, name), keys.version_sk(version)
        try:
            doc = self.update_item(pk, sk, changes)
        except NotFound:
            raise NotFound(f"no version {name}@{version}", id=name, version=version) from None
        return keys.item_to_record(doc)

    def list_datasets(
        self, tenant: str, kind: str, *, cursor: str | None = None, limit: int = 50
    ) -> Page:
        prefix = keys.entity_prefix(kind)
        after = _cursor_in(cursor) if cursor else prefix
        rows = (
            self._conn()
            .execute(
                "SELECT sk, doc FROM items WHERE pk=? AND sk > ? AND sk < ? ORDER BY sk LIMIT ?",
                (keys.tenant_pk(tenant), after, prefix[:-1] + "$", limit + 1),
            )
            .fetchall()
        )
        more = len(rows) > limit
        rows = rows[:limit]
        items = []
        for _sk, doc in rows:
            d = orjson.loads(doc)
            items.append(
                DatasetEntry(d["tenant"], d["kind"], d["name"], d["created_at"], d["updated_at"])
            )
        return Page(items, _cursor_out(rows[-1][0]) if more and rows else None)

    def list_tenants(self) -> list[str]:
        rows = (
            self._conn()
            .execute("SELECT DISTINCT pk FROM items WHERE pk LIKE 'T#%' AND pk NOT LIKE 'T#%#%'")
            .fetchall()
        )
        return sorted(r[0][2:] for r in rows)

    # -- auxiliary rows --------------------------------------------------------------------

    def put_item(self, pk: str, sk: str, item: dict[str, Any], *, if_absent: bool = False) -> None:
        verb = "INSERT" if if_absent else "INSERT OR REPLACE"
        doc = orjson.dumps(item)

        def put() -> None:
            try:
                self._conn().execute(
                    f"{verb} INTO items (pk, sk, doc) VALUES (?, ?, ?)", (pk, sk, doc)
                )
            except sqlite3.IntegrityError:
                raise Conflict(f"item {pk}/{sk} already exists") from None

        self._write(put)

    def get_item(self, pk: str, sk: str) -> dict[str, Any] | None:
        row = self._conn().execute("SELECT doc FROM items WHERE pk=? AND sk=?", (pk, sk)).fetchone()
        return orjson.loads(row[0]) if row else None

    def update_item(
        self, pk: str, sk: str, changes: dict[str, Any], *, expect: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self._write(lambda: self._update_item(pk, sk, changes, expect))

    def _update_item(
        self, pk: str, sk: str, changes: dict[str, Any], expect: dict[str, Any] | None
    ) -> dict[str, Any]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT doc FROM items WHERE pk=? AND sk=?", (pk, sk)).fetchone()
            if row is None:
                raise NotFound(f"no item {pk}/{sk}")
            doc = orjson.loads(row[0])
            for k, v in (expect or {}).items():
                if doc.get(k) != v:
                    raise Conflict(f"item {pk}/{sk}: {k} is {doc.get(k)!r}, expected {v!r}")
            doc.update(changes)
            conn.execute("UPDATE items SET doc=? WHERE pk=? AND sk=?", (orjson.dumps(doc), pk, sk))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return doc
