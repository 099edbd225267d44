"""The pod side of an export: download `{prefix}/...` into a data directory, verified.

Every listed key is checked before anything is written: a key that would land outside the
destination stops the pull and is named (CWE-22); every key but the manifest must be a file of
the manifest and match its digest (a `bundle.tar.gz` inside the prefix, as older exports wrote
it, is left out). The download goes into a hidden temporary directory; only a verified download
is moved into place, manifest last, so a directory that has `manifest.json` is complete. The
hidden directory is inside the destination (`caseshelf.services.staging`), so a destination that
is a mount point (a pod's volume) works as any other, and what a killed pull left is removed.
A pull that fails or is killed before its commit keeps its staging directory, named after its
source (the prefix and the manifest's digest): the next pull of the same export into the same
destination goes on with it, downloading only the files not already there with the manifest's
size and digest.

`--bundle` fetches the bundle at the sibling key `<prefix without its slash>.bundle.tar.gz`
(outside the prefix, so a pod listing the prefix never downloads it), or, for an older export,
`<prefix>bundle.tar.gz`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

from caseshelf.domain.errors import BadRequest, Conflict, NotFound, Upstream
from caseshelf.domain.export import (
    BUNDLE_NAME,
    BUNDLE_SUFFIX,
    MANIFEST_NAME,
    ExportManifest,
    parse_manifest,
)
from caseshelf.domain.paths import relative_path_problem
from caseshelf.ports import BlobStore, ObjectInfo
from caseshelf.services.objectio import per_object
from caseshelf.services.staging import STAGING_PREFIX, Staging

DEFAULT_CONCURRENCY = 16


class Progress(Protocol):
    """What an export or a pull reports as it goes: the totals (`files` and `nbytes` 0 when not
    known up front, as in an export streamed a chunk of cases at a time), then what is done."""

    def start(self, cases: int, files: int, nbytes: int) -> None: ...

    def advance(self, files: int, nbytes: int, cases: int = 0) -> None: ...


class NoProgress:
    def start(self, cases: int, files: int, nbytes: int) -> None:
        pass

    def advance(self, files: int, nbytes: int, cases: int = 0) -> None:
        pass


_REPORTER: ContextVar[Progress | None] = ContextVar("caseshelf_progress", default=None)


@contextmanager
def reporting(progress: Progress) -> Iterator[Progress]:
    """Within the block, exports and pulls of this context report to `progress` (a command
    line's bars) without every layer between passing it along."""
    token = _REPORTER.set(progress)
    try:
        yield progress
    finally:
        _REPORTER.reset(token)


def current_progress() -> Progress:
    return _REPORTER.get() or NoProgress()


@dataclass(frozen=True)
class PullResult:
    dest: Path
    export_id: str
    case_count: int
    file_count: int
    bytes: int
    requests: int
    reused: bool = False
    resumed: int = 0  # files a killed or failed pull of the same export had already written


def safe_relative_key(key: str, prefix: str, dest: Path) -> str:
    """The path a listed key takes under `dest`; an unsafe one stops the pull, naming the key."""
    rel = key[len(prefix) :]
    problem = relative_path_problem(rel)
    if problem is None:
        root = dest.resolve()
        if root not in (root / rel).resolve().parents:
            problem = "resolves outside the destination"
    if problem:
        raise BadRequest(
            f"refusing key {key!r}: {rel!r} {problem} (it would land outside {dest})",
            key=key,
        )
    return rel


def _check(rel: str, data: bytes, manifest: ExportManifest, key: str) -> None:
    expected = manifest.files.get(rel)
    if expected is None:
        raise BadRequest(f"key {key!r} is not in the export's manifest", key=key)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if digest != expected[0] or len(data) != expected[1]:
        raise Upstream(
            f"digest mismatch for {key!r}: the manifest says {expected[0]} ({expected[1]} bytes), "
            f"the object is {digest} ({len(data)} bytes)",
            key=key,
        )


def _source(prefix: str, manifest_bytes: bytes) -> str:
    """What a pull's staging directory is named after: the export it is a copy of."""
    return f"{prefix}\nsha256:{hashlib.sha256(manifest_bytes).hexdigest()}"


def _staged(tmp: Path, rel: str, manifest: ExportManifest) -> bool:
    """Whether a resumed staging directory already holds `rel` with the manifest's size and
    digest (its mode set again: a run killed between the write and the chmod)."""
    path = tmp / rel
    digest, size = manifest.files[rel]
    try:
        if path.stat().st_size != size:
            return False
        with open(path, "rb") as fh:
            got = "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return False
    if got != digest:
        return False
    mode = manifest.modes.get(rel)
    if mode is not None:
        path.chmod(mode)
    return True


def _write(
    tmp: Path, rel: str, data: bytes, mode: int | None, made: set[str], *, over: bool = False
) -> None:
    """Write one file under the staging directory (`made`: the directories made so far;
    `over`: a resumed one, where a file that did not verify is replaced)."""
    path = tmp / rel
    parent = rel.rpartition("/")[0]
    if parent and parent not in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        made.add(parent)
    if over:
        path.unlink(missing_ok=True)  # a mode without write permission is not in the way
    with open(path, "wb") as fh:
        fh.write(data)
    if mode is not None:
        path.chmod(mode)


def _already_there(dest: Path, export_id: str | None) -> PullResult | None:
    if not dest.is_dir() or not any(not p.name.startswith(STAGING_PREFIX) for p in dest.iterdir()):
        return None  # empty, or only what a killed run staged
    marker = dest / MANIFEST_NAME
    if marker.is_file():
        found = parse_manifest(marker.read_bytes())
        if export_id is None or found.export_id == export_id:
            return PullResult(
                dest,
                found.export_id,
                found.case_count,
                len(found.files),
                sum(s for _, s in found.files.values()),
                0,
                reused=True,
            )
    raise Conflict(f"destination {dest} is not empty and holds no copy of this export")


def pull(
    store: BlobStore,
    prefix: str,
    dest: Path,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    bundle: bool = False,
    progress: Progress | None = None,
) -> PullResult:
    """Download the export at `prefix` (a key prefix in `store`) into `dest`."""
    progress = progress or current_progress()
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    manifest_bytes = _manifest_bytes(store, prefix)
    manifest = parse_manifest(manifest_bytes)
    if (dest / MANIFEST_NAME).is_file():  # complete: nothing to write (or another export)
        found = _already_there(dest, manifest.export_id)
        if found is not None:
            return found
    total_bytes = sum(size for _, size in manifest.files.values())
    progress.start(manifest.case_count, len(manifest.files), total_bytes)
    if bundle:
        got = _pull_bundle(store, prefix, dest, manifest, manifest_bytes)
        progress.advance(got.file_count, got.bytes)
        return got
    wanted = _wanted(store, prefix, dest, manifest)
    return _pull_files(store, prefix, dest, manifest, manifest_bytes, wanted, concurrency, progress)


def _manifest_bytes(store: BlobStore, prefix: str) -> bytes:
    """The export's manifest, or `NotFound` saying the prefix holds no complete export."""
    try:
        return per_object(partial(store.get, prefix + MANIFEST_NAME))
    except NotFound:
        raise NotFound(
            f"no {MANIFEST_NAME} under {prefix!r}: not an export, or an incomplete one",
            key=prefix + MANIFEST_NAME,
        ) from None


def _wanted(
    store: BlobStore, prefix: str, dest: Path, manifest: ExportManifest
) -> list[tuple[str, str]]:
    """The export's files as `(key, path relative to dest)`, listed under `prefix` and held to
    the manifest: a key it does not name is refused, and so is a file it names that is not
    there."""
    wanted: list[tuple[str, str]] = []
    listed: set[str] = set()
    listing: list[ObjectInfo] = per_object(lambda: list(store.list(prefix)))
    for info in listing:
        if info.key.endswith("/") and info.size == 0:
            continue  # a "folder" marker some S3 tools create: nothing is written for it
        rel = safe_relative_key(info.key, prefix, dest)
        if rel == MANIFEST_NAME or (rel == BUNDLE_NAME and rel not in manifest.files):
            continue  # the manifest, and the bundle of an older export: not files of it
        if rel not in manifest.files:
            raise BadRequest(f"key {info.key!r} is not in the export's manifest", key=info.key)
        listed.add(rel)
        wanted.append((info.key, rel))
    missing = sorted(set(manifest.files) - listed)
    if missing:
        raise Upstream(
            f"{len(missing)} file(s) of the manifest are not under {prefix!r}: "
            + ", ".join(missing[:20]),
            missing=missing[:50],
        )
    return wanted


def _pull_files(
    store: BlobStore,
    prefix: str,
    dest: Path,
    manifest: ExportManifest,
    manifest_bytes: bytes,
    wanted: list[tuple[str, str]],
    concurrency: int,
    progress: Progress,
) -> PullResult:
    """The `wanted` files fetched `concurrency` at a time into a staging directory (going on
    with what an interrupted run verified), checked against the manifest, and put in place
    at `dest` whole."""
    total = resumed = 0
    source = _source(prefix, manifest_bytes)
    with Staging(dest, what="destination", source=source, expected=manifest.files) as staging:
        found = _already_there(dest, manifest.export_id)
        if found is not None:
            return found
        over = staging.resumed is not None
        tmp = staging.start()
        made: set[str] = set()

        def fetch(key: str, rel: str) -> tuple[int, bool]:
            if over and _staged(tmp, rel, manifest):
                return manifest.files[rel][1], True
            # Each file on its own: tried again when the store stays unavailable through the
            # client's retries (a body cut mid-stream is read on where it stopped, by the store)
            data = per_object(partial(store.get, key))
            _check(rel, data, manifest, key)
            _write(tmp, rel, data, manifest.modes.get(rel), made, over=over)
            return len(data), False

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            futures = [pool.submit(fetch, key, rel) for key, rel in wanted]
            try:
                for fut in as_completed(futures):
                    n, kept = fut.result()
                    total += n
                    resumed += kept
                    progress.advance(1, n)
            except BaseException:
                # Stop here: the downloads not begun are left to the next run (which goes on
                # with what this one verified), not fetched only to be kept.
                pool.shutdown(cancel_futures=True)
                raise
        staging.commit(manifest_bytes)
    # GETs: the manifest and one per file not resumed (listing pages not counted).
    return PullResult(
        dest,
        manifest.export_id,
        manifest.case_count,
        len(wanted),
        total,
        1 + len(wanted) - resumed,
        resumed=resumed,
    )


def _pull_bundle(
    store: BlobStore, prefix: str, dest: Path, manifest: ExportManifest, manifest_bytes: bytes
) -> PullResult:
    """One GET of the bundle (after the manifest, which says the export is complete): at the
    sibling key, else inside the prefix where older exports put it."""
    try:
        data = per_object(partial(store.get, prefix[:-1] + BUNDLE_SUFFIX))
    except NotFound:
        try:
            data = per_object(partial(store.get, prefix + BUNDLE_NAME))
        except NotFound:
            raise NotFound(
                f"the export at {prefix!r} has no bundle (it is written only when asked: export "
                f"with --bundle); expected {prefix[:-1] + BUNDLE_SUFFIX!r}",
                key=prefix[:-1] + BUNDLE_SUFFIX,
            ) from None
    got = install_bundle(
        data, dest, manifest_bytes=manifest_bytes, source=_source(prefix, manifest_bytes)
    )
    return PullResult(
        dest, got.export_id, got.case_count, got.file_count, got.bytes, 2, resumed=got.resumed
    )


def install_bundle(
    bundle: bytes, dest: Path, *, manifest_bytes: bytes | None = None, source: str | None = None
) -> PullResult:
    """Unpack a `bundle.tar.gz` into `dest`: members are checked like listed keys (and must be
    regular files or directories), then verified against the manifest (`manifest_bytes`, or the
    bundle's own when None). With a `source`, the staging directory a killed or failed pull of
    it left is gone on with: files there already verified are not written again."""
    raw = gzip.decompress(bundle)
    members: list[tuple[str, bytes]] = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for member in tar:
            rel = safe_relative_key(member.name, "", dest)
            if member.isdir():
                continue
            if not member.isreg():
                raise BadRequest(
                    f"bundle member {member.name!r} is not a regular file", key=member.name
                )
            fh = tar.extractfile(member)
            assert fh is not None
            members.append((rel, fh.read()))
    inner = next((data for rel, data in members if rel == MANIFEST_NAME), None)
    if inner is None:
        raise Upstream(f"the bundle has no {MANIFEST_NAME}")
    if manifest_bytes is not None and inner != manifest_bytes:
        raise Upstream(f"the bundle's manifest differs from {MANIFEST_NAME}")
    manifest = parse_manifest(inner)
    seen: set[str] = set()
    total = resumed = 0
    with Staging(dest, what="destination", source=source, expected=manifest.files) as staging:
        found = _already_there(dest, manifest.export_id)
        if found is not None:
            return found
        over = staging.resumed is not None
        tmp = staging.start()
        made: set[str] = set()
        for rel, data in members:
            if rel == MANIFEST_NAME:
                continue
            _check(rel, data, manifest, f"{BUNDLE_NAME}:{rel}")
            if over and _staged(tmp, rel, manifest):
                resumed += 1
            else:
                _write(tmp, rel, data, manifest.modes.get(rel), made, over=over)
            seen.add(rel)
            total += len(data)
        missing = sorted(set(manifest.files) - seen)
        if missing:
            raise Upstream(
                f"{BUNDLE_NAME} lacks {len(missing)} file(s) of the manifest", missing=missing[:50]
            )
        staging.commit(inner)
    return PullResult(
        dest, manifest.export_id, manifest.case_count, len(seen), total, 1, resumed=resumed
    )
