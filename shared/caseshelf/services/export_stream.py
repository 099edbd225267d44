"""An export written as it is planned, a window of cases at a time, to a directory or a store.

Memory does not grow with the version: each window of cases is read, planned, its files written
and its manifest entries appended to `manifest.json` (a local file, written as it goes), then
dropped. The row formats write their row file as they go too (`cases.jsonl` / `samples.jsonl`
line by line, `cases.parquet` a row group per window). The files and the manifest are those of
the eager plan (`caseshelf.domain.export_plan.plan_export`), byte for byte, except `cases.parquet`,
whose row groups follow the windows (the same rows and schema).

Where it goes is a `Sink`:

- `DirectorySink`: a hidden staging directory inside the destination, moved into place at the
  end, `manifest.json` last (a directory that has `manifest.json` is complete). The staging
  directory names the export; one left by a killed or failed run of the same export is resumed:
  a file already there whose size, mode and sha256 match the plan is kept (`Sink.reusable`),
  and its stored body is not read again;
- `StoreSink`: a key prefix; files are put by a pool of threads with a bounded queue, the row file
  and the manifest are staged in a local scratch directory and uploaded from disk
  (`BlobStore.put_file`), the bundle (when asked) is built in scratch as the files go by, and
  `manifest.json` is put LAST. A failure removes every object under the prefix (which held none
  but this export's own files when it started) and the bundle.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import logging
import os
import shutil
import stat
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import orjson

from caseshelf.domain.errors import Conflict
from caseshelf.domain.export import (
    DEFAULT_MODE,
    FORMAT,
    MANIFEST_NAME,
    ROLE_DATA,
    CasePlan,
    ExportWarning,
    ManifestWriter,
    PlannedFile,
    SharedEntry,
    _file_entry,
    case_entry,
    manifest_head,
    plan_case,
)
from caseshelf.domain.export_formats import (
    HARBOR_MANIFEST,
    ROW_FILES,
    export_org,
    harbor_task,
    parquet_schema,
    plan_harbor_case,
    plan_row_window,
    shared_row_files,
)
from caseshelf.domain.harbor_registry import manifest_head as harbor_head
from caseshelf.domain.harbor_registry import manifest_tail as harbor_tail
from caseshelf.extras import require
from caseshelf.ports import BlobStore
from caseshelf.services.objectio import per_object
from caseshelf.services.pull import Progress
from caseshelf.services.staging import Staging, keeps_staging

CASE_FORMATS = ("case-dirs", "harbor")
# Formats that can refuse a case (no instruction text, no verifier): checked in a first pass over
# the cases, so that such an export fails before anything is written.
REFUSING_FORMATS = ("harbor", "inspect")
MAX_REPORTED_WARNINGS = 100
log = logging.getLogger(__name__)
# Cases per window: a case directory's window is a few thousand files; a row format's window is
# one parquet row group, which wants more rows (fewer, larger groups read and compress better).
CASE_WINDOW = 2048
ROW_WINDOW = 16384


def window_size(fmt: str) -> int:
    return CASE_WINDOW if fmt in CASE_FORMATS else ROW_WINDOW


# --- where the files go -----------------------------------------------------------------------


class Sink(Protocol):
    def local(self, rel: str) -> Path:
        """A local path to write the export's file `rel` at (then `add_local(rel)`)."""

    def reusable(self, files: Sequence[PlannedFile]) -> frozenset[str]:
        """The paths of `files` an earlier run of this export already wrote and verified; they
        are not written (nor their bodies read) again."""

    def write(self, files: Sequence[PlannedFile], bodies: Mapping[str, bytes]) -> int:
        """Write `files` (generated bodies, or stored ones from `bodies` by hex digest);
        their bytes."""

    def add_local(self, rel: str, content_type: str | None = None) -> None:
        """The file written at `local(rel)` is complete and part of the export."""

    def commit(self) -> None:
        """`local(MANIFEST_NAME)` is written: make the export complete."""

    def abort(self, *, keep: bool = True) -> None:
        """Leave nothing that looks like an export (with `keep`, a directory sink keeps what it
        wrote, unseen, for the next run of the same export)."""


