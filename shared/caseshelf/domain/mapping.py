"""Row -> case: a recipe's mapping applied to source rows. Pure.

`RowMapper` compiles a recipe once and builds each case directly in the envelope's canonical
plain form (defaults omitted, tags sorted and unique), applying the envelope's rules as it goes:
ids are non-empty strings without control characters and at most 256 characters, texts are
strings, numbers are finite, paths are safe. That form is a fixed point of
`parse_case` + `case_to_plain` (the test suite holds every real benchmark and generated rows to
it), so a mapped case hashes exactly as the same case registered by hand. `rows_to_cases` can
also run every case through `parse_case` itself (`validate=True`, what previews do).

Rules (architecture §6, issue "imports"):
- env precedence: repo_path > git > files_template > os_use > prompt > browser. Browser needs a
  start_url_field or category `browser`; otherwise a case has no env.
- a repo's `ref` defaults to HEAD (and HEAD, the default, is omitted);
- ground truth from answer_field; an `answer-match` grader only when the answer is non-empty;
- a `tests-pass` grader from test_cmd_field (when non-empty);
- the per-row image_field wins over the recipe-wide image; a container case (repo_path or
  placement set) without an image is an error naming the case;
- tags from tag_fields, empty values dropped;
- id from id_template, else id_field, else `<recipe id>-<row index>`; colliding ids name both
  rows.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Mapping as AnyMapping
from difflib import get_close_matches
from typing import Any, NamedTuple

import orjson

from caseshelf.domain.canonical import CANONICAL_OPTIONS
from caseshelf.domain.envelope import case_to_plain, parse_case
from caseshelf.domain.errors import BadRequest, CaseshelfError, TooLarge
from caseshelf.domain.legacy import RoleListProblem, split_role_list
from caseshelf.domain.recipe import Recipe
from caseshelf.domain.templates import (
    FieldExpr,
    FieldMissing,
    FilterFailed,
    compile_field,
    compile_render,
    compile_template,
    compile_value,
)

Row = AnyMapping[str, Any]
Builder = Callable[[Row, int], Any]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_ID_CHARS = 256


class _Bad(Exception):
    """A value that breaks an envelope rule; turned into BadRequest naming row and field."""

    def __init__(self, target: str, message: str) -> None:
        super().__init__(message)
        self.target = target
        self.message = message


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or v == [] or v == {}


def _text(v: Any, target: str) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _Bad(target, "is not a finite number")
        return repr(v)
    raise _Bad(target, f"must be text, not {type(v).__name__}")


def _finite(v: Any, target: str) -> Any:
    """Any JSON value, with NaN and Infinity refused (parquet rows can carry them)."""
    if type(v) is str:
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _Bad(target, "is not a finite number")
    elif isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise _Bad(target, "has a non-string key")
            _finite(x, target)
    elif isinstance(v, list):
        for x in v:
            _finite(x, target)
    elif isinstance(v, tuple):
        return [_finite(x, target) for x in v]
    elif not (v is None or isinstance(v, str | int | bool)):
        raise _Bad(target, f"is not a JSON value ({type(v).__name__})")
    return v


def _texts(v: Any, target: str) -> list[str]:
    """A list of non-empty strings from a list or a single value."""
    items = v if isinstance(v, list) else [v]
    out = []
    for x in items:
        if _empty(x):
            continue
        out.append(_text(x, target))
    return out


def _field(expr: str) -> FieldExpr:
    return compile_field(expr)


FieldMap = list[tuple[str, Builder, str, str | None]]


def _plain_key(template: Any) -> str | None:
    """The row key when a template is exactly one placeholder without filters (`{answer}`)."""
    if not isinstance(template, str):
        return None
    parts = compile_template(template).parts
    return parts[0].key if len(parts) == 1 and isinstance(parts[0], FieldExpr) else None


def _field_map(spec: list[str] | dict[str, Any], target: str) -> FieldMap:
    """`(key, builder, error target, row key when it is a plain lookup)` of each entry of a
    details / metadata mapping."""
    if isinstance(spec, dict):
        return [
            (key, compile_value(value), f"{target}.{key}", _plain_key(value))
            for key, value in spec.items()
        ]
    out: FieldMap = []
    for expr in spec:
        fe = _field(expr)
        out.append((fe.field, fe.value, f"{target}.{fe.field}", fe.key))
    return out


def container_needs_image(recipe: Recipe) -> bool:
    m = recipe.mapping
    return m.repo_path is not None or bool(m.placement)


class _Fixed:
    """The same value for every row (an env that reads no field)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, row: Row, index: int) -> Any:
        return self.value


