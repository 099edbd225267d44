"""Wire shapes of responses (requests are the domain models in `caseshelf.domain.models`).

Every response body the API or the CLI's `--json` prints is one of these models, built from
service results by the `*_from` functions here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from caseshelf.domain.answers import ANSWER_BUDGET_BYTES, PAGE_FRAME_BYTES, escaped_size, fitting
from caseshelf.domain.diff import ABSENT, Change, to_pointer
from caseshelf.domain.diff_fields import FieldCounts
from caseshelf.domain.paging import encode_diff_position
from caseshelf.domain.subset import SubsetStamp
from caseshelf.domain.tags import TagMove
from caseshelf.domain.versions import VersionRecord

if TYPE_CHECKING:
    # Only the converters' signatures name service results: keep handler imports light.
    from caseshelf.services.diff import CaseBrief, DiffResult
    from caseshelf.services.exports import ExportResult
    from caseshelf.services.registry import DatasetSummary, RegisterResult, ValidateResult
    from caseshelf.services.selection import SubsetResult
    from caseshelf.services.tasks import TaskImportResult

T = TypeVar("T")

# What the server enforces on refs, cursors and job ids, stated in the OpenAPI document too
# (dataset ids and labels: `caseshelf.domain.models`).
REF_PATTERN = r"^(sha256:[0-9a-f]{64}|[A-Za-z0-9._-]{1,64})$"
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,512}$"
JOB_ID_PATTERN = r"^[0-9a-f]{32}$"


class Wire(BaseModel):
    # Built on first use (a command or a function uses a few of these models, not all of them).
    model_config = ConfigDict(extra="forbid", defer_build=True)


class PageOut(Wire, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        default=None,
        pattern=CURSOR_PATTERN,
        description="Pass as `cursor` for the next page; null on the last one.",
    )


class RegisterOut(Wire):
    id: str
    version: str
    content_digest: str
    case_count: int
    created: bool


class ValidateOut(Wire):
    valid: bool = True
    would_conflict: bool
    content_digest: str
    case_count: int
    version: str


class VersionOut(Wire):
    id: str
    version: str
    content_digest: str
    case_count: int
    bytes: int
    description: str
    tags: list[str]
    version_tags: list[str]
    created_at: str
    created_by: str
    deleted_at: str | None = None
    deleted_by: str | None = None
    produced_by: dict[str, Any] | None = None
    owner: str = Field(description="The tenant that owns it: the caller's, or _shared.")


class DatasetOut(Wire):
    id: str
    owner: str
    latest: str | None
    latest_digest: str | None
    version_count: int
    case_count: int | None
    description: str
    tags: list[str] = Field(default_factory=list, description="The latest version's tags.")
    created_at: str
    updated_at: str


class TagsIn(Wire):
    tags: list[str]


class TagsMoveIn(Wire):
    """Tags to point at `version`, each moved from wherever it pointed."""

    version: str
    tags: list[str]


class TagMoveOut(Wire):
    """One move of a tag: `from_version` null for a new tag, `to_version` null for a removal."""

    seq: int
    tag: str
    from_version: str | None
    to_version: str | None
    by: str
    at: str


class TagMovesOut(Wire):
    """The moves a tag request made (none when every tag already pointed there), and the
    version's metadata after it (null for a removal)."""

    id: str
    moves: list[TagMoveOut]
    version: VersionOut | None


class TagsOut(Wire):
    """Where each tag of a dataset points, and the moves that put it there, newest first
    (`dropped`: how many older moves are no longer kept)."""

    id: str
    tags: dict[str, str]
    history: list[TagMoveOut]
    dropped: int


def tag_move_out(m: TagMove) -> TagMoveOut:
    return TagMoveOut(
        seq=m.seq,
        tag=m.tag,
        from_version=m.from_version,
        to_version=m.to_version,
        by=m.by,
        at=m.at,
    )


class DownloadOut(Wire):
    url: str
    filename: str
    expires_in: int


class CaseLinkOut(Wire):
    """One case too large for an answer (`caseshelf.domain.answers`): a presigned GET of its
    canonical JSON alone."""

    id: str
    url: str
    bytes: int = Field(description="The case's size escaped inside an answer: over the budget.")
    expires_in: int