def _body(f: PlannedFile, bodies: Mapping[str, bytes]) -> bytes:
    return f.body if f.body is not None else bodies[f.digest[7:]]


class DirectorySink:
    """Files under the hidden staging directory inside the destination, moved into place by
    `commit` (`caseshelf.services.staging`).

    Each `write` (a case's files) is handed to one of `workers` threads, at most a few windows'
    worth queued: creating a file and a directory is a system call that waits on the file
    system with the interpreter lock released, so several in flight write a tree faster than
    one after the other (`bench/bench_export.py`, `export-dir`, against `cp -r`)."""

    def __init__(self, staging: Staging, *, workers: int = 8) -> None:
        self.staging = staging
        self.tmp = staging.start()
        self.root = str(self.tmp)
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.pending: deque[Future[None]] = deque()
        self.max_pending = 16 * workers
        self.resumed = staging.resumed is not None
        self.reused = 0  # files an earlier run wrote, verified and kept

    def local(self, rel: str) -> Path:
        path = self.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def reusable(self, files: Sequence[PlannedFile]) -> frozenset[str]:
        if not self.resumed or not files:
            return frozenset()
        verified = self.pool.map(self._verified, files)
        found = frozenset(f.path for f, ok in zip(files, verified, strict=True) if ok)
        self.reused += len(found)
        return found

    def _verified(self, f: PlannedFile) -> bool:
        """Whether the staged `f` is there, whole: a regular file of its size, mode and digest.
        (The resumed staging directory holds no symlink: `staging._resumable`.)"""
        path = f"{self.root}/{f.path}"
        try:
            st = os.lstat(path)
        except OSError:  # not there, or a parent that is not a directory
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != f.size:
            return False
        if f.mode != DEFAULT_MODE and stat.S_IMODE(st.st_mode) != f.mode:
            return False
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return "sha256:" + h.hexdigest() == f.digest

    def _write(self, files: Sequence[PlannedFile], bodies: Mapping[str, bytes]) -> None:
        made: set[str] = set()
        for f in files:
            parent = f.path.rpartition("/")[0]
            if parent and parent not in made:
                (self.tmp / parent).mkdir(parents=True, exist_ok=True)
                made.add(parent)
            path = f"{self.root}/{f.path}"  # a plain string: no Path object per file
            with open(path, "wb") as fh:
                fh.write(_body(f, bodies))
            if f.mode != DEFAULT_MODE:
                Path(path).chmod(f.mode)

    def _settle(self, keep: int) -> None:
        while len(self.pending) > keep:
            self.pending.popleft().result()  # the first failure stops the export

    def write(self, files: Sequence[PlannedFile], bodies: Mapping[str, bytes]) -> int:
        self.pending.append(self.pool.submit(self._write, files, bodies))
        self._settle(self.max_pending)
        return sum(f.size for f in files)

    def add_local(self, rel: str, content_type: str | None = None) -> None:
        pass

    def commit(self) -> None:
        self._settle(0)
        self.pool.shutdown(wait=True)
        self.staging.commit()

    def abort(self, *, keep: bool = True) -> None:
        """With `keep`, the writes already handed over finish (each is verified before the next
        run reuses it) and the staging directory is kept for that run; else they are cancelled
        and it is removed."""
        for fut in self.pending:
            if not keep:
                fut.cancel()
            elif not fut.cancelled():
                with contextlib.suppress(Exception):  # the failure being handled is raised
                    fut.result()
        self.pool.shutdown(wait=True)
        self.pending.clear()
        self.staging.abort(keep=keep)


