"""Subset selection: resolve a version, decide the selection over its manifest, and optionally
read the selected cases or register them as a derived version.

Only the manifest is read unless the caller asks for the cases, and of it only the chunks the
selection needs (`chunks_for_selection`: those carrying a wanted tag, the first ones for a limit,
every one for ids); `register_as` writes a new manifest that points at the parent's packs (no
case bytes are copied).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace
from itertools import chain
from typing import Any

from caseshelf.domain.chunks import Root, concat_chunks, join_sample_columns
from caseshelf.domain.errors import Corrupt, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import Manifest, column_array
from caseshelf.domain.subset import (
    Selection,
    Subset,
    SubsetRequest,
    chunks_for_selection,
    count_tagged,
    samples_from_column,
    select_sample,
    select_subset,
)
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.registry import RegisterResult, RegistryService
from caseshelf.services.storage import read_sample_columns


@dataclass(frozen=True)
class SubsetResult:
    record: VersionRecord
    subset: Subset
    case_ids: list[str]
    cases: list[dict[str, Any]] | None = None
    registered: RegisterResult | None = None


class SelectionService:
    def __init__(self, registry: RegistryService, *, max_case_bytes: int | None = None) -> None:
        """`max_case_bytes` bounds the case bytes one call may return (an HTTP answer has a
        size limit); None for no bound (the library and the embedded CLI)."""
        self.registry = registry
        self.max_case_bytes = max_case_bytes

    def select_subset(
        self,
        identity: Identity,
        name: str,
        ref: str,
        request: SubsetRequest,
        *,
        with_cases: bool = False,
        include_deleted: bool = False,
    ) -> SubsetResult:
        rec = self.registry.get_version(identity, name, ref, include_deleted=include_deleted)
        selection = request.selection()
        root = self.registry.root(rec)
        cases = None
        if root.sample_keys and samples_from_column(selection) and not with_cases:
            subset, case_ids = self._sample_from_columns(rec, root, selection)
        else:
            subset, case_ids, lengths = self._select_from_chunks(rec, root, selection)
            if with_cases:
                cases = self._cases(rec, root, subset, case_ids, lengths)

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
        return SubsetResult(rec, subset, case_ids, cases, registered)

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
            self._columns(rec, root, numbers, selection),
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
            return subset, self._all_ids(rec), []
        local = [bisect_left(positions, p) for p in subset.indices]
        all_lengths = column_array(manifest.lengths)
        return subset, [manifest.ids[i] for i in local], [all_lengths[i] for i in local]

    def _sample_from_columns(
        self, rec: VersionRecord, root: Root, selection: Selection
    ) -> tuple[Subset, list[str]]:
        """A sample without ids or tags from the version's sample columns (ids and digest
        prefixes), the first ones covering `limit` cases when one is given: a column per ~7
        chunks at ~a fifth of their bytes, where the chunks would be a request per ~1,000
        cases (`bench/bench_subset.py`, 100,000 cases on moto: 12 requests instead of 97,
        ratio 0.037 instead of 0.142; embedded 0.011 instead of 0.065)."""
        starts = root.sample_starts()
        wanted = len(root.sample_keys)
        if selection.limit is not None:
            wanted = bisect_left(starts, min(selection.limit, len(root)), 1)
        reg = self.registry
        keys = root.sample_keys[:wanted]
        column = join_sample_columns(
            read_sample_columns(reg.store, rec.tenant, keys, workers=reg.read_workers)
        )
        if len(column) != starts[wanted]:
            raise Corrupt(
                f"the sample columns of {rec.manifest_key} hold {len(column)} cases where "
                f"the root counts {starts[wanted]} (run `caseshelf verify` on the version)",
                key=rec.manifest_key,
            )
        subset = select_sample(
            column,
            selection,
            dataset_id=rec.name,
            version=rec.version,
            content_digest=root.content_digest,
            total=len(root),
        )
        return subset, [column.ids[i] for i in subset.indices]

    def _cases(
        self,
        rec: VersionRecord,
        root: Root,
        subset: Subset,
        case_ids: list[str],
        lengths: list[int],
    ) -> list[dict[str, Any]]:
        """The selected cases, refused (`TooLarge`) above the bytes one answer may carry."""
        size = root.case_bytes if subset.stamp is None else sum(lengths)
        if self.max_case_bytes is not None and size > self.max_case_bytes:
            raise TooLarge(
                f"the {len(case_ids)} selected cases are {size} bytes, over the "
                f"{self.max_case_bytes} bytes one answer may carry; ask without cases and "
                "page through the cases, or register the selection with register_as",
                size=size,
                limit=self.max_case_bytes,
            )
        return [case for _, case in self.registry.case_records(rec, subset.indices)]

    def _columns(
        self, rec: VersionRecord, root: Root, numbers: list[int], selection: Selection
    ) -> Manifest:
        """The ids, digests and lengths (and tags, when the selection names some) of the chunks
        `numbers`, back to back. A selection by tags and a limit without a sample stops reading
        near the chunk where the limit is reached (`_until_limit`)."""
        wanted = set(selection.tags or ())
        stop_at = (
            selection.limit
            if selection.tags is not None and selection.sample is None and selection.ids is None
            else None
        )
        if stop_at is None:
            taken = list(self.registry.read_chunks(rec, numbers))
        else:
            taken = self._until_limit(rec, root, numbers, wanted, stop_at)
        return concat_chunks(
            taken,
            tag_names=root.tag_names,
            locations=False,
            tags=selection.tags is not None,
        )

    def _until_limit(
        self, rec: VersionRecord, root: Root, numbers: list[int], wanted: set[str], limit: int
    ) -> list[Manifest]:
        """The chunks `numbers` (each carrying a wanted tag) in order, up to the one where
        `limit` cases carrying one are found, read in batches (`_next_batch`)."""
        taken: list[Manifest] = []
        found = seen = at = 0
        while at < len(numbers) and found < limit:
            batch = _next_batch(root, numbers, at, limit - found, found, seen)
            at += len(batch)
            for chunk in self.registry.read_chunks(rec, batch):
                taken.append(chunk)
                tagged = {t for t, name in enumerate(chunk.tag_names) if name in wanted}
                found += count_tagged(chunk.case_tags, tagged)
                seen += len(chunk)
        return taken

    def _all_ids(self, rec: VersionRecord) -> list[str]:
        """Every case id of a version, chunk by chunk."""
        return [cid for _, chunk in self.registry.iter_chunks(rec) for cid in chunk.ids]


def _next_batch(
    root: Root, numbers: list[int], at: int, missing: int, found: int, seen: int
) -> list[int]:
    """The next chunks a selection by tags and a limit reads, from `numbers[at]` on: as many as
    hold the `missing` cases if every case carried a wanted tag (the first batch: no more can be
    needed), then as many as the share of matching cases seen so far says, with a tenth more.
    Each batch is a round of reads in flight; sized by the share seen, a selection reads in
    two or three rounds where the first rule alone took five to seven (`bench/bench_subset.py`,
    tags + limit 5,000 of 100,000 cases, a third of them matching)."""
    share = found / seen if seen and found else 1.0
    needed = missing / share * (1.1 if share < 1.0 else 1.0)
    batch: list[int] = []
    room = 0
    while at < len(numbers) and room < needed:
        batch.append(numbers[at])
        room += root.chunk_counts[numbers[at]]
        at += 1
    return batch
