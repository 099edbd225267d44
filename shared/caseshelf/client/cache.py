"""The verified local cache of dataset versions, keyed by content digest.

One directory per version (`<cache>/versions/<hex of the content digest>/`): `cases.jsonl`
(the cases' canonical records, one a line), `meta.json` (description, tags, shared files: the
rest of what the digest is computed from) and `files/<hex>` (file bodies). Content addressing
makes one cache safe to share between every store, API and tenant: a digest names the same
bytes wherever they came from.

- **Written atomically**: an entry is built in a temporary directory beside the others and
  renamed into place whole; a reader never sees half of one.
- **Verified before it is served**: every read computes the content digest again from the
  cached records (`caseshelf.domain.cached.verify_records`); an entry that does not verify is
  removed and reported as a miss, so the caller fetches it again. It is never served.
- **Bounded**: `CASESHELF_CACHE_MAX` (bytes, or `500M`, `10G`; default 10 GiB); after a write
  the least recently used entries go until the cache is under it. An entry's last use is its
  `meta.json`'s modification time, set on every read.
- **Where**: `CASESHELF_CACHE`, else the user cache directory (`platformdirs`, e.g.
  `~/.cache/caseshelf` on Linux).

A cache that cannot be written (read-only, full) is not an error for a load: `put` answers
False and warns once (`CacheWarning`); the caller still has the version from the registry.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import orjson
from platformdirs import user_cache_path
from pydantic import BaseModel, ConfigDict

from caseshelf.domain.cached import Verified, VersionContent, verify_records
from caseshelf.domain.canonical import hex_of
from caseshelf.domain.errors import BadRequest

CACHE_ENV = "CASESHELF_CACHE"
CACHE_MAX_ENV = "CASESHELF_CACHE_MAX"
DEFAULT_MAX_BYTES = 10 << 30
_HEX = re.compile(r"^[0-9a-f]{64}$")
_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgGtT]?)i?[bB]?\s*$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_LINES_A_WRITE = 4096


class CacheWarning(UserWarning):
    """The cache could not be used (read-only, full, an entry that did not verify); the
    version came from the registry instead."""


def parse_size(text: str, *, what: str = CACHE_MAX_ENV) -> int:
    """`1073741824`, `500M`, `10G`, `2GiB` as bytes."""
    m = _SIZE.match(text)
    if not m:
        raise BadRequest(
            f"{what}={text!r} is no size: give bytes or a number with K, M, G or T (e.g. 10G)",
            field=what,
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV]).expanduser()
    return user_cache_path("caseshelf", appauthor=False)


class CacheEntry(BaseModel):
    """One cached version: its digest, cases, bytes on disk and when it was last used (seconds
    since the epoch)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    cases: int
    bytes: int
    last_used: float
    description: str


