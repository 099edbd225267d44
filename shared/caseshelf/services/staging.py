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
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
from pathlib import Path
from types import TracebackType

import orjson

from caseshelf.domain.errors import BadRequest, Conflict
from caseshelf.domain.export import MANIFEST_NAME

STAGING_PREFIX = ".caseshelf-staging-"
JOURNAL = ".moving"
_OLD_SIBLING = re.compile(r"^\.(?P<name>.+)\.(?:export|pull)-[0-9a-f]{12}$")


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


def clean_leftovers(dest: Path) -> list[str]:
    """Remove what killed runs left in and beside `dest` (the caller holds `dest`'s lock);
    the names removed."""
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
    for entry in sorted(dest.iterdir()):
        if not entry.name.startswith(STAGING_PREFIX) or entry.is_symlink():
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


class Staging:
    """A locked destination and the hidden directory inside it that a pull or an export writes
    into (`start`), moved into place by `commit`, removed by `abort`. As a context manager it
    aborts whatever was not committed."""

    def __init__(self, dest: Path, *, what: str = "destination") -> None:
        if dest.is_symlink():
            raise BadRequest(f"{what} {dest} is a symlink", path=str(dest))
        if dest.exists() and not dest.is_dir():
            raise BadRequest(f"{what} {dest} is not a directory", path=str(dest))
        self.dest = dest
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
        try:
            self.cleaned = clean_leftovers(dest)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def start(self) -> Path:
        """Make the hidden staging directory and answer it."""
        if self.tmp is None:
            self.tmp = self.dest / f"{STAGING_PREFIX}{secrets.token_hex(6)}"
            self.tmp.mkdir()
        return self.tmp

    def commit(self, manifest: bytes | None = None) -> None:
        """Move the staged entries into the destination, `manifest.json` last (`manifest`
        written first when given)."""
        tmp = self.start()
        if manifest is not None:
            (tmp / MANIFEST_NAME).write_bytes(manifest)
        names = sorted(p.name for p in tmp.iterdir() if p.name != MANIFEST_NAME)
        (tmp / JOURNAL).write_bytes(orjson.dumps(names))
        for name in names:
            (tmp / name).rename(self.dest / name)
        if (tmp / MANIFEST_NAME).exists():
            (tmp / MANIFEST_NAME).rename(self.dest / MANIFEST_NAME)
        shutil.rmtree(tmp)
        self.tmp = None
        self.created = False
        self._release()

    def abort(self) -> None:
        """Remove the staging directory (and the destination when this run made it)."""
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
        self.abort()
