"""Version labels, their order, bumps, and ref resolution (architecture §5). Pure.

Order: labels that are semver are ordered by semver precedence (1.9.0 < 1.10.0, 1.0.0-rc.1 <
1.0.0); labels that are not semver are ordered by registration order and sort before every semver
label, so a dataset that uses semver gets its highest semver version as `latest`, and a dataset
that never does gets the last one registered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any

from caseshelf.domain.errors import BadRequest, NotFound
from caseshelf.domain.models import DATASET_ID_PATTERN, DIGEST_PATTERN, LABEL_PATTERN
from caseshelf.domain.words import DATASET_ID_RULE, DIGEST_RULE, LABEL_RULE, REF_RULE, TAG_RULE

_LABEL = re.compile(LABEL_PATTERN)
_DATASET_ID = re.compile(DATASET_ID_PATTERN)
_DIGEST = re.compile(DIGEST_PATTERN)
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?$"
)


def check_label(label: str) -> str:
    if not isinstance(label, str) or not _LABEL.fullmatch(label) or label == "latest":
        raise BadRequest(
            f"invalid version label {label!r}: {LABEL_RULE}, and not 'latest'",
            field="version",
        )
    return label


def check_dataset_id(name: str) -> str:
    if not isinstance(name, str) or not _DATASET_ID.fullmatch(name):
        raise BadRequest(
            f"invalid id {name!r}: {DATASET_ID_RULE}",
            field="id",
        )
    return name


def check_tags(tags: Iterable[str]) -> list[str]:
    out = []
    for tag in tags:
        if not isinstance(tag, str) or not _LABEL.fullmatch(tag) or tag == "latest":
            raise BadRequest(
                f"invalid version tag {tag!r}: {TAG_RULE}, and not 'latest'",
                field="tags",
            )
        if tag not in out:
            out.append(tag)
    return out


def semver(label: str) -> tuple[int, int, int, tuple[Any, ...]] | None:
    """A sort key by semver precedence, or None when the label is not semver."""
    m = _SEMVER.fullmatch(label)
    if not m:
        return None
    major, minor, patch, pre = m.groups()
    if pre is None:
        # A release sorts after every pre-release of the same version.
        pre_key: tuple[Any, ...] = ((2, 0, ""),)
    else:
        pre_key = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return int(major), int(minor), int(patch), pre_key


@dataclass(frozen=True)
class VersionRecord:
    """One version's row in the index (architecture §4). `kind` is `dataset` or `recipe`."""

    tenant: str
    kind: str
    name: str
    version: str
    content_digest: str
    manifest_key: str
    case_count: int
    bytes: int
    created_at: str
    created_by: str
    seq: int
    description: str = ""
    tags: tuple[str, ...] = ()
    version_tags: tuple[str, ...] = ()
    produced_by: dict[str, Any] | None = None
    deleted_at: str | None = None
    deleted_by: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.deleted_at is None


def order_key(rec: VersionRecord) -> tuple[Any, ...]:
    sv = semver(rec.version)
    if sv is None:
        return (0, (), rec.seq)
    return (1, sv, rec.seq)


def ordered(records: Iterable[VersionRecord]) -> list[VersionRecord]:
    """Oldest first."""
    return sorted(records, key=order_key)


def latest(records: Iterable[VersionRecord]) -> VersionRecord | None:
    live = [r for r in records if r.live]
    return max(live, key=order_key) if live else None


def next_version(records: Sequence[VersionRecord], bump: str) -> str:
    """The label `bump` gives after the highest semver label ever registered (tombstoned ones
    included, so a bump never lands on a hidden label). The first is 1.0.0."""
    keyed = [(semver(r.version), r) for r in records]
    sv = [k for k, _ in keyed if k is not None]
    if not sv:
        return "1.0.0"
    major, minor, patch, pre = max(sv)
    released = pre == ((2, 0, ""),)
    if bump == "major":
        return f"{major + 1}.0.0" if released or minor or patch else f"{major}.0.0"
    if bump == "minor":
        return f"{major}.{minor + 1}.0" if released or patch else f"{major}.{minor}.0"
    if bump == "patch":
        return f"{major}.{minor}.{patch + 1}" if released else f"{major}.{minor}.{patch}"
    raise BadRequest(f"unknown bump {bump!r}: major, minor or patch", field="bump")