class BundleWriter:
    """The single-object bundle (`<prefix>.bundle.tar.gz`), written as the files go by: regular
    files with fixed metadata and their directories once each, gzip without a name or a time, so
    the same export always gives the same bytes. (It remembers the directories it has written:
    a bundle is asked for on purpose, and its directory names are a small part of it.)"""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._raw = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._gz = gzip.GzipFile(
            filename="", mode="wb", fileobj=self._raw, compresslevel=6, mtime=0
        )
        self._tar = tarfile.open(  # noqa: SIM115 - closed by close()
            fileobj=self._gz, mode="w", format=tarfile.PAX_FORMAT
        )
        self._dirs: set[str] = set()

    def _parents(self, path: str) -> None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in self._dirs:
                self._dirs.add(d)
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                self._tar.addfile(info)

    def add(self, path: str, data: bytes, mode: int = DEFAULT_MODE) -> None:
        self._parents(path)
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mode = mode
        self._tar.addfile(info, io.BytesIO(data))

    def add_file(self, path: str, local: Path) -> None:
        self._parents(path)
        info = tarfile.TarInfo(path)
        info.size = local.stat().st_size
        info.mode = DEFAULT_MODE
        with open(local, "rb") as fh:
            self._tar.addfile(info, fh)

    def close(self) -> None:
        self._tar.close()
        self._gz.close()
        self._raw.close()


class StoreSink:
    """Files put under `prefix` by `concurrency` threads, at most a few windows' worth queued."""

    def __init__(
        self,
        store: BlobStore,
        prefix: str,
        *,
        concurrency: int,
        bundle_key: str | None = None,
        bundle_only: bool = False,
    ) -> None:
        """`bundle_only`: the export is already complete under the prefix; only its missing
        bundle is written (nothing under the prefix is touched, even on failure)."""
        self.store = store
        self.bundle_only = bundle_only
        self.prefix = prefix
        self.scratch = Path(tempfile.mkdtemp(prefix="caseshelf-export-"))
        self.pool = ThreadPoolExecutor(max_workers=concurrency)
        self.pending: set[Future[None]] = set()
        self.max_pending = 4 * concurrency
        self.bundle_key = bundle_key
        self.bundle = BundleWriter(self.scratch / ".bundle.tar.gz") if bundle_key else None
        self.bundle_written = False

    def local(self, rel: str) -> Path:
        path = self.scratch / "files" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _settle(self, keep: int) -> None:
        # Wait for whichever put ends first, not the oldest: one put waiting out a retry
        # would otherwise hold back every other thread's next file.
        while len(self.pending) > keep:
            done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
            for fut in done:
                self.pending.discard(fut)
                fut.result()  # the first failure stops the export

    def write(self, files: Sequence[PlannedFile], bodies: Mapping[str, bytes]) -> int:
        total = 0
        for f in files:
            data = _body(f, bodies)
            if self.bundle is not None:
                self.bundle.add(f.path, data, f.mode)
            if self.bundle_only:
                continue
            put = partial(self.store.put, self.prefix + f.path, data)
            self.pending.add(self.pool.submit(per_object, put))
            self._settle(self.max_pending)
            total += len(data)
        return total

    def reusable(self, files: Sequence[PlannedFile]) -> frozenset[str]:
        return frozenset()  # a failed export removes its objects: nothing is left to reuse

    def add_local(self, rel: str, content_type: str | None = None) -> None:
        path = self.local(rel)
        if rel != MANIFEST_NAME:
            if self.bundle is not None:
                self.bundle.add_file(rel, path)
            self._settle(0)
            if not self.bundle_only:
                per_object(
                    partial(self.store.put_file, self.prefix + rel, path, content_type=content_type)
                )

    def commit(self) -> None:
        self._settle(0)
        manifest = self.local(MANIFEST_NAME)
        if self.bundle is not None and self.bundle_key is not None:
            self.bundle.add_file(MANIFEST_NAME, manifest)
            self.bundle.close()
            self.bundle_written = True
            per_object(
                partial(
                    self.store.put_file,
                    self.bundle_key,
                    self.bundle.path,
                    content_type="application/gzip",
                )
            )
        if not self.bundle_only:
            per_object(
                partial(
                    self.store.put_file,
                    self.prefix + MANIFEST_NAME,
                    manifest,
                    content_type="application/json",
                )
            )
        self._close()

    def abort(self, *, keep: bool = True) -> None:
        for fut in self.pending:
            fut.cancel()
        wait(list(self.pending))
        self.pending.clear()
        keys = [] if self.bundle_only else [info.key for info in self.store.list(self.prefix)]
        if self.bundle_written and self.bundle_key is not None:
            keys.append(self.bundle_key)
        for key in keys:
            try:
                self.store.delete(key)
            except Exception:  # best effort: the manifest was never written
                log.warning("export: could not remove %s", key)
        self._close()

    def _close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.bundle is not None and not self.bundle_written:
            with contextlib.suppress(OSError, ValueError):
                self.bundle.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


