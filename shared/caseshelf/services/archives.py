"""Reading archives with bounded work: `.tar` (plain, gzip, bzip2, xz), `.zip`, and a bounded
view of any decompressing stream.

Every limit is enforced while the bytes stream, before they are kept: the number of members, the
size of each member, the total uncompressed size, and the ratio of uncompressed to compressed
bytes (a 984-byte `.tar.bz2` that holds a 1 GiB member stops after a few MB, not after 1 GiB).
The defaults keep the tree an archive becomes (held in memory) well below the functions' memory
(2 GB): `MAX_TOTAL_BYTES` in all, `MAX_MEMBER_BYTES` for one file.

Paths are checked member by member (no absolute path, no `..`, no link leaving the tree: CWE-22,
CWE-59; no device or fifo), and a member given twice is refused: a tar or zip may hold two
entries of one name, and keeping the last would lose the first without a word.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import lzma
import posixpath
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO

from caseshelf.domain.errors import BadRequest, StorageFull, TooLarge
from caseshelf.domain.paths import relative_path_problem
from caseshelf.services.staging import ensure_room

MAX_MEMBERS = 200_000
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_MEMBER_BYTES = 256 * 1024 * 1024
# Uncompressed ÷ compressed bytes, checked once RATIO_FLOOR_BYTES have come out (small, very
# compressible files are normal; gigabytes of them from kilobytes are a bomb).
MAX_RATIO = 200
RATIO_FLOOR_BYTES = 16 * 1024 * 1024
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    max_entries: int = MAX_MEMBERS
    max_total_bytes: int = MAX_TOTAL_BYTES
    max_member_bytes: int = MAX_MEMBER_BYTES
    max_ratio: float = MAX_RATIO
    ratio_floor_bytes: int = RATIO_FLOOR_BYTES


@dataclass
class Tree:
    """Files of a tree by relative POSIX path; `name` is the tree's own name (dir or archive)."""

    name: str
    files: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    # In-tree file links of an archive (member -> the file it resolves to); their `files` entry
    # is already a copy of the target. Case-directory trees use them to apply the listed-symlink
    # rule (`caseshelf.domain.symlinks`) as they would on disk.
    links: dict[str, str] = field(default_factory=dict)


class Budget:
    """Counts members and bytes against `Limits`; `TooLarge` naming the archive and the limit."""

    def __init__(self, limits: Limits, where: str) -> None:
        self.limits = limits
        self.where = where
        self.entries = 0
        self.bytes = 0

    def entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise TooLarge(
                f"{self.where}: more than {self.limits.max_entries} entries", field="entries"
            )

    def member(self, path: str, size: int) -> None:
        if size > self.limits.max_member_bytes:
            raise TooLarge(
                f"{self.where}: entry {path!r} is {size} bytes uncompressed; the limit for one "
                f"file is {self.limits.max_member_bytes}",
                field="size",
                path=path,
            )

    def size(self, n: int) -> None:
        self.bytes += n
        if self.bytes > self.limits.max_total_bytes:
            raise TooLarge(
                f"{self.where}: more than {self.limits.max_total_bytes} bytes uncompressed",
                field="size",
            )