class Problem(Wire):
    """`application/problem+json` (RFC 9457) plus fields that help fix the input."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str


R = TypeVar("R", bound=RegisterOut)


def registered_as(model: type[R], r: VersionRecord, created: bool, **more: Any) -> R:
    """`model` (a `RegisterOut` or one that adds to it) for a registered version."""
    return model(
        id=r.name,
        version=r.version,
        content_digest=r.content_digest,
        case_count=r.case_count,
        created=created,
        **more,
    )


def register_out(res: RegisterResult) -> RegisterOut:
    return registered_as(RegisterOut, res.record, res.created)


class SkippedOut(Wire):
    task: str
    reason: str


class TaskImportOut(RegisterOut):
    """What a task import registered, and every task it left out (`skip_invalid`)."""

    skipped: list[SkippedOut]


def task_import_out(res: TaskImportResult) -> TaskImportOut:
    skipped = [SkippedOut(task=s.task, reason=s.reason) for s in res.skipped]
    return registered_as(TaskImportOut, res.record, res.created, skipped=skipped)


def validate_out(res: ValidateResult) -> ValidateOut:
    return ValidateOut(
        would_conflict=res.would_conflict,
        content_digest=res.content_digest,
        case_count=res.case_count,
        version=res.version,
    )


def version_out(r: VersionRecord) -> VersionOut:
    return VersionOut(
        id=r.name,
        version=r.version,
        content_digest=r.content_digest,
        case_count=r.case_count,
        bytes=r.bytes,
        description=r.description,
        tags=list(r.tags),
        version_tags=list(r.version_tags),
        created_at=r.created_at,
        created_by=r.created_by,
        deleted_at=r.deleted_at,
        deleted_by=r.deleted_by,
        produced_by=r.produced_by,
        owner=r.tenant,
    )


def dataset_out(s: DatasetSummary) -> DatasetOut:
    latest = s.latest
    return DatasetOut(
        id=s.id,
        owner=s.tenant,
        latest=latest.version if latest else None,
        latest_digest=latest.content_digest if latest else None,
        version_count=s.version_count,
        case_count=latest.case_count if latest else None,
        description=latest.description if latest else "",
        tags=list(latest.tags) if latest else [],
        created_at=s.created_at,
        updated_at=s.updated_at,
    )


# -- subset and diff ---------------------------------------------------------------------------


class SubsetOut(Wire):
    """`stamp` is null only when nothing narrowed the version (the whole version)."""

    stamp: SubsetStamp | None
    case_ids: list[str]
    cases: list[dict[str, Any]] | None = Field(
        default=None,
        description="The selected cases, when asked for with `cases=true`: one page of them, "
        "as many as fit one answer (5 MB escaped); a case too large on its own is a stub with "
        "`oversized` naming the route that serves it.",
    )
    cases_next_cursor: str | None = Field(
        default=None,
        pattern=CURSOR_PATTERN,
        description="With `cases=true`: pass as `cursor` (with the same body) for the next page "
        "of the cases; null on the last. It pins the version by content digest.",
    )
    registered: RegisterOut | None = Field(
        default=None, description="The derived version, when `register_as` was given."
    )


class VersionRefOut(Wire):
    id: str
    version: str
    content_digest: str


class SubsetRegisteredOut(Wire):
    """The result of a subset job (`register_as`): the version selected from, the selection's
    stamp and the derived version registered. The selected ids are the plain subset's answer
    (the same request without `register_as`, on `parent`)."""

    parent: VersionRefOut = Field(description="The version the selection was made from.")
    stamp: SubsetStamp | None = Field(
        description="As the subset's answer: null only when nothing narrowed the version."
    )
    registered: RegisterOut = Field(description="The derived version.")


class ChangeOut(Wire):
    """One change. `before` or `after` is left out where the key or element is absent on that
    side (a JSON null is a value and is written)."""

    path: str = Field(description="RFC 6901 JSON pointer into the case (or the version).")
    before: Any = Field(default=None, description="Absent when added.")
    after: Any = Field(default=None, description="Absent when removed.")

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # The serializer below only leaves keys out: document the fields, not its dict.
        plain = {k: v for k, v in core_schema.items() if k != "serialization"}
        return handler(cast(CoreSchema, plain))

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for side in ("before", "after"):
            if side not in self.model_fields_set:
                data.pop(side, None)
        return data


class CaseBriefOut(Wire):
    id: str
    user: str | None = Field(description="A short text of `inputs.user`.")


class OversizedChangeOut(Wire):
    """A changed case whose changes alone are over an answer's budget: the two forms of the
    case, each from its own route (`GET …/cases/<position>`)."""

    bytes: int = Field(description="The entry's size escaped inside an answer.")
    base: str = Field(description="The route of the case in the base version.")
    candidate: str = Field(description="The route of the case in the candidate version.")


class CaseChangesOut(Wire):
    id: str
    changes: list[ChangeOut]
    oversized: OversizedChangeOut | None = Field(
        default=None,
        description="Set (and `changes` empty) when the changes are too large for an answer; "
        "absent otherwise.",
    )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # The serializer below only leaves a key out: document the fields, not its dict.
        plain = {k: v for k, v in core_schema.items() if k != "serialization"}
        return handler(cast(CoreSchema, plain))

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.oversized is None:
            data.pop("oversized", None)
        return data


class DiffSummaryOut(Wire):
    added: int
    removed: int
    changed: int
    unchanged: int


class DiffMetaOut(Wire):
    changes: list[ChangeOut] = Field(
        description="Changes of description, tags and shared files (paths into the version)."
    )
    case_order_changed: bool = Field(
        description="The cases both versions hold come in another order."
    )


class FieldCountOut(Wire):
    path: str = Field(
        description="A field path: the JSON pointer of a change with every list position as `*`."
    )
    cases: int = Field(description="Changed cases with a change at this path.")


class DiffFieldsOut(Wire):
    """Which fields the diff's changed cases changed, over the whole diff (not one page)."""

    paths: list[FieldCountOut] = Field(description="Most cases first (then by path).")
    other_paths: int = Field(description="Field paths left out of `paths` (the least changed).")
    counted: int = Field(
        description="Changed cases counted so far: the diff's first `counted` (every one when "
        "`complete`)."
    )
    complete: bool = Field(
        description="Every changed case is counted. When false (a diff of more than 50,000 "
        "changed cases on AWS, which counts 50,000 more a request), each count is at least the "
        "number given: ask again to count on from where the counts stopped."
    )


