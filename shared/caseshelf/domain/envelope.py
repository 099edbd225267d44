"""From a raw item to a validated case and its canonical bytes.

`normalise_item` is the one step between what a loader read and what is validated: legacy shapes
are folded into the envelope there (see `caseshelf.domain.legacy`), so everything after it sees
only the envelope. `canonical_case` then fixes the bytes that are hashed and stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from itertools import accumulate, islice
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, cast, get_args, get_origin

import orjson
from pydantic import BaseModel, ValidationError
from pydantic_core import CoreSchema, SchemaValidator

from caseshelf.domain.canonical import CANONICAL_OPTIONS, canonical_json, digest_of
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.legacy import normalise_legacy_item
from caseshelf.domain.models import DATASET_ID_PATTERN, DIGEST_PATTERN, LABEL_PATTERN, Case
from caseshelf.domain.words import DATASET_ID_RULE, DIGEST_RULE, LABEL_RULE

# The legacy-shape normaliser (`caseshelf.domain.legacy`) folds deprecated item shapes into the
# envelope; it returns the envelope item and the notice codes it raised. Replaceable for tests.
ItemNormaliser = Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]]

_normaliser: ItemNormaliser = normalise_legacy_item


def install_normaliser(fn: ItemNormaliser) -> None:
    global _normaliser
    _normaliser = fn


def normalise_item(item: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    return _normaliser(item)


# The rules of the patterns the models hold, said in words (an error never shows a regex).
PATTERN_RULES: Mapping[str, str] = {
    DATASET_ID_PATTERN: DATASET_ID_RULE,
    LABEL_PATTERN: LABEL_RULE,
    DIGEST_PATTERN: DIGEST_RULE,
}


def error_message(err: Mapping[str, Any], rules: Mapping[str, str] = PATTERN_RULES) -> str:
    """The message of one pydantic error: an unknown key named, a refused pattern said in words
    (`rules`: pattern -> words), never as the regular expression."""
    if err.get("type") == "extra_forbidden" and err.get("loc"):
        return f"unknown key {err['loc'][-1]!r}"
    if err.get("type") == "string_pattern_mismatch":
        pattern = str((err.get("ctx") or {}).get("pattern", ""))
        return (
            rules.get(pattern) or PATTERN_RULES.get(pattern) or "has a character not allowed here"
        )
    return str(err.get("msg", "invalid value"))


def validation_problem(exc: ValidationError) -> tuple[str, str]:
    """(field path, message) of a pydantic error, for error bodies that name the field."""
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"])
    return loc, error_message(err)


M = TypeVar("M", bound=BaseModel)


def parse_model(model: type[M], raw: Any) -> M:
    """Validate `raw` into `model`; a 400 naming the field (an unknown key included) on error."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        raise BadRequest(f"{loc}: {msg}", field=loc) from None


def parse_case(item: Any, *, index: int | None = None) -> Case:
    """Validate one item into a Case; errors name the case id (or index) and the field."""
    if not isinstance(item, dict):
        raise BadRequest(f"case {index} is not an object", index=index)
    try:
        return Case.model_validate(item)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        case_id = item.get("id") if isinstance(item.get("id"), str) else None
        who = f"case {case_id!r}" if case_id else f"case at index {index}"
        raise BadRequest(f"{who}: {loc}: {msg}", case_id=case_id, index=index, field=loc) from None