ROW_ERRORS = (FieldMissing, FilterFailed, _Bad)


def row_error(exc: Exception, index: int, row: Row | None = None) -> BadRequest:
    """The 400 for a row that does not map (one of ROW_ERRORS), naming the row and the field;
    a missing field also lists the fields the row has, the closest to it first."""
    if isinstance(exc, FieldMissing):
        return BadRequest(
            f"row {index}: missing field {exc.field!r}{_fields_hint(exc.field, row)}",
            row=index,
            field=exc.field,
        )
    if isinstance(exc, FilterFailed):
        return BadRequest(
            f"row {index}: field {exc.field!r}: {exc.message}", row=index, field=exc.field
        )
    assert isinstance(exc, _Bad)
    return BadRequest(f"row {index}: {exc.target} {exc.message}", row=index, field=exc.target)


def _fields_hint(name: str, row: Row | None) -> str:
    if not row:
        return ""
    fields = [str(k) for k in row]
    close = get_close_matches(name, fields, n=3, cutoff=0.6)
    ordered = close + [f for f in fields if f not in close]
    shown = ", ".join(repr(f) for f in ordered[:20])
    more = f" and {len(ordered) - 20} more" if len(ordered) > 20 else ""
    lead = f"; did you mean {close[0]!r}? " if close else "; "
    return f"{lead}the row has {shown}{more}"


