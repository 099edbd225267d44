"""Writing a version's bytes: each staged batch's plan (`caseshelf.domain.writeplan.plan_batch`,
pure) applied: new records into packs, bodies into blobs, every case into the manifest's
chunks, the root last (`RegistryWriter._write`). Nothing written is visible before the commit;
on any failure the manifest writer is closed (`ManifestWriter.close`) and what was stored stays
unreferenced, for gc to collect."""

from __future__ import annotations

from collections import ChainMap, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from caseshelf.domain import layout
from caseshelf.domain.chunks import Root
from caseshelf.domain.diff import ChangeAgainstBase
from caseshelf.domain.manifest import PENDING_PACK, Location, Manifest, ManifestBuilder
from caseshelf.domain.versions import VersionRecord
from caseshelf.domain.writeplan import plan_batch, record_spans
from caseshelf.services.registry.results import WriteStats, _Copied
from caseshelf.services.registry.staging import (
    RegistryStaging,
    SeenIds,
    Staged,
    VersionHead,
    _digester,
    _refuse_repeats,
)
from caseshelf.services.storage import (
    BlobWriter,
    ManifestWriter,
    ManifestWritten,
    PackWriter,
    read_cases,
)

# The most cases a registration holds waiting for the packs their new records went into
# (`_HeldCases`): beyond it the pack being filled is stored as it is (`PackWriter.cut`). A pack
# is stored once it reaches its target size, which a registration reusing most of its records
# reaches slowly: a re-import of 1,000,000 GSM8K rows with 1% changed fills one pack with its
# 10,000 new records, and every case waited for it (~265 bytes a case held, ~250 MB). At this
# bound such a re-import stores a pack of its new records every ~131,000 cases; a version whose
# records are new fills its packs long before (an 8 MB pack is ~13,000 GSM8K cases).
HELD_MAX_CASES = 131_072


# Copies of superseded records (`RegistryService._keep_superseded`) are kept for changes up to
# this size: a pack's worth.
SUPERSEDED_MAX_RECORDS = 20_000


SUPERSEDED_MAX_BYTES = 8 * 1024 * 1024


def _reused_columns(
    reused: Sequence[Location | None], lengths: Sequence[int]
) -> tuple[list[str], list[int], list[int]]:
    """The manifest columns of a batch as its plan leaves them: where each reused record is;
    new ones are filled in as they are written (`_write_runs`)."""
    containers = [loc.container if loc is not None else "" for loc in reused]
    offsets = [loc.offset if loc is not None else 0 for loc in reused]
    sizes = [loc.length if loc is not None else n for loc, n in zip(reused, lengths, strict=True)]
    return containers, offsets, sizes


def _write_runs(
    packs: PackWriter,
    batch: Staged,
    runs: Sequence[tuple[int, int]],
    pending: list[str],
    containers: list[str],
    offsets: list[int],
) -> None:
    """Append each run of new records to the packs as one slice of the batch's buffer, and
    note where each record went (its pack by placeholder name until the pack is stored).

    A batch whose records are all new is appended as a view of its buffer (no copy). A batch
    that reuses some has its runs copied out (`_run_bytes`): a view would keep the whole buffer
    alive while the pack being filled waits for more records, and in a re-import with 1% of its
    cases changed that pack fills slowly, so every batch's buffer stayed until the end."""
    assert batch.data is not None
    starts, stops = record_spans(batch.lengths)
    view = memoryview(batch.data)
    whole = runs == [(0, len(batch.lengths))]
    for first, stop in runs:
        at = starts[first]
        run = view[at : stops[stop - 1]] if whole else _run_bytes(view, at, stops[stop - 1])
        segments = packs.append_run(run, [e - at for e in stops[first:stop]])
        for n, (seg_first, number, shift) in enumerate(segments):
            seg_stop = segments[n + 1][0] if n + 1 < len(segments) else stop - first
            while len(pending) <= number:
                pending.append(PENDING_PACK + str(len(pending)))
            for i in range(first + seg_first, first + seg_stop):
                containers[i] = pending[number]
                offsets[i] = starts[i] - at + shift


def _run_bytes(view: memoryview, start: int, stop: int) -> memoryview:
    """A copy of `view[start:stop]`, as a view of the copy (a pack slices it without copying
    again)."""
    return memoryview(bytes(view[start:stop]))


def _place(
    packs: PackWriter, batch: Staged, reusable: Mapping[str, Location], pending: list[str]
) -> tuple[int, tuple[list[str], list[int], list[int]]]:
    """A batch's plan (`plan_batch`) applied: its new records appended to the packs. Answers
    how many records are new, and the batch's manifest columns (containers, offsets,
    lengths)."""
    plan = plan_batch(batch.digests, reusable)
    containers, offsets, lengths = _reused_columns(plan.reused, batch.lengths)
    if plan.runs:
        if batch.data is None:
            raise ValueError("a batch with new records that does not hold them")
        _write_runs(packs, batch, plan.runs, pending, containers, offsets)
    return plan.new_count, (containers, offsets, lengths)