class _Counting(io.RawIOBase):
    """A read-only view of `raw` that counts the bytes read from it (the compressed side)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        return n


class BoundedStream(io.RawIOBase):
    """The decompressed side of a stream, refused (`TooLarge`) once more than `max_bytes` come
    out, or more than `max_ratio` times what went in (after `ratio_floor_bytes`)."""

    def __init__(
        self,
        inner: IO[bytes],
        counted: _Counting | None,
        where: str,
        *,
        max_bytes: int,
        max_ratio: float,
        ratio_floor_bytes: int,
    ) -> None:
        self.inner = inner
        self.counted = counted
        self.where = where
        self.max_bytes = max_bytes
        self.max_ratio = max_ratio
        self.ratio_floor_bytes = ratio_floor_bytes
        self.out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(min(len(buffer), _CHUNK))  # (its errors are the caller's)
        n = len(data)
        buffer[:n] = data
        self.out += n
        if self.out > self.max_bytes:
            raise TooLarge(
                f"{self.where}: more than {self.max_bytes} bytes uncompressed", field="size"
            )
        if self.counted is not None and self.out > self.ratio_floor_bytes:
            ratio = self.out / max(self.counted.count, 1)
            if ratio > self.max_ratio:
                raise TooLarge(
                    f"{self.where}: inflates more than {self.max_ratio:g} times "
                    f"({self.out} bytes from {self.counted.count}): refused as a bomb",
                    field="size",
                )
        return n


def _gzip(raw: IO[bytes]) -> IO[bytes]:
    return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]


def _bz2(raw: IO[bytes]) -> IO[bytes]:
    return bz2.BZ2File(raw, mode="rb")


def _xz(raw: IO[bytes]) -> IO[bytes]:
    return lzma.LZMAFile(raw, mode="rb")


# The compressions a tar comes in, by their magic bytes.
_MAGIC: list[tuple[bytes, Callable[[IO[bytes]], IO[bytes]]]] = [
    (b"\x1f\x8b", _gzip),
    (b"BZh", _bz2),
    (b"\xfd7zXZ\x00", _xz),
]


def bounded(
    raw: IO[bytes], where: str, limits: Limits, decompress: Callable[[IO[bytes]], IO[bytes]]
) -> IO[bytes]:
    """`decompress(raw)` read through a `BoundedStream` (total and ratio limits), buffered."""
    counted = _Counting(raw)
    inner = decompress(io.BufferedReader(counted))
    stream = BoundedStream(
        inner,
        counted,
        where,
        max_bytes=limits.max_total_bytes + limits.max_entries * 1024 + _CHUNK,  # headers too
        max_ratio=limits.max_ratio,
        ratio_floor_bytes=limits.ratio_floor_bytes,
    )
    return io.BufferedReader(stream, buffer_size=_CHUNK)


def _uncompressed(fileobj: IO[bytes], where: str, limits: Limits) -> IO[bytes]:
    """The tar bytes of `fileobj`, decompressed (gzip, bzip2 or xz by their magic) through a
    bounded stream; a plain tar as it is."""
    head = fileobj.read(6)
    fileobj.seek(0)
    for magic, opener in _MAGIC:
        if head.startswith(magic):
            return bounded(fileobj, where, limits, opener)
    return fileobj


def clean_member(name: str, where: str) -> str | None:
    """The safe relative path of an archive member, None for the root itself."""
    trimmed = name
    while trimmed.startswith("./"):
        trimmed = trimmed[2:]
    trimmed = trimmed.rstrip("/")
    if trimmed in {"", "."}:
        return None
    problem = relative_path_problem(trimmed)
    if problem:
        raise BadRequest(f"{where}: entry {name!r} {problem}", field="archive", path=name)
    if "//" in trimmed:
        raise BadRequest(
            f"{where}: entry {name!r} is not normalised (an empty segment): two spellings of "
            "one path are refused",
            field="archive",
            path=name,
        )
    return trimmed


def link_target(member: str, target: str, where: str) -> str:
    """The in-tree path a symlink at `member` points to; refused when it leaves the tree."""
    if target.startswith("/") or "\\" in target:
        raise BadRequest(
            f"{where}: link {member!r} -> {target!r} points outside the tree", path=member
        )
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(member), target))
    if resolved == ".." or resolved.startswith("../") or resolved == ".":
        raise BadRequest(
            f"{where}: link {member!r} -> {target!r} points outside the tree", path=member
        )
    return resolved


def resolve_links(tree: Tree, links: dict[str, str], where: str) -> None:
    """Materialize in-tree file links as copies of their targets (links to links followed,
    cycles and links to directories refused)."""
    for member in links:
        seen = {member}
        target = links[member]
        while target in links:
            if target in seen:
                raise BadRequest(f"{where}: link cycle at {member!r}", path=member)
            seen.add(target)
            target = links[target]
        if target not in tree.files:
            raise BadRequest(
                f"{where}: link {member!r} does not point at a file in the tree", path=member
            )
        tree.files[member] = tree.files[target]
        tree.modes[member] = tree.modes.get(target, 0o644)
        tree.links[member] = target


class _Seen:
    """Member paths already given (a tar or zip may hold two entries of one name: keeping the
    last would lose the first without a word)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.paths: set[str] = set()

    def once(self, path: str) -> None:
        if path in self.paths:
            raise BadRequest(
                f"{self.where}: entry {path!r} appears twice in the archive; keeping either "
                "would lose the other",
                field="archive",
                path=path,
            )
        self.paths.add(path)


@dataclass
class Member:
    """One file of an archive as it streams by: its checked path, permission bits and size;
    `link`, for a link, the in-tree path it points at (checked, not yet resolved); else
    `handle`, its bytes, readable until the next member is asked for (`copy_member`)."""

    path: str
    mode: int
    size: int
    link: str | None = None
    handle: IO[bytes] | None = None


