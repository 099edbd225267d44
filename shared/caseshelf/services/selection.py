"""Subset selection: resolve a version, decide the selection over its manifest, and optionally
read the selected cases or register them as a derived version.

Only the manifest is read unless the caller asks for the cases, and of it only what the
selection needs: a selection chooses from the version's sample columns (`columns_for_selection`:
ids, digest prefixes and, from root format 5 on, tags; those covering a wanted tag, the first
ones for a limit, every one for ids or a sample) and, asked for the cases, reads then the chunks
holding the selected ones, which say where they are. One by tags from columns without them
(format 4 roots) reads the chunks (`chunks_for_selection`). `register_as` writes a new manifest
that points at the parent's packs (no case bytes are copied).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import chain, groupby
from typing import Any, Protocol, TypeVar

import orjson

from caseshelf.domain.answers import (
    ANSWER_BUDGET_BYTES,
    PAGE_FRAME_BYTES,
    escaped_size,
    fitting,
    oversized_case,
)
from caseshelf.domain.chunks import Root, SampleColumn, concat_chunks, join_sample_columns
from caseshelf.domain.errors import BadRequest, Conflict, Corrupt
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import Manifest, column_array
from caseshelf.domain.paging import decode_selection_position, encode_selection_position
from caseshelf.domain.subset import (
    Selection,
    Subset,
    SubsetRequest,
    chunks_for_selection,
    columns_answer,
    columns_for_selection,
    count_tagged,
    select_from_columns,
    select_subset,
)
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.registry import RegisterResult, RegistryService
from caseshelf.services.storage import read_sample_columns


class _Part(Protocol):
    def __len__(self) -> int: ...


_P = TypeVar("_P", bound=_Part)


@dataclass
class SubsetProgress:
    """How far a selection registered as a job is (`caseshelf.services.jobs`), set as it goes:
    the cases selected, then those registered."""

    selected: int = 0
    registered: int = 0


@dataclass(frozen=True)
class SubsetResult:
    record: VersionRecord
    subset: Subset
    case_ids: list[str]
    cases: list[dict[str, Any]] | None = None
    registered: RegisterResult | None = None
    # With cases: the cursor of the next page of them (None on the last), and where this page's
    # first case is among the selected ones.
    cases_next_cursor: str | None = None
    cases_from: int = 0


class SelectionService:
    def __init__(
        self, registry: RegistryService, *, answer_bytes: int = ANSWER_BUDGET_BYTES
    ) -> None:
        """`answer_bytes`: the escaped bytes one answer with cases may take
        (`caseshelf.domain.answers`); the cases come a page at a time within it."""
        self.registry = registry
        self.answer_bytes = answer_bytes

    def select_subset(
        self,
        identity: Identity,
        name: str,
        ref: str,
        request: SubsetRequest,
        *,
        with_cases: bool = False,
        include_deleted: bool = False,
        cursor: str | None = None,
        pinned: str | None = None,
        progress: SubsetProgress | None = None,
    ) -> SubsetResult:
        """The selection `request` of `name@ref`. With `with_cases`, its cases too, a page at a
        time (`answer_bytes`): `cursor` (the `cases_next_cursor` of the page before, which pins
        the version by content digest) asks for the next page. `pinned`: the content digest
        `name@ref` must have (a job's, resolved when it started); `progress` is told the cases
        selected, then registered."""
        start = 0
        if cursor:
            ref, start = decode_selection_position(cursor)
        rec = self.registry.get_version(identity, name, ref, include_deleted=include_deleted)
        if pinned is not None and rec.content_digest != pinned:
            raise Conflict(
                f"{name}@{ref} is now {rec.content_digest}, not {pinned} as when the subset "
                "was asked for (it was deleted and registered again); ask again",
                id=name,
                version=ref,
            )
        selection = request.selection()
        root = self.registry.root(rec)
        page: tuple[list[dict[str, Any]], str | None] | None = None
        by_columns = columns_answer(selection, tags=root.sample_tags)
        if root.sample_keys and by_columns:
            subset, case_ids = self._select_from_columns(rec, root, selection)
            if with_cases:
                lengths = self._lengths(rec, root, subset.indices)
                page = self._cases(rec, subset, case_ids, lengths, start)
        else:
            subset, case_ids, lengths = self._select_from_chunks(rec, root, selection)
            if with_cases:
                page = self._cases(rec, subset, case_ids, lengths, start)

        if progress is not None:
            progress.selected = len(subset.indices)
        registered = None
        if request.register_as is not None:
            target = request.register_as
            registered = self.registry.register_derived(
                identity,
                name=target.id,
                version=target.version,
                bump=target.bump,
                parent=rec,
                indices=subset.indices,
                produced_by={
                    "via": "subset",
                    "parent": {
                        "id": rec.name,
                        "version": rec.version,
                        "digest": rec.content_digest,
                    },
                    "selection": selection.as_record(),
                },
            )
            if progress is not None:
                progress.registered = registered.record.case_count
        cases, nxt = page if page is not None else (None, None)
        return SubsetResult(rec, subset, case_ids, cases, registered, nxt, start)

    def _select_from_chunks(
        self, rec: VersionRecord, root: Root, selection: Selection
    ) -> tuple[Subset, list[str], list[int]]:
        """The selection over the chunks it needs (`chunks_for_selection`): the subset, the
        selected cases' ids and their lengths."""
        numbers = chunks_for_selection(root, selection)
        if numbers is None:
            numbers = list(range(len(root.chunk_keys)))
        starts = root.chunk_starts()
        manifest = replace(
            self._chunk_columns(rec, root, numbers, selection),
            content_digest=root.content_digest,
        )
        # Each read case's position in the version: the chunks' stretches, back to back.
        positions = list(chain.from_iterable(range(starts[n], starts[n + 1]) for n in numbers))[
            : len(manifest)
        ]
        subset = select_subset(
            manifest,
            selection,
            dataset_id=rec.name,
            version=rec.version,
            positions=positions,
            total=len(root),
        )
        if subset.stamp is None:  # the whole version
            return subset, self._all_ids(rec, root), []
        local = [bisect_left(positions, p) for p in subset.indices]
        all_lengths = column_array(manifest.lengths)
        return subset, [manifest.ids[i] for i in local], [all_lengths[i] for i in local]

    def _select_from_columns(
        self, rec: VersionRecord, root: Root, selection: Selection
    ) -> tuple[Subset, list[str]]:
        """A selection decided from the version's sample columns (ids, digest
        prefixes and, in a root of format 5, tags; `columns_for_selection`), a column per ~7
        chunks at ~a fifth of their bytes. At 100,000 cases a sample reads 12 objects instead
        of 97, and tags + limit 5,000 reads 3 (the root and 2 columns) instead of 20
        (`bench/bench_subset.py`). Tags and a limit stop reading near the column where the limit is
        reached (`_read_until_limit`)."""
        numbers = columns_for_selection(root, selection)
        starts = root.sample_starts()
        if selection.tags is not None and selection.limit is not None and selection.ids is None:
            wanted = set(selection.tags)
            counts = [starts[g + 1] - starts[g] for g in range(len(root.sample_keys))]
            columns = _read_until_limit(
                numbers,
                counts,
                selection.limit,
                lambda batch: self._sample_columns(rec, root, batch),
                lambda column: _tagged_in(column.tag_names, column.tags or (), wanted),
            )
        else:
            columns = list(self._sample_columns(rec, root, numbers))
        read = numbers[: len(columns)]
        column = join_sample_columns(columns, tags=selection.tags is not None)
        held = sum(starts[g + 1] - starts[g] for g in read)
        if len(column) != held:
            raise Corrupt(
                f"the sample columns of {rec.manifest_key} hold {len(column)} cases where "
                f"the root counts {held} (run `caseshelf verify` on the version)",
                key=rec.manifest_key,
            )
        if selection.tags is not None and column.tags is None:
            raise Corrupt(
                f"the sample columns of {rec.manifest_key} carry no tags where its root "
                f"({root.root_format}) says they do (run `caseshelf verify` on the version)",
                key=rec.manifest_key,
            )
        first = read == list(range(len(read)))  # the version's first columns: positions as read
        positions = (
            None
            if first
            else list(chain.from_iterable(range(starts[g], starts[g + 1]) for g in read))
        )
        subset = select_from_columns(
            column,
            selection,
            dataset_id=rec.name,
            version=rec.version,
            content_digest=root.content_digest,
            total=len(root),
            positions=positions,
        )
        if positions is None:
            return subset, [column.ids[i] for i in subset.indices]
        return subset, [column.ids[bisect_left(positions, p)] for p in subset.indices]

    def _sample_columns(
        self, rec: VersionRecord, root: Root, numbers: Iterable[int]
    ) -> Iterable[SampleColumn]:
        """The sample columns `numbers` of a version, in that order, several reads in flight."""
        reg = self.registry
        keys = [root.sample_keys[g] for g in numbers]
        return read_sample_columns(reg.store, rec.tenant, keys, workers=reg.read_workers)

    def _lengths(self, rec: VersionRecord, root: Root, indices: Sequence[int]) -> list[int]:
        """The stored lengths of the cases at `indices` (ascending), from the chunks holding
        them: the registry keeps the chunks it reads (`RegistryService.chunk`), so reading the
        cases next reads no chunk again, where the selection over the chunks read every chunk
        carrying a wanted tag and the cases' read then the ones holding a selected case."""
        starts = root.chunk_starts()
        out: list[int] = []
        for n, run in groupby(indices, key=lambda i: bisect_right(starts, i) - 1):
            lengths = column_array(self.registry.chunk(rec, n).lengths)
            out.extend(lengths[i - starts[n]] for i in run)
        return out

    def _cases(
        self,
        rec: VersionRecord,
        subset: Subset,
        case_ids: list[str],
        lengths: list[int],
        start: int,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The selected cases from the `start`-th on that fit one answer beside the selection's
        ids (`caseshelf.domain.answers`), and the cursor of the rest. Only the cases that may
        fit are read: their stored lengths bound their escaped sizes from below."""
        count = len(subset.indices)
        if start > count:
            raise BadRequest(f"cursor past the {count} selected cases", field="cursor")
        # the ids come twice at most (the answer's `case_ids`, a selection by ids in its stamp)
        frame = 2 * escaped_size(orjson.dumps(case_ids)) + 2 * PAGE_FRAME_BYTES
        room = self.answer_bytes - frame
        stop = start + max(fitting(lengths[start:], room), 1) if start < count else start
        wanted = subset.indices[start:stop]
        records = [data for _, data in self.registry.read_records(rec, wanted)]
        kept = fitting(map(escaped_size, records), room)
        if kept:
            cases = [orjson.loads(data) for data in records[:kept]]
        elif records:  # one case over the budget on its own: a stub naming its route
            at = wanted[0]
            href = self.registry.case_href(rec, at)
            cases = [oversized_case(case_ids[start], at, escaped_size(records[0]), href)]
            kept = 1
        else:
            cases = []
        nxt = start + kept
        cursor = encode_selection_position(rec.content_digest, nxt) if nxt < count else None
        return cases, cursor

    def _chunk_columns(
        self, rec: VersionRecord, root: Root, numbers: list[int], selection: Selection
    ) -> Manifest:
        """The ids, digests and lengths (and tags, when the selection names some) of the chunks
        `numbers`, back to back. A selection by tags and a limit stops reading near the chunk
        where the limit is reached (`_read_until_limit`)."""
        if selection.tags is not None and selection.limit is not None and selection.ids is None:
            wanted = set(selection.tags)
            taken = _read_until_limit(
                numbers,
                root.chunk_counts,
                selection.limit,
                lambda batch: self.registry.read_chunks(rec, batch),
                lambda chunk: _tagged_in(chunk.tag_names, chunk.case_tags, wanted),
            )
        else:
            taken = list(self.registry.read_chunks(rec, numbers))
        return concat_chunks(
            taken,
            tag_names=root.tag_names,
            locations=False,
            tags=selection.tags is not None,
        )

    def _all_ids(self, rec: VersionRecord, root: Root) -> list[str]:
        """Every case id of a version: from its sample columns when it has them (a column per
        ~7 chunks), otherwise chunk by chunk."""
        if root.sample_keys:
            columns = self._sample_columns(rec, root, range(len(root.sample_keys)))
            return [cid for column in columns for cid in column.ids]
        return [cid for _, chunk in self.registry.iter_chunks(rec) for cid in chunk.ids]


def _tagged_in(
    tag_names: Sequence[str], case_tags: Sequence[Sequence[int]], wanted: set[str]
) -> int:
    """How many cases of a chunk or a sample column carry one of the `wanted` tag names."""
    return count_tagged(case_tags, {t for t, name in enumerate(tag_names) if name in wanted})


def _read_until_limit(
    numbers: list[int],
    counts: Sequence[int],
    limit: int,
    read: Callable[[list[int]], Iterable[_P]],
    matching: Callable[[_P], int],
) -> list[_P]:
    """The parts `numbers` of a version (chunks or sample columns, each covering a wanted tag,
    `counts[n]` cases in part n) in order, up to the one where `limit` cases carrying one are
    found (`matching`), read in batches (`_next_batch`)."""
    taken: list[_P] = []
    found = seen = at = 0
    while at < len(numbers) and found < limit:
        batch = _next_batch(counts, numbers, at, limit - found, found, seen)
        at += len(batch)
        for part in read(batch):
            taken.append(part)
            found += matching(part)
            seen += len(part)
    return taken


def _next_batch(
    counts: Sequence[int], numbers: list[int], at: int, missing: int, found: int, seen: int
) -> list[int]:
    """The next parts a selection by tags and a limit reads, from `numbers[at]` on: as many as
    hold the `missing` cases if every case carried a wanted tag (the first batch: no more can be
    needed), then as many as the share of matching cases seen so far says, with a tenth more.
    Each batch is a round of reads in flight; sized by the share seen, a selection reads in
    two or three rounds where the first rule alone would take five to seven."""
    share = found / seen if seen and found else 1.0
    needed = missing / share * (1.1 if share < 1.0 else 1.0)
    batch: list[int] = []
    room = 0
    while at < len(numbers) and room < needed:
        batch.append(numbers[at])
        room += counts[numbers[at]]
        at += 1
    return batch
