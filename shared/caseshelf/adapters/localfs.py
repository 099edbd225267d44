"""BlobStore on a local directory: the same key tree as the bucket, written atomically.

Served by `caseshelf serve`, the store also stands in for S3's presigned PUT and GET: given the
server's public URL, `presign_put` answers `<public url>/_uploads/<token>` and `presign_get`
`<public url>/_downloads/<token>`, where the token is an HMAC-signed, expiring value naming the
method, the tenant and the key; the dev server hands an upload's body to `receive_upload`, which
checks the token and writes the object, and a download's token to `open_download`, which checks
it and opens the object. A token grants its own method only: a download URL never writes. The
signing key is random per store (per server process): a restart voids every outstanding URL.

Every object is durable before its write returns: the file is fsynced before it takes its name
and its directory after, so the index, committed later, never names an object a power cut lost.
A full disk (ENOSPC) is `StorageFull`, naming the store, the object and the room it needed.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import hmac
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, NoReturn

import orjson

from caseshelf.domain.errors import BadRequest, Forbidden, NotFound, StorageFull
from caseshelf.domain.layout import check_tenant
from caseshelf.domain.paths import relative_path_problem
from caseshelf.ports import ObjectInfo
from caseshelf.storehome import read_only_store

UPLOAD_PATH = "/_uploads/"
DOWNLOAD_PATH = "/_downloads/"
_CHUNK = 1 << 20
# An object is written to its file this many bytes at a time (`_write_file`).
WRITE_PIECE_BYTES = 256 << 10


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class UploadTokens:
    """`<payload>.<mac>`, both base64url: the payload is `{"t": tenant, "k": key, "e": expiry,
    "m": method}` (epoch seconds; `PUT` for an upload, `GET` for a download), the mac its
    HMAC-SHA256 under a secret only this process knows."""

    def __init__(self, secret: bytes | None = None, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self._clock = clock

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._secret, payload.encode("ascii"), hashlib.sha256).digest())

    def sign(
        self, key: str, expires: int, *, method: str = "PUT", filename: str | None = None
    ) -> str:
        """A token for `key`; `filename` (a download's): the name its answer saves it as."""
        tenant = _tenant_of(key)
        body = {"t": tenant, "k": key, "e": int(self._clock()) + int(expires), "m": method}
        if filename:
            body["n"] = filename
        payload = _b64(orjson.dumps(body))
        return f"{payload}.{self._mac(payload)}"

    def filename(self, token: str) -> str | None:
        """The download name a token was signed with (None: none), once `verify` passed it."""
        name = orjson.loads(_unb64(token.partition(".")[0])).get("n")
        return name if isinstance(name, str) else None

    def verify(self, token: str, *, method: str = "PUT") -> str:
        """The key a token names for `method`; `Forbidden` when it is forged, altered, expired
        or made for the other method."""
        what = "download" if method == "GET" else "upload"
        payload, _, mac = token.partition(".")
        if not payload or not mac or not hmac.compare_digest(mac, self._mac(payload)):
            raise Forbidden(f"the {what} URL is not valid (bad signature)", field="token")
        try:
            body = orjson.loads(_unb64(payload))
            tenant, key, expiry = body["t"], body["k"], int(body["e"])
            signed_for = body["m"]
        except (binascii.Error, ValueError, KeyError, TypeError):
            raise Forbidden(f"the {what} URL is not valid (bad payload)", field="token") from None
        if signed_for != method:
            article = "a" if method == "GET" else "an"
            raise Forbidden(f"the URL is not {article} {what} URL", field="token")
        if expiry < self._clock():
            raise Forbidden(f"the {what} URL has expired", field="token")
        if not isinstance(key, str):
            raise Forbidden(f"the {what} URL is not valid (bad payload)", field="token")
        try:
            owner = _tenant_of(key)
        except BadRequest:
            raise Forbidden(f"the {what} URL is not valid (bad key)", field="token") from None
        if owner != tenant:
            raise Forbidden(f"the {what} URL is not valid (tenant and key differ)", field="token")
        return key


def sync_dir(path: Path) -> None:
    """fsync a directory, so the names made in it (a new file, a rename) survive a power cut."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _write_file(path: Path, data: bytes) -> None:
    """Write `data` to a new file at `path` in `WRITE_PIECE_BYTES` pieces, not in one call:
    a write of a megabyte or more into a new file (a pack is one 8 MiB write) costs the kernel
    about ten times the system time of the same bytes written 256 KiB at a time."""
    view = memoryview(data)
    with path.open("wb") as fh:
        for at in range(0, len(view), WRITE_PIECE_BYTES):
            fh.write(view[at : at + WRITE_PIECE_BYTES])
        fh.flush()
        os.fsync(fh.fileno())


def _drain(body: BinaryIO, left: int) -> None:
    while left > 0:
        chunk = body.read(min(left, _CHUNK))
        if not chunk:
            return
        left -= len(chunk)


def _tenant_of(key: str) -> str:
    """The tenant of a `t/<tenant>/...` key (only tenant keys are ever signed)."""
    parts = key.split("/")
    if len(parts) < 3 or parts[0] != "t" or relative_path_problem(key):
        raise BadRequest(f"object key {key!r} is not under a tenant", field="key")
    return check_tenant(parts[1])


class LocalBlobStore:
    def __init__(
        self,
        root: str | Path,
        *,
        public_url: str | None = None,
        tokens: UploadTokens | None = None,
    ) -> None:
        # Created by the first write (`_tmp`), never by opening or reading the store.
        self.root = Path(root).resolve()
        self.public_url = public_url.rstrip("/") if public_url else None
        self.tokens = tokens or UploadTokens()

    def _path(self, key: str) -> Path:
        problem = relative_path_problem(key)
        if problem:
            raise BadRequest(f"object key {key!r} {problem}", field="key")
        path = self.root / key
        # Refuse keys that resolve out of the root through a planted symlink (CWE-59): in any
        # existing directory on the way, or the object itself. The store never makes symlinks.
        if not path.resolve().is_relative_to(self.root):
            raise BadRequest(f"object key {key!r} escapes the store", field="key")
        return path

    def _tmp(self, path: Path) -> Path:
        """A new temporary file beside `path`; the directories made for it are synced into
        their parents. A store that cannot be written is refused naming it."""
        made = []
        here = path.parent
        while not here.is_dir() and here != self.root:
            made.append(here)
            here = here.parent
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            for d in reversed(made):
                sync_dir(d.parent)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        except (PermissionError, NotADirectoryError) as exc:
            raise read_only_store(self.root.parent, exc.strerror or str(exc)) from None
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            raise read_only_store(self.root.parent, exc.strerror or str(exc)) from None
        os.close(fd)
        return Path(tmp)

    def full(self, key: str, needed: int) -> StorageFull:
        """The error for an object that did not fit: the store, the key, and the room."""
        free = shutil.disk_usage(self.root).free
        return StorageFull(
            f"the store at {self.root} is full: {key} needs {needed:,} bytes and {free:,} are "
            "free; free space on that disk (or run `caseshelf gc --delete`) and retry",
            path=str(self.root),
            key=key,
            needed_bytes=needed,
            free_bytes=free,
        )

    @contextmanager
    def _room(self, key: str, needed: int) -> Iterator[None]:
        """ENOSPC while writing `key` becomes `StorageFull` naming the store."""
        try:
            yield
        except OSError as exc:
            if disk_full(exc):
                raise self.full(key, needed) from None
            raise

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Written durably: the file is fsynced before it takes its name, and its directory
        after, so an index row committed after this call never names a lost object."""
        path = self._path(key)
        if path.exists():
            return False
        with self._room(key, len(data)):
            tmp = self._tmp(path)
            try:
                _write_file(tmp, data)
                try:
                    os.link(tmp, path)  # atomic, and fails if another writer got there first
                except FileExistsError:
                    return False
                sync_dir(path.parent)
                return True
            finally:
                tmp.unlink(missing_ok=True)

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        path = self._path(key)
        with self._room(key, len(data)):
            tmp = self._tmp(path)
            try:
                _write_file(tmp, data)
                tmp.replace(path)
                sync_dir(path.parent)
            finally:
                tmp.unlink(missing_ok=True)

    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> None:
        dest = self._path(key)
        with self._room(key, path.stat().st_size):
            tmp = self._tmp(dest)
            try:
                shutil.copyfile(path, tmp)
                with tmp.open("rb") as fh:
                    os.fsync(fh.fileno())
                tmp.replace(dest)
                sync_dir(dest.parent)
            finally:
                tmp.unlink(missing_ok=True)

    def open_writer(self, key: str, *, content_type: str | None = None) -> FileWriter:
        dest = self._path(key)
        return FileWriter(self, self._tmp(dest), dest)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"no object {key}", key=key) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        try:
            with self._path(key).open("rb") as fh:
                fh.seek(offset)
                return fh.read(length)
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"no object {key}", key=key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except FileNotFoundError:
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        base = self.root / prefix.rstrip("/") if prefix else self.root
        # `t/a/x` matches `t/a/x/...` and also a sibling `t/a/xy`: walk from the parent then.
        start = base if not prefix or prefix.endswith("/") else base.parent
        if not start.exists():
            return
        found = []
        for dirpath, _dirs, files in os.walk(start):
            for name in files:
                if name.startswith(".tmp-"):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    st = full.stat()
                    found.append(ObjectInfo(key, st.st_size, st.st_mtime))
        yield from sorted(found, key=lambda o: o.key)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def presign_get(
        self, key: str, *, expires: int = 900, filename: str | None = None
    ) -> str | None:
        """`<public url>/_downloads/<token>` when a dev server publishes this store, else None
        (the caller then reads the object itself). `filename` is signed into the token: the
        server's answer names the download so (`download_filename`)."""
        if self.public_url is None:
            return None
        self._path(key)
        token = self.tokens.sign(key, expires, method="GET", filename=filename)
        return f"{self.public_url}{DOWNLOAD_PATH}{token}"

    def presign_put(self, key: str, *, expires: int = 900) -> str | None:
        """`<public url>/_uploads/<token>` when a dev server publishes this store, else None."""
        if self.public_url is None:
            return None
        self._path(key)
        return f"{self.public_url}{UPLOAD_PATH}{self.tokens.sign(key, expires)}"

    def upload_key(self, token: str) -> str:
        """The key an upload token grants (checked before any body is read)."""
        key = self.tokens.verify(token)
        self._path(key)
        return key

    def receive_upload(self, token: str, body: BinaryIO, length: int) -> tuple[str, str]:
        """Write the `length` bytes of `body` to the key the token grants, as S3 does for a
        presigned PUT (the whole object or nothing); (key, ETag: the body's MD5 hex). On a full
        disk the rest of the body is read and dropped before `StorageFull` is raised."""
        key = self.upload_key(token)
        path = self._path(key)
        md5 = hashlib.md5(usedforsecurity=False)
        left = length
        try:
            with self._room(key, length):
                tmp = self._tmp(path)
                try:
                    with tmp.open("wb") as fh:
                        while left > 0:
                            chunk = body.read(min(left, _CHUNK))
                            if not chunk:
                                raise BadRequest(
                                    f"the upload ended after {length - left} of {length} bytes",
                                    field="body",
                                )
                            left -= len(chunk)
                            fh.write(chunk)
                            md5.update(chunk)
                        fh.flush()
                        os.fsync(fh.fileno())
                    tmp.replace(path)
                    sync_dir(path.parent)
                finally:
                    tmp.unlink(missing_ok=True)
        except StorageFull:
            _drain(body, left)  # the client then reads the answer, not a reset connection
            raise
        return key, md5.hexdigest()

    def download_filename(self, token: str) -> str:
        """The name a download token's answer saves its object as: the one it was signed with,
        else the key's last part. `Forbidden` as for `open_download`."""
        key = self.tokens.verify(token, method="GET")
        return self.tokens.filename(token) or key.rsplit("/", 1)[-1]

    def open_download(self, token: str) -> tuple[str, BinaryIO, int]:
        """The key a download token grants, the object opened for reading, and its size:
        `Forbidden` for a forged, altered, expired or upload token, `NotFound` when the object
        is gone. The caller closes the file."""
        key = self.tokens.verify(token, method="GET")
        path = self._path(key)
        try:
            fh = path.open("rb")
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"no object {key}", key=key) from None
        try:
            size = os.fstat(fh.fileno()).st_size
        except OSError:
            fh.close()
            raise
        return key, fh, size