class DiffOut(Wire):
    """`added`, `removed` and `changed` are null in summary mode. Otherwise they hold one page
    of the diff's entries (changed, then added, then removed); `summary` counts the whole
    diff on every page. With `path`, the entries are the changed cases with a change at that
    field path or under it, each with only those changes."""

    base: VersionRefOut
    candidate: VersionRefOut
    summary: DiffSummaryOut
    added: list[CaseBriefOut] | None
    removed: list[CaseBriefOut] | None
    changed: list[CaseChangesOut] | None
    meta: DiffMetaOut
    next_cursor: str | None = Field(
        default=None,
        pattern=CURSOR_PATTERN,
        description="Pass as `cursor` for the next page of entries; null on the last one. It "
        "pins both versions by content digest.",
    )
    fields: DiffFieldsOut | None = Field(
        default=None, description="With `fields=true` or `path`: the field paths changed."
    )
    path: str | None = Field(default=None, description="The field path filter, as asked.")
    path_matches: int | None = Field(
        default=None, description="With `path`: the changed cases with a change there."
    )


SHORT_TEXT = 120


def short_text(value: Any, width: int = SHORT_TEXT) -> str | None:
    """A one-line display string of `inputs.user` (a string, a list of turns, or `{ref}`)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, list):
        text = " | ".join(v if isinstance(v, str) else display_value(v) for v in value)
    elif isinstance(value, dict) and isinstance(value.get("ref"), str):
        text = f"(file {value['ref']})"
    else:
        text = display_value(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def display_value(value: Any) -> str:
    """A JSON value as a display string (compact JSON; `ABSENT` as an empty string)."""
    if value is ABSENT:
        return ""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def change_out(change: Change, prefix: str = "") -> ChangeOut:
    fields: dict[str, Any] = {"path": to_pointer(change.path, prefix)}
    if change.before is not ABSENT:
        fields["before"] = change.before
    if change.after is not ABSENT:
        fields["after"] = change.after
    return ChangeOut(**fields)


def version_ref_out(r: VersionRecord) -> VersionRefOut:
    return VersionRefOut(id=r.name, version=r.version, content_digest=r.content_digest)


def subset_out(res: SubsetResult) -> SubsetOut:
    return SubsetOut(
        stamp=res.subset.stamp,
        case_ids=res.case_ids,
        cases=res.cases,
        registered=register_out(res.registered) if res.registered else None,
        cases_next_cursor=res.cases_next_cursor,
    )


def diff_out(res: DiffResult) -> DiffOut:
    def briefs(items: list[CaseBrief] | None) -> list[CaseBriefOut] | None:
        if items is None:
            return None
        return [CaseBriefOut(id=b.id, user=short_text(b.user)) for b in items]

    changed = (
        None
        if res.changed is None
        else [
            CaseChangesOut(id=c.id, changes=[change_out(ch) for ch in c.changes])
            for c in res.changed
        ]
    )
    return DiffOut(
        base=version_ref_out(res.base),
        candidate=version_ref_out(res.candidate),
        summary=DiffSummaryOut(**res.summary),
        added=briefs(res.added),
        removed=briefs(res.removed),
        changed=changed,
        meta=DiffMetaOut(
            changes=[change_out(ch) for ch in res.plan.meta],
            case_order_changed=res.plan.order_changed,
        ),
        next_cursor=res.next_cursor,
        fields=fields_out(res.fields, len(res.plan.changed)),
        path=res.path,
        path_matches=res.path_matches,
    )


def fields_out(counts: FieldCounts | None, changed: int) -> DiffFieldsOut | None:
    if counts is None:
        return None
    shown, left = counts.top()
    return DiffFieldsOut(
        paths=[FieldCountOut(path=p, cases=n) for p, n in shown],
        other_paths=left,
        counted=counts.counted,
        complete=counts.counted >= changed,
    )


def wire_size(model: BaseModel) -> int:
    """A wire model's escaped size inside an answer (`caseshelf.domain.answers`)."""
    return escaped_size(orjson.dumps(model.model_dump(mode="json")))