def _stats(packs: PackWriter, blobs: BlobWriter, copied: _Copied, reused: int) -> WriteStats:
    return WriteStats(
        case_bytes_written=packs.bytes_written + copied.bytes_written,
        pack_objects_written=packs.objects_written + copied.objects_written,
        blob_bytes_written=blobs.bytes_written,
        cases_reused=reused,
        superseded_copied=copied.records,
    )


@dataclass(frozen=True)
class _HeldBatch:
    """A batch's manifest columns, waiting for the packs below `packs_named` to be stored."""

    ids: list[str]
    digests: list[str]
    tags: Sequence[Sequence[str]]
    containers: list[str]
    offsets: list[int]
    lengths: list[int]
    packs_named: int


class _HeldCases:
    """Cases added to the manifest whose packs are still being written: a chunk names the
    packs its cases are in, and a pack's name is the digest of its bytes. Each batch's columns
    (not its records: those are in the packs) are handed on to the `ManifestWriter`, in order,
    once every pack it went into is stored."""

    def __init__(self, writer: ManifestWriter) -> None:
        self._writer = writer
        self._held: deque[_HeldBatch] = deque()
        self._count = 0
        self._names: dict[str, str] = {}  # placeholder -> pack name, of the packs stored

    def add(
        self,
        batch: Staged,
        containers: list[str],
        offsets: list[int],
        lengths: list[int],
        packs_named: int,
    ) -> None:
        """A batch whose new records went into packs below number `packs_named`."""
        self._held.append(
            _HeldBatch(
                batch.ids, batch.digests, batch.tags, containers, offsets, lengths, packs_named
            )
        )
        self._count += len(batch.ids)

    def __len__(self) -> int:
        """The cases held."""
        return self._count

    def case_id(self, position: int) -> str:
        """The id of the case at `position` of the version (held here, or handed on)."""
        at = len(self._writer)
        if position < at:
            return self._writer.case_id(position)
        for batch in self._held:
            if position < at + len(batch.ids):
                return batch.ids[position - at]
            at += len(batch.ids)
        raise IndexError(f"case position {position} out of range")

    def release(
        self, stored: int, pending: Sequence[str], digest_of_pack: Callable[[int], str]
    ) -> None:
        """Hand on the batches whose packs are among the first `stored` (named by
        `digest_of_pack`), their placeholders replaced by the packs' names."""
        names = self._names
        for number in range(len(names), min(stored, len(pending))):
            names[pending[number]] = digest_of_pack(number)
        while self._held and self._held[0].packs_named <= stored:
            b = self._held.popleft()
            self._count -= len(b.ids)
            located = [names.get(c, c) for c in b.containers] if names else b.containers
            self._writer.add(b.ids, b.digests, b.tags, located, b.offsets, b.lengths)


