"""inspect_ai datasets that carry the registry's content digest into every eval log.

    import caseshelf.inspect
    ds = caseshelf.inspect.dataset("gsm8k@stable")   # an inspect_ai MemoryDataset

The dataset's `name` is `ID@VERSION` (the label the ref resolved to) and its `location` the
version pinned by its content digest (`Client.version_location`):
`<API URL>/datasets/ID/versions/sha256:<hex>` over HTTP, `caseshelf:ID@sha256:<hex>` on the
embedded store. inspect_ai writes both into the log's
`eval.dataset` (`EvalDataset`: name, location, samples, sample_ids), so a log says exactly which
content it ran on; `logged_version(log)` reads them back. Each sample's `id` is its case id and
its `metadata` holds `case_id` and `case_digest` (the sha256 of the case's canonical JSON, as
the registry computes it) next to whatever the mapping put there.

`sample_fields` is inspect_ai's own: a `FieldSpec` (its field names are looked up in the
case's record, below) or a function from a record to one or more samples, exactly as
`inspect_ai.dataset.json_dataset` takes them (the mapping is inspect_ai's own
`record_to_sample_fn`). A case's record is the case as it is (`id`, `inputs`, `expectations`,
`metadata`, `tags`, ...) plus every nested field under its dotted path (`inputs.user`,
`expectations.ground_truth`, `expectations.details.choices`, `metadata.source`); the default
`FieldSpec` reads the input from `inputs.user`, the target from `expectations.ground_truth` and
the choices from `expectations.details.choices`.

Needs `pip install 'caseshelf[inspect]'`: importing this module without inspect_ai is a
`MissingExtra` naming that line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from caseshelf.client import Client, connect
from caseshelf.client.refs import DIGEST_PATTERN, parse_ref
from caseshelf.domain.canonical import canonical_json, digest_of
from caseshelf.domain.errors import BadRequest
from caseshelf.extras import require

_dataset = require("inspect_ai.dataset", "caseshelf.inspect")
# inspect_ai's own FieldSpec mapping, the one json_dataset and csv_dataset use
_mapping = require("inspect_ai.dataset._util", "caseshelf.inspect")

if TYPE_CHECKING:
    from inspect_ai.dataset import FieldSpec, MemoryDataset, RecordToSample, Sample

DEFAULT_FIELDS: FieldSpec = _dataset.FieldSpec(
    input="inputs.user",
    target="expectations.ground_truth",
    choices="expectations.details.choices",
)
_DIGEST = re.compile(DIGEST_PATTERN.strip("^$"))


@dataclass(frozen=True)
class LoggedVersion:
    """The version an eval log's dataset names (`logged_version`)."""

    name: str
    version: str
    content_digest: str


def dataset(
    ref: str,
    sample_fields: FieldSpec | RecordToSample | None = None,
    *,
    client: Client | None = None,
    include_deleted: bool = False,
) -> MemoryDataset:
    """The version `ref` names (`ID`, `ID@LABEL`, `ID@TAG`, `ID@sha256:<hex>`) as an
    inspect_ai dataset whose name and location carry `ID@VERSION` and the content digest.

    `client` defaults to `caseshelf.connect()` (the environment's registry). The ref is resolved
    once; every case is then read from the content digest it resolved to."""
    cs = client if client is not None else connect()
    name, _ = parse_ref(ref)
    version = cs.get(ref, include_deleted=include_deleted)
    return pinned_dataset(
        cs,
        name,
        version.version,
        version.content_digest,
        sample_fields,
        include_deleted=include_deleted,
    )


def pinned_dataset(
    client: Client,
    name: str,
    version: str,
    content_digest: str,
    sample_fields: FieldSpec | RecordToSample | None = None,
    *,
    include_deleted: bool = False,
) -> MemoryDataset:
    """The dataset of a version already resolved to `(version, content_digest)` (what a lock
    file pins): its cases read by digest, so a tag that moves meanwhile changes nothing."""
    if not _DIGEST.fullmatch(content_digest):
        raise BadRequest(
            f"{content_digest!r} is not a content digest (sha256:<64 hex>): pin a version by "
            "the content_digest the registry gives it",
            field="content_digest",
        )
    cases = client.cases(f"{name}@{content_digest}", include_deleted=include_deleted, raw=True)
    return _dataset.MemoryDataset(
        samples=samples_of(cases, sample_fields),
        name=f"{name}@{version}",
        location=client.version_location(name, content_digest),
    )


def samples_of(
    cases: Iterable[Mapping[str, Any]],
    sample_fields: FieldSpec | RecordToSample | None = None,
) -> list[Sample]:
    """The inspect_ai samples of canonical cases: mapped by `sample_fields`, each case's id as
    the sample id when the mapping gives none, `case_id` and `case_digest` in the metadata."""
    to_sample: Callable[[dict[str, Any]], Sample | list[Sample]] = _mapping.record_to_sample_fn(
        sample_fields if sample_fields is not None else DEFAULT_FIELDS
    )
    samples: list[Sample] = []
    for case in cases:
        case_id = case["id"]
        digest = digest_of(canonical_json(case, checked=True))
        try:
            mapped = to_sample(record_of(case))
        except (ValueError, KeyError, TypeError) as exc:
            raise BadRequest(
                f"case {case_id!r}: inspect_ai could not make a sample of it ({exc}); give "
                "sample_fields naming where the input is (a FieldSpec of dotted paths such as "
                "'inputs.user', or a function of the case's record)",
                case_id=case_id,
                field="sample_fields",
            ) from None
        for sample in mapped if isinstance(mapped, list) else [mapped]:
            if sample.id is None:
                sample.id = case_id
            sample.metadata = {
                **(sample.metadata or {}),
                "case_id": case_id,
                "case_digest": digest,
            }
            samples.append(sample)
    return samples


def record_of(case: Mapping[str, Any]) -> dict[str, Any]:
    """A case as the record `sample_fields` reads: its fields as they are, and every field of
    a nested object under its dotted path too (`inputs.user`, `expectations.details.choices`)."""
    record: dict[str, Any] = dict(case)

    def spread(prefix: str, value: Mapping[str, Any]) -> None:
        for key, item in value.items():
            path = f"{prefix}.{key}"
            record.setdefault(path, item)
            if isinstance(item, Mapping):
                spread(path, item)

    for key, value in case.items():
        if isinstance(value, Mapping) and key != "files":
            spread(key, value)
    return record


def logged_version(log: Any) -> LoggedVersion:
    """The registry version an inspect_ai eval log ran on, from its `eval.dataset` (an
    `EvalLog`, as `inspect_ai.log.read_eval_log` gives it, or its `EvalDataset`)."""
    ds = getattr(getattr(log, "eval", None), "dataset", log)
    name, location = getattr(ds, "name", None) or "", getattr(ds, "location", None) or ""
    found = _DIGEST.search(location)
    if "@" not in name or found is None:
        raise BadRequest(
            f"the log's dataset ({name!r} at {location!r}) is not a caseshelf version: load it "
            "with caseshelf.inspect.dataset(ref) to have its digest logged",
            field="eval.dataset",
        )
    dataset_id, _, version = name.rpartition("@")
    return LoggedVersion(dataset_id, version, found.group(0))


__all__ = [
    "DEFAULT_FIELDS",
    "LoggedVersion",
    "dataset",
    "logged_version",
    "pinned_dataset",
    "record_of",
    "samples_of",
]
