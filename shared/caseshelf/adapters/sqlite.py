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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from caseshelf.adapters.sqlite_stamp import STAMP_SCHEMA, read_only_uri
from caseshelf.domain import keys
from caseshelf.domain.errors import BadRequest, Conflict, NotFound, StorageFull
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import DatasetEntry, Page
from caseshelf.storehome import read_only_store

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


def _complete_schema(conn: sqlite3.Connection) -> None:
    """Give the index its table, stamp and triggers where any is missing, in one transaction
    (a no-op, and no write, where they are all there)."""
    have = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE (type = 'table' AND name IN ('items', 'stamp'))"
        " OR (type = 'trigger' AND name LIKE 'stamp_%')"
    ).fetchone()[0]
    if have < 5:
        conn.executescript(f"BEGIN IMMEDIATE;\n{_SCHEMA}{STAMP_SCHEMA}COMMIT;")


def _use_wal(conn: sqlite3.Connection, patience: float = 30.0) -> None:
    """Put the index in WAL mode (a no-op once it is). Switching a new file takes an exclusive
    lock, and where waiting for it could deadlock (two processes opening a new store at once,
    each holding a shared lock) SQLite answers "database is locked" at once instead of calling
    the busy handler: the one refused lets go and tries again once the other has switched, for
    up to `patience` seconds, as the busy timeout would."""
    deadline = time.monotonic() + patience
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _empty_index() -> sqlite3.Connection:
    """An empty index in memory: what reading a store that does not exist yet finds."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.executescript(_SCHEMA)
    return conn


def _cursor_out(sk: str) -> str:
    return base64.urlsafe_b64encode(sk.encode()).decode().rstrip("=")


def _cursor_in(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(f"invalid cursor {cursor!r}", field="cursor") from None


class SqliteIndex:
    """The index in one SQLite file. Opening it creates nothing: a read of a store that does not
    exist yet answers as an empty index, and the first write creates the file (its directory,
    the schema, the change stamp: one transaction, so processes creating it at once create it
    once). Where the file or its directory cannot be written (a read-only mount, permissions),
    reads are served from the file opened read-only and a write is refused naming the store."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        self._create_lock = threading.Lock()
        self._ready = self.path == ":memory:"
        self.reserve = Path(self.path + ".reserve") if self.path != ":memory:" else None
        if self.reserve is not None and Path(self.path).is_file():
            self._make_reserve()

    def _conn(self) -> sqlite3.Connection:
        """A connection for reading: this thread's on the file, or, while there is no file, an
        empty in-memory index (never kept: the file is looked for again on the next read)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if not self._ready and not Path(self.path).is_file():
            return _empty_index()
        conn = self._open()
        self._local.conn = conn
        return conn

    def create(self) -> None:
        """Create the index (and its directory) where there is none yet (`caseshelf init`)."""
        self._write_conn()

    def _write_conn(self) -> sqlite3.Connection:
        """A connection for writing, the index created first where there is none yet."""
        if not self._ready:
            with self._create_lock:
                if not self._ready:
                    self._create()
        conn = self._conn()
        if getattr(self._local, "read_only", False):
            raise read_only_store(Path(self.path).parent, "the index cannot be written")
        return conn

    def _create(self) -> None:
        """The file, its directory and the schema, where any of them is missing."""
        home = Path(self.path).parent
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise read_only_store(home, exc.strerror or str(exc)) from None
        if getattr(self._local, "conn", None) is None:
            self._local.conn = self._open()
        self._ready = True
        if not getattr(self._local, "read_only", False):
            self._make_reserve()

    def _open(self) -> sqlite3.Connection:
        """This thread's connection on the file: read-write, with the schema made complete;
        read-only where the file or its directory cannot be written."""
        path = Path(self.path)
        if self.path != ":memory:" and not os.access(path.parent, os.W_OK):
            # WAL readers write a shared-memory file beside the index: in a directory that
            # cannot be written, the file is read as immutable (nothing else may write it).
            if not path.is_file():
                raise read_only_store(path.parent, "the directory is read-only")
            return self._read_only(read_only_uri(str(path.resolve())) + "&immutable=1")
        if path.is_file() and not os.access(path, os.W_OK):
            return self._read_only(read_only_uri(str(path.resolve())))
        try:
            conn = sqlite3.connect(
                self.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA busy_timeout=30000")
            _use_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            _complete_schema(conn)
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc) or "unable to open" in str(exc):
                raise read_only_store(path.parent, str(exc)) from None
            raise
        self._ready = True
        return conn

    def _read_only(self, uri: str) -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA busy_timeout=30000")
        self._local.read_only = True
        return conn

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
            # No room, or a store this process may only read: the index works without one.
            if not _is_full(exc) and exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
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
        if self.reserve is not None and self._ready and not self.reserve.exists():
            self._make_reserve()
        return result

    # -- versions --------------------------------------------------------------------------

    def put_version(self, rec: VersionRecord) -> None:
        self._write(lambda: self._put_version(rec))

    def _put_version(self, rec: VersionRecord) -> None:
        conn = self._write_conn()
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
                self._write_conn().execute(
                    f"{verb} INTO items (pk, sk, doc) VALUES (?, ?, ?)", (pk, sk, doc)
                )
            except sqlite3.IntegrityError:
                raise Conflict(f"item {pk}/{sk} already exists") from None

        self._write(put)

    def get_item(self, pk: str, sk: str) -> dict[str, Any] | None:
        row = self._conn().execute("SELECT doc FROM items WHERE pk=? AND sk=?", (pk, sk)).fetchone()
        return orjson.loads(row[0]) if row else None

    def list_items(self, pk: str) -> list[tuple[str, dict[str, Any]]]:
        rows = (
            self._conn()
            .execute("SELECT sk, doc FROM items WHERE pk=? ORDER BY sk", (pk,))
            .fetchall()
        )
        return [(sk, orjson.loads(doc)) for sk, doc in rows]

    def delete_item(self, pk: str, sk: str) -> None:
        if not self._ready and not Path(self.path).is_file():
            return  # no store yet: nothing to remove
        self._write(
            lambda: self._write_conn().execute("DELETE FROM items WHERE pk=? AND sk=?", (pk, sk))
        )

    def update_item(
        self, pk: str, sk: str, changes: dict[str, Any], *, expect: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if not self._ready and not Path(self.path).is_file():
            raise NotFound(f"no item {pk}/{sk}")  # no store yet: changing nothing creates none
        return self._write(lambda: self._update_item(pk, sk, changes, expect))

    def _update_item(
        self, pk: str, sk: str, changes: dict[str, Any], expect: dict[str, Any] | None
    ) -> dict[str, Any]:
        conn = self._write_conn()
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