# --- the export -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamSpec:
    """What is known before the first case is read."""

    export_id: str
    fmt: str
    dataset: Mapping[str, Any]
    content_digest: str
    subset: Mapping[str, Any] | None
    shared: Sequence[SharedEntry]
    case_count: int


@dataclass
class StreamOutcome:
    file_count: int = 0
    nbytes: int = 0
    warnings: list[str] | None = None
    warning_count: int = 0


Windows = Callable[[], Iterator[Sequence[Mapping[str, Any]]]]
BodyReader = Callable[[set[str]], Mapping[str, bytes]]


def _planner(spec: StreamSpec) -> Callable[..., CasePlan]:
    if spec.fmt == FORMAT:
        return plan_case
    return partial(plan_harbor_case, org=export_org(spec.dataset))


def check_cases(spec: StreamSpec, windows: Windows, existing: set[str] | None) -> None:
    """A first pass over the cases, before anything is written: every case planned (a case the
    format cannot carry raises its `BadRequest` here), and, when the target already holds
    objects (`existing`: paths under the prefix), each of them must be a file of this export
    (what a failed attempt left), since a pod listing the prefix would download anything else."""
    remaining = set(existing or ()) - {MANIFEST_NAME}
    ignored: list[ExportWarning] = []
    if spec.fmt in CASE_FORMATS:
        planner = _planner(spec)
        if spec.fmt == "harbor":
            remaining.discard(HARBOR_MANIFEST)
        for window in windows():
            for case in window:
                for f in planner(case, spec.shared, ignored).files:
                    remaining.discard(f.path)
            ignored.clear()
    else:
        remaining.discard(ROW_FILES[spec.fmt])
        for f in shared_row_files(spec.shared):
            remaining.discard(f.path)
        if spec.fmt in REFUSING_FORMATS or remaining:
            for window in windows():
                for f in plan_row_window(spec.fmt, window, ignored).data:
                    remaining.discard(f.path)
                ignored.clear()
    if remaining:
        rel = min(remaining)
        raise Conflict(
            f"the prefix holds {rel!r}, which is not part of this export (another export's "
            "files, or other data): EvalHub downloads every object under the prefix; choose an "
            "empty prefix",
            key=rel,
        )


class _Warnings:
    def __init__(self, warn: Callable[[str], None]) -> None:
        self.warn = warn
        self.kept: list[str] = []
        self.count = 0

    def add(self, found: list[ExportWarning]) -> None:
        for w in found:
            self.warn(str(w))
            if len(self.kept) < MAX_REPORTED_WARNINGS:
                self.kept.append(str(w))
        self.count += len(found)
        found.clear()


def _wanted(files: Iterable[PlannedFile], have: Mapping[str, bytes]) -> set[str]:
    return {f.digest[7:] for f in files if f.body is None and f.digest[7:] not in have}


def _to_write(files: Sequence[PlannedFile], sink: Sink) -> list[PlannedFile]:
    """`files` but those an earlier run of the export already wrote (`Sink.reusable`)."""
    kept = sink.reusable(files)
    return [f for f in files if f.path not in kept] if kept else list(files)


