"""The lock file (`caseshelf.lock`): the dataset versions an eval repository runs on, pinned by
content digest. Pure: the model, its TOML form, and errors that name the file, line and pin.

    format = 1

    [pins.gsm8k]
    ref = "gsm8k@stable"
    version = "1.1.0"
    digest = "sha256:18e1…"
    cases = 1319
    registry = "embedded"

    [pins.gsm8k-easy]
    ref = "gsm8k@1.1.0"
    …
    subset = { limit = 200, selected = 200, tags = ["easy"], total = 1319 }

One table per pin, pins sorted by name, keys in a fixed order, nothing that changes between two
writes of the same pins (no times): a pull request's diff of the file shows only what moved. It
is read with `tomllib` and written here (the standard library reads TOML but does not write it;
the shape is small and fixed, so a writer of its own keeps the output byte-stable without a new
dependency).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from caseshelf.domain.errors import BadRequest

if TYPE_CHECKING:
    from caseshelf.domain.subset import Selection

# The rules of `caseshelf.domain.models` (ids, labels, digests) and of a subset's seed, repeated
# so that reading a lock imports neither the case models nor the manifest code: `cs.load` of a
# cached version pays for what it runs (a unit test holds them equal).
DATASET_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
LABEL_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
DatasetId = Annotated[str, StringConstraints(pattern=DATASET_ID_PATTERN)]
Label = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]
Digest = Annotated[str, StringConstraints(pattern=DIGEST_PATTERN)]
Seed = int | Annotated[str, StringConstraints(min_length=1, max_length=256)]

LOCK_NAME = "caseshelf.lock"
LOCK_FORMAT = 1
# The registry a pin came from when it was resolved in process rather than over HTTP.
EMBEDDED = "embedded"
# `ID@REF`: a dataset id, then a label, `latest`, a version tag or `sha256:<hex>`.
PIN_REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}@(sha256:[0-9a-f]{64}|[A-Za-z0-9._-]{1,64})$"

HEADER = (
    "# caseshelf.lock: the dataset versions this repository runs on, pinned by content digest.\n"
    "# Written by `caseshelf pin` and `caseshelf update`; `caseshelf check` holds the registry "
    "to it.\n"
)


class _Strict(BaseModel):
    # Built on first use: most commands that import this module read no lock file.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class SubsetPin(_Strict):
    """The selection a subset pin takes of its version (ids -> tags -> limit -> sample, as the
    subset route runs it) and the stamp it had when pinned: `total` cases in the version,
    `selected` of them taken."""

    ids: list[str] | None = None
    tags: list[str] | None = None
    limit: int | None = Field(default=None, ge=1)
    sample: int | None = Field(default=None, ge=1)
    seed: Seed | None = None
    total: int = Field(ge=0)
    selected: int = Field(ge=1)

    def selection(self) -> Selection:
        from caseshelf.domain.subset import Selection  # lazy: ~45 ms, for a subset pin only

        return Selection(
            ids=tuple(self.ids) if self.ids is not None else None,
            tags=tuple(self.tags) if self.tags is not None else None,
            limit=self.limit,
            sample=self.sample,
            seed=self.seed,
        )

    def request(self) -> dict[str, Any]:
        """The body of the subset route that selects the same cases."""
        fields: dict[str, Any] = {
            "ids": self.ids,
            "tags": self.tags,
            "limit": self.limit,
            "sample": self.sample,
        }
        if self.sample is not None:
            fields["seed"] = self.seed
        return {k: v for k, v in fields.items() if v is not None}


class Pin(_Strict):
    """One pin: the ref as written, what it resolved to, and where it came from."""

    ref: str = Field(pattern=PIN_REF_PATTERN, description="The ref as written: ID@REF.")
    version: Label = Field(description="The version label the ref resolved to.")
    digest: Digest = Field(description="The version's content digest.")
    cases: int = Field(ge=0, description="Cases the pin gives (the subset's, for a subset).")
    registry: str = Field(min_length=1, description="The API URL, or `embedded`.")
    subset: SubsetPin | None = None

    @property
    def dataset(self) -> str:
        return self.ref.partition("@")[0]

    @property
    def ref_part(self) -> str:
        return self.ref.partition("@")[2]

    @property
    def pinned_ref(self) -> str:
        """`ID@sha256:<hex>`: the pinned content itself, whatever the ref does later."""
        return f"{self.dataset}@{self.digest}"


class Lock(_Strict):
    format: Literal[1] = 1
    pins: dict[DatasetId, Pin] = Field(default_factory=dict)

    @field_validator("pins")
    @classmethod
    def _sorted(cls, v: dict[str, Pin]) -> dict[str, Pin]:
        return dict(sorted(v.items()))

    def with_pin(self, name: str, pin: Pin) -> Lock:
        return Lock(pins={**self.pins, name: pin})

    def without(self, name: str) -> Lock:
        return Lock(pins={k: v for k, v in self.pins.items() if k != name})


# -- reading ----------------------------------------------------------------------------------

_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER_LINE = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$")
_KEY_LINE = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|[A-Za-z0-9_-]+)\s*=')


class LockError(BadRequest):
    """A lock file that does not parse, or names something the lock model does not hold."""


def parse_lock(text: str, path: str) -> Lock:
    """The lock held by `text` (the file at `path`). A file that is not TOML, a key the model
    does not know, or a value of the wrong shape is a `LockError` naming the file, the line and
    the pin (fields `file`, `line`, `pin`)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_AT.search(str(exc))
        line = int(m.group(1)) if m else None
        reason = _TOML_AT.sub("", str(exc)).strip()
        pin = _pin_at(text, line) if line else None
        raise _lock_error(path, line, pin, f"not TOML: {reason}") from None
    try:
        return Lock.model_validate(raw)
    except ValidationError as exc:
        # An unknown key first: a misspelt key is also reported as the key it should be, missing.
        err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        loc = tuple(str(p) for p in err["loc"])
        pin = loc[1] if len(loc) > 1 and loc[0] == "pins" else None
        line = line_of(text, loc)
        what = ".".join(loc[2:]) if pin else ".".join(loc)
        if err["type"] == "extra_forbidden":
            reason = f"unknown key {what!r}{_known_keys(loc)}"
        else:
            reason = f"{what or 'the file'}: {err['msg']}"
            if err["type"] == "literal_error" and loc == ("format",):
                reason += " (this lock was written by a newer caseshelf: upgrade it)"
        raise _lock_error(path, line, pin, reason) from None