class RowMapper:
    """A recipe compiled once; `mapper(row, index)` is the case's canonical plain form."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        m = recipe.mapping
        self._id: Builder | None = None
        if m.id_template is not None:
            self._id = compile_render(m.id_template)
        elif m.id_field:
            self._id = _field(m.id_field).value
        self._id_prefix = f"{recipe.id}-"
        self._task: Builder | None = None
        self._task_key: str | None = None
        if m.task_template is not None:
            self._task = compile_render(m.task_template)
            self._task_key = _plain_key(m.task_template)
        elif m.task_field:
            task_field = _field(m.task_field)
            self._task, self._task_key = task_field.value, task_field.key
        self._answer = _field(m.answer_field) if m.answer_field else None
        answer_grader: dict[str, Any] = {"id": "answer-match"}
        if m.answer_mode:
            answer_grader["config"] = {"mode": m.answer_mode}
        self._answer_grader = answer_grader
        self._test_cmd = _field(m.test_cmd_field) if m.test_cmd_field else None
        self._hitl = _field(m.hitl_field) if m.hitl_field else None
        self._tags = [_field(t) for t in m.tag_fields]
        self._details = _field_map(m.details_fields, "expectations.details")
        self._metadata = _field_map(m.metadata_fields, "metadata")
        self._image_field = _field(m.image_field) if m.image_field else None
        self._image = m.image
        self._needs_image = container_needs_image(recipe)
        self._extra = [g.model_dump(mode="json", exclude_defaults=True) for g in m.extra_graders]
        self._templates = [
            (g.id, compile_value(g.config) if g.config else None) for g in recipe.grader_templates
        ]
        self._env = self._compile_env(recipe)
        self.build = self._compile_build()  # raises ROW_ERRORS; `mapper(row, i)` a BadRequest

    # -- env -------------------------------------------------------------------------------

    def _compile_env(self, recipe: Recipe) -> Callable[[Row, int], dict[str, Any] | None]:
        m = recipe.mapping
        placement = {"placement": m.placement} if m.placement else {}
        if m.repo_path is not None:
            return _Fixed({"kind": "repo", "source": {"path": m.repo_path}, **placement})
        if m.git_field is not None:
            git = _field(m.git_field)
            ref = _field(m.ref_field) if m.ref_field else None

            def repo_git(row: Row, index: int) -> dict[str, Any]:
                source: dict[str, Any] = {
                    "git": _text(_need(git, row, index, "env.source.git"), "env.source.git")
                }
                if not source["git"].strip():
                    raise _Bad("env.source.git", "is empty")
                if ref is not None:
                    r = ref.value(row, index)
                    if not _empty(r) and _text(r, "env.source.ref") != "HEAD":
                        source["ref"] = _text(r, "env.source.ref")
                return {"kind": "repo", "source": source, **placement}

            return repo_git
        if m.files_template:
            files = [(path, compile_template(t).render) for path, t in m.files_template.items()]

            def repo_files(row: Row, index: int) -> dict[str, Any]:
                body = {p: _text(f(row, index), f"env.source.files.{p}") for p, f in files}
                return {"kind": "repo", "source": {"files": body}, **placement}

            return repo_files
        if m.os_use_env:
            setup = [compile_template(t).render for t in m.os_use_setup]
            fixed: dict[str, Any] = {"kind": "os-use", **placement}
            if m.display:
                fixed["display"] = m.display
            if m.screenshot_path:
                fixed["screenshot_path"] = m.screenshot_path

            def os_use(row: Row, index: int) -> dict[str, Any]:
                env = dict(fixed)
                lines = [_text(f(row, index), "env.setup") for f in setup]
                if lines:
                    env["setup"] = lines
                return env

            return os_use
        if m.prompt_env:
            return _Fixed({"kind": "prompt"})
        if m.start_url_field is not None:
            url = _field(m.start_url_field)

            def browser(row: Row, index: int) -> dict[str, Any]:
                v = url.value(row, index)
                if v is None:
                    return {"kind": "browser"}
                return {"kind": "browser", "start_url": _text(v, "env.start_url")}

            return browser
        if recipe.category == "browser":
            return _Fixed({"kind": "browser"})
        return lambda row, index: None

    # -- one row ---------------------------------------------------------------------------

    def case_id(self, row: Row, index: int) -> str:
        if self._id is None:
            return f"{self._id_prefix}{index}"
        v = self._id(row, index)
        if v is None or isinstance(v, list | dict):
            raise _Bad("id", "must be a string or a number")
        cid = _text(v, "id")
        if not cid:
            raise _Bad("id", "is empty")
        if len(cid) > MAX_ID_CHARS:
            raise _Bad("id", f"is longer than {MAX_ID_CHARS} characters")
        if _CONTROL.search(cid):
            raise _Bad("id", "contains a control character")
        return cid

    def __call__(self, row: Row, index: int) -> dict[str, Any]:
        try:
            return self.build(row, index)
        except ROW_ERRORS as exc:
            raise row_error(exc, index, row) from None

    def _compile_build(self) -> Callable[[Row, int], dict[str, Any]]:
        """The row -> case function, with the recipe's settings bound as closure variables:
        every row of every import runs it, so it reads no attributes, skips what the recipe
        does not use, and takes strings (the common case) before the checks that only other
        values need."""
        id_value, id_prefix, case_id = self._id, self._id_prefix, self.case_id
        task, task_key = self._task, self._task_key
        hitl = self._hitl.value if self._hitl is not None else None
        answer_value = self._answer.value if self._answer is not None else None
        answer_grader, details, metadata = self._answer_grader, self._details, self._metadata
        env_of = self._env
        env_fixed = env_of.value if isinstance(env_of, _Fixed) else None
        image_of = self._compile_image()  # None: the recipe names no image and needs none
        more_graders = self._compile_graders()  # None: no grader but the answer's
        tag_values = [t.value for t in self._tags]

        def build(row: Row, index: int) -> dict[str, Any]:
            cid = f"{id_prefix}{index}" if id_value is None else case_id(row, index)
            case: dict[str, Any] = {"id": cid}
            inputs: dict[str, Any] = {}
            if task_key is not None:
                try:
                    user = row[task_key]
                except KeyError:
                    raise FieldMissing(task_key) from None
                if type(user) is str:
                    inputs["user"] = user
                else:
                    _task_inputs(user, inputs)
            elif task is not None:
                user = task(row, index)
                if type(user) is str:
                    inputs["user"] = user
                else:
                    _task_inputs(user, inputs)
            if hitl is not None:
                _add_hitl(inputs, hitl(row, index))
            if inputs:
                case["inputs"] = inputs

            graders: list[dict[str, Any]] = []
            expectations: dict[str, Any] = {}
            if answer_value is not None:
                answer = answer_value(row, index)
                if type(answer) is str:
                    if answer.strip():
                        expectations["ground_truth"] = answer
                        graders.append(answer_grader)
                elif not _empty(answer):
                    expectations["ground_truth"] = _finite(answer, "expectations.ground_truth")
                    graders.append(answer_grader)
            if details:
                expectations["details"] = _values(details, row, index)
            if expectations:
                case["expectations"] = expectations

            env = env_fixed if env_fixed is not None else env_of(row, index)
            if env is not None:
                case["env"] = env

            if image_of is not None:
                image = image_of(row, index, cid)
                if image is not None:
                    case["image"] = image

            if more_graders is not None:
                more_graders(row, index, graders)
            if graders:
                case["graders"] = graders

            if tag_values:
                tags = _tags(tag_values, row, index)
                if tags:
                    case["tags"] = tags

            if metadata:
                case["metadata"] = _values(metadata, row, index)
            return case

        return build

    def _compile_image(self) -> Callable[[Row, int, str], str | None] | None:
        """A row's image (its image field's, else the recipe's fixed one), or None when the
        recipe names no image and needs none. A container case with no image is refused."""
        image_value = self._image_field.value if self._image_field is not None else None
        fixed_image = self._image
        needs_image = self._needs_image
        if image_value is None and fixed_image is None and not needs_image:
            return None

        def image_of(row: Row, index: int, cid: str) -> str | None:
            image = None
            if image_value is not None:
                v = image_value(row, index)
                if not _empty(v):
                    image = _text(v, "image")
            if image is None:
                image = fixed_image
            if image is None and needs_image:
                raise _Bad(
                    "image",
                    f"is required: case {cid!r} runs in a container and no prebuilt image is "
                    "given (set mapping.image or mapping.image_field; images are referenced, "
                    "never built)",
                )
            return image

        return image_of

    def _compile_graders(self) -> Callable[[Row, int, list[dict[str, Any]]], None] | None:
        """What adds a row's graders after the answer's (the test command's, the extra ones,
        the templated ones), or None when the recipe has none of them."""
        test_cmd = self._test_cmd.value if self._test_cmd is not None else None
        extra = self._extra
        templates = self._templates
        if test_cmd is None and not extra and not templates:
            return None

        def more_graders(row: Row, index: int, graders: list[dict[str, Any]]) -> None:
            if test_cmd is not None:
                cmd = test_cmd(row, index)
                if not _empty(cmd):
                    graders.append(
                        {"id": "tests-pass", "config": {"cmd": _text(cmd, "tests-pass")}}
                    )
            if extra:
                graders.extend(extra)
            for gid, config in templates:
                if config is None:
                    graders.append({"id": gid})
                else:
                    cfg = _finite(config(row, index), f"graders.{gid}.config")
                    graders.append({"id": gid, "config": cfg} if cfg else {"id": gid})

        return more_graders


def _add_hitl(inputs: dict[str, Any], value: Any) -> None:
    """A row's HITL lines after those its task gave (`inputs.hitl`)."""
    lines = _texts(value, "inputs.hitl")
    if lines:
        inputs["hitl"] = [*inputs.get("hitl", ()), *lines]