@contextmanager
def archive_errors(name: str) -> Iterator[None]:
    """A broken archive's errors (from the decompressor, tarfile or zipfile, raised wherever
    its bytes are read) as a `BadRequest` naming it."""
    try:
        yield
    except tarfile.TarError as exc:
        raise BadRequest(f"{name}: not a readable tar archive: {exc}", field="archive") from None
    except (zipfile.BadZipFile, NotImplementedError) as exc:
        raise BadRequest(f"{name}: a zip entry is corrupt: {exc}", field="archive") from None
    except (EOFError, lzma.LZMAError, zlib.error) as exc:
        raise BadRequest(f"{name}: truncated or corrupt archive: {exc}", field="archive") from None
    except OSError as exc:
        if exc.errno is not None:  # the disk's (a full scratch area), not the archive's
            raise
        raise BadRequest(f"{name}: truncated or corrupt archive: {exc}", field="archive") from None


def copy_member(member: Member, where: str, write: Callable[[bytes], Any]) -> None:
    """Hand a member's bytes to `write` a chunk at a time, never past its declared size; a
    member shorter than it declares is refused, and so is one that goes on past it (a zip
    entry whose header lies)."""
    assert member.handle is not None
    left = member.size
    while left > 0:
        chunk = member.handle.read(min(_CHUNK, left))
        if not chunk:
            raise BadRequest(
                f"{where}: entry {member.path!r} is truncated "
                f"({member.size - left} of {member.size} bytes)",
                path=member.path,
            )
        write(chunk)
        left -= len(chunk)
    if member.handle.read(1):
        raise TooLarge(
            f"{where}: entry {member.path!r} inflates past its declared size", field="size"
        )


def iter_tar(fileobj: BinaryIO, name: str, limits: Limits = Limits()) -> Iterator[Member]:
    """The members of a `.tar`, `.tar.gz`/`.tgz`, `.tar.bz2` or `.tar.xz`, streamed once
    through the limits (count, each member's size, the total, the inflation ratio), each path
    checked as it comes. Directories are left out."""
    budget = Budget(limits, name)
    seen = _Seen(name)
    with archive_errors(name):
        stream = _uncompressed(fileobj, name, limits)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                budget.entry()
                path = clean_member(member.name, name)
                if member.isdir():
                    continue
                if path is None:
                    raise BadRequest(
                        f"{name}: entry {member.name!r} is not a file", path=member.name
                    )
                seen.once(path)
                if member.issym():
                    yield Member(path, 0o644, 0, link=link_target(path, member.linkname, name))
                    continue
                if member.islnk():
                    target = clean_member(member.linkname, name)
                    if target is None:
                        raise BadRequest(f"{name}: bad hard link {member.name!r}", path=path)
                    yield Member(path, 0o644, 0, link=target)
                    continue
                if not member.isfile():
                    raise BadRequest(
                        f"{name}: entry {member.name!r} is not a regular file, directory or link",
                        path=member.name,
                    )
                budget.member(path, member.size)
                budget.size(member.size)
                handle = tar.extractfile(member) or io.BytesIO()
                yield Member(path, member.mode, member.size, handle=handle)


def _zip_plan(
    archive: zipfile.ZipFile, name: str, limits: Limits
) -> list[tuple[str, zipfile.ZipInfo, bool]]:
    """Every file of a zip's central directory, checked (names, twice-given names, links,
    declared sizes and ratios, count) before one byte is inflated."""
    budget = Budget(limits, name)
    seen = _Seen(name)
    plan: list[tuple[str, zipfile.ZipInfo, bool]] = []
    for info in archive.infolist():
        budget.entry()
        path = clean_member(info.filename, name)
        if info.is_dir() or path is None:
            continue
        seen.once(path)
        is_link = stat.S_ISLNK(info.external_attr >> 16)
        if not is_link:
            budget.member(path, info.file_size)
            budget.size(info.file_size)
            if (
                info.file_size > limits.ratio_floor_bytes
                and info.file_size > limits.max_ratio * max(info.compress_size, 1)
            ):
                raise TooLarge(
                    f"{name}: entry {path!r} inflates more than {limits.max_ratio:g} times "
                    f"({info.file_size} bytes from {info.compress_size}): refused as a bomb",
                    field="size",
                    path=path,
                )
        plan.append((path, info, is_link))
    return plan


