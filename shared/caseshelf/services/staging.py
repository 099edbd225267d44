"""Where a pull or a directory export is written before it is complete: inside its destination.

A destination may be a mount point (a pod's volume at `/test_data`): its parent is another file
system, so a directory staged beside it cannot be renamed into it (EXDEV), and the mount point
itself cannot be replaced (EBUSY). The files are therefore written into a hidden directory inside
the destination, `.caseshelf-staging-<hex>`, and moved into place entry by entry (renames within
one file system), `manifest.json` last: a destination that has `manifest.json` is complete.

While it writes, a pull or export holds an exclusive lock (`flock`) on the destination
directory; a second one into the same destination is refused (409) instead of mixing files. The
lock goes with the process, so whatever the holder of the lock finds that is not its own is left
from a killed run, and is removed before anything is written:

- `.caseshelf-staging-*` directories inside the destination; when the destination holds no
  `manifest.json`, also the entries a killed run had already moved into it, which its staging
  directory's journal (`.moving`, written before the first move) names;
- the hidden siblings earlier releases staged beside the destination (`.NAME.export-<hex>`,
  `.NAME.pull-<hex>`).

A pull names its source (`Staging(..., source=..., expected=...)`: the prefix and the digest of
the export's manifest, and the files that manifest lists); a directory export names its export id
(`expected=None`: its files are known only as its cases are planned). The staging directory
carries that name (`.caseshelf-source`) and is kept when the run fails or is killed before its
commit (`keeps_staging`), so the next run of the same source into the same destination resumes
it (`Staging.resumed`): it writes only the files not already there and verified. A staging
directory is resumed only when it names the same source, its commit had not begun (no
`.moving`), and it holds nothing but directories and regular files (those the manifest lists,
when `expected` is given; no symlink, nothing else); any other is removed as above.

Work that must stage a known number of bytes on a local disk (a case-directory archive written out
in a Lambda function's /tmp) asks `ensure_room` first: too little free space is `StorageFull`
(507) naming the disk, the bytes needed and free, and the way around it, before anything is
written, never an `ENOSPC` halfway through.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
from collections.abc import Collection
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from caseshelf.domain.errors import (
    BackendUnavailable,
    BadRequest,
    Conflict,
    StorageFull,
    Upstream,
)
from caseshelf.domain.export import MANIFEST_NAME

STAGING_PREFIX = ".caseshelf-staging-"
JOURNAL = ".moving"
SOURCE = ".caseshelf-source"
_SOURCE_BYTES = 4096  # what is read of a staging directory's source name
_OLD_SIBLING = re.compile(r"^\.(?P<name>.+)\.(?:export|pull)-[0-9a-f]{12}$")
# What one file or directory takes on a disk beyond its bytes, at most: its last, partly used
# block (ext4's and most file systems' 4 KiB).
BLOCK_BYTES = 4096


def staged_bytes(sizes: Collection[int], directories: int = 0) -> int:
    """The room files of `sizes` (and `directories` directories) take on a disk: each file's
    bytes and at most one block more, a block for each directory."""
    return sum(sizes) + BLOCK_BYTES * (len(sizes) + directories)


def ensure_room(where: Path, needed: int, *, what: str, around: str, **fields: Any) -> None:
    """Refuse to write `needed` bytes under `where` when its disk has less free: `StorageFull`
    naming `what`, the disk (`disk`) and its size (`limit_bytes`), the bytes needed and free,
    and `around` (the way around it), before anything is written. `fields` go on the error
    (the entry's `path`, say)."""
    usage = shutil.disk_usage(where)
    if needed > usage.free:
        raise StorageFull(
            f"{what} needs {needed:,} bytes of local disk at {where} and {usage.free:,} of its "
            f"{usage.total:,} are free; {around}",
            disk=str(where),
            needed_bytes=needed,
            free_bytes=usage.free,
            limit_bytes=usage.total,
            **fields,
        )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _moved_names(staging: Path) -> list[str]:
    """The entries a staging directory's commit moved (or was about to move) into place."""
    try:
        names = orjson.loads((staging / JOURNAL).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return []
    if not isinstance(names, list):
        return []
    return [
        n
        for n in names
        if isinstance(n, str)
        and n not in {"", ".", "..", MANIFEST_NAME}
        and "/" not in n
        and "\0" not in n
        and not n.startswith(STAGING_PREFIX)
    ]


def _resumable(staging: Path, source: str, expected: Collection[str] | None) -> bool:
    """Whether a leftover staging directory is one of `source` that a run may go on with: its
    commit not begun, and nothing in it but directories and regular files (those `expected`,
    unless that is None)."""
    try:
        with open(staging / SOURCE, "rb") as fh:
            named = fh.read(_SOURCE_BYTES + 1)
    except OSError:
        return False
    if named != source.encode() or (staging / JOURNAL).exists():
        return False
    for root, dirs, files in os.walk(staging):
        base = Path(root)
        for name in dirs:
            if (base / name).is_symlink():
                return False
        for name in files:
            path = base / name
            rel = path.relative_to(staging).as_posix()
            if rel == SOURCE:
                continue
            if path.is_symlink() or not path.is_file():
                return False
            if expected is not None and rel not in expected:
                return False
    return True


def clean_leftovers(
    dest: Path, *, source: str | None = None, expected: Collection[str] | None = ()
) -> list[str]:
    """Remove what killed runs left in and beside `dest` (the caller holds `dest`'s lock);
    the names removed. The first staging directory of `source` that can be resumed is kept."""
    removed: list[str] = []
    try:
        siblings = [
            p
            for p in dest.parent.iterdir()
            if (m := _OLD_SIBLING.match(p.name)) and m.group("name") == dest.name
        ]
    except PermissionError:  # a parent this process may not list (a pod's `/`): none seen
        siblings = []
    for sibling in siblings:
        if not sibling.is_symlink():
            _remove(sibling)
            removed.append(str(sibling))
    complete = (dest / MANIFEST_NAME).is_file()
    kept = False
    for entry in sorted(dest.iterdir()):
        if not entry.name.startswith(STAGING_PREFIX) or entry.is_symlink():
            continue
        if source is not None and not complete and not kept and entry.is_dir():
            kept = _resumable(entry, source, expected)
            if kept:
                continue
        if not complete:
            for name in _moved_names(entry):
                target = dest / name
                if target.exists() or target.is_symlink():
                    _remove(target)
                    removed.append(str(target))
        _remove(entry)
        removed.append(str(entry))
    return removed


def destination_full(dest: Path, what: str, exc: BaseException) -> StorageFull | None:
    """The error for a destination whose disk filled up while `exc` was raised (None when `exc`
    is no full disk): it names the destination and the room left, and says the next run goes
    on from what was written."""
    if not isinstance(exc, OSError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    try:
        free = shutil.disk_usage(dest).free
    except OSError:
        free = 0
    return StorageFull(
        f"{what} {dest} is full ({exc.strerror}; {free:,} bytes free): free space on that disk, "
        "or choose another destination, and run it again: it goes on from the files already "
        "written",
        path=str(dest),
        free_bytes=free,
    )


def keeps_staging(exc: BaseException | None) -> bool:
    """Whether a run that failed with `exc` leaves its staging directory for the next run. A
    source found wrong (a key refused, a digest that does not match, a file missing, a case the
    format cannot carry) is no run to go on with; anything else (storage unavailable, a full
    disk, an interrupt) leaves what was verified for the next run."""
    wrong = isinstance(exc, (BadRequest, Upstream)) and not isinstance(exc, BackendUnavailable)
    return not wrong


class Staging:
    """A locked destination and the hidden directory inside it that a pull or an export writes
    into (`start`), moved into place by `commit`, removed by `abort`. As a context manager it
    aborts whatever was not committed. With a `source`, the staging directory is that of a
    killed or failed run of the same source when there is one (`resumed`), and `abort` keeps it
    for the next run unless its commit had begun."""

    def __init__(
        self,
        dest: Path,
        *,
        what: str = "destination",
        source: str | None = None,
        expected: Collection[str] | None = (),
    ) -> None:
        if dest.is_symlink():
            raise BadRequest(f"{what} {dest} is a symlink", path=str(dest))
        if dest.exists() and not dest.is_dir():
            raise BadRequest(f"{what} {dest} is not a directory", path=str(dest))
        self.dest = dest
        self.what = what
        self.created = False
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                dest.mkdir()
                self.created = True
            except FileExistsError:
                pass
        self._fd: int | None = os.open(dest, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._release()
            raise Conflict(
                f"another pull or export into {dest} is under way; wait for it to finish or "
                "choose another destination",
                path=str(dest),
            ) from None
        self.tmp: Path | None = None
        self.source = source
        self.resumed: Path | None = None
        try:
            self.cleaned = clean_leftovers(dest, source=source, expected=expected)
            if source is not None:
                self.resumed = next(
                    (
                        p
                        for p in sorted(dest.iterdir())
                        if p.name.startswith(STAGING_PREFIX) and p.is_dir() and not p.is_symlink()
                    ),
                    None,
                )
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def start(self) -> Path:
        """Make the hidden staging directory and answer it."""
        if self.tmp is None and self.resumed is not None:
            self.tmp = self.resumed
        elif self.tmp is None:
            self.tmp = self.dest / f"{STAGING_PREFIX}{secrets.token_hex(6)}"
            self.tmp.mkdir()
            if self.source is not None:
                (self.tmp / SOURCE).write_text(self.source)
        return self.tmp

    def commit(self, manifest: bytes | None = None) -> None:
        """Move the staged entries into the destination, `manifest.json` last (`manifest`
        written first when given)."""
        tmp = self.start()
        if manifest is not None:
            (tmp / MANIFEST_NAME).write_bytes(manifest)
        names = sorted(p.name for p in tmp.iterdir() if p.name not in {MANIFEST_NAME, SOURCE})
        (tmp / JOURNAL).write_bytes(orjson.dumps(names))
        for name in names:
            (tmp / name).rename(self.dest / name)
        if (tmp / MANIFEST_NAME).exists():
            (tmp / MANIFEST_NAME).rename(self.dest / MANIFEST_NAME)
        shutil.rmtree(tmp)
        self.tmp = None
        self.created = False
        self._release()

    def abort(self, *, keep: bool = True) -> None:
        """Remove the staging directory (and the destination when this run made it); one of a
        `source` whose commit had not begun is kept for the next run to resume, unless `keep`
        is false."""
        if (
            keep
            and self.tmp is not None
            and self.source is not None
            and not (self.tmp / JOURNAL).exists()
        ):
            self.tmp = None  # kept: what it holds was verified as written
        if self.tmp is not None:
            if not (self.dest / MANIFEST_NAME).is_file():
                for name in _moved_names(self.tmp):  # a commit that failed part way
                    target = self.dest / name
                    if target.exists() or target.is_symlink():
                        _remove(target)
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        if self.created:
            with contextlib.suppress(OSError):  # something else is in it now: not ours
                self.dest.rmdir()
            self.created = False
        self._release()

    def __enter__(self) -> Staging:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abort(keep=keeps_staging(exc))
        full = destination_full(self.dest, self.what, exc) if exc is not None else None
        if full is not None:
            raise full from None