def write_stream(
    spec: StreamSpec,
    windows: Windows,
    read_bodies: BodyReader,
    shared_bodies: Mapping[str, bytes],
    sink: Sink,
    progress: Progress,
    warn: Callable[[str], None],
) -> StreamOutcome:
    """Write the export to `sink`, a window of cases at a time; `sink.abort()` on any failure.
    `shared_bodies` are bodies known up front (a request's inline shared files); the bodies of
    the version's shared files are read once, with the first window that needs them."""
    progress.start(spec.case_count, 0, 0)
    try:
        if spec.fmt in CASE_FORMATS:
            outcome = _write_case_dirs(
                spec, windows, read_bodies, shared_bodies, sink, progress, warn
            )
        else:
            outcome = _write_rows(spec, windows, read_bodies, shared_bodies, sink, progress, warn)
        sink.commit()
    except BaseException as exc:
        sink.abort(keep=keeps_staging(exc))
        raise
    return outcome


def _head(spec: StreamSpec, data_files: Sequence[PlannedFile] = ()) -> dict[str, Any]:
    return manifest_head(
        export_id=spec.export_id,
        fmt=spec.fmt,
        dataset=spec.dataset,
        content_digest=spec.content_digest,
        subset=spec.subset,
        shared_files=spec.shared,
        case_count=spec.case_count,
        data_files=data_files,
    )


def _planned_cases(
    spec: StreamSpec,
    windows: Windows,
    read_bodies: BodyReader,
    shared_bodies: Mapping[str, bytes],
    sink: Sink,
    kept: _Warnings,
) -> Generator[
    tuple[Mapping[str, Any], CasePlan, list[PlannedFile], Mapping[str, bytes]], None, None
]:
    """Each case with its package's plan, the files of it to write (those an earlier run did
    not already write) and the stored bodies they need, a window of cases planned and their
    bodies read at a time."""
    planner = _planner(spec)
    shared = dict(shared_bodies)
    shared_digests = {s.digest[7:] for s in spec.shared}
    for window in windows():
        found: list[ExportWarning] = []
        plans = [planner(case, spec.shared, found) for case in window]
        kept.add(found)
        kept_paths = sink.reusable([f for p in plans for f in p.files])
        todo = [[f for f in p.files if f.path not in kept_paths] for p in plans]
        bodies = dict(read_bodies(_wanted((f for files in todo for f in files), shared)))
        for h in shared_digests & bodies.keys():
            shared[h] = bodies[h]  # every case has them: read once
        bodies.update(shared)
        for case, plan, files in zip(window, plans, todo, strict=True):
            yield case, plan, files, bodies


def _write_case_dirs(
    spec: StreamSpec,
    windows: Windows,
    read_bodies: BodyReader,
    shared_bodies: Mapping[str, bytes],
    sink: Sink,
    progress: Progress,
    warn: Callable[[str], None],
) -> StreamOutcome:
    if spec.fmt == "harbor":
        return _write_harbor(spec, windows, read_bodies, shared_bodies, sink, progress, warn)
    kept = _Warnings(warn)
    files = nbytes = 0
    planned = _planned_cases(spec, windows, read_bodies, shared_bodies, sink, kept)
    # Closed as soon as the loop ends, a failure included, not whenever gc finds it: it holds
    # the windows' reader thread.
    with open(sink.local(MANIFEST_NAME), "wb") as out, contextlib.closing(planned):
        writer = ManifestWriter(out.write, _head(spec))
        for _, plan, todo, bodies in planned:
            sink.write(todo, bodies)
            size = sum(f.size for f in plan.files)
            files += len(plan.files)
            nbytes += size
            writer.case(plan)
            progress.advance(len(plan.files), size, 1)
        writer.finish(files, nbytes)
    sink.add_local(MANIFEST_NAME, "application/json")
    return StreamOutcome(files, nbytes, kept.kept, kept.count)