class _Spec:
    """What `strip_defaults` needs to know of one model: each field's default (as JSON) and
    how to descend into it. Built once per model class by introspection."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.fields: dict[str, tuple[bool, Any, Any]] = {}
        for name, info in model.model_fields.items():
            required = info.is_required()
            if required:
                default: Any = _MISSING
            elif info.default_factory is not None:
                made = info.default_factory()  # type: ignore[call-arg]
                default = {} if isinstance(made, BaseModel) else made
            else:
                default = info.default
            self.fields[name] = (required, default, _child(info.annotation))


_MISSING = object()
_SPECS: dict[type[BaseModel], _Spec] = {}


def _spec(model: type[BaseModel]) -> _Spec:
    spec = _SPECS.get(model)
    if spec is None:
        spec = _SPECS[model] = _Spec(model)
    return spec


def _child(annotation: Any) -> Any:
    """('model', cls) | ('list', child) | ('dict', child) | ('kind', {kind: cls}) | None."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _child(get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation)
    if origin in (list, tuple):
        inner = _child(get_args(annotation)[0])
        return ("list", inner) if inner else None
    if origin is dict:
        inner = _child(get_args(annotation)[1])
        return ("dict", inner) if inner else None
    if origin in (Union, UnionType):
        models = [
            a for a in _union_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not models:
            return None
        if len(models) == 1:
            # `Model | None` (and `str | list | Model`): strip the model's defaults when present.
            return ("model", models[0])
        kinds = {}
        for m in models:
            kind = m.model_fields.get("kind")
            if kind is not None and get_origin(kind.annotation) is Literal:
                kinds[get_args(kind.annotation)[0]] = m
        if len(kinds) == len(models):
            return ("kind", kinds)
        return ("union", models)
    return None


def _union_args(annotation: Any) -> list[Any]:
    """The members of a union; `Annotated[A | B, ...] | None` (the optional `env`) flattened."""
    out: list[Any] = []
    for arg in get_args(annotation):
        if get_origin(arg) is Annotated:
            arg = get_args(arg)[0]
        if get_origin(arg) in (Union, UnionType):
            out.extend(_union_args(arg))
        else:
            out.append(arg)
    return out


def _strip_value(value: Any, child: Any) -> Any:
    if child is None or value is None:
        return value
    tag, inner = child
    if tag == "model":
        return strip_defaults(value, inner) if isinstance(value, dict) else value
    if tag == "kind":
        model = inner.get(value.get("kind")) if isinstance(value, dict) else None
        return strip_defaults(value, model) if model else value
    if tag == "list":
        return [_strip_value(v, inner) for v in value]
    if tag == "dict":
        return {k: _strip_value(v, inner) for k, v in value.items()}
    if tag == "union" and isinstance(value, dict):
        # Members of an undiscriminated union (git/files/path sources, file entries) forbid
        # unknown keys, so the one whose keys fit is the member the value was validated as.
        model = _union_member(value, inner)
        return strip_defaults(value, model) if model else value
    return value


def _union_member(value: dict[str, Any], models: list[type[BaseModel]]) -> Any:
    keys = value.keys()
    for model in models:
        fields = _spec(model).fields
        if keys <= fields.keys() and all(n in keys for n, f in fields.items() if f[0]):
            return model
    return None


def strip_defaults(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Drop every value equal to its field's default, recursively; an optional sub-object that
    ends up empty means the same as its absence and is dropped too. In place; returns `data`."""
    spec = _spec(model).fields
    for key in list(data):
        required, default, child = spec[key]
        value = data[key] = _strip_value(data[key], child)
        if not required and (value == default or (value == {} and child is not None)):
            del data[key]
    return data


def _finish(plain: dict[str, Any]) -> dict[str, Any]:
    tags = plain.get("tags")
    if tags is not None and len(tags) > 1:
        plain["tags"] = sorted(set(tags))
    return plain


def case_to_plain(case: Case) -> dict[str, Any]:
    """The canonical plain form: defaults omitted, tags sorted and unique."""
    return _finish(strip_defaults(case.model_dump(mode="json", exclude_unset=True), Case))


def cases_to_plain(cases: list[Case]) -> list[dict[str, Any]]:
    """`case_to_plain` for many cases: the plain form of cases validated into models (a body the
    HTTP resolver validated; `validate_plain_cases` gives the same without the models).

    Reads the validated models directly instead of dumping and then stripping them, which halves
    the cost and allocates only the containers. Exact because every free-form value a model holds
    is already plain JSON (see `models._finite`). The plain forms share their leaf values with
    the models: read them, do not change them."""
    return [_finish(_plain_of(case)) for case in cases]


# -- validation straight into the plain form --------------------------------------------------
#
# A registration needs each case's plain form, not a model of it: validating into models and
# reading them back (`cases_to_plain`) builds three model objects per case that are dropped at
# once. The plain validator is derived from `Case`'s own pydantic-core schema (the models stay
# the one source of the wire shape): every model in it becomes a typed dict with the same fields,
# validators and config (unknown keys refused, no NaN), whose fields are absent when not given,
# as `exclude_unset` leaves them; an after-step of each drops what `_plain_of` drops (a field
# equal to its default, an optional sub-object left empty). What it refuses, and every error,
# is the models' to say: on any failure a caller validates the same input with the models.


def _settler(model: type[BaseModel]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The after-step of `model`'s typed dict: drop each given field equal to its default, and
    an optional sub-object left with nothing in it, as `_plain_of` leaves them out. The
    sub-objects were settled before it (pydantic-core runs inner validators first). In place.

    Most objects hold no default at all, and say so cheaply: a JSON value equal to a default
    that is empty, zero or None is itself empty, zero or None, so an object whose values are all
    truthy and which holds no field with another default (`timeout_sec`, `mode`, `ref`) keeps
    everything. That check runs in C, and skips most of the settling."""
    fields = _spec(model).fields
    defaults = {name: default for name, (required, default, _) in fields.items() if not required}
    empty_is_absent = frozenset(
        name for name, (required, _, child) in fields.items() if not required and child is not None
    )
    truthy_defaults = frozenset(name for name, default in defaults.items() if default)

    def settle(plain: dict[str, Any]) -> dict[str, Any]:
        if all(plain.values()) and truthy_defaults.isdisjoint(plain):
            return plain
        gone = [
            name
            for name, value in plain.items()
            if name in defaults
            and (value == defaults[name] or (value == {} and name in empty_is_absent))
        ]
        for name in gone:
            del plain[name]
        return plain

    return settle


# Keys of a core schema node whose values are not schemas (functions, classes, literal values).
_OPAQUE_KEYS = frozenset({"function", "cls", "metadata", "serialization", "default", "expected"})


def _plain_schema(node: Any) -> Any:
    """`node` of a model's core schema with every `model` node made a typed dict that settles
    into the plain form (`_settler`); everything else as it is."""
    if isinstance(node, list):
        return [_plain_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind == "model":
        return _plain_model(node)
    if kind in ("function-before", "function-after", "function-wrap", "function-plain") and (
        node.get("schema", {}).get("type") == "model"
    ):
        raise TypeError(f"a model validator cannot run on a plain case: {node['schema']['cls']}")
    return {
        key: value if key in _OPAQUE_KEYS else _plain_schema(value) for key, value in node.items()
    }


def _plain_model(node: dict[str, Any]) -> dict[str, Any]:
    fields_schema = node["schema"]
    if fields_schema["type"] != "model-fields" or fields_schema.get("computed_fields"):
        raise TypeError(f"{node['cls'].__name__}: only plain model fields can be made plain")
    config = node.get("config", {})
    fields: dict[str, Any] = {}
    for name, field in fields_schema["fields"].items():
        if set(field) - {"type", "schema", "metadata"}:
            raise TypeError(f"{node['cls'].__name__}.{name}: aliases cannot be made plain")
        inner = field["schema"]
        required = inner["type"] != "default"
        fields[name] = {
            "type": "typed-dict-field",
            "schema": _plain_schema(inner if required else inner["schema"]),
            "required": required,
        }
    plain: dict[str, Any] = {
        "type": "function-after",
        "function": {"type": "no-info", "function": _settler(node["cls"])},
        "schema": {
            "type": "typed-dict",
            "fields": fields,
            "extra_behavior": config.get("extra_fields_behavior", "ignore"),
            "config": config,
        },
    }
    if "ref" in node:
        plain["ref"] = node["ref"]
    return plain


@lru_cache(maxsize=1)
def _plain_cases_validator() -> SchemaValidator:
    """A list of cases validated into their plain form; built once, when first needed."""
    Case.model_rebuild()  # the models defer building their schema until first used
    items = _plain_schema(Case.__pydantic_core_schema__)
    return SchemaValidator(cast(CoreSchema, {"type": "list", "items_schema": items}))


def validate_plain_cases(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Items validated as `Case`s straight into their canonical plain form: what
    `cases_to_plain` makes of the models, without making them (the validation with its
    defaults settled in pydantic-core, then the tags sorted).

    Well under half the CPU of building `Case` models and reading them back with
    `cases_to_plain`. Raises pydantic's `ValidationError`
    (or the `BadRequest` of a path validator) on any failure, whose text is the plain schema's:
    validate with the models to say what is wrong (`parse_case`, `parse_dataset`)."""
    return [_finish(plain) for plain in _plain_cases_validator().validate_python(list(items))]


# How `_plain_of` treats a field: kept as it is (required), dropped when None (its default),
# dropped when equal to its default, converted and kept (a required field that may hold
# models), or converted and dropped when equal to its default or empty.
_KEEP, _DROP_NONE, _DROP_DEFAULT, _NESTED_KEEP, _NESTED_DROP = 0, 1, 2, 3, 4
_PLANS: dict[type[BaseModel], dict[str, tuple[int, Any]]] = {}


def _how(required: bool, default: Any, child: Any) -> int:
    if child is not None:
        return _NESTED_KEEP if required else _NESTED_DROP
    if required:
        return _KEEP
    return _DROP_NONE if default is None else _DROP_DEFAULT


def _plan(model: type[BaseModel]) -> dict[str, tuple[int, Any]]:
    """Field name -> (how, default as JSON)."""
    plan = _PLANS.get(model)
    if plan is None:
        plan = _PLANS[model] = {
            name: (_how(required, default, child), default)
            for name, (required, default, child) in _spec(model).fields.items()
        }
    return plan


def _plain_of(model: BaseModel) -> dict[str, Any]:
    plan = _PLANS.get(type(model)) or _plan(type(model))
    values = model.__dict__
    out: dict[str, Any] = {}
    for name in model.__pydantic_fields_set__:
        how, default = plan[name]
        value = values[name]
        if how == _KEEP:
            out[name] = value
        elif how == _NESTED_DROP:
            if value is None:
                if default is not None:
                    out[name] = value
            elif isinstance(value, BaseModel):
                value = _plain_of(value)
                if value and value != default:  # neither empty nor the default
                    out[name] = value
            else:
                if type(value) is not str:
                    value = _plain_value(value)
                if not (value == default or value == {}):
                    out[name] = value
        elif how == _DROP_NONE:
            if value is not None:
                out[name] = value
        elif how == _DROP_DEFAULT:
            if value != default:
                out[name] = value
        elif value is None or isinstance(value, BaseModel):
            out[name] = value if value is None else _plain_of(value)
        else:
            out[name] = value if type(value) is str else _plain_value(value)
    return out


def _plain_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _plain_of(value)
    if isinstance(value, list):
        return [_plain_of(v) if isinstance(v, BaseModel) else v for v in value]
    if isinstance(value, dict):
        return {k: _plain_of(v) if isinstance(v, BaseModel) else v for k, v in value.items()}
    return value


def _serialise(plain: dict[str, Any]) -> bytes:
    try:
        return canonical_json(plain, checked=True)
    except TypeError as exc:  # orjson: a lone surrogate in free-form JSON, say
        raise BadRequest(f"case {plain['id']!r}: {exc}", case_id=plain["id"]) from None


def canonical_case(case: Case) -> tuple[bytes, str]:
    """Canonical bytes of a case and their digest."""
    data = _serialise(case_to_plain(case))
    return data, digest_of(data)


def canonical_into(
    plains: Sequence[dict[str, Any]], records: bytearray, *, chunk: int = 2048
) -> tuple[list[int], list[str], list[list[str]]]:
    """The canonical records of cases in their plain form (`cases_to_plain`,
    `validate_plain_cases`) written into `records`: each case's canonical bytes followed by a
    newline (as packs hold them), serialised `chunk` at a time. Answers where each case ends in
    `records` (its newline included), the digests and the tags, in order; the registration hot
    path, in bulk."""
    sha256, dumps, opts = hashlib.sha256, orjson.dumps, CANONICAL_OPTIONS
    ends: list[int] = []
    digests: list[str] = []
    tags: list[list[str]] = []
    for start in range(0, len(plains), chunk):
        part = plains[start : start + chunk]
        try:
            datas = [dumps(plain, option=opts) for plain in part]
        except TypeError:
            datas = [_serialise(plain) for plain in part]  # raises the BadRequest naming it
        ends.extend(islice(accumulate([len(d) + 1 for d in datas], initial=len(records)), 1, None))
        records += b"\n".join(datas)
        records += b"\n"
        digests.extend(["sha256:" + sha256(data).hexdigest() for data in datas])
        tags.extend([plain.get("tags", []) for plain in part])
    return ends, digests, tags