def is_tag_ref(records: Sequence[VersionRecord], ref: str) -> bool:
    """Whether `ref` can only be a version tag: no `latest`, no digest, no label of `records`."""
    return (
        ref != "latest"
        and not ref.startswith("sha256:")
        and not any(r.version == ref for r in records)
    )


def resolve_ref(
    records: Sequence[VersionRecord],
    ref: str,
    *,
    include_deleted: bool = False,
    name: str = "",
    pointers: Mapping[str, str] | None = None,
) -> VersionRecord:
    """A label, `latest`, a version tag or `sha256:<hex>`. A tag resolves by `pointers` (tag ->
    label, `caseshelf.domain.tags.effective_pointers`) where given, else to the highest live
    version carrying it."""
    pool = [r for r in records if include_deleted or r.live]
    what = f"{name}@{ref}" if name else ref
    if ref == "latest":
        found = latest(pool)
    elif ref.startswith("sha256:"):
        if not _DIGEST.fullmatch(ref):
            raise BadRequest(f"invalid digest ref {ref!r}: {DIGEST_RULE}", field="ref")
        matches = [r for r in pool if r.content_digest == ref]
        found = max(matches, key=order_key) if matches else None
    elif not _LABEL.fullmatch(ref):
        # Labels and version tags share one rule: a ref outside it cannot name anything.
        raise BadRequest(
            f"invalid ref {ref!r}: {REF_RULE}",
            field="ref",
        )
    else:
        by_label = [r for r in pool if r.version == ref]
        if by_label:
            found = by_label[0]
        elif pointers is not None:
            found = _pointed(pool, records, ref, pointers, what)
        else:
            tagged = [r for r in pool if ref in r.version_tags and r.live]
            found = max(tagged, key=order_key) if tagged else None
    if found is None:
        raise NotFound(missing_version(records, ref, what, include_deleted), ref=ref)
    return found


def missing_version(
    records: Sequence[VersionRecord], ref: str, what: str, include_deleted: bool
) -> str:
    """Why `ref` names no version, and what to do: a deleted one is said to be deleted (and how
    to revive it); an unknown label lists the closest labels there are."""
    name = what.rpartition("@")[0] or what
    deleted = [r for r in records if not r.live and (r.version == ref or ref in r.version_tags)]
    if deleted and not include_deleted:
        label = deleted[0].version
        return (
            f"{name}@{label} is deleted: revive it (`caseshelf revive {name}@{label}`), or read "
            "it as it was with --include-deleted (`include_deleted=true` over HTTP)"
        )
    live = [r.version for r in sorted(records, key=order_key, reverse=True) if r.live]
    if not live:
        return f"no version {what}: {name} has no live version"
    if ref.startswith("sha256:"):
        return f"no version {what}; its versions: {', '.join(live[:5])}"
    close = get_close_matches(ref, live, n=3, cutoff=0.6)
    if close:
        return f"no version {what}; the closest: {', '.join(close)}"
    more = f" ({len(live)} in all)" if len(live) > 5 else ""
    return f"no version {what}; the latest: {', '.join(live[:5])}{more}"


def _pointed(
    pool: Sequence[VersionRecord],
    records: Sequence[VersionRecord],
    tag: str,
    pointers: Mapping[str, str],
    what: str,
) -> VersionRecord | None:
    label = pointers.get(tag)
    if label is None:
        return None
    found = next((r for r in pool if r.version == label), None)
    if found is None and any(r.version == label for r in records):
        raise NotFound(
            f"{what}: the tag points at {label}, which is deleted; revive {label} or move the "
            "tag to another version",
            ref=tag,
            version=label,
        )
    return found