def _write_harbor(
    spec: StreamSpec,
    windows: Windows,
    read_bodies: BodyReader,
    shared_bodies: Mapping[str, bytes],
    sink: Sink,
    progress: Progress,
    warn: Callable[[str], None],
) -> StreamOutcome:
    """The task packages as `_write_case_dirs` writes case directories, and `dataset.toml`: a
    `[[tasks]]` entry as each package is written. The manifest's head lists `dataset.toml`,
    whose digest is known at the end: the case entries wait in a scratch file until then."""
    kept = _Warnings(warn)
    files = nbytes = 0
    entries_path = sink.local(MANIFEST_NAME).with_name(".manifest-cases")
    planned = _planned_cases(spec, windows, read_bodies, shared_bodies, sink, kept)
    with (
        _HarborManifest(spec, sink) as registry,
        open(entries_path, "wb") as entries,
        contextlib.closing(planned),  # as in `_write_case_dirs`
    ):
        for n, (case, plan, todo, bodies) in enumerate(planned):
            sink.write(todo, bodies)
            size = sum(f.size for f in plan.files)
            files += len(plan.files)
            nbytes += size
            entries.write((b"," if n else b"") + case_entry(plan))
            registry.add(harbor_task(case, plan, registry.org, bodies))
            progress.advance(len(plan.files), size, 1)
        toml = registry.finish()
    files, nbytes = files + 1, nbytes + toml.size
    progress.advance(1, toml.size)
    with open(sink.local(MANIFEST_NAME), "wb") as out, open(entries_path, "rb") as read:
        writer = ManifestWriter(out.write, _head(spec, [toml]))
        writer.cases_from(read)
        writer.finish(files, nbytes)
    entries_path.unlink()
    sink.add_local(MANIFEST_NAME, "application/json")
    return StreamOutcome(files, nbytes, kept.kept, kept.count)


class _HarborManifest:
    """`dataset.toml`, written as the packages are: its head, a `[[tasks]]` entry a package,
    its tail; hashed as it goes."""

    def __init__(self, spec: StreamSpec, sink: Sink) -> None:
        self.spec, self.sink = spec, sink
        self.org = export_org(spec.dataset)
        self.path = sink.local(HARBOR_MANIFEST)
        self._fh = open(self.path, "wb")  # noqa: SIM115 - closed by finish() or __exit__
        self._hash = hashlib.sha256()
        self.size = 0
        self.add(harbor_head(spec.dataset))

    def __enter__(self) -> _HarborManifest:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()

    def add(self, data: bytes) -> None:
        self._fh.write(data)
        self._hash.update(data)
        self.size += len(data)

    def finish(self) -> PlannedFile:
        spec = self.spec
        self.add(
            harbor_tail(
                spec.dataset,
                content_digest=spec.content_digest,
                export_id=spec.export_id,
                case_count=spec.case_count,
                subset=spec.subset,
            )
        )
        self._fh.close()
        self.sink.add_local(HARBOR_MANIFEST, "application/toml")
        return PlannedFile(
            HARBOR_MANIFEST, "sha256:" + self._hash.hexdigest(), self.size, role="harbor"
        )