def bounded_diff_out(res: DiffResult, budget: int = ANSWER_BUDGET_BYTES) -> DiffOut:
    """`diff_out(res)`, its entries cut to what fits an answer of `budget` escaped bytes (the
    cursor then points at the first entry left out). A changed case whose changes alone are
    over the budget is answered by the routes of its two forms instead (`oversized`)."""
    out = diff_out(res)
    if out.changed is None or out.added is None or out.removed is None:
        return out
    entries: list[BaseModel] = [*out.changed, *out.added, *out.removed]
    empty = out.model_copy(update={"changed": [], "added": [], "removed": []})
    room = budget - wire_size(empty) - PAGE_FRAME_BYTES
    kept = fitting(map(wire_size, entries), room)
    if kept == len(entries):
        return out
    changed, added, removed = out.changed, out.added, out.removed
    if kept == 0:  # the first entry is a changed case too large on its own (briefs are short)
        first = changed[0]
        i, j = res.changed_at[0]
        stub = OversizedChangeOut(
            bytes=wire_size(first),
            base=f"/datasets/{res.base.name}/versions/{res.base.content_digest}/cases/{i}",
            candidate=(
                f"/datasets/{res.candidate.name}/versions/{res.candidate.content_digest}/cases/{j}"
            ),
        )
        changed = [first.model_copy(update={"changes": [], "oversized": stub})]
        kept = 1
    c, a = len(changed), len(added)
    more = kept < len(entries) or res.next_cursor is not None
    nxt = encode_diff_position(
        res.base.content_digest, res.candidate.content_digest, res.start + kept
    )
    return out.model_copy(
        update={
            "changed": changed[:kept],
            "added": added[: max(kept - c, 0)],
            "removed": removed[: max(kept - c - a, 0)],
            "next_cursor": nxt if more else None,
        }
    )


class S3TestDataRefOut(Wire):
    """EvalHub's `S3TestDataRef` (`pkg/api/evaluations.go`): all three fields are required."""

    bucket: str
    key: str = Field(description="The export's prefix, ending in `/`.")
    secret_ref: str = Field(description="The Kubernetes Secret with the S3 credentials.")


class TestDataRefOut(Wire):
    """The `test_data_ref` snippet an EvalHub benchmark takes as it is."""

    s3: S3TestDataRefOut


class ExportOut(Wire):
    export_id: str = Field(description="Content address: (content digest, subset, shared files).")
    prefix: str = Field(description="Where the case directories are (`s3://bucket/key/`).")
    case_count: int
    file_count: int
    manifest_key: str = Field(description="Written last: present only on a complete export.")
    bundle_url: str | None = Field(
        default=None, description="A presigned GET of `bundle.tar.gz` (every file in one object)."
    )
    file_url: str | None = Field(
        default=None,
        description="A presigned GET of the export's one file: a `jsonl` or `parquet` export "
        "of cases without companion or shared files (`cases.jsonl`, `cases.parquet`).",
    )
    test_data_ref: TestDataRefOut | None = Field(
        default=None,
        description="Ready for an EvalHub benchmark; null when the export is not in a bucket or "
        "no secret_ref is known (`test_data_ref_problem` says which).",
    )
    test_data_ref_problem: str | None = Field(
        default=None, description="Why there is no `test_data_ref`."
    )
    format: str = Field(default="case-dirs", description="The export's layout.")
    bytes: int = Field(default=0, description="Total size of the exported files.")
    bundle_key: str | None = Field(
        default=None, description="The bundle's key: a sibling of the prefix, outside it."
    )
    reused: bool = Field(description="The same export existed already; nothing was written.")
    warnings: list[str] = Field(default_factory=list, description="What was left out, and why.")
    warning_count: int = 0


def export_out(res: ExportResult) -> ExportOut:
    ref = res.test_data_ref
    return ExportOut(
        export_id=res.export_id,
        prefix=res.prefix,
        case_count=res.case_count,
        file_count=res.file_count,
        manifest_key=res.manifest_key,
        bundle_url=res.bundle_url,
        file_url=res.file_url,
        test_data_ref=TestDataRefOut(s3=S3TestDataRefOut(**ref["s3"])) if ref else None,
        test_data_ref_problem=res.test_data_ref_problem,
        format=res.format,
        bytes=res.bytes,
        bundle_key=res.bundle_key,
        reused=res.reused,
        warnings=res.warnings,
        warning_count=res.warning_count,
    )
