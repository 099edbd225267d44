"""An export written in parts, each by its own invocation, then finished by one.

A part writes the cases at positions [start, stop) of the export's selection (the plan:
`caseshelf.domain.export_parts`), a window at a time, and keeps what the finish needs beside
the export's prefix, in its scratch area `<prefix without its slash>.parts/` (a sibling, so a
pod listing the prefix never sees it; under the tenant's `exports/`, so the lifecycle rule
expires what a failed export left):

- `part-NNNNN.entries`: the part's entries of the manifest, encoded (`"id":{…}`, comma-separated:
  a case format's cases, a row format's companion files);
- `part-NNNNN.rows`: a row format's rows (jsonl lines, or a parquet file of its row groups);
- `part-NNNNN.toml`: the `harbor` format's `[[tasks]]` entries of `dataset.toml`, one a case;
- `part-NNNNN.tgz`: with a bundle, the part's files as tar entries in one gzip member (no
  end-of-archive: gzip members concatenate into one stream, and so do tar entries);
- `part-NNNNN.json`: its counts and warnings, written LAST: the part-done marker. A part whose
  marker is there (same range, and a bundle member when one is asked) is not written again.

Every object a part writes is a pure function of the version and the request (files are put
with their content; pieces are streamed and appear whole at commit), so a part killed half way
and run again writes the same bytes, and two runs of one part do no harm.

The finish streams, in this order: the row file (a row format: the parts' pieces concatenated,
a parquet file's row groups rewritten into one file) and the shared row files, or `dataset.toml`
(`harbor`: its head, the parts' `[[tasks]]` entries, its tail); the bundle (the parts' members,
then one member with those files and the manifest, and the end of the archive); `manifest.json`
LAST, from the parts' entries. Nothing passes through
/tmp and no stream holds more than one multipart part (`caseshelf.adapters.s3.PART_BYTES`).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from caseshelf.domain.export import (
    DEFAULT_MODE,
    MANIFEST_NAME,
    ROLE_DATA,
    ExportWarning,
    PlannedFile,
    case_entry,
)
from caseshelf.domain.export_formats import (
    HARBOR_MANIFEST,
    ROW_FILES,
    export_org,
    harbor_task,
    parquet_schema,
    plan_row_window,
    shared_row_files,
)
from caseshelf.domain.harbor_registry import manifest_head as harbor_head
from caseshelf.domain.harbor_registry import manifest_tail as harbor_tail
from caseshelf.extras import require
from caseshelf.ports import BlobStore, ObjectWriter
from caseshelf.services.export_stream import (
    CASE_FORMATS,
    MAX_REPORTED_WARNINGS,
    ROW_WINDOW,
    StreamSpec,
    _entry,
    _head,
    _planner,
    _wanted,
)
from caseshelf.services.exports import Prepared, bundle_key

SCRATCH_SUFFIX = ".parts/"
READ_BYTES = 8 << 20  # what a stream copies at a time
PUT_CONCURRENCY = 16
PARQUET_TYPE = "application/vnd.apache.parquet"
TOML_TYPE = "application/toml"
HARBOR = "harbor"  # the format whose parts also write `[[tasks]]` entries of `dataset.toml`


def scratch_prefix(prefix: str) -> str:
    """The scratch area of the export at `prefix` (`t/a/exports/x/` -> `t/a/exports/x.parts/`)."""
    return prefix[:-1] + SCRATCH_SUFFIX


def part_key(scratch: str, number: int, kind: str) -> str:
    return f"{scratch}part-{number:05d}.{kind}"


@dataclass(frozen=True)
class PartMeta:
    """What one part wrote: the finish's inputs and the job's progress."""

    number: int
    start: int
    stop: int
    files: int
    nbytes: int
    entries_size: int
    rows_size: int = 0
    bundle: bool = False
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0
    tasks_size: int = 0  # `harbor`: its `[[tasks]]` entries (`part-NNNNN.toml`)

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> PartMeta:
        return cls(**orjson.loads(data))


def done_part(
    store: BlobStore,
    scratch: str,
    number: int,
    rng: tuple[int, int],
    bundle: bool,
    *,
    tasks: bool = False,
) -> PartMeta | None:
    """The part's marker when this range was written already (with its bundle member, when a
    bundle is asked, and its `[[tasks]]` entries when `tasks`: a `harbor` export): a part
    redelivered, or an earlier export job's."""
    try:
        meta = PartMeta.from_json(store.get(part_key(scratch, number, "json")))
    except Exception:  # absent, or not a marker of this code: written again
        return None
    if (meta.start, meta.stop) != rng or (bundle and not meta.bundle):
        return None
    if tasks and rng[1] > rng[0] and not meta.tasks_size:
        return None  # a marker of a part that did not write its entries of dataset.toml
    return meta


