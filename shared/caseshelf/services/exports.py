"""Export a version (or an on-disk case tree) as per-case directories for evaluation pods.

The layout is decided by the pure `caseshelf.domain.export`; this module gathers its inputs (the
selected cases, the file bodies) and applies it to a target:

- a local directory, written into a hidden directory inside it and moved into place,
  `manifest.json` last (`caseshelf.services.staging`), so a directory that looks complete (has
  `manifest.json`) is complete, and a mount point is a destination like any other; a killed or
  failed export's hidden directory is resumed by the next export of the same id;
- an object store prefix (the registry bucket under `t/<tenant>/exports/<export id>/`, or any
  `s3://bucket/prefix/`), uploaded concurrently, then (when asked) the bundle at the sibling key
  `<prefix without its slash>.bundle.tar.gz`, outside the listed prefix, then `manifest.json`
  LAST: a failed export leaves no manifest, so it is never mistaken for a complete one.

Every store prefix ends in `/` and no export's prefix is a prefix of another's: a prefix inside
another export, or one holding objects that are not part of this export, is refused (409), since
EvalHub's init container downloads every object under the prefix.

An export is content-addressed: when the target already holds a manifest with the same export id,
nothing is written and the existing export is returned.

The answer's `test_data_ref` is what EvalHub's API validates (`S3TestDataRef{bucket, key,
secret_ref}`, all three required): it is given only when the export is in a bucket and a
`secret_ref` is known (the request's, else the deployment's `CASESHELF_EVALHUB_SECRET_REF`);
otherwise `test_data_ref_problem` says why there is none.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from caseshelf.domain import layout
from caseshelf.domain.canonical import canonical_json, content_digest, digest_of, hex_of
from caseshelf.domain.downloads import download_name
from caseshelf.domain.errors import BadRequest, Conflict, NotFound
from caseshelf.domain.export import (
    BUNDLE_SUFFIX,
    FORMAT,
    MANIFEST_NAME,
    ExportPlan,
    SharedEntry,
    check_format,
    export_id,
    merge_shared,
    parse_manifest,
)
from caseshelf.domain.export_formats import ROW_FILES, CaseWindow
from caseshelf.domain.identity import Identity
from caseshelf.domain.models import SharedFileInput, Strict
from caseshelf.domain.paths import relative_path_problem
from caseshelf.domain.subset import SubsetRequest
from caseshelf.ports import BlobStore
from caseshelf.services.export_stream import (
    REFUSING_FORMATS,
    BodyReader,
    DirectorySink,
    StoreSink,
    StreamSpec,
    Windows,
    check_cases,
    window_size,
    write_stream,
)
from caseshelf.services.pull import Progress, current_progress
from caseshelf.services.registry import RegistryService
from caseshelf.services.selection import SelectionService
from caseshelf.services.staging import Staging, destination_full
from caseshelf.services.storage import read_blobs
from caseshelf.services.windowread import WholePacks, read_ahead, window_cases
from caseshelf.services.workspace import EvalConfig, Roots, collect_case_tree, resolve_shared

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 16
MAX_REPORTED_WARNINGS = 100
ExportFormat = Literal["case-dirs", "harbor", "inspect", "jsonl", "parquet"]
# A Kubernetes object name of the DNS label kind (RFC 1123): what EvalHub's `secret_ref` names.
SECRET_REF_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # noqa: S105 - a name pattern
_SECRET_REF = re.compile(SECRET_REF_PATTERN)
EVALHUB_SECRET_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "AWS_S3_ENDPOINT",
)


def check_secret_ref(value: str, *, field: str = "secret_ref") -> str:
    """A `secret_ref` EvalHub accepts: the name of a Kubernetes Secret (an RFC 1123 label)."""
    if not _SECRET_REF.fullmatch(value):
        raise BadRequest(
            f"{field} {value!r} is not a Kubernetes Secret name (RFC 1123 label: at most 63 "
            "lower-case letters, digits and '-', starting and ending with a letter or digit)",
            field=field,
        )
    return value


class ExportRequest(Strict):
    """The body of `POST /datasets/{id}/versions/{ref}/exports`."""

    subset: SubsetRequest | None = Field(
        default=None, description="Export only these cases (ids -> tags -> limit -> sample)."
    )
    shared_files: list[SharedFileInput] = Field(
        default_factory=list,
        description="Files added to every case at `dest` (a version's shared file at the same "
        "dest is replaced).",
    )
    format: ExportFormat = Field(
        default="case-dirs",
        description="The layout: per-case directories, Harbor task packages, inspect_ai "
        "samples, or one row per case in jsonl / parquet.",
    )
    secret_ref: str | None = Field(
        default=None,
        pattern=SECRET_REF_PATTERN,
        description="The Kubernetes Secret EvalHub mounts into its init container (AWS_ACCESS_KEY_"
        "ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_S3_ENDPOINT); default: the "
        "deployment's CASESHELF_EVALHUB_SECRET_REF.",
    )
    bundle: bool = Field(
        default=False,
        description="Also write every file in one `.bundle.tar.gz` object, at the sibling key "
        "outside the prefix (`<prefix>.bundle.tar.gz`).",
    )


# The formats whose export of cases without files is a single file (its name).
SINGLE_FILE_FORMATS = {f: ROW_FILES[f] for f in ("jsonl", "parquet")}


@dataclass(frozen=True)
class ExportResult:
    export_id: str
    prefix: str  # "s3://bucket/key/", a store key prefix, or a local directory
    case_count: int
    file_count: int
    manifest_key: str
    reused: bool
    bucket: str | None = None
    key_prefix: str | None = None
    bundle_key: str | None = None
    bundle_url: str | None = None
    file_url: str | None = None
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0
    format: str = FORMAT
    secret_ref: str | None = None
    bytes: int = 0

    @property
    def test_data_ref(self) -> dict[str, Any] | None:
        """The `test_data_ref` of an EvalHub benchmark, exactly as EvalHub validates it
        (`pkg/api/evaluations.go`: `S3TestDataRef{bucket, key, secret_ref}`, all required); None
        when one of the three is not known (`test_data_ref_problem` says which)."""
        if self.bucket is None or self.key_prefix is None or self.secret_ref is None:
            return None
        return {
            "s3": {"bucket": self.bucket, "key": self.key_prefix, "secret_ref": self.secret_ref}
        }

    @property
    def test_data_ref_problem(self) -> str | None:
        if self.bucket is None or self.key_prefix is None:
            return (
                "no test_data_ref: the export is not in an S3 bucket (EvalHub's init container "
                "reads test data from S3); export with --to s3://BUCKET/PREFIX"
            )
        if self.secret_ref is None:
            return (
                "no test_data_ref: EvalHub rejects an s3 test_data_ref without secret_ref; give "
                "secret_ref (--secret-ref NAME: the Kubernetes Secret holding "
                + ", ".join(EVALHUB_SECRET_KEYS)
                + ") or set CASESHELF_EVALHUB_SECRET_REF for the deployment"
            )
        return None


@dataclass(frozen=True)
class Target:
    """Where an export goes: a local directory, or a key prefix in a store (with its bucket
    name when it has one)."""

    directory: Path | None = None
    store: BlobStore | None = None
    prefix: str = ""
    bucket: str | None = None


def export_prefix(tenant: str, eid: str) -> str:
    """Where the registry keeps an export in its own bucket."""
    return f"{layout.root(tenant)}exports/{eid}/"


def download_names(dataset: Mapping[str, Any] | None, fmt: str) -> tuple[str | None, str | None]:
    """What an export's downloads are saved as: its bundle `<dataset>-<version>.<format>.tar.gz`
    and its one file (jsonl, parquet) `<dataset>-<version>.<format>`; (None, None) when the
    version is not known (the store's key names it then)."""
    if not dataset or not dataset.get("id") or not dataset.get("version"):
        return None, None
    name, version = str(dataset["id"]), str(dataset["version"])
    return download_name(name, version, f"{fmt}.tar.gz"), download_name(name, version, fmt)


def bundle_key(prefix: str) -> str:
    """The bundle's key: a sibling of the prefix, outside it (`evals/gsm8k/` ->
    `evals/gsm8k.bundle.tar.gz`), so a pod listing the prefix never downloads it."""
    if not prefix.endswith("/") or prefix == "/":
        raise BadRequest(f"an export prefix ends in '/' and is not the root: {prefix!r}")
    return prefix[:-1] + BUNDLE_SUFFIX


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (bucket, "prefix/"); the prefix obeys the path rules."""
    if not url.startswith("s3://"):
        raise BadRequest(f"not an s3:// URL: {url!r}", field="to")
    bucket, _, key = url[5:].partition("/")
    if not bucket:
        raise BadRequest(f"{url!r} names no bucket", field="to")
    key = key.strip("/")
    if key:
        problem = relative_path_problem(key)
        if problem:
            raise BadRequest(f"prefix {key!r} {problem}", field="to", path=key)
        key += "/"
    return bucket, key


# --- reading a case tree from disk ------------------------------------------------------------


@dataclass
class TreeSource:
    """An on-disk case tree read for export: plain cases, shared entries and every body."""

    cases: list[dict[str, Any]]
    shared: list[SharedEntry]
    bodies: dict[str, bytes]
    content_digest: str
    name: str


def read_case_tree(config: EvalConfig, *, warn: Callable[[str], None]) -> TreeSource:
    """Each sub-directory of the dataset directory is a case (its name is the case id, so a
    safe name keeps its directory); every file of it is kept as a case file, so its bytes come
    back unchanged. Hidden and symlinked case directories are left out."""
    if not config.dataset_dir.is_dir():
        raise BadRequest(f"dataset directory {config.dataset_dir} does not exist")
    bodies: dict[str, bytes] = {}
    cases: list[dict[str, Any]] = []
    digests: list[tuple[str, str]] = []
    for entry in sorted(config.dataset_dir.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        files: dict[str, dict[str, Any]] = {}
        for rel, path in collect_case_tree(entry, config, warn=warn).items():
            data = path.read_bytes()
            d = digest_of(data)
            bodies[d[7:]] = data
            files[rel] = {"digest": d, "size": len(data)}
        case_id = entry.name
        case = {"id": case_id, "files": files}
        cases.append(case)
        digests.append((case_id, digest_of(canonical_json(case))))
    shared: list[SharedEntry] = []
    for spec in config.files:
        if isinstance(spec, str):
            continue
        for dest, path in resolve_shared(spec, Roots.of(config), warn):
            data = path.read_bytes()
            d = digest_of(data)
            bodies[d[7:]] = data
            shared.append(SharedEntry(dest, d, len(data)))
    shared = merge_shared(shared, ())
    cdigest = content_digest(
        description="",
        tags=[],
        shared_files=[{"dest": s.dest, "digest": s.digest} for s in shared],
        case_digests=digests,
    )
    return TreeSource(cases, shared, bodies, cdigest, config.name)


@dataclass
class Prepared:
    """A registered version's export, resolved (`ExportService.prepare`): its stream spec, its
    target, and readers of its cases (by position range) and file bodies."""

    service: ExportService
    record: Any
    root: Any
    indices: Sequence[int]
    locations: Mapping[str, Any]
    stamp: dict[str, Any] | None
    shared: list[SharedEntry]
    extra_bodies: dict[str, bytes]
    fmt: str
    secret_ref: str | None
    to: str | None = None
    spec: StreamSpec = field(init=False)
    target: Target = field(init=False)

    def __post_init__(self) -> None:
        rec = self.record
        eid = export_id(rec.content_digest, self.stamp, self.shared, self.fmt)
        self.target = self.service.target(self.to, rec.tenant, eid)
        self.spec = StreamSpec(
            export_id=eid,
            fmt=self.fmt,
            dataset={
                "id": rec.name,
                "version": rec.version,
                "tenant": rec.tenant,
                "description": rec.description,
                "tags": list(rec.tags),
            },
            content_digest=rec.content_digest,
            subset=self.stamp,
            shared=self.shared,
            case_count=len(self.indices),
        )

    def windows(self, start: int, stop: int) -> Iterator[CaseWindow]:
        """The cases at positions [start, stop) of the selection, a window at a time, read in
        bulk from the chunks of the manifest that cover it (`services.windowread`), the next
        one while this one is written: only those two are held, and the packs read whole, for
        the windows after them."""
        size = window_size(self.fmt)
        packs = WholePacks(self.service.store)
        starts = self.root.chunk_starts()
        registry = self.service.registry

        def read(number: int) -> CaseWindow:
            lo = start + number * size
            window = self.indices[lo : min(stop, lo + size)]
            cases = window_cases(registry, self.record, starts, window, packs)
            cases.without_files = not self.locations  # the version holds no file body
            return cases

        return read_ahead(read, -(-(stop - start) // size))

    def read_bodies(self, wanted: set[str]) -> Mapping[str, bytes]:
        tenant = self.record.tenant
        return read_blobs(self.service.store, tenant, {h: self.locations[h] for h in wanted})


class ExportService:
    def __init__(
        self,
        registry: RegistryService,
        *,
        selection: SelectionService | None = None,
        bucket: str | None = None,
        store_for_bucket: Callable[[str], BlobStore] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        presign_expiry: int = 900,
        warn: Callable[[str], None] | None = None,
        secret_ref: str | None = None,
    ) -> None:
        """`bucket` names the registry's own bucket (None for the embedded store);
        `store_for_bucket` opens any other bucket for `s3://` targets; `secret_ref` is the
        deployment's default EvalHub Secret name."""
        self.registry = registry
        self.store = registry.store
        self.selection = selection or SelectionService(registry)
        self.bucket = bucket
        self.store_for_bucket = store_for_bucket
        self.concurrency = concurrency
        self.presign_expiry = presign_expiry
        self.warn = warn or (lambda msg: log.warning("export: %s", msg))
        self.secret_ref = None
        if secret_ref:
            self.secret_ref = check_secret_ref(secret_ref, field="CASESHELF_EVALHUB_SECRET_REF")

    # -- targets ---------------------------------------------------------------------------

    def target(self, to: str | None, tenant: str, eid: str) -> Target:
        if to is None:
            return Target(store=self.store, prefix=export_prefix(tenant, eid), bucket=self.bucket)
        if to.startswith("s3://"):
            bucket, prefix = parse_s3_url(to)
            if not prefix:
                raise BadRequest(
                    f"{to}: an export needs a prefix of its own, not the bucket's root (every "
                    "object under it would be part of the export)",
                    field="to",
                )
            if bucket == self.bucket:
                return Target(store=self.store, prefix=prefix, bucket=bucket)
            if self.store_for_bucket is None:
                raise BadRequest(f"cannot write to {to}: no S3 access is configured", field="to")
            return Target(store=self.store_for_bucket(bucket), prefix=prefix, bucket=bucket)
        return Target(directory=Path(to))

    # -- registered versions ---------------------------------------------------------------

    def export_version(
        self,
        identity: Identity,
        name: str,
        ref: str,
        request: ExportRequest | None = None,
        *,
        to: str | None = None,
        progress: Progress | None = None,
    ) -> ExportResult:
        """Write the export in this process, a window of cases at a time (what the embedded
        client does for a destination of its own; the API runs it as a job of parts,
        `caseshelf.services.export_jobs`)."""
        request = request or ExportRequest()
        prepared = self.prepare(identity, name, ref, request, to=to)
        found = self.existing(
            prepared.target, prepared.spec.export_id, prepared.secret_ref, request.bundle
        )
        if found is not None:
            return found
        return self._stream(
            prepared.spec,
            lambda: prepared.windows(0, len(prepared.indices)),
            prepared.read_bodies,
            prepared.extra_bodies,
            prepared.target,
            secret_ref=prepared.secret_ref,
            bundle=request.bundle,
            progress=progress,
        )

    def prepare(
        self,
        identity: Identity,
        name: str,
        ref: str,
        request: ExportRequest,
        *,
        to: str | None = None,
        chosen: tuple[Sequence[int], dict[str, Any] | None] | None = None,
    ) -> Prepared:
        """Everything an export of (name, ref, request) needs before its first case is read:
        the version, the selection (`chosen`, its positions and stamp, when already known: a
        job's parts read them from the job), the shared
        files, the export id and its target. Nothing is written."""
        check_format(request.format)
        secret_ref = self._secret_ref(request)
        chosen_indices, stamp = chosen if chosen is not None else (None, None)
        if request.subset is not None and request.subset.register_as is not None:
            raise BadRequest("register_as is not an export option", field="subset")
        if request.subset is not None and chosen is None:
            selected = self.selection.select_subset(identity, name, ref, request.subset)
            rec = selected.record
            chosen_indices = selected.subset.indices
            if selected.subset.stamp is not None:
                stamp = selected.subset.stamp.model_dump(exclude_none=True)
        else:
            rec = self.registry.get_version(identity, name, ref)
        # The root alone (count, shared files, where file bodies are): the cases are read a
        # window at a time, each window from the chunks that cover it.
        root = self.registry.root(rec)
        positions = chosen_indices if chosen_indices is not None else range(len(root))
        locations = root.blob_locations()
        base = [
            SharedEntry(s["dest"], s["digest"], locations[hex_of(s["digest"])].length)
            for s in root.shared_files
        ]
        extra, extra_bodies = _request_shared(request.shared_files, locations)
        shared = merge_shared(base, extra)
        return Prepared(
            service=self,
            record=rec,
            root=root,
            indices=positions,
            locations=locations,
            stamp=stamp,
            shared=shared,
            extra_bodies=extra_bodies,
            fmt=request.format,
            secret_ref=secret_ref,
            to=to,
        )

    def _secret_ref(self, request: ExportRequest) -> str | None:
        if request.secret_ref is not None:
            return check_secret_ref(request.secret_ref)
        return self.secret_ref

    # -- on-disk trees ---------------------------------------------------------------------

    def export_tree(
        self,
        config: EvalConfig,
        *,
        to: str,
        tenant: str = "local",
        fmt: str = FORMAT,
        secret_ref: str | None = None,
        bundle: bool = False,
        progress: Progress | None = None,
    ) -> ExportResult:
        """Export an `eval.yaml` case tree as it is on disk (no registration)."""
        check_format(fmt)
        secret_ref = check_secret_ref(secret_ref) if secret_ref is not None else self.secret_ref
        source = read_case_tree(config, warn=self.warn)
        eid = export_id(source.content_digest, None, source.shared, fmt)
        target = self.target(to, tenant, eid)
        found = self.existing(target, eid, secret_ref, bundle)
        if found is not None:
            return found
        spec = StreamSpec(
            export_id=eid,
            fmt=fmt,
            dataset={
                "id": source.name,
                "version": None,
                "source": str(config.dataset_dir),
                "description": "",
                "tags": [],
            },
            content_digest=source.content_digest,
            subset=None,
            shared=source.shared,
            case_count=len(source.cases),
        )
        size = window_size(fmt)

        def windows() -> Iterator[list[dict[str, Any]]]:
            for start in range(0, len(source.cases), size):
                yield source.cases[start : start + size]

        def read_bodies(wanted: set[str]) -> Mapping[str, bytes]:
            return {h: source.bodies[h] for h in wanted}

        return self._stream(
            spec,
            windows,
            read_bodies,
            {},
            target,
            secret_ref=secret_ref,
            bundle=bundle,
            progress=progress,
        )

    # -- writing -------------------------------------------------------------------------

    def _stream(
        self,
        spec: StreamSpec,
        windows: Windows,
        read_bodies: BodyReader,
        shared_bodies: Mapping[str, bytes],
        target: Target,
        *,
        secret_ref: str | None,
        bundle: bool,
        progress: Progress | None,
    ) -> ExportResult:
        """Write the export a window of cases at a time (`caseshelf.services.export_stream`).
        A format that can refuse a case, or a prefix that already holds objects, gets a first
        pass over the cases, so that the refusal comes before anything is written."""
        progress = progress or current_progress()
        sink: DirectorySink | StoreSink
        reused = False
        if target.directory is not None:
            if spec.fmt in REFUSING_FORMATS:
                check_cases(spec, windows, None)
            sink = DirectorySink(self._directory_staging(target.directory, spec.export_id))
        else:
            store, prefix = target.store, target.prefix
            assert store is not None
            if store.exists(prefix + MANIFEST_NAME):
                # this same export (checked by `_existing`), asked for the bundle it lacks
                reused = True
                sink = StoreSink(
                    store,
                    prefix,
                    concurrency=self.concurrency,
                    bundle_key=bundle_key(prefix),
                    bundle_only=True,
                )
            else:
                existing = {info.key[len(prefix) :] for info in store.list(prefix)}
                if existing or spec.fmt in REFUSING_FORMATS:
                    check_cases(spec, windows, existing)
                sink = StoreSink(
                    store,
                    prefix,
                    concurrency=self.concurrency,
                    bundle_key=bundle_key(prefix) if bundle else None,
                )
        try:
            done = write_stream(
                spec, windows, read_bodies, shared_bodies, sink, progress, self.warn
            )
        except OSError as exc:
            if target.directory is None:
                raise
            full = destination_full(target.directory, "export destination", exc)
            if full is None:
                raise
            raise full from None
        result = self._result(
            None,
            target,
            reused=reused,
            eid=spec.export_id,
            counts=(spec.case_count, done.file_count),
            fmt=spec.fmt,
            secret_ref=secret_ref,
            bundled=bundle or None,
            nbytes=done.nbytes,
            dataset=spec.dataset,
        )
        return replace(result, warnings=done.warnings or [], warning_count=done.warning_count)

    def existing(
        self, target: Target, eid: str, secret_ref: str | None, bundle: bool
    ) -> ExportResult | None:
        if target.directory is not None:
            path = target.directory / MANIFEST_NAME
            if not path.is_file():
                return None
            data = path.read_bytes()
        else:
            assert target.store is not None
            self._check_not_nested(target)
            try:
                data = target.store.get(target.prefix + MANIFEST_NAME)
            except NotFound:
                return None
        found = parse_manifest(data)
        if found.export_id != eid:
            where = target.directory or f"{target.bucket or ''}/{target.prefix}"
            raise Conflict(
                f"{where} already holds another export ({found.export_id}); "
                "choose an empty destination",
                export_id=found.export_id,
            )
        if bundle and target.store is not None:
            key = bundle_key(target.prefix)
            if not target.store.exists(key):
                return None  # asked for the bundle it lacks: planned again, bundle written
        return self._result(
            None,
            target,
            reused=True,
            eid=eid,
            counts=(found.case_count, len(found.files)),
            fmt=str(found.doc.get("export_format") or FORMAT),
            secret_ref=secret_ref,
            nbytes=sum(size for _, size in found.files.values()),
            dataset=found.doc.get("dataset"),
        )

    def result_of(self, prepared: Prepared, done: Any, *, bundle: bool) -> ExportResult:
        """The answer for an export its job has just finished (`export_fanout.Finished`)."""
        result = self._result(
            None,
            prepared.target,
            reused=False,
            eid=prepared.spec.export_id,
            counts=(prepared.spec.case_count, done.file_count),
            fmt=prepared.spec.fmt,
            secret_ref=prepared.secret_ref,
            bundled=bundle,
            nbytes=done.nbytes,
            dataset=prepared.spec.dataset,
        )
        return replace(result, warnings=done.warnings, warning_count=done.warning_count)

    def _check_not_nested(self, target: Target) -> None:
        """No export inside another: a prefix whose parent prefixes hold a manifest is
        refused, since a pod listing that export would download this one too."""
        assert target.store is not None
        parts = target.prefix.rstrip("/").split("/")
        for i in range(1, len(parts)):
            outer = "/".join(parts[:i]) + "/"
            if target.store.exists(outer + MANIFEST_NAME):
                raise Conflict(
                    f"{target.prefix!r} is inside the export at {outer!r}: a pod listing that "
                    "export would download this one too; choose a prefix outside it",
                    prefix=outer,
                )

    def _result(
        self,
        plan: ExportPlan | None,
        target: Target,
        *,
        reused: bool,
        eid: str | None = None,
        counts: tuple[int, int] | None = None,
        fmt: str = FORMAT,
        secret_ref: str | None = None,
        bundled: bool | None = None,
        nbytes: int = 0,
        dataset: Mapping[str, Any] | None = None,
    ) -> ExportResult:
        """`dataset`: the exported version's `id` and `version` (the export manifest's
        `dataset`), which name its downloads (`download_names`)."""
        if plan is not None:
            eid, counts, fmt = plan.export_id, (plan.case_count, plan.file_count()), plan.format
            nbytes = plan.total_bytes()
            dataset = plan.dataset
        assert eid is not None and counts is not None
        warnings = [str(w) for w in plan.warnings] if plan is not None else []
        if target.directory is not None:
            return ExportResult(
                export_id=eid,
                prefix=str(target.directory),
                case_count=counts[0],
                file_count=counts[1],
                manifest_key=str(target.directory / MANIFEST_NAME),
                reused=reused,
                warnings=warnings[:MAX_REPORTED_WARNINGS],
                warning_count=len(warnings),
                format=fmt,
                secret_ref=secret_ref,
                bytes=nbytes,
            )
        assert target.store is not None
        key = bundle_key(target.prefix)
        if bundled is None:
            bundled = target.store.exists(key)
        bundle_name, file_name = download_names(dataset, fmt)
        url = (
            target.store.presign_get(key, expires=self.presign_expiry, filename=bundle_name)
            if bundled
            else None
        )
        # A jsonl or parquet export of cases without files is one file: a link to it alone.
        single = SINGLE_FILE_FORMATS.get(fmt) if counts[1] == 1 else None
        file_url = (
            target.store.presign_get(
                target.prefix + single, expires=self.presign_expiry, filename=file_name
            )
            if single
            else None
        )
        shown = f"s3://{target.bucket}/{target.prefix}" if target.bucket else target.prefix
        return ExportResult(
            export_id=eid,
            prefix=shown,
            case_count=counts[0],
            file_count=counts[1],
            manifest_key=target.prefix + MANIFEST_NAME,
            reused=reused,
            bucket=target.bucket,
            key_prefix=target.prefix,
            bundle_key=key if bundled else None,
            bundle_url=url,
            file_url=file_url,
            warnings=warnings[:MAX_REPORTED_WARNINGS],
            warning_count=len(warnings),
            format=fmt,
            secret_ref=secret_ref,
            bytes=nbytes,
        )

    def _directory_staging(self, dest: Path, eid: str) -> Staging:
        """The locked destination an export to `dest` is staged inside; it must hold nothing
        else. What a killed or failed run of this same export left there is resumed (its files
        are verified as the cases are planned); anything else a killed run left is removed."""
        staging = Staging(dest, what="export destination", source=f"export {eid}\n", expected=None)
        if any(p != staging.resumed for p in dest.iterdir()):
            staging.abort()
            raise Conflict(f"export destination {dest} exists and is not empty", path=str(dest))
        return staging


def _request_shared(
    entries: Sequence[SharedFileInput], locations: Mapping[str, Any]
) -> tuple[list[SharedEntry], dict[str, bytes]]:
    """Shared files given with the export request: inline bodies, or digests of bodies stored
    with the version."""
    out: list[SharedEntry] = []
    bodies: dict[str, bytes] = {}
    for sf in entries:
        where = f"shared_files.{sf.dest}"
        if sf.digest is not None:
            loc = locations.get(hex_of(sf.digest))
            if loc is None:
                raise BadRequest(
                    f"{where}: {sf.digest} is not a file of this version; send it inline",
                    field=where,
                    digests=[sf.digest],
                )
            out.append(SharedEntry(sf.dest, sf.digest, loc.length))
            continue
        if sf.text is not None:
            data = sf.text.encode("utf-8")
        else:
            try:
                data = base64.b64decode(sf.base64 or "", validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest(f"{where}: base64 body is not valid base64", field=where) from None
        d = digest_of(data)
        bodies[d[7:]] = data
        out.append(SharedEntry(sf.dest, d, len(data)))
    return out, bodies
