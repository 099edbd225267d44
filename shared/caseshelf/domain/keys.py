"""The index's logical rows (architecture §4): one single-table key schema for DynamoDB and SQLite.

- version row: pk=`T#<tenant>#D#<name>` (`#R#` for recipes), sk=`V#<version>`
- dataset row: pk=`T#<tenant>`, sk=`D#<name>` (`R#<name>` for recipes)
- auxiliary rows (jobs, idempotency): any other pk, e.g. `JOB#<id>`
"""

from __future__ import annotations

from typing import Any

from caseshelf.domain.versions import VersionRecord

KIND_LETTER = {"dataset": "D", "recipe": "R"}
LETTER_KIND = {v: k for k, v in KIND_LETTER.items()}


def version_pk(tenant: str, kind: str, name: str) -> str:
    return f"T#{tenant}#{KIND_LETTER[kind]}#{name}"


def version_sk(version: str) -> str:
    return f"V#{version}"


def tenant_pk(tenant: str) -> str:
    return f"T#{tenant}"


def entity_sk(kind: str, name: str) -> str:
    return f"{KIND_LETTER[kind]}#{name}"


def entity_prefix(kind: str) -> str:
    return f"{KIND_LETTER[kind]}#"


def record_to_item(rec: VersionRecord) -> dict[str, Any]:
    """A version row as a plain document (no pk/sk)."""
    return {
        "tenant": rec.tenant,
        "kind": rec.kind,
        "name": rec.name,
        "version": rec.version,
        "content_digest": rec.content_digest,
        "manifest_key": rec.manifest_key,
        "case_count": rec.case_count,
        "bytes": rec.bytes,
        "created_at": rec.created_at,
        "created_by": rec.created_by,
        "seq": rec.seq,
        "description": rec.description,
        "tags": list(rec.tags),
        "version_tags": list(rec.version_tags),
        "produced_by": rec.produced_by,
        "deleted_at": rec.deleted_at,
        "deleted_by": rec.deleted_by,
        "extra": rec.extra,
    }


def item_to_record(item: dict[str, Any]) -> VersionRecord:
    return VersionRecord(
        tenant=item["tenant"],
        kind=item["kind"],
        name=item["name"],
        version=item["version"],
        content_digest=item["content_digest"],
        manifest_key=item["manifest_key"],
        case_count=int(item["case_count"]),
        bytes=int(item["bytes"]),
        created_at=item["created_at"],
        created_by=item["created_by"],
        seq=int(item["seq"]),
        description=item.get("description") or "",
        tags=tuple(item.get("tags") or ()),
        version_tags=tuple(item.get("version_tags") or ()),
        produced_by=item.get("produced_by"),
        deleted_at=item.get("deleted_at"),
        deleted_by=item.get("deleted_by"),
        extra=item.get("extra") or {},
    )


MUTABLE_VERSION_FIELDS = frozenset({"version_tags", "deleted_at", "deleted_by"})


def check_version_changes(changes: dict[str, Any]) -> None:
    """Refuse a change to a version row's immutable fields (a programming error, not input)."""
    bad = set(changes) - MUTABLE_VERSION_FIELDS
    if bad:
        raise ValueError(f"immutable version fields: {sorted(bad)}")