# -- tar entries into a gzip member --------------------------------------------------------------


class _Sink(io.RawIOBase):
    """An `ObjectWriter` as a binary file (gzip, tarfile and Arrow write to files)."""

    def __init__(self, writer: ObjectWriter, also: Callable[[bytes], Any] | None = None) -> None:
        self.writer = writer
        self.also = also
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.writer.write(chunk)
        if self.also is not None:
            self.also(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position


class TarMember:
    """Tar entries written as one gzip member of a bundle: regular files with fixed metadata
    and their directories once each, gzip without a name or a time, so a part's member is the
    same bytes every time. `close(end=True)` adds the end of the archive (the last member)."""

    def __init__(self, writer: ObjectWriter) -> None:
        self.writer = writer
        self._gz: gzip.GzipFile | None = None
        self._tar: tarfile.TarFile | None = None
        self._dirs: set[str] = set()

    def _open(self) -> tarfile.TarFile:
        """The member, begun with its first entry: a part without files leaves an empty object
        (an empty gzip member would end the stream for some readers)."""
        if self._tar is None:
            self._gz = gzip.GzipFile(
                filename="", mode="wb", fileobj=_Sink(self.writer), compresslevel=6, mtime=0
            )
            self._tar = tarfile.open(  # noqa: SIM115 - closed by close()
                fileobj=self._gz, mode="w", format=tarfile.PAX_FORMAT
            )
        return self._tar

    def _parents(self, path: str) -> None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in self._dirs:
                self._dirs.add(d)
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                self._open().addfile(info)

    def add(self, path: str, data: bytes, mode: int = DEFAULT_MODE) -> None:
        self.add_stream(path, len(data), io.BytesIO(data), mode)

    def add_stream(self, path: str, size: int, reader: Any, mode: int = DEFAULT_MODE) -> None:
        self._parents(path)
        info = tarfile.TarInfo(path)
        info.size = size
        info.mode = mode
        self._open().addfile(info, reader)

    def close(self, *, end: bool = False) -> int:
        """Finish the member (with the end-of-archive blocks when `end`) and commit it."""
        if end:
            self._open().close()  # (left open otherwise: closing writes the end of the archive)
        if self._gz is not None:
            self._gz.close()
        return self.writer.commit()

    def abort(self) -> None:
        self.writer.abort()


class _Reader(io.RawIOBase):
    """Pieces of bytes as a readable file (what `tarfile.addfile` reads a body from)."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self.pieces = pieces
        self.buffer = b""

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self.buffer) < n:
            piece = next(self.pieces, None)
            if piece is None:
                break
            self.buffer += piece
        if n < 0:
            n = len(self.buffer)
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out


def object_pieces(store: BlobStore, key: str, size: int) -> Iterator[bytes]:
    """An object's bytes, `READ_BYTES` at a time (ranged reads)."""
    offset = 0
    while offset < size:
        piece = store.get_range(key, offset, min(READ_BYTES, size - offset))
        if not piece:
            raise OSError(f"{key} ended at {offset} of {size} bytes")
        offset += len(piece)
        yield piece


# -- one part ------------------------------------------------------------------------------------


class _Puts:
    """Objects put by a pool of threads, at most a few windows' worth queued."""

    def __init__(self, store: BlobStore, prefix: str) -> None:
        self.store, self.prefix = store, prefix
        self.pool = ThreadPoolExecutor(max_workers=PUT_CONCURRENCY)
        self.pending: list[Future[None]] = []

    def put(self, path: str, data: bytes) -> None:
        self.pending.append(self.pool.submit(self.store.put, self.prefix + path, data))
        if len(self.pending) >= 4 * PUT_CONCURRENCY:
            self.settle()

    def settle(self) -> None:
        pending, self.pending = self.pending, []
        for fut in pending:
            fut.result()  # the first failure stops the part

    def close(self) -> None:
        try:
            self.settle()
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class _Counts:
    files: int = 0
    nbytes: int = 0
    cases: int = 0
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0

    def warn(self, found: list[ExportWarning], warn: Callable[[str], None]) -> None:
        for w in found:
            warn(str(w))
            if len(self.warnings) < MAX_REPORTED_WARNINGS:
                self.warnings.append(str(w))
        self.warning_count += len(found)
        found.clear()


def write_part(
    prepared: Prepared,
    number: int,
    rng: tuple[int, int],
    *,
    bundle: bool,
    warn: Callable[[str], None],
    advance: Callable[[int, int, int], None] | None = None,
) -> PartMeta:
    """Write part `number` (cases at positions `rng`) and its marker; its `PartMeta`. A case
    the format cannot carry raises its `BadRequest` (the job fails, naming it)."""
    target = prepared.target
    store, prefix = target.store, target.prefix
    assert store is not None
    scratch = scratch_prefix(prefix)
    entries = store.open_writer(part_key(scratch, number, "entries"))
    member = TarMember(store.open_writer(part_key(scratch, number, "tgz"))) if bundle else None
    rows = _RowPiece(prepared.fmt, store, part_key(scratch, number, "rows"))
    tasks = store.open_writer(part_key(scratch, number, "toml")) if prepared.fmt == HARBOR else None
    puts = _Puts(store, prefix)
    counts = _Counts()
    try:
        if prepared.fmt in CASE_FORMATS:
            _case_windows(prepared, rng, puts, (member, entries, tasks), counts, warn, advance)
        else:
            _row_windows(prepared, rng, puts, member, entries, rows, counts, warn, advance)
        puts.close()
        entries_size = entries.commit()
        rows_size = rows.commit()
        tasks_size = tasks.commit() if tasks is not None else 0
        if member is not None:
            member.close()
    except BaseException:
        with contextlib.suppress(Exception):
            puts.close()
        for w in (entries, member, rows, tasks):
            if w is not None:
                w.abort()
        raise
    meta = PartMeta(
        number, rng[0], rng[1], counts.files, counts.nbytes, entries_size, rows_size, bundle,
        counts.warnings, counts.warning_count, tasks_size,
    )  # fmt: skip
    store.put(part_key(scratch, number, "json"), meta.to_json(), content_type="application/json")
    return meta


def _case_windows(
    prepared: Prepared,
    rng: tuple[int, int],
    puts: _Puts,
    out: tuple[TarMember | None, ObjectWriter, ObjectWriter | None],
    counts: _Counts,
    warn: Callable[[str], None],
    advance: Callable[[int, int, int], None] | None,
) -> None:
    """The cases' files, and what `out` holds: the bundle member (when one is asked), the
    manifest's entries, and the `[[tasks]]` entries of `dataset.toml` (`harbor`)."""
    member, entries, tasks = out
    spec = prepared.spec
    planner = _planner(spec)
    org = export_org(spec.dataset)
    shared: dict[str, bytes] = dict(prepared.extra_bodies)
    shared_digests = {s.digest[7:] for s in spec.shared}
    for window in prepared.windows(*rng):
        found: list[ExportWarning] = []
        plans = [planner(case, spec.shared, found) for case in window]
        counts.warn(found, warn)
        bodies = dict(prepared.read_bodies(_wanted((f for p in plans for f in p.files), shared)))
        for h in shared_digests & bodies.keys():
            shared[h] = bodies[h]  # every case has them: read once
        bodies.update(shared)
        before = (counts.files, counts.nbytes)
        for case, plan in zip(window, plans, strict=True):
            for f in plan.files:
                data = f.body if f.body is not None else bodies[f.digest[7:]]
                puts.put(f.path, data)
                if member is not None:
                    member.add(f.path, data, f.mode)
                counts.files += 1
                counts.nbytes += len(data)
            entries.write((b"," if counts.cases else b"") + case_entry(plan))
            if tasks is not None:
                tasks.write(harbor_task(case, plan, org, bodies))
            counts.cases += 1
        if advance is not None:
            advance(len(plans), counts.files - before[0], counts.nbytes - before[1])


class _RowPiece:
    """A part's rows: jsonl lines, or a parquet file of its windows' row groups; nothing for a
    case format."""

    def __init__(self, fmt: str, store: BlobStore, key: str) -> None:
        self.fmt = fmt
        self.writer: ObjectWriter | None = None
        self.parquet: Any = None
        if fmt in CASE_FORMATS:
            return
        self.writer = store.open_writer(key)
        if fmt == "parquet":
            require("pyarrow", "the parquet export format")
            import pyarrow.parquet as pq  # lazy: optional [parquet] extra, ~135 ms, parquet only

            self.parquet = pq.ParquetWriter(
                _Sink(self.writer), parquet_schema(), compression="zstd"
            )

    def add(self, text: bytearray, table: Any, count: int) -> None:
        assert self.writer is not None
        if self.parquet is None:
            self.writer.write(bytes(text))
        elif count:
            self.parquet.write_table(table() if callable(table) else table)

    def commit(self) -> int:
        if self.writer is None:
            return 0
        if self.parquet is not None:
            self.parquet.close()
            self.parquet = None
        return self.writer.commit()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()


def _row_windows(
    prepared: Prepared,
    rng: tuple[int, int],
    puts: _Puts,
    member: TarMember | None,
    entries: ObjectWriter,
    rows: _RowPiece,
    counts: _Counts,
    warn: Callable[[str], None],
    advance: Callable[[int, int, int], None] | None,
) -> None:
    shared = prepared.extra_bodies
    for window in prepared.windows(*rng):
        found: list[ExportWarning] = []
        planned = plan_row_window(prepared.fmt, window, found)
        counts.warn(found, warn)
        rows.add(planned.text, planned.table, planned.count)
        bodies = {**prepared.read_bodies(_wanted(planned.data, shared)), **shared}
        before = (counts.files, counts.nbytes)
        for f in planned.data:
            data = f.body if f.body is not None else bodies[f.digest[7:]]
            puts.put(f.path, data)
            if member is not None:
                member.add(f.path, data, f.mode)
            entries.write((b"," if counts.files else b"") + _entry(f))
            counts.files += 1
            counts.nbytes += len(data)
        counts.cases += planned.count
        if advance is not None:
            advance(planned.count, counts.files - before[0], counts.nbytes - before[1])


# -- the finish ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finished:
    file_count: int
    nbytes: int
    warnings: list[str]
    warning_count: int


def finish_export(prepared: Prepared, metas: Sequence[PartMeta], *, bundle: bool) -> Finished:
    """Write the row file and the shared row files (or `dataset.toml`), the bundle, and
    `manifest.json` LAST, from the parts' pieces (`metas` in part order)."""
    spec = prepared.spec
    store, prefix = prepared.target.store, prepared.target.prefix
    assert store is not None
    scratch = scratch_prefix(prefix)
    files = sum(m.files for m in metas)
    nbytes = sum(m.nbytes for m in metas)
    data_files: list[PlannedFile] = []
    shared_bodies: dict[str, bytes] = {}
    if spec.fmt not in CASE_FORMATS:
        main = _write_row_file(store, prefix, scratch, spec.fmt, metas)
        shared_files = shared_row_files(spec.shared)
        wanted = _wanted(shared_files, prepared.extra_bodies)
        shared_bodies = {**prepared.read_bodies(wanted), **prepared.extra_bodies}
        for f in shared_files:
            store.put(prefix + f.path, shared_bodies[f.digest[7:]])
        data_files = [main, *shared_files]
    elif spec.fmt == HARBOR:
        data_files = [_write_harbor_manifest(store, prefix, scratch, spec, metas)]
    files += len(data_files)
    nbytes += sum(f.size for f in data_files)
    manifest = _ManifestPieces(store, scratch, spec, data_files, metas, (files, nbytes))
    out = store.open_writer(prefix + MANIFEST_NAME, content_type="application/json")
    try:
        if bundle:
            _write_bundle(prepared, metas, data_files, shared_bodies, manifest, out)
        else:
            for piece in manifest.pieces():
                out.write(piece)
    except BaseException:
        out.abort()
        raise
    out.commit()  # LAST: the export is complete from here on
    warnings = [w for m in metas for w in m.warnings][:MAX_REPORTED_WARNINGS]
    return Finished(files, nbytes, warnings, sum(m.warning_count for m in metas))


def _write_row_file(
    store: BlobStore, prefix: str, scratch: str, fmt: str, metas: Sequence[PartMeta]
) -> PlannedFile:
    """The row file from the parts' pieces, with its digest: jsonl pieces concatenated, parquet
    pieces' row groups written into one file (a piece, one part's rows, read whole)."""
    name = ROW_FILES[fmt]
    digest = hashlib.sha256()
    writer = store.open_writer(
        prefix + name, content_type=PARQUET_TYPE if fmt == "parquet" else None
    )
    sink = _Sink(writer, digest.update)
    try:
        if fmt == "parquet":
            require("pyarrow", "the parquet export format")
            import pyarrow as pa  # lazy: optional [parquet] extra, ~135 ms, parquet only
            import pyarrow.parquet as pq  # lazy: as pyarrow above

            out = pq.ParquetWriter(sink, parquet_schema(), compression="zstd")
            held: list[Any] = []
            count = 0
            for m in metas:
                piece = pq.ParquetFile(
                    pa.BufferReader(store.get(part_key(scratch, m.number, "rows")))
                )
                for group in range(piece.num_row_groups):
                    held.append(piece.read_row_group(group))
                    count += held[-1].num_rows
                    while count >= ROW_WINDOW:  # the groups of a file written in one pass
                        table = pa.concat_tables(held)
                        out.write_table(table.slice(0, ROW_WINDOW))
                        held, count = [table.slice(ROW_WINDOW)], count - ROW_WINDOW
            if count:
                out.write_table(pa.concat_tables(held))
            out.close()
        else:
            for m in metas:
                for chunk in object_pieces(store, part_key(scratch, m.number, "rows"), m.rows_size):
                    sink.write(chunk)
    except BaseException:
        writer.abort()
        raise
    size = writer.commit()
    return PlannedFile(name, "sha256:" + digest.hexdigest(), size, role=ROLE_DATA)


def _write_harbor_manifest(
    store: BlobStore, prefix: str, scratch: str, spec: StreamSpec, metas: Sequence[PartMeta]
) -> PlannedFile:
    """`dataset.toml`, with its digest: its head, the parts' `[[tasks]]` entries in part order,
    its tail (the bytes `export_stream._HarborManifest` writes in one pass)."""
    digest = hashlib.sha256()
    writer = store.open_writer(prefix + HARBOR_MANIFEST, content_type=TOML_TYPE)
    sink = _Sink(writer, digest.update)
    try:
        sink.write(harbor_head(spec.dataset))
        for m in metas:
            for chunk in object_pieces(store, part_key(scratch, m.number, "toml"), m.tasks_size):
                sink.write(chunk)
        tail = harbor_tail(
            spec.dataset,
            content_digest=spec.content_digest,
            export_id=spec.export_id,
            case_count=spec.case_count,
            subset=spec.subset,
        )
        sink.write(tail)
    except BaseException:
        writer.abort()
        raise
    size = writer.commit()
    return PlannedFile(HARBOR_MANIFEST, "sha256:" + digest.hexdigest(), size, role=HARBOR)


class _ManifestPieces:
    """`manifest.json` as a series of pieces, framed as `ManifestWriter` frames it (so the bytes
    are those of an export written in one pass), with its size known before it is read (a tar
    header comes first)."""

    def __init__(
        self,
        store: BlobStore,
        scratch: str,
        spec: StreamSpec,
        data_files: Sequence[PlannedFile],
        metas: Sequence[PartMeta],
        totals: tuple[int, int],
    ) -> None:
        self.store, self.scratch, self.metas = store, scratch, [m for m in metas if m.entries_size]
        head = orjson.dumps(_head(spec, data_files))
        tail = b"}," + orjson.dumps({"file_count": totals[0], "bytes": totals[1]})[1:] + b"\n"
        if spec.fmt in CASE_FORMATS:
            self.before, self.sep_first = head[:-1] + b',"cases":{', b""
            self.after = tail
        else:
            self.before, self.sep_first = head[:-2], b","
            self.after = b'},"cases":{' + tail
        entries = sum(m.entries_size for m in self.metas)
        seps = len(self.metas) - 1 + len(self.sep_first) if self.metas else 0
        self.size = len(self.before) + entries + seps + len(self.after)

    def pieces(self) -> Iterator[bytes]:
        yield self.before
        for i, m in enumerate(self.metas):
            yield self.sep_first if i == 0 else b","
            yield from object_pieces(
                self.store, part_key(self.scratch, m.number, "entries"), m.entries_size
            )
        yield self.after


def _write_bundle(
    prepared: Prepared,
    metas: Sequence[PartMeta],
    data_files: Sequence[PlannedFile],
    shared_bodies: Mapping[str, bytes],
    manifest: _ManifestPieces,
    manifest_out: ObjectWriter,
) -> None:
    """The bundle: the parts' members as they are, then a last member with the row file and
    the shared files (a row format) or `dataset.toml` (`harbor`), the manifest (its pieces also
    written to `manifest_out`) and the end of the archive."""
    store, prefix = prepared.target.store, prepared.target.prefix
    assert store is not None
    scratch = scratch_prefix(prefix)
    key = bundle_key(prefix)
    out = store.open_writer(key, content_type="application/gzip")
    try:
        for m in metas:
            member_key = part_key(scratch, m.number, "tgz")
            info = store.head(member_key)
            if info is None:
                raise OSError(f"part {m.number}'s bundle member {member_key} is missing")
            out.copy(member_key, info.size)  # by S3 itself, a part's worth at a time
        last = TarMember(out)
        for f in data_files:
            if f.role in (ROLE_DATA, HARBOR):  # written by the finish: read back
                last.add_stream(
                    f.path, f.size, _Reader(object_pieces(store, prefix + f.path, f.size))
                )
            else:
                last.add(f.path, shared_bodies[f.digest[7:]], f.mode)

        def teed() -> Iterator[bytes]:
            for piece in manifest.pieces():
                manifest_out.write(piece)
                yield piece

        last.add_stream(MANIFEST_NAME, manifest.size, _Reader(teed()))
        last.close(end=True)  # commits the bundle
    except BaseException:
        out.abort()
        raise


def remove_scratch(store: BlobStore, prefix: str) -> None:
    """Remove a finished export's scratch area (best effort: the lifecycle rule expires it)."""
    for info in list(store.list(scratch_prefix(prefix))):
        try:
            store.delete(info.key)
        except Exception:  # noqa: S112 - expired by the bucket's rule otherwise
            continue