def iter_zip(fileobj: BinaryIO, name: str, limits: Limits = Limits()) -> Iterator[Member]:
    """The members of a `.zip`: the whole central directory is checked first (`_zip_plan`),
    then each member is inflated on its own, never past its declared size."""
    try:
        archive = zipfile.ZipFile(fileobj)
    except zipfile.BadZipFile as exc:
        raise BadRequest(f"{name}: not a readable zip archive: {exc}", field="archive") from None
    with archive:
        plan = _zip_plan(archive, name, limits)
        for path, info, is_link in plan:
            with archive_errors(name), archive.open(info) as handle:
                if is_link:
                    data = handle.read(4097)
                    if len(data) > 4096:
                        raise TooLarge(
                            f"{name}: entry {info.filename!r} inflates past its declared size",
                            field="size",
                        )
                    target = link_target(path, data.decode("utf-8", "replace"), name)
                    yield Member(path, 0o644, 0, link=target)
                    continue
                mode = info.external_attr >> 16
                yield Member(path, mode if mode else 0o644, info.file_size, handle=handle)


def iter_members(
    fileobj: BinaryIO, name: str, kind: str, limits: Limits = Limits()
) -> Iterator[Member]:
    """`iter_zip` or `iter_tar` of an archive of `kind` (`zip` or `tar`)."""
    return iter_zip(fileobj, name, limits) if kind == "zip" else iter_tar(fileobj, name, limits)


def _read_tree(members: Iterator[Member], name: str) -> Tree:
    tree = Tree(name)
    links: dict[str, str] = {}
    with archive_errors(name):
        for member in members:
            if member.link is not None:
                links[member.path] = member.link
                continue
            out = bytearray()
            copy_member(member, name, out.extend)
            tree.files[member.path] = bytes(out)
            tree.modes[member.path] = member.mode
    resolve_links(tree, links, name)
    return tree


def read_tar(fileobj: BinaryIO, name: str, limits: Limits = Limits()) -> Tree:
    """A tar archive (`iter_tar`) as a tree held in memory."""
    return _read_tree(iter_tar(fileobj, name, limits), name)


def read_zip(fileobj: BinaryIO, name: str, limits: Limits = Limits()) -> Tree:
    """A zip archive (`iter_zip`) as a tree held in memory."""
    return _read_tree(iter_zip(fileobj, name, limits), name)


# A scratch area keeps this much free besides what a member needs (the worker's own writes).
SCRATCH_RESERVE_BYTES = 16 * 1024 * 1024


@dataclass
class Extracted:
    """An archive written out under `root` member by member: the mode of every file by its
    relative path (links included, as copies of their targets) and the links themselves."""

    name: str
    root: Path
    modes: dict[str, int] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def read(self, path: str) -> bytes:
        return (self.root / path).read_bytes()


def _room(dest: Path, need: int, where: str, path: str) -> None:
    ensure_room(
        dest,
        need + SCRATCH_RESERVE_BYTES,
        what=f"{where}: entry {path!r} (with the scratch area's reserve)",
        around="split the tasks into several smaller archives, or give the worker more scratch "
        "space (its EphemeralStorage)",
        path=path,
    )


def _write_member(member: Member, target: Path, where: str) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("xb") as out:
            copy_member(member, where, out.write)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        raise BadRequest(
            f"{where}: entry {member.path!r} is both a file and a directory in the archive",
            field="archive",
            path=member.path,
        ) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise StorageFull(
                f"{where}: the scratch space ran out writing entry {member.path!r}: split the "
                "tasks into several smaller archives, or give the worker more scratch space",
                path=member.path,
            ) from None
        raise


def extract(members: Iterator[Member], name: str, dest: Path) -> Extracted:
    """Write an archive's members under `dest` (a private, empty directory) one at a time:
    memory holds one chunk of one member, never the archive. Paths were checked as the members
    came (no absolute path, no `..`); links are never made on disk: once every member is
    written, each in-tree file link becomes a copy of its target (`resolve_links`'s rules).
    The free space is checked before each member (`StorageFull` naming the member and the way
    around)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = Extracted(name, dest)
    links: dict[str, str] = {}
    with archive_errors(name):
        for member in members:
            if member.link is not None:
                links[member.path] = member.link
                continue
            _room(dest, member.size, name, member.path)
            _write_member(member, dest / member.path, name)
            out.modes[member.path] = member.mode
    for path in links:
        seen = {path}
        target = links[path]
        while target in links:
            if target in seen:
                raise BadRequest(f"{name}: link cycle at {path!r}", path=path)
            seen.add(target)
            target = links[target]
        if target not in out.modes:
            raise BadRequest(
                f"{name}: link {path!r} does not point at a file in the tree", path=path
            )
        _room(dest, (dest / target).stat().st_size, name, path)
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dest / target, dest / path)
        out.modes[path] = out.modes[target]
        out.links[path] = target
    return out