class RegistryWriter(RegistryStaging):
    """Writing a version's packs, blobs and manifest."""

    def _write(
        self,
        tenant: str,
        head: VersionHead,
        batches: Iterable[Staged],
        *,
        base: VersionRecord | None,
        known: dict[str, Location] | None,
        known_blobs: dict[str, Location] | None = None,
        inline_ahead: frozenset[str] = frozenset(),
    ) -> tuple[ManifestWritten, WriteStats]:
        """Apply each batch's plan: new records into packs (put-if-absent, named by digest),
        bodies into blobs, every case into the manifest, whose chunks are stored as they fill
        (`ManifestWriter`) and whose root is stored last. Nothing here is visible until
        `_commit`. `inline_ahead`: bodies a later batch sends inline (a buffered source's; a
        streamed one names a body stored, or sent earlier in the stream).

        Memory holds a window of cases: those whose packs are still being written (a chunk
        names its packs; at most `HELD_MAX_CASES`), and the chunk being filled. With a base,
        the change against it is followed as the batches pass (`ChangeAgainstBase`: the base
        read a chunk at a time while the batches line up with it, else whole; a byte per base
        case; the changed and added cases while they number few enough for a delta), for the
        records the plan reuses, the copies of those the version supersedes and its delta
        against the base: memory follows the change, not the new input."""
        # The records the plan may point at: the base's, found batch by batch (`change.match`),
        # and `known` (a derived version's parent's).
        reusable: Mapping[str, Location] = known or {}
        root = self.root(base) if base is not None else None
        stored = root.blob_locations() if root is not None else {}
        blobs = BlobWriter(self.store, tenant, {**stored, **(known_blobs or {})})
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        # The version's content and file bodies (its cases go to `chunks` as they come).
        builder = ManifestBuilder(
            description=head.description, tags=list(head.tags), shared_files=list(head.shared_files)
        )
        chunks = ManifestWriter(self.store, tenant, workers=self.read_workers)
        held = _HeldCases(chunks)
        change = self._change_against(base, root)
        seen = SeenIds()
        digester = _digester(head)
        named: dict[str, None] = {}  # every body the version names, in order
        pending: list[str] = []  # the placeholder name of each pack number
        reused = 0
        try:
            for batch in batches:
                self._take_bodies(tenant, blobs, batch, inline_ahead)
                named.update(dict.fromkeys(batch.files))
                if not batch.ids:
                    continue
                if batch.positions:
                    _refuse_repeats(seen, batch, held.case_id)
                digester.add(batch.pairs())
                if change is not None:
                    matched = change.match(batch.ids, batch.digests)
                    reusable = ChainMap(known, matched) if known else matched
                new, (containers, offsets, lengths) = _place(packs, batch, reusable, pending)
                reused += len(batch.ids) - new
                if change is not None:
                    change.place(containers, offsets, lengths)
                held.add(batch, containers, offsets, lengths, len(pending))
                if len(held) > HELD_MAX_CASES:
                    packs.cut()
                held.release(packs.stored(), pending, packs.digest_of_pack)
            named.update(dict.fromkeys(sf["digest"][7:] for sf in head.shared_files))
            packs.flush()
            held.release(len(pending), pending, packs.digest_of_pack)
            blob_locs = blobs.finish()
            for hex_digest in named:
                builder.add_blob(hex_digest, blob_locs[hex_digest])
            written, copied = self._finish(
                tenant, builder.build(digester.digest()), chunks, change, packs
            )
        except BaseException:
            chunks.close()
            raise
        finally:
            if change is not None:
                change.close()
        return written, _stats(packs, blobs, copied, reused)

    def _take_bodies(
        self, tenant: str, blobs: BlobWriter, batch: Staged, inline_ahead: frozenset[str]
    ) -> None:
        """Store a batch's bodies sent inline, and check those it names by reference: stored,
        sent earlier, or sent inline by a later batch (`inline_ahead`)."""
        for hex_digest, data in batch.bodies.items():
            blobs.add(hex_digest, data)
        self._check_refs(
            tenant,
            batch.refs,
            lambda h: blobs.has(h) or h in inline_ahead,
            blobs.locate_standalone,
        )

    def _change_against(
        self, base: VersionRecord | None, root: Root | None
    ) -> ChangeAgainstBase | None:
        """The change against `base` that `_write` follows as the batches pass (None without
        a base)."""
        if base is None or root is None:
            return None
        return ChangeAgainstBase(
            root.content_digest, root.count, self.iter_chunks(base), lambda: self.manifest(base)
        )

    def _finish(
        self,
        tenant: str,
        manifest: Manifest,
        chunks: ManifestWriter,
        change: ChangeAgainstBase | None,
        packs: PackWriter,
    ) -> tuple[ManifestWritten, _Copied]:
        """Store the manifest's last chunks and its root; with a base, first the copies of the
        records it supersedes (`_keep_superseded`) and the delta against it."""
        if change is None:
            return chunks.finish(manifest), _Copied()
        change.resolve_pending(packs.digest_of_pack)
        manifest, copied = self._keep_superseded(tenant, change.superseded_cases(), manifest)
        written = chunks.finish(manifest, delta=change.delta(), delta_base=change.content_digest)
        return written, copied

    def _keep_superseded(
        self, tenant: str, cases: Manifest | None, manifest: Manifest
    ) -> tuple[Manifest, _Copied]:
        """`manifest` with copies of the base version's records `cases` (ids, digests and
        where they are), those the new version no longer holds (its changed and removed cases),
        written back to back: a diff of the two then reads them in one span instead of one
        request each, scattered through the base's packs. Registration pays those reads once,
        with this store's read plan (`read_gap`, `read_workers`). Skipped beyond
        `SUPERSEDED_MAX_RECORDS` or `SUPERSEDED_MAX_BYTES` (a large change costs a diff more
        reads in any case), or when `cases` is None (more than its tracker keeps)."""
        if (
            cases is None
            or not len(cases)
            or len(cases) > SUPERSEDED_MAX_RECORDS
            or cases.case_bytes() > SUPERSEDED_MAX_BYTES
        ):
            return manifest, _Copied()
        records = read_cases(
            self.store,
            tenant,
            cases,
            range(len(cases)),
            max_gap=self.read_gap,
            workers=self.read_workers,
        )
        packs = PackWriter(self.store, lambda h: layout.pack_key(tenant, h))
        text = cases.digest_text()
        placed = [
            (text[64 * k : 64 * k + 64], packs.append(records[k]), len(records[k]))
            for k in range(len(cases))
        ]
        packs.flush()
        copies = [(d, packs.location(where, size)) for d, where, size in placed]
        copied = _Copied(len(copies), packs.bytes_written, packs.objects_written)
        return manifest.with_superseded(copies), copied