class FileWriter:
    """An object written into a temporary file beside its place, renamed into place at
    `commit` (the store's own atomic write); `abort` removes it. A full disk is the store's
    `StorageFull`, as for every other write, and leaves nothing behind."""

    def __init__(self, store: LocalBlobStore, tmp: Path, dest: Path) -> None:
        self.store = store
        self.tmp = tmp
        self.dest = dest
        self.fh: BinaryIO | None = tmp.open("wb")
        self.size = 0

    def write(self, data: bytes) -> int:
        assert self.fh is not None, "written after commit or abort"
        try:
            self.fh.write(data)
        except OSError as exc:
            self._full(exc, len(data))
        self.size += len(data)
        return len(data)

    def _full(self, exc: OSError, more: int) -> NoReturn:
        if not disk_full(exc):
            raise exc
        self.abort()
        raise self.store.full(
            str(self.dest.relative_to(self.store.root)), self.size + more
        ) from None

    def copy(self, key: str, size: int) -> None:
        with self.store._path(key).open("rb") as src:
            remaining = size
            while remaining:
                chunk = src.read(min(_CHUNK, remaining))
                if not chunk:
                    raise NotFound(f"{key} ended {remaining} bytes short", key=key)
                self.write(chunk)
                remaining -= len(chunk)

    def commit(self) -> int:
        assert self.fh is not None, "committed twice"
        try:
            self.fh.close()
        except OSError as exc:  # the last buffered bytes did not fit
            self.fh = None
            self._full(exc, 0)
        self.fh = None
        self.tmp.replace(self.dest)
        return self.size

    def abort(self) -> None:
        if self.fh is not None:
            fh, self.fh = self.fh, None
            # A full disk refuses the last buffered bytes: they are dropped with the file.
            with suppress(OSError):
                fh.close()
        self.tmp.unlink(missing_ok=True)
