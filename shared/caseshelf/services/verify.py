"""`verify`: re-hash everything a version references and report what is missing or damaged.

Reads check each record as they serve it (`caseshelf.services.storage.read_cases`); `verify` is
the whole-version form, for an operator: the manifest is there and parses, every chunk its root
names is there and hashes to its key (a broken one is named by its key), its content digest is
the one of its ids and case digests (and of the version row), every pack and blob container is
there, every case record and file body (and every superseded copy) hashes to its digest. Each
container is read once, whole.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from caseshelf.domain import keys, layout
from caseshelf.domain.canonical import content_digest, sha256_hex
from caseshelf.domain.chunks import (
    Root,
    chunk_from_bytes,
    join_chunks,
    sample_column_bytes,
    superseded_from_bytes,
)
from caseshelf.domain.diff import delta_from_bytes
from caseshelf.domain.errors import CaseshelfError, Corrupt, NotFound
from caseshelf.domain.manifest import Location, Manifest
from caseshelf.domain.tags import BOARD_SK, TagBoard, conflicting_tags, effective_pointers
from caseshelf.domain.versions import VersionRecord
from caseshelf.ports import BlobStore, Index
from caseshelf.services.storage import parse_root


@dataclass(frozen=True)
class Problem:
    version: str  # name@version
    kind: str  # "missing" | "corrupt"
    key: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"version": self.version, "kind": self.kind, "key": self.key, "detail": self.detail}


@dataclass
class VerifyReport:
    versions: list[str] = field(default_factory=list)
    objects_checked: int = 0
    records_checked: int = 0
    bytes_hashed: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "version_count": len(self.versions),
            "versions": self.versions,
            "objects_checked": self.objects_checked,
            "records_checked": self.records_checked,
            "bytes_hashed": self.bytes_hashed,
            "problem_count": len(self.problems),
            "problems": [p.to_dict() for p in self.problems],
        }


def dataset_versions(
    index: Index, tenants: Iterable[str], *, name: str | None = None
) -> Iterator[VersionRecord]:
    """Every dataset version (tombstoned ones too) of `tenants`, or of one dataset."""
    for tenant in tenants:
        if name is not None:
            yield from sorted(index.list_versions(tenant, "dataset", name), key=lambda r: r.seq)
            continue
        cursor: str | None = None
        while True:
            page = index.list_datasets(tenant, "dataset", cursor=cursor, limit=1000)
            for entry in page.items:
                records = index.list_versions(tenant, "dataset", entry.name)
                yield from sorted(records, key=lambda r: r.seq)
            cursor = page.next_cursor
            if not cursor:
                break


def verify_versions(
    store: BlobStore,
    records: Iterable[VersionRecord],
    *,
    on_version: Callable[[VersionRecord], None] | None = None,
    index: Index | None = None,
) -> VerifyReport:
    """Every version's objects; with `index`, also each dataset's tags (a tag its version rows
    give to other versions than the one it points at)."""
    report = VerifyReport()
    seen: list[VersionRecord] = []
    for rec in records:
        _verify_one(store, rec, report)
        seen.append(rec)
        if on_version is not None:
            on_version(rec)
    if index is not None:
        report.problems.extend(tag_problems(index, seen))
    return report


def tag_problems(index: Index, records: Iterable[VersionRecord]) -> list[Problem]:
    """A problem for each tag whose version rows disagree with where it points (old data where
    two versions carry one tag, or a move whose row updates did not all land)."""
    datasets = dict.fromkeys((rec.tenant, rec.name) for rec in records)
    found: list[Problem] = []
    for tenant, name in datasets:
        everyone = index.list_versions(tenant, "dataset", name)
        board = TagBoard.from_doc(
            index.get_item(keys.version_pk(tenant, "dataset", name), BOARD_SK)
        )
        pointers = effective_pointers(board, everyone)
        for tag, holders in conflicting_tags(board, everyone).items():
            target = pointers[tag]
            found.append(
                Problem(
                    name,
                    "tags",
                    f"tag {tag}",
                    f"the rows of {', '.join(holders) or 'no version'} carry it, and it points "
                    f"at {target}; `caseshelf tag {name}@{target} {tag}` mends the rows",
                )
            )
    return found


def _verify_one(store: BlobStore, rec: VersionRecord, report: VerifyReport) -> None:
    who = f"{rec.name}@{rec.version}" + (f" ({rec.tenant})" if rec.tenant else "")
    report.versions.append(who)

    def problem(kind: str, key: str, detail: str) -> None:
        report.problems.append(Problem(who, kind, key, detail))

    try:
        data = store.get(rec.manifest_key)
    except NotFound:
        problem("missing", rec.manifest_key, "the manifest is missing")
        return
    report.objects_checked += 1
    try:
        stored = parse_root(data)
    except CaseshelfError as exc:
        problem("corrupt", rec.manifest_key, exc.detail)
        return
    if isinstance(stored, Manifest):
        manifest = stored
    else:
        chunks = _read_chunks(store, rec.tenant, stored, report, problem)
        if chunks is None:
            return
        try:
            manifest = join_chunks(stored, chunks)
        except CaseshelfError as exc:
            problem("corrupt", rec.manifest_key, exc.detail)
            return
        if stored.superseded_key:
            copies = _superseded_copies(store, rec.tenant, stored.superseded_key, report, problem)
            if copies is None:
                return
            manifest = manifest.with_superseded(list(copies.items()))
        _check_sample_columns(store, rec.tenant, stored, manifest, report, problem)
        if stored.delta_key:
            _check_delta(store, rec.tenant, stored, manifest, report, problem)
        named = set(stored.packs)
        unnamed = sorted({p for c in chunks for p in c.packs} - named)
        if unnamed:
            problem(
                "corrupt",
                rec.manifest_key,
                f"the root does not list {len(unnamed)} pack(s) its chunks name: "
                + ", ".join(unnamed[:5]),
            )
    recomputed = content_digest(
        description=manifest.description,
        tags=manifest.tags,
        shared_files=manifest.shared_files,
        case_digests=((cid, "sha256:" + d) for _, cid, d in manifest.iter_cases()),
    )
    if recomputed != manifest.content_digest or recomputed != rec.content_digest:
        problem(
            "corrupt",
            rec.manifest_key,
            f"the manifest's content hashes to {recomputed}; the version records "
            f"{rec.content_digest}",
        )
    try:
        cases = manifest.locations_by_digest()
        superseded = manifest.superseded_locations()
        blobs = manifest.blob_locations()
    except CaseshelfError as exc:
        problem("corrupt", rec.manifest_key, exc.detail)
        return
    packs: dict[str, list[tuple[str, Location, str]]] = defaultdict(list)
    names = dict(zip(manifest.digest_list(), manifest.ids, strict=True))
    for digest, loc in cases.items():
        packs[loc.container].append((digest, loc, f"case {names[digest]!r}"))
    for digest, loc in superseded.items():
        packs[loc.container].append((digest, loc, "a superseded copy"))
    containers: dict[str, list[tuple[str, Location, str]]] = defaultdict(list)
    for digest, loc in blobs.items():
        containers[loc.container].append((digest, loc, "a file body"))
    for key_of, groups in ((layout.pack_key, packs), (layout.blob_key, containers)):
        for container, items in sorted(groups.items()):
            key = key_of(rec.tenant, container)
            _check_container(store, key, items, report, problem)


def _addressed(
    store: BlobStore,
    key: str,
    hex_digest: str,
    what: str,
    report: VerifyReport,
    problem: Callable[[str, str, str], None],
) -> bytes | None:
    """The bytes of the manifest object at `key`, when it is there and hashes to its address
    `hex_digest`; None, with the problem named (`what`: "the delta", say), otherwise."""
    try:
        data = store.get(key)
    except NotFound:
        problem("missing", key, f"{what} is missing")
        return None
    report.objects_checked += 1
    report.bytes_hashed += len(data)
    if sha256_hex(data) != hex_digest:
        problem("corrupt", key, f"{what} does not hash to its key")
        return None
    return data


def _check_sample_columns(
    store: BlobStore,
    tenant: str,
    root: Root,
    manifest: Manifest,
    report: VerifyReport,
    problem: Callable[[str, str, str], None],
) -> None:
    """Every sample column a root names is there, hashes to its key, and is the column of the
    cases it covers (recomputed from the chunks, with their tags when the root's columns carry
    them: a selection is decided from nothing else)."""
    starts = root.sample_starts()
    for n, hex_digest in enumerate(root.sample_keys):
        key = layout.sample_key(tenant, hex_digest)
        data = _addressed(store, key, hex_digest, "the sample column", report, problem)
        if data is None:
            continue
        if sample_column_bytes(manifest, starts[n], starts[n + 1], tags=root.sample_tags) != data:
            what = "ids, digests and tags" if root.sample_tags else "ids and digests"
            problem("corrupt", key, f"the sample column is not the {what} of its cases")


def _check_delta(
    store: BlobStore,
    tenant: str,
    root: Root,
    manifest: Manifest,
    report: VerifyReport,
    problem: Callable[[str, str, str], None],
) -> None:
    """The change against its base a root names is there, hashes to its key, and names this
    version's cases as they are (ids, digests and locations at their positions)."""
    key = layout.delta_key(tenant, root.delta_key)
    data = _addressed(store, key, root.delta_key, "the delta", report, problem)
    if data is None:
        return
    try:
        part = delta_from_bytes(data).cand_part
        digests = manifest.digest_list()
        for n, i in enumerate(part.positions):
            if i >= len(manifest) or (part.ids[n], part.digest(n), part.location(n)) != (
                manifest.ids[i],
                digests[i],
                manifest.location(i),
            ):
                problem("corrupt", key, f"the delta's case at position {i} is not the version's")
                return
    except CaseshelfError as exc:
        problem("corrupt", key, exc.detail)


