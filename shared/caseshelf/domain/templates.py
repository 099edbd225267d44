"""Row templates: `{field}`, `{a.b}` and `{field|filter:arg|...}` over one source row. Pure.

A template is compiled once per recipe and rendered per row. A template that is exactly one
placeholder renders to the value itself (a list stays a list, a number a number); any other
template renders to a string. `{{` and `}}` are literal braces; inside a placeholder `\\|`, `\\:`,
`\\}` and `\\\\` escape their character.

A field expression (`answer|after:####|strip`) is the inside of a placeholder: the mapping's
`*_field` settings take one. A missing field is an error naming the field, unless a `default`
filter supplies a value.

Filters (all pure):
  lower, upper, strip[:CHARS]   string case and trimming
  replace:A:B                   every A replaced by B (B may be empty)
  split:SEP                     a list of the pieces, each stripped, empty pieces dropped
  join:SEP                      a list joined into one string
  after:SEP, before:SEP         the text after / before the first SEP; a missing SEP is an error
  default:X                     X when the value is missing, null or ""
  json                          parse a JSON-encoded string into its value
  tojson                        encode a value as canonical JSON text
  int, float                    a number from its text
  prefix:X, suffix:X            X put before / after the text
  letter                        an option index as a letter (0 -> A, 1 -> B, ...)
  lettered[:SEP]                a list of options as `A. first` / `B. second` ..., one a line
                                (or joined by SEP)
  first, last                   the first / last item of a list

Field paths reach into lists: `a.b` and `a.0` walk objects and lists; `messages[*].content` maps
the rest of the path over a list, `messages[role=user].content` keeps the items whose `role` is
`user`, `choices[0]` takes one item. A path that fans out (`[*]`, `[k=v]`) gives a list.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from caseshelf.domain.errors import BadRequest
from caseshelf.domain.strictjson import loads as strict_loads

INDEX_FIELD = "_index"


class _Missing:
    """The value of a field that is not in the row (distinct from null)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class TemplateError(ValueError):
    """A template that does not parse (raised when a recipe is validated)."""


class FieldMissing(Exception):
    """A row lacks a field a template needs; the mapper turns it into a BadRequest naming the
    row and the field."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


class FilterFailed(Exception):
    """A filter could not apply to a row's value (e.g. `after:####` without `####`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


Filter = Callable[[Any], Any]


def _text(value: Any) -> str:
    """How a value reads inside a string template."""
    if isinstance(value, str):
        return value
    if value is None or value is MISSING:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


class _MissingValue(Exception):
    pass


class _FilterProblem(Exception):
    pass


# Filters run for every row of every import: each takes the common case (a string) first.


def _lower(v: Any) -> Any:
    return v.lower() if type(v) is str else _text(_present(v)).lower()


def _upper(v: Any) -> Any:
    return v.upper() if type(v) is str else _text(_present(v)).upper()


def _present(v: Any) -> Any:
    if v is MISSING:
        raise _MissingValue
    return v


def _make(name: str, args: list[str]) -> Filter:
    def arity(lo: int, hi: int) -> None:
        if not lo <= len(args) <= hi:
            want = str(lo) if lo == hi else f"{lo}-{hi}"
            raise TemplateError(f"filter {name!r} takes {want} argument(s), got {len(args)}")

    one = ":".join(args)  # single-argument filters take the rest of the spec verbatim
    if name == "lower":
        arity(0, 0)
        return _lower
    if name == "upper":
        arity(0, 0)
        return _upper
    if name == "strip":
        chars = one if args else None

        def strip(v: Any) -> Any:
            return v.strip(chars) if type(v) is str else _text(_present(v)).strip(chars)

        return strip
    if name == "replace":
        if len(args) < 2:
            raise TemplateError("filter 'replace' takes two arguments: replace:A:B")
        old, new = args[0], ":".join(args[1:])
        if not old:
            raise TemplateError("filter 'replace' needs a non-empty A in replace:A:B")
        return lambda v: _text(_present(v)).replace(old, new)
    if name == "split":
        if not args or not one:
            raise TemplateError("filter 'split' takes a separator: split:SEP")

        def split(v: Any) -> Any:
            v = _present(v)
            if isinstance(v, list):
                return v
            return [p.strip() for p in _text(v).split(one) if p.strip()]

        return split
    if name == "join":
        if not args:
            raise TemplateError("filter 'join' takes a separator: join:SEP")

        def join(v: Any) -> Any:
            v = _present(v)
            if isinstance(v, list):
                return one.join(_text(x) for x in v)
            return _text(v)

        return join
    if name in ("after", "before"):
        if not args or not one:
            raise TemplateError(f"filter {name!r} takes a separator: {name}:SEP")
        first = name == "after"

        def cut(v: Any) -> Any:
            text = v if type(v) is str else _text(_present(v))
            head, sep, tail = text.partition(one)
            if not sep:
                raise _FilterProblem(f"{one!r} not found for {name}:{one}")
            return tail if first else head

        return cut
    if name == "default":

        def default(v: Any) -> Any:
            return one if v is MISSING or v is None or v == "" else v

        return default
    return _make_value_filter(name, args, one, arity)