class _RowFile:
    """The row file, written as it goes: lines appended, or a parquet row group per window.

    A window's bytes are written by a background thread while the next window is read and
    planned; a parquet window whose rows are given as a function (Arrow builds them from the
    records: `export_formats.plan_row_window`) is built by a second one, so that reading and
    checking a window, building the one before and writing the one before that overlap (Arrow
    parses, joins strings, encodes and compresses with the interpreter lock released). At most
    one window is built and one written while the next is read."""

    def __init__(self, fmt: str, path: Path) -> None:
        self.fmt = fmt
        self.path = path
        self._fh: BinaryIO | None = None
        self._parquet: Any = None
        self._writer = ThreadPoolExecutor(max_workers=1)
        self._builder = ThreadPoolExecutor(max_workers=1)
        self._pending: deque[Future[Any]] = deque()
        if fmt == "parquet":
            require("pyarrow", "the parquet export format")
            import pyarrow.parquet as pq  # lazy: optional [parquet] extra, ~150 ms, parquet only

            self._parquet = pq.ParquetWriter(str(path), parquet_schema(), compression="zstd")
        else:
            self._fh = open(path, "wb")  # noqa: SIM115 - closed by close()

    def _settle(self, keep: int) -> None:
        while len(self._pending) > keep:
            self._pending.popleft().result()  # the first failure stops the export

    def _write_group(self, table: Any) -> None:
        self._parquet.write_table(table.result() if isinstance(table, Future) else table)

    def add(self, text: bytearray, table: Any, count: int) -> None:
        if self._parquet is not None:
            if count:
                self._settle(1)
                if callable(table):
                    table = self._builder.submit(table)
                self._pending.append(self._writer.submit(self._write_group, table))
        else:
            assert self._fh is not None
            self._settle(0)
            self._pending.append(self._writer.submit(self._fh.write, text))

    def close(self) -> tuple[str, int]:
        """(digest, size) of the finished file."""
        try:
            self._settle(0)
        finally:
            self._builder.shutdown(wait=True, cancel_futures=True)
            self._writer.shutdown(wait=True, cancel_futures=True)
            if self._parquet is not None:
                self._parquet.close()
                self._parquet = None
            if self._fh is not None:
                self._fh.close()
                self._fh = None
        h = hashlib.sha256()
        with open(self.path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
        return "sha256:" + h.hexdigest(), self.path.stat().st_size

    def abandon(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _write_rows(
    spec: StreamSpec,
    windows: Windows,
    read_bodies: BodyReader,
    shared_bodies: Mapping[str, bytes],
    sink: Sink,
    progress: Progress,
    warn: Callable[[str], None],
) -> StreamOutcome:
    """The row file and the cases' files, as they go; the manifest's entries of the cases'
    files are kept in a scratch file and put after the row file's, whose digest is known only
    at the end (the manifest lists the row file, the shared files, then the cases' files)."""
    kept = _Warnings(warn)
    name = ROW_FILES[spec.fmt]
    rows = _RowFile(spec.fmt, sink.local(name))
    files = nbytes = 0
    entries_path = sink.local(MANIFEST_NAME).with_name(".manifest-entries")
    try:
        with open(entries_path, "wb") as entries:
            first = True
            for window in windows():
                found: list[ExportWarning] = []
                planned = plan_row_window(spec.fmt, window, found)
                kept.add(found)
                rows.add(planned.text, planned.table, planned.count)
                todo = _to_write(planned.data, sink)
                bodies = read_bodies(_wanted(todo, shared_bodies))
                sink.write(todo, {**bodies, **shared_bodies})
                size = sum(f.size for f in planned.data)
                for f in planned.data:
                    entries.write((b"" if first else b",") + _entry(f))
                    first = False
                files += len(planned.data)
                nbytes += size
                progress.advance(len(planned.data), size, planned.count)
        digest, size = rows.close()
    except BaseException:
        rows.abandon()
        raise
    main = PlannedFile(name, digest, size, role=ROLE_DATA)
    sink.add_local(name, "application/vnd.apache.parquet" if spec.fmt == "parquet" else None)
    shared_files = shared_row_files(spec.shared)
    todo = _to_write(shared_files, sink)
    bodies = read_bodies(_wanted(todo, shared_bodies))
    sink.write(todo, {**bodies, **shared_bodies})
    shared_size = sum(f.size for f in shared_files)
    files += 1 + len(shared_files)
    nbytes += size + shared_size
    progress.advance(1 + len(shared_files), size + shared_size)
    with open(sink.local(MANIFEST_NAME), "wb") as out, open(entries_path, "rb") as entries:
        writer = ManifestWriter(out.write, _head(spec, [main, *shared_files]), entries)
        writer.finish(files, nbytes)
    entries_path.unlink()
    sink.add_local(MANIFEST_NAME, "application/json")
    return StreamOutcome(files, nbytes, kept.kept, kept.count)


def _entry(f: PlannedFile) -> bytes:
    return orjson.dumps({f.path: _file_entry(f)})[1:-1]