def _known_keys(loc: Sequence[str]) -> str:
    model: type[BaseModel] = Lock
    if len(loc) >= 3 and loc[0] == "pins":
        model = SubsetPin if len(loc) >= 4 and loc[2] == "subset" else Pin
    return f" (the keys here are {', '.join(model.model_fields)})"


def _lock_error(path: str, line: int | None, pin: str | None, reason: str) -> LockError:
    where = f"{path}:{line}" if line else path
    who = f" pin {pin}:" if pin else ""
    return LockError(
        f"{where}:{who} {reason}; fix the file (or restore it with git) and run the command "
        "again; nothing was rewritten",
        file=path,
        line=line,
        pin=pin,
    )


def _tables(text: str) -> list[tuple[int, tuple[str, ...], str | None]]:
    """(line number, table path, key or None) of every header and key line of `text`."""
    out: list[tuple[int, tuple[str, ...], str | None]] = []
    table: tuple[str, ...] = ()
    for n, line in enumerate(text.splitlines(), start=1):
        header = _HEADER_LINE.match(line)
        if header and not line.lstrip().startswith("[["):
            table = tuple(_unquote(p) for p in _split_dotted(header.group(1)))
            out.append((n, table, None))
            continue
        key = _KEY_LINE.match(line)
        if key:
            out.append((n, table, _unquote(key.group(1))))
    return out


def _split_dotted(key: str) -> list[str]:
    return [p.strip() for p in re.findall(r'"(?:[^"\\]|\\.)*"|[^.]+', key)]


def _unquote(part: str) -> str:
    part = part.strip()
    if part.startswith('"') and part.endswith('"') and len(part) >= 2:
        return str(tomllib.loads(f"k = {part}")["k"])
    return part


def line_of(text: str, loc: Sequence[str]) -> int | None:
    """The line of `text` that holds what `loc` (a validation error's location: `pins`, the
    pin's name, its key …) names: the key's own line, else its table's header, else None."""
    best: int | None = None
    best_len = -1
    for n, table, key in _tables(text):
        path = (*table, key) if key is not None else table
        if path == tuple(loc[: len(path)]) and len(path) >= best_len:
            best, best_len = n, len(path)
    return best


def _pin_at(text: str, line: int) -> str | None:
    """The pin whose table holds `line` (none for a header line: it may be the broken one)."""
    lines = text.splitlines()
    if line > len(lines) or lines[line - 1].lstrip().startswith("["):
        return None
    pin = None
    for n, table, _key in _tables(text):
        if n > line:
            break
        pin = table[1] if len(table) >= 2 and table[0] == "pins" else None
    return pin


def pin_lines(text: str) -> dict[str, int]:
    """Pin name -> the line of its table's header (for messages about a pin)."""
    out: dict[str, int] = {}
    for n, table, key in _tables(text):
        if key is None and len(table) == 2 and table[0] == "pins":
            out.setdefault(table[1], n)
    return out


# -- writing ----------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_PIN_KEYS = ("ref", "version", "digest", "cases", "registry")


def render_lock(lock: Lock) -> str:
    """The lock as TOML: a comment, `format`, then one table per pin in name order with its keys
    in a fixed order. The same pins give the same bytes."""
    parts = [HEADER, f"format = {lock.format}\n"]
    for name in sorted(lock.pins):
        pin = lock.pins[name]
        lines = [f"\n[pins.{_key(name)}]\n"]
        lines += [f"{k} = {_value(getattr(pin, k))}\n" for k in _PIN_KEYS]
        if pin.subset is not None:
            fields = pin.subset.model_dump(exclude_none=True)
            inline = ", ".join(f"{_key(k)} = {_value(fields[k])}" for k in sorted(fields))
            lines.append(f"subset = {{ {inline} }}\n")
        parts.append("".join(lines))
    return "".join(parts)


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else _string(name)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_ESCAPES["\r"] = "\\r"


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


__all__ = [
    "EMBEDDED",
    "LOCK_FORMAT",
    "LOCK_NAME",
    "Lock",
    "LockError",
    "Pin",
    "SubsetPin",
    "line_of",
    "parse_lock",
    "pin_lines",
    "render_lock",
]