def _make_value_filter(
    name: str, args: list[str], one: str, arity: Callable[[int, int], None]
) -> Filter:
    """The filters of `_make` that parse, number, letter or pick (`one`: the arguments joined,
    `arity`: the check of their count)."""
    if name == "json":
        arity(0, 0)

        def parse(v: Any) -> Any:
            v = _present(v)
            if not isinstance(v, str):
                return v
            try:
                return strict_loads(v, where="the json filter's text")
            except BadRequest as exc:
                raise _FilterProblem(f"not JSON text for json: {exc.detail}") from None

        return parse
    if name == "tojson":
        arity(0, 0)
        return lambda v: orjson.dumps(_present(v), option=orjson.OPT_SORT_KEYS).decode()
    if name in ("int", "float"):
        arity(0, 0)
        kind = int if name == "int" else float

        def number(v: Any) -> Any:
            v = _present(v)
            try:
                out = kind(_text(v).replace(",", "").strip()) if isinstance(v, str) else kind(v)
            except (TypeError, ValueError):
                raise _FilterProblem(f"{v!r} is not a number for {name}") from None
            if isinstance(out, float) and not math.isfinite(out):
                raise _FilterProblem(f"{v!r} is not a finite number for {name}")
            return out

        return number
    if name in ("prefix", "suffix"):
        if not args:
            raise TemplateError(f"filter {name!r} takes the text to add: {name}:X")
        if name == "prefix":
            return lambda v: one + _text(_present(v))
        return lambda v: _text(_present(v)) + one
    if name == "letter":
        arity(0, 0)

        def letter(v: Any) -> Any:
            v = _present(v)
            text = _text(v).strip()
            if not text.isdigit() or int(text) > 25:
                raise _FilterProblem(f"{v!r} is not an option index (0-25) for letter")
            return chr(ord("A") + int(text))

        return letter
    if name == "lettered":
        sep = one if args else "\n"

        def lettered(v: Any) -> Any:
            v = _present(v)
            if not isinstance(v, list):
                raise _FilterProblem(f"{type(v).__name__} is not a list of options for lettered")
            if len(v) > 26:
                raise _FilterProblem(f"{len(v)} options are more than lettered can letter (26)")
            return sep.join(f"{chr(ord('A') + i)}. {_text(x)}" for i, x in enumerate(v))

        return lettered
    if name in ("first", "last"):
        arity(0, 0)
        at = 0 if name == "first" else -1

        def pick(v: Any) -> Any:
            v = _present(v)
            if not isinstance(v, list):
                return v
            if not v:
                raise _FilterProblem(f"an empty list has no {name} item")
            return v[at]

        return pick
    raise TemplateError(f"unknown filter {name!r}")


