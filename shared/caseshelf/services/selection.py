"""Subset selection: resolve a version, decide the selection over its manifest, and optionally
read the selected cases or register them as a derived version.

Only the manifest is read unless the caller asks for the cases; `register_as` writes a new
manifest that points at the parent's packs (no case bytes are copied).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caseshelf.domain.errors import TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.manifest import column_array
from caseshelf.domain.subset import Subset, SubsetRequest, select_subset
from caseshelf.domain.versions import VersionRecord
from caseshelf.services.registry import RegisterResult, RegistryService


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
        manifest = self.registry.manifest(rec)
        selection = request.selection()
        subset = select_subset(manifest, selection, dataset_id=rec.name, version=rec.version)
        case_ids = [manifest.ids[i] for i in subset.indices]

        cases = None
        if with_cases:
            lengths = column_array(manifest.lengths)
            size = sum(lengths[i] for i in subset.indices)
            if self.max_case_bytes is not None and size > self.max_case_bytes:
                raise TooLarge(
                    f"the {len(case_ids)} selected cases are {size} bytes, over the "
                    f"{self.max_case_bytes} bytes one answer may carry; ask without cases and "
                    "page through the cases, or register the selection with register_as",
                    size=size,
                    limit=self.max_case_bytes,
                )
            cases = [case for _, case in self.registry.case_records(rec, subset.indices)]

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