def _superseded_copies(
    store: BlobStore,
    tenant: str,
    hex_key: str,
    report: VerifyReport,
    problem: Callable[[str, str, str], None],
) -> dict[str, Location] | None:
    """Where the superseded copies a root names (`hex_key`) are, read and checked against
    their key; None (a problem reported) when they are missing or damaged."""
    skey = layout.superseded_key(tenant, hex_key)
    try:
        data = store.get(skey)
    except NotFound:
        problem("missing", skey, "the superseded copies are missing")
        return None
    report.objects_checked += 1
    report.bytes_hashed += len(data)
    try:
        if sha256_hex(data) != hex_key:
            raise Corrupt("the superseded copies do not hash to their key")
        return superseded_from_bytes(data)
    except CaseshelfError as exc:
        problem("corrupt", skey, exc.detail)
        return None


def _read_chunks(
    store: BlobStore,
    tenant: str,
    root: Root,
    report: VerifyReport,
    problem: Callable[[str, str, str], None],
) -> list[Manifest] | None:
    """Every chunk a root names, each hashed against its key; None (with a problem naming
    each broken key) when one is missing, damaged or unreadable."""
    chunks: list[Manifest] = []
    broken = False
    for hex_digest in root.chunk_keys:
        key = layout.chunk_key(tenant, hex_digest)
        data = _addressed(store, key, hex_digest, "the manifest chunk", report, problem)
        if data is None:
            broken = True
            continue
        try:
            chunks.append(chunk_from_bytes(data))
        except CaseshelfError as exc:
            problem("corrupt", key, exc.detail)
            broken = True
    return None if broken else chunks


def _check_container(
    store: BlobStore,
    key: str,
    items: list[tuple[str, Location, str]],
    report: VerifyReport,
    problem: Callable[[str, str, str], None],
) -> None:
    try:
        data = store.get(key)
    except NotFound:
        problem("missing", key, f"missing, and {len(items)} record(s) live in it")
        return
    report.objects_checked += 1
    report.bytes_hashed += len(data)
    bad = []
    for digest, loc, what in items:
        report.records_checked += 1
        record = data[loc.offset : loc.offset + loc.length]
        if len(record) != loc.length or sha256_hex(record) != digest:
            bad.append(f"{what} (sha256:{digest[:12]}…, bytes {loc.offset}+{loc.length})")
    if bad:
        shown = "; ".join(bad[:10]) + (f"; and {len(bad) - 10} more" if len(bad) > 10 else "")
        problem("corrupt", key, f"{len(bad)} record(s) do not match their digest: {shown}")