FILTERS = (
    "lower",
    "upper",
    "strip",
    "replace",
    "split",
    "join",
    "after",
    "before",
    "default",
    "json",
    "tojson",
    "int",
    "float",
    "prefix",
    "suffix",
    "letter",
    "lettered",
    "first",
    "last",
)


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split on `sep` outside backslash escapes, then unescape each part."""
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(ch + text[i + 1])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "\\|:}{":
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


_SELECTOR = re.compile(r"\[([^\[\]]*)\]")
_NAME = re.compile(r"[^.\[\]]+")


def _steps(path: str) -> list[tuple[str, Any]]:
    """A path with list selectors as steps: ("key", name), ("index", n), ("all", None),
    ("where", (key, value)). `a.b[*].c`, `messages[role=user].content`, `choices[0]`."""
    steps: list[tuple[str, Any]] = []
    i, n = 0, len(path)
    while i < n:
        if path[i] == ".":
            i += 1
            continue
        if path[i] == "[":
            m = _SELECTOR.match(path, i)
            if m is None:
                raise TemplateError(f"unclosed '[' in field {path!r}")
            inner = m.group(1).strip()
            if inner == "*":
                steps.append(("all", None))
            elif inner.lstrip("-").isdigit():
                steps.append(("index", int(inner)))
            elif "=" in inner:
                key, _, value = inner.partition("=")
                if not key.strip():
                    raise TemplateError(f"no key in selector [{inner}] of field {path!r}")
                steps.append(("where", (key.strip(), value.strip())))
            else:
                raise TemplateError(
                    f"selector [{inner}] of field {path!r} is not [*], [N] or [key=value]"
                )
            i = m.end()
            continue
        m = _NAME.match(path, i)
        assert m is not None
        steps.append(("key", m.group(0)))
        i = m.end()
    return steps


def _matches(value: Any, wanted: str) -> bool:
    return isinstance(value, str | int | float | bool) and _text(value) == wanted


def _list_getter(path: str) -> Callable[[Mapping[str, Any], int], Any]:
    """A lookup through list selectors: `[*]` maps the rest of the path over a list, `[k=v]`
    keeps the objects whose `k` reads as `v`, `[N]` takes one item. Once a selector fans out,
    the value is a list (every item must have the rest of the path, else the field is
    missing)."""
    steps = _steps(path)

    def step(value: Any, kind: str, arg: Any) -> Any:
        if kind == "key":
            return value[arg] if isinstance(value, Mapping) and arg in value else MISSING
        if not isinstance(value, list):
            return MISSING
        if kind == "index":
            return value[arg] if -len(value) <= arg < len(value) else MISSING
        if kind == "all":
            return value
        key, wanted = arg
        return [v for v in value if isinstance(v, Mapping) and _matches(v.get(key), wanted)]

    def get(row: Mapping[str, Any], index: int) -> Any:
        if path in row:
            return row[path]
        cur: Any = row
        many = False
        for kind, arg in steps:
            fans = kind in ("all", "where")
            if many:
                out = []
                for item in cur:
                    got = step(item, kind, arg)
                    if got is MISSING:
                        return MISSING
                    if fans:
                        out.extend(got)
                    else:
                        out.append(got)
                cur = out
            else:
                cur = step(cur, kind, arg)
                if cur is MISSING:
                    return MISSING
                many = many or fans
        return cur

    return get


def _getter(path: str) -> Callable[[Mapping[str, Any], int], Any]:
    """A field lookup: the whole name as a key first (names may hold dots or spaces), then a
    dotted path through objects and lists (with list selectors, `_list_getter`). Answers
    MISSING when absent."""
    if path == INDEX_FIELD:
        return lambda row, index: index
    if "[" in path:
        return _list_getter(path)
    parts = path.split(".")

    def get(row: Mapping[str, Any], index: int) -> Any:
        if path in row:
            return row[path]
        if len(parts) == 1:
            return MISSING
        cur: Any = row
        for part in parts:
            if isinstance(cur, Mapping):
                if part not in cur:
                    return MISSING
                cur = cur[part]
            elif isinstance(cur, list) and part.lstrip("-").isdigit():
                i = int(part)
                if not -len(cur) <= i < len(cur):
                    return MISSING
                cur = cur[i]
            else:
                return MISSING
        return cur

    return get


class FieldExpr:
    """`name|filter:arg|...`: one field of a row through a chain of filters.

    `value(row, index)` is the filtered value (FieldMissing / FilterFailed otherwise); it is
    bound at compile time to the cheapest closure that does the job, since it runs for every
    row of every import."""

    __slots__ = ("field", "filters", "has_default", "key", "source", "value")

    def __init__(
        self,
        source: str,
        field: str,
        get: Callable[[Mapping[str, Any], int], Any],
        filters: tuple[Filter, ...],
        has_default: bool,
    ) -> None:
        self.source = source
        self.field = field
        self.filters = filters
        self.has_default = has_default
        # The row key itself when the value is just `row[key]`: callers may look it up inline.
        plain = not filters and "." not in field and "[" not in field and field != INDEX_FIELD
        self.key: str | None = field if plain else None
        self.value: Callable[[Mapping[str, Any], int], Any] = self._compile(get)

    def _compile(self, get: Callable[[Mapping[str, Any], int], Any]) -> Callable[..., Any]:
        field, filters, has_default = self.field, self.filters, self.has_default
        one_key = "." not in field and "[" not in field and field != INDEX_FIELD
        if not filters and one_key:

            def plain(row: Mapping[str, Any], index: int) -> Any:
                try:
                    return row[field]
                except KeyError:
                    raise FieldMissing(field) from None

            return plain

        if one_key:
            # The same as `filtered` below with the lookup inlined: this runs once per row per
            # field on the import hot path, where one more call per value is measurable.

            def filtered_key(row: Mapping[str, Any], index: int) -> Any:
                v = row.get(field, MISSING)
                if v is MISSING and not has_default:
                    raise FieldMissing(field)
                try:
                    for f in filters:
                        v = f(v)
                except _MissingValue:
                    raise FieldMissing(field) from None
                except _FilterProblem as exc:
                    raise FilterFailed(field, str(exc)) from None
                if v is MISSING:
                    raise FieldMissing(field)
                return v

            return filtered_key

        def filtered(row: Mapping[str, Any], index: int) -> Any:
            v = get(row, index)
            if v is MISSING and not has_default:
                raise FieldMissing(field)
            try:
                for f in filters:
                    v = f(v)
            except _MissingValue:
                raise FieldMissing(field) from None
            except _FilterProblem as exc:
                raise FilterFailed(field, str(exc)) from None
            if v is MISSING:
                raise FieldMissing(field)
            return v

        return filtered


def compile_field(expr: str) -> FieldExpr:
    """Compile a field expression (the inside of a placeholder)."""
    if not isinstance(expr, str) or not expr.strip():
        raise TemplateError("empty field expression")
    parts = _split_unescaped(expr, "|")
    field = _unescape(parts[0]).strip()
    if not field:
        raise TemplateError(f"no field name in {expr!r}")
    filters: list[Filter] = []
    has_default = False
    for spec in parts[1:]:
        bits = _split_unescaped(spec, ":")
        name = bits[0].strip()
        args = [_unescape(b) for b in bits[1:]]
        filters.append(_make(name, args))
        has_default = has_default or name == "default"
    return FieldExpr(expr, field, _getter(field), tuple(filters), has_default)


@dataclass(frozen=True)
class Template:
    """A compiled template: literal text and field expressions in order."""

    source: str
    parts: tuple[str | FieldExpr, ...]

    @property
    def fields(self) -> list[str]:
        return [p.field for p in self.parts if isinstance(p, FieldExpr)]

    def render(self, row: Mapping[str, Any], index: int) -> Any:
        parts = self.parts
        if len(parts) == 1:
            only = parts[0]
            return only.value(row, index) if isinstance(only, FieldExpr) else only
        out = []
        for p in parts:
            out.append(_text(p.value(row, index)) if isinstance(p, FieldExpr) else p)
        return "".join(out)


def compile_template(text: str) -> Template:
    """Compile `text`; TemplateError on an unclosed brace, an empty placeholder or an unknown
    filter."""
    if not isinstance(text, str):
        raise TemplateError("a template is a string")
    parts: list[str | FieldExpr] = []
    lit: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "{" and i + 1 < n and text[i + 1] == "{":
            lit.append("{")
            i += 2
            continue
        if ch == "}" and i + 1 < n and text[i + 1] == "}":
            lit.append("}")
            i += 2
            continue
        if ch == "}":
            raise TemplateError(f"unmatched '}}' at offset {i} (write '}}}}' for a literal brace)")
        if ch == "{":
            j = i + 1
            while j < n and text[j] != "}":
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise TemplateError(f"unclosed '{{' at offset {i}")
            if lit:
                parts.append("".join(lit))
                lit = []
            parts.append(compile_field(text[i + 1 : j]))
            i = j + 1
            continue
        lit.append(ch)
        i += 1
    if lit or not parts:
        parts.append("".join(lit))
    return Template(text, tuple(parts))


def render_value(value: Any, row: Mapping[str, Any], index: int) -> Any:
    """Render every string inside a JSON value as a template (grader templates' configs)."""
    if isinstance(value, str):
        return compile_template(value).render(row, index)
    if isinstance(value, dict):
        return {k: render_value(v, row, index) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, row, index) for v in value]
    return value


