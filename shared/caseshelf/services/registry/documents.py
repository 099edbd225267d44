"""A dataset document as `register` and `validate` take it: validated into its canonical plain
cases (`parse_dataset`), errors naming the case id (or index) and the field."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from caseshelf.domain.envelope import cases_to_plain, validate_plain_cases, validation_problem
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.models import Case, DatasetVersionInput

# Built on first use, as the models are (`defer_build`): building it at import built the whole
# `Case` schema, ~30 ms of every process that imports the registry, an import's included, which
# never validates a case this way.
_CASE_LIST: TypeAdapter[list[Case]] = TypeAdapter(list[Case], config=ConfigDict(defer_build=True))


@dataclass(frozen=True)
class DatasetDocument:
    """A validated dataset document, as `register` and `validate` take it: everything but its
    cases as the model holds it (`cases` left empty), and the cases in their canonical plain
    form (`caseshelf.domain.envelope.cases_to_plain`), their inline file bodies not yet
    stored."""

    meta: DatasetVersionInput
    plain_cases: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return self.meta.id

    @cached_property
    def cases(self) -> list[Case]:
        """The cases as models, for a reader of their fields (made when first read; a
        registration reads `plain_cases`)."""
        return _CASE_LIST.validate_python(self.plain_cases)


def document_of(body: DatasetVersionInput | DatasetDocument) -> DatasetDocument:
    """A document validated into models (an HTTP body) as `register` takes it."""
    if isinstance(body, DatasetDocument):
        return body
    return DatasetDocument(body.model_copy(update={"cases": []}), cases_to_plain(body.cases))


def parse_dataset(raw: Any) -> DatasetDocument:
    """Validate a dataset document; errors name the case id (or index) and the field.

    The cases are validated straight into their plain form (`validate_plain_cases`: half the
    cost of models read back); on any failure the whole document is validated with the models,
    which name what is wrong exactly as they always have."""
    if not isinstance(raw, dict):
        raise BadRequest("a dataset version is a JSON object")
    cases = raw.get("cases")
    if isinstance(cases, list):
        try:
            meta = DatasetVersionInput.model_validate({**raw, "cases": []})
            return DatasetDocument(meta, validate_plain_cases(cases))
        except (ValidationError, BadRequest):  # a path validator raises BadRequest itself
            pass
    try:
        return document_of(DatasetVersionInput.model_validate(raw))
    except ValidationError as exc:
        raise dataset_error(exc, raw) from None


def dataset_error(exc: ValidationError, raw: Any) -> BadRequest:
    loc, msg = validation_problem(exc)
    first = exc.errors(include_url=False)[0]["loc"]
    case_id = None
    index = None
    if len(first) >= 2 and first[0] == "cases" and isinstance(first[1], int):
        index = first[1]
        try:
            cid = raw["cases"][index].get("id")
            case_id = cid if isinstance(cid, str) else None
        except (KeyError, IndexError, TypeError, AttributeError):
            case_id = None
        where = f"case {case_id!r}" if case_id else f"case at index {index}"
        field_path = ".".join(str(p) for p in first[2:]) or "case"
        return BadRequest(
            f"{where}: {field_path}: {msg}", case_id=case_id, index=index, field=field_path
        )
    return BadRequest(f"{loc}: {msg}", field=loc)


def _decode_inline(entry: Mapping[str, str], where: str) -> bytes:
    """The body of a file sent inline, `{text}` or `{base64}` (a plain `InlineText` or
    `InlineBase64`)."""
    if "text" in entry:
        return entry["text"].encode("utf-8")
    try:
        return base64.b64decode(entry["base64"], validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: base64 body is not valid base64", field=where) from None