class Cache:
    def __init__(self, root: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._warned = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Cache:
        environ = os.environ if env is None else env
        limit = environ.get(CACHE_MAX_ENV)
        return cls(
            default_cache_dir(environ),
            max_bytes=parse_size(limit) if limit else DEFAULT_MAX_BYTES,
        )

    def __repr__(self) -> str:
        return f"caseshelf.Cache({str(self.root)!r}, max_bytes={self.max_bytes})"

    @property
    def versions(self) -> Path:
        return self.root / "versions"

    def path_of(self, digest: str) -> Path:
        return self.versions / hex_of(digest)

    # -- reading ---------------------------------------------------------------------------

    def get(self, digest: str) -> Verified | None:
        """The cached version with this content digest, verified; None when it is not cached,
        or was and did not verify (it is then removed, with a warning)."""
        entry = self.path_of(digest)
        try:
            meta = orjson.loads((entry / "meta.json").read_bytes())
            data = (entry / "cases.jsonl").read_bytes()
        except (OSError, orjson.JSONDecodeError):
            return None
        try:
            lines = data.split(b"\n")
            if lines and not lines[-1]:
                lines.pop()
            got = verify_records(
                lines,
                description=meta["description"],
                tags=meta["tags"],
                shared_files=meta["shared_files"],
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            got = None
        if got is None or got.content_digest != digest:
            self._drop_bad(entry, digest)
            return None
        self._touch(entry)
        return got

    def file(self, hex_digest: str, digest: str) -> bytes | None:
        """One file body of a cached version, when it is there and hashes to its name."""
        try:
            body = (self.path_of(digest) / "files" / hex_digest).read_bytes()
        except OSError:
            return None
        return body if hashlib.sha256(body).hexdigest() == hex_digest else None

    def _drop_bad(self, entry: Path, digest: str) -> None:
        warnings.warn(
            f"the cached copy of {digest} in {entry} did not verify (its cases no longer hash "
            "to it): it was removed and the version is fetched from the registry again",
            CacheWarning,
            stacklevel=3,
        )
        shutil.rmtree(entry, ignore_errors=True)

    @staticmethod
    def _touch(entry: Path) -> None:
        # a read-only cache serves; it only forgets the order of use
        with contextlib.suppress(OSError):
            os.utime(entry / "meta.json")

    def entries(self) -> list[CacheEntry]:
        """Every cached version, the most recently used first."""
        out = []
        try:
            names = [p for p in self.versions.iterdir() if _HEX.match(p.name)]
        except OSError:
            return []
        for path in names:
            try:
                meta_path = path / "meta.json"
                meta = orjson.loads(meta_path.read_bytes())
                used = meta_path.stat().st_mtime
            except (OSError, orjson.JSONDecodeError):
                continue
            out.append(
                CacheEntry(
                    digest="sha256:" + path.name,
                    cases=int(meta.get("case_count", 0)),
                    bytes=_tree_size(path),
                    last_used=used,
                    description=str(meta.get("description", "")),
                )
            )
        out.sort(key=lambda e: e.last_used, reverse=True)
        return out

    # -- writing ---------------------------------------------------------------------------

    def put(self, digest: str, content: VersionContent, *, strict: bool = False) -> bool:
        """Keep `content` (which the caller verified to have this digest) under `digest`,
        written whole or not at all, then evict down to the bound. True when it is cached.
        A cache that cannot be written: with `strict` the OSError is raised, else a warning
        (once per cache) and False."""
        size = sum(len(r) + 1 for r in content.records) + sum(map(len, content.files.values()))
        if size > self.max_bytes:
            return self._not_kept(
                f"{digest} is {size:,} bytes, over the cache's bound of {self.max_bytes:,} "
                f"({CACHE_MAX_ENV}); raise the bound to keep it",
                strict,
                None,
            )
        try:
            self._write(digest, content)
        except OSError as exc:
            return self._not_kept(
                f"the cache at {self.root} could not be written ({exc.strerror or exc}); make "
                f"it writable, free space, or set {CACHE_ENV} to another directory",
                strict,
                exc,
            )
        self.evict(keep={hex_of(digest)})
        return True

    def _not_kept(self, why: str, strict: bool, exc: OSError | None) -> bool:
        if strict:
            if exc is not None:
                raise OSError(exc.errno or errno.EIO, why) from exc
            raise BadRequest(why, field=CACHE_MAX_ENV)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"{why}: the version was loaded from the registry and is not cached",
                CacheWarning,
                stacklevel=4,
            )
        return False

    def _write(self, digest: str, content: VersionContent) -> None:
        final = self.path_of(digest)
        if (final / "meta.json").is_file():
            return
        self.versions.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.versions))
        try:
            with (tmp / "cases.jsonl").open("wb") as fh:
                _write_lines(fh, content.records)
            if content.files:
                (tmp / "files").mkdir()
                for hex_digest, body in content.files.items():
                    (tmp / "files" / hex_digest).write_bytes(body)
            meta = {**content.meta(), "content_digest": digest, "case_count": len(content.records)}
            (tmp / "meta.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_SORT_KEYS))
            try:
                tmp.rename(final)
            except OSError as exc:
                # another process cached the same digest first: its copy is the same bytes
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def evict(
        self, *, max_bytes: int | None = None, keep: frozenset[str] | set[str] = frozenset()
    ) -> list[str]:
        """Remove the least recently used entries (never those in `keep`, hex digests) until
        the cache is under `max_bytes` (default its bound); the digests removed."""
        bound = self.max_bytes if max_bytes is None else max_bytes
        entries = self.entries()
        total = sum(e.bytes for e in entries)
        removed = []
        for e in reversed(entries):  # least recently used first
            if total <= bound:
                break
            if hex_of(e.digest) in keep:
                continue
            shutil.rmtree(self.path_of(e.digest), ignore_errors=True)
            total -= e.bytes
            removed.append(e.digest)
        self._sweep_temporaries()
        return removed

    def clear(self) -> list[str]:
        """Remove every entry; the digests removed."""
        gone = [e.digest for e in self.entries()]
        for digest in gone:
            shutil.rmtree(self.path_of(digest), ignore_errors=True)
        self._sweep_temporaries(age=0)
        return gone

    def _sweep_temporaries(self, age: float = 3600) -> None:
        """Temporary directories of writes that died (older than `age` seconds, so a write
        under way in another process is left alone)."""
        try:
            stale = [
                p for p in self.versions.glob(".tmp-*") if time.time() - p.stat().st_mtime > age
            ]
        except OSError:
            return
        for p in stale:
            shutil.rmtree(p, ignore_errors=True)


def _write_lines(fh: BinaryIO, records: Sequence[bytes]) -> None:
    """`records` one a line, a batch to a write: a third of the time of two writes a record."""
    for at in range(0, len(records), _LINES_A_WRITE):
        fh.write(b"\n".join(records[at : at + _LINES_A_WRITE]))
        fh.write(b"\n")


def _tree_size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            total += p.stat().st_size if p.is_file() else 0
    return total


__all__ = ["CACHE_ENV", "CACHE_MAX_ENV", "Cache", "CacheEntry", "CacheWarning", "parse_size"]