def compile_render(text: str) -> Callable[[Mapping[str, Any], int], Any]:
    """`compile_template(text).render`, or a cheaper function that renders the same: a constant
    for literal text, the field's own lookup for a template that is one placeholder."""
    tpl = compile_template(text)
    if len(tpl.parts) == 1:
        only = tpl.parts[0]
        if isinstance(only, FieldExpr):
            return only.value
        return lambda row, index: only
    return tpl.render


def compile_value(value: Any) -> Callable[[Mapping[str, Any], int], Any]:
    """Compile every string inside a JSON value once; the result renders it per row."""
    if isinstance(value, str):
        return compile_render(value)
    if isinstance(value, dict):
        items = [(k, compile_value(v)) for k, v in value.items()]
        return lambda row, index: {k: f(row, index) for k, f in items}
    if isinstance(value, list):
        fns = [compile_value(v) for v in value]
        return lambda row, index: [f(row, index) for f in fns]
    return lambda row, index: value


def check_template(text: str, where: str) -> Template:
    try:
        return compile_template(text)
    except TemplateError as exc:
        raise BadRequest(f"{where}: {exc}", field=where) from None


def check_field(expr: str, where: str) -> FieldExpr:
    try:
        return compile_field(expr)
    except TemplateError as exc:
        raise BadRequest(f"{where}: {exc}", field=where) from None


def fields_of(templates: Sequence[str]) -> list[str]:
    out: list[str] = []
    for t in templates:
        for f in compile_template(t).fields:
            if f not in out:
                out.append(f)
    return out