def _tags(tag_values: list[Builder], row: Row, index: int) -> list[str]:
    """A row's tags from every tag field, sorted and unique."""
    tags: list[str] = []
    for tag_value in tag_values:
        tags.extend(_texts(tag_value(row, index), "tags"))
    return sorted(set(tags)) if len(tags) > 1 else tags


def _values(fields: FieldMap, row: Row, index: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value_of, target, row_key in fields:
        if row_key is not None:
            try:
                v = row[row_key]
            except KeyError:
                raise FieldMissing(row_key) from None
        else:
            v = value_of(row, index)
        out[key] = v if type(v) is str else _finite(v, target)
    return out


def _need(fe: FieldExpr, row: Row, index: int, target: str) -> Any:
    v = fe.value(row, index)
    if v is None:
        raise _Bad(target, f"field {fe.field!r} is null")
    return v


def _task_inputs(v: Any, inputs: dict[str, Any]) -> None:
    """The task value of a row into `inputs`: a chat-message list (`[{role, content}, ...]`)
    as `register` reads it (user turns -> `user`, HITL turns -> `hitl`, and the whole
    conversation -> `messages` when it has turns of other roles); anything else as text."""
    if isinstance(v, list) and any(isinstance(x, dict) for x in v):
        try:
            users, hitl, messages = split_role_list(v, "inputs.user")
        except RoleListProblem as exc:
            raise _Bad(exc.field, exc.problem) from None
        if not users:
            raise _Bad("inputs.user", "has no user message")
        inputs["user"] = users[0] if len(users) == 1 else users
        if hitl:
            inputs["hitl"] = hitl
        if messages:
            inputs["messages"] = messages
        return
    inputs["user"] = _user(v)


def _user(v: Any) -> str | list[str]:
    if isinstance(v, list):
        return [_text(x, "inputs.user") for x in v]
    return _text(v, "inputs.user")


def row_to_case(row: Row, index: int, recipe: Recipe) -> dict[str, Any]:
    """One row as a validated case (plain canonical form)."""
    plain = RowMapper(recipe)(row, index)
    return case_to_plain(parse_case(plain, index=index))


def rows_to_cases(
    rows: Iterable[tuple[int, Row]],
    recipe: Recipe,
    *,
    validate: bool = True,
    mapper: RowMapper | None = None,
) -> Iterator[dict[str, Any]]:
    """Every row as a case, in order; colliding ids are an error naming both rows.

    `validate=True` runs each case through `parse_case` too (the mapper's output is already
    valid by construction; the streaming import skips this second pass)."""
    mapper = mapper or RowMapper(recipe)
    seen: dict[str, int] = {}
    for index, row in rows:
        case = mapper(row, index)
        cid = case["id"]
        first = seen.setdefault(cid, index)
        if first != index:
            raise BadRequest(
                f"rows {first} and {index} both map to case id {cid!r}",
                case_ids=[cid],
                rows=[first, index],
            )
        if validate:
            case = case_to_plain(parse_case(case, index=index))
        yield case


class RecordBatch(NamedTuple):
    """Cases as canonical records with their digests, ready for a pack: what
    `RegistryService.register_records` consumes. The digests are taken by `record_batches`,
    in whichever process maps the rows (`record_digests`)."""

    ids: list[str]
    lengths: list[int]  # bytes of each record
    data: bytes  # the records back to back, each followed by "\n"
    tags: list[Sequence[str]] | None  # sorted, unique tags of each case; None: no case has any
    digests: list[str]  # sha256 (hex) of each record, taken where the records are made


BATCH_ROWS = 1000
BATCH_BYTES = 4 << 20  # a batch of large cases closes early
FIRST_BATCH_ROWS = 100  # a small first batch, so that its consumer starts early


def record_batches(
    rows: Iterable[tuple[int, Row]],
    recipe: Recipe,
    *,
    max_case_bytes: int,
    batch_rows: int = BATCH_ROWS,
    batch_bytes: int = BATCH_BYTES,
) -> Iterator[RecordBatch]:
    """Every row as its case's canonical record, in batches of at most `batch_rows` cases (or
    about `batch_bytes`), in order. Errors name the row: a mapping error, two rows of a batch
    with the same case id (both rows), a case over `max_case_bytes` (413).

    Ids repeated across batches are refused by the registry, which sees every batch of the
    import, from both processes of a split file (`RegistryService.register_records`). So that
    the first problem in row order is the one reported, a batch that holds a problem is cut
    before the row at fault: the rows before it come as a batch of their own (the registry
    refuses one that repeats an earlier batch's id), then the row's error (`_checked`).

    Per row only the mapping and the serialisation run in Python; sizes and ids repeated
    within a batch are checked a batch at a time in C, and row by row only once a batch holds
    a problem, to find the first."""
    build = RowMapper(recipe).build
    dumps, options = orjson.dumps, CANONICAL_OPTIONS
    tagged = bool(recipe.mapping.tag_fields)
    indexes: list[int] = []
    ids: list[str] = []
    records: list[bytes] = []
    tags: list[Sequence[str]] = []
    held = 0  # bytes in the batch so far
    most = min(FIRST_BATCH_ROWS, batch_rows)
    for index, row in rows:
        try:
            case = build(row, index)
            data = dumps(case, option=options)
        except ROW_ERRORS as exc:
            error: CaseshelfError = row_error(exc, index, row)
        except orjson.JSONEncodeError as exc:  # an integer beyond 64 bits
            error = BadRequest(f"row {index}: case {case['id']!r}: {exc}", row=index)
        else:
            indexes.append(index)
            ids.append(case["id"])
            records.append(data)
            if tagged:
                tags.append(case.get("tags", ()))
            held += len(data)
            if len(ids) >= most or held >= batch_bytes:
                yield from _checked(max_case_bytes, indexes, ids, records, tags if tagged else None)
                indexes, ids, records, tags = [], [], [], []
                held, most = 0, batch_rows
            continue
        yield from _checked(max_case_bytes, indexes, ids, records, tags if tagged else None)
        raise error
    yield from _checked(max_case_bytes, indexes, ids, records, tags if tagged else None)


def _checked(
    max_case_bytes: int,
    indexes: list[int],
    ids: list[str],
    records: list[bytes],
    tags: list[Sequence[str]] | None,
) -> Iterator[RecordBatch]:
    """The batch of these records, once none is over the limit or repeats an id of the batch;
    otherwise the records before the first that does, and then its error. Nothing for no
    records.

    Ids are checked within the batch only: the registry checks every id of the registration
    anyway, so a dict of every id this process mapped would be a second copy of that check,
    with memory growing with the rows."""
    if not ids:
        return
    lengths = list(map(len, records))
    if len(set(ids)) == len(ids) and max(lengths) <= max_case_bytes:
        yield _batch(ids, lengths, records, tags)
        return
    at, error = _first_problem(indexes, ids, lengths, max_case_bytes)
    if at:
        yield _batch(ids[:at], lengths[:at], records[:at], tags[:at] if tags is not None else None)
    raise error


def _batch(
    ids: list[str], lengths: list[int], records: list[bytes], tags: list[Sequence[str]] | None
) -> RecordBatch:
    """One batch of checked records: their digests, and the records joined."""
    digests = record_digests(records)
    records.append(b"")
    return RecordBatch(ids, lengths, b"\n".join(records), tags, digests)


def record_digests(records: Iterable[bytes]) -> list[str]:
    """The sha256 (hex) of each record. Taken here, beside the mapping, rather than by the
    registry from the joined batch: an import in several processes
    (`caseshelf.adapters.sources.split_jsonl`) hashes in each of them, and the process that
    stores the records does not slice and hash them again."""
    return [hashlib.sha256(record).hexdigest() for record in records]


def _first_problem(
    indexes: list[int], ids: list[str], lengths: list[int], limit: int
) -> tuple[int, CaseshelfError]:
    """The position in the batch of the first record that is over the limit or repeats an id
    of the batch, and its error (the batch holds one). A record with both problems is named by
    its size: the ids it may repeat from earlier batches are the registry's to find, and the
    batch it would be found in ends before it."""
    seen: dict[str, int] = {}  # case id -> its row
    for at, (index, cid, size) in enumerate(zip(indexes, ids, lengths, strict=True)):
        if size > limit:
            return at, TooLarge(
                f"row {index}: case {cid!r} is {size} bytes; the limit is {limit}",
                row=index,
                case_id=cid,
            )
        first = seen.setdefault(cid, index)
        if first != index:
            return at, BadRequest(
                f"rows {first} and {index} both map to case id {cid!r}",
                case_ids=[cid],
                rows=[first, index],
            )
    raise AssertionError("a batch check found no problem row by row")
