"""BlobStore on a local directory: the same key tree as the bucket, written atomically."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from caseshelf.domain.errors import BadRequest, NotFound
from caseshelf.domain.paths import relative_path_problem
from caseshelf.ports import ObjectInfo


class LocalBlobStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        problem = relative_path_problem(key)
        if problem:
            raise BadRequest(f"object key {key!r} {problem}", field="key")
        path = self.root / key
        # Refuse keys that resolve out of the root through a planted symlink (CWE-59).
        parent = path.parent.resolve() if path.parent.exists() else path.parent
        if not str(parent).startswith(str(self.root)):
            raise BadRequest(f"object key {key!r} escapes the store", field="key")
        return path

    def _tmp(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        os.close(fd)
        return Path(tmp)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        if path.exists():
            return False
        tmp = self._tmp(path)
        try:
            tmp.write_bytes(data)
            try:
                os.link(tmp, path)  # atomic, and fails if another writer got there first
            except FileExistsError:
                return False
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        path = self._path(key)
        tmp = self._tmp(path)
        try:
            tmp.write_bytes(data)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

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

    def presign_get(self, key: str, *, expires: int = 900) -> str | None:
        return None

    def presign_put(self, key: str, *, expires: int = 900) -> str | None:
        return None
