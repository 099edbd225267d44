"""A small YAML writer for the value shapes a case holds: what the export's YAML files cost.

An export writes three YAML files per case (`input.yaml`, `annotations.yaml`,
`environment.yaml`). PyYAML's representer and serializer are Python even with libyaml's emitter,
and at ~0.15 ms a document they were most of a directory export's time
(`bench/bench_export.py`, `export-dir`). `dump_plain_yaml` writes the same
block style directly for JSON-shaped values (mappings with string keys, lists, strings, numbers,
booleans, null) and answers None for anything else, which the caller hands to PyYAML.

The output reads back (`yaml.safe_load`, `caseshelf.domain.boundedyaml.load_yaml`) to the value
it was given, which `tests/unit/test_yamlwriter.py` checks on generated values:

- keys sorted, block mappings, a list under a key not indented (PyYAML's default layout), `{}`
  and `[]` for empty containers;
- a string is written plain only when it is one line of text that cannot be read as anything
  else: no indicator first, no `: ` or ` #` inside, PyYAML's resolver (YAML 1.1) reads it back
  as a string (not `null`, `yes`, `on`, a number, a date, ...), and so does YAML 1.2's core
  schema, which the harnesses' other readers follow (Go's yaml.v3, ruamel.yaml): `1e3`,
  `1.5e3` and `0o17` are text to YAML 1.1 but numbers to YAML 1.2; every other string is
  double-quoted JSON text, with the
  characters YAML treats as line breaks (NEL, LS, PS) or refuses in a stream (DEL, C1 controls,
  BOM, U+FFFE/U+FFFF) escaped as well;
- floats as PyYAML writes them (`1.0e+17`, since YAML 1.1 reads `1e17` as a string).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from yaml.resolver import Resolver

# Longest key written as an implicit (`key: value`) key: YAML readers refuse a simple key past
# 1024 characters, PyYAML itself switches to `? key` at 128; longer keys go to PyYAML.
MAX_KEY_CHARS = 128
# A plain scalar: characters a YAML stream holds raw and that are not line breaks (no tab, no
# C0/C1 control, no NEL/LS/PS/BOM), not starting with an indicator, a space or a dot (`...` at
# the start of a line ends the document), not ending with a space or a colon, and without the
# `: ` and ` #` that would end it.
_PLAIN_CHAR = "[\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
_PLAIN = re.compile(f"(?![-?:,\\[\\]{{}}#&*!|>'\"%@`. ]){_PLAIN_CHAR}+(?<![ :])")
# Characters JSON leaves raw that a YAML stream must not hold raw.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")
_RESOLVERS = Resolver.yaml_implicit_resolvers
_STR_TAG = "tag:yaml.org,2002:str"
# What YAML 1.2 readers take a plain scalar for other than a string: the core schema's null,
# booleans, integers (decimal, 0o, 0x) and floats (an exponent without a dot or a sign too),
# and the digit groups and 0b integers that ruamel.yaml and Go's yaml.v3 read as well.
YAML12_NOT_TEXT = re.compile(
    r"~|null|Null|NULL|true|True|TRUE|false|False|FALSE"
    r"|[-+]?[0-9][0-9_]*|0o[0-7_]+|0x[0-9a-fA-F_]+|0b[01_]+"
    r"|[-+]?(?:\.[0-9_]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)


class _NotPlain(Exception):
    """The value holds something this writer leaves to PyYAML."""


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _plain_ok(text: str) -> bool:
    """True when `text` written plain reads back as this same string."""
    if not _PLAIN.fullmatch(text) or ": " in text or " #" in text:
        return False
    if YAML12_NOT_TEXT.fullmatch(text):
        return False
    return not any(rx.match(text) for tag, rx in _RESOLVERS.get(text[0], ()) if tag != _STR_TAG)


def _string(text: str) -> str:
    if _plain_ok(text):
        return text
    try:
        quoted = orjson.dumps(text).decode("utf-8")
    except orjson.JSONEncodeError:  # a lone surrogate: left to PyYAML
        raise _NotPlain from None
    return _YAML_UNSAFE.sub(_escape, quoted)


def _float(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        raise _NotPlain
    text = repr(value).lower()
    if "." not in text and "e" in text:
        text = text.replace("e", ".0e", 1)
    return text


def _scalar(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return _string(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float:
        return _float(value)
    if kind is dict and not value:
        return "{}"
    if kind is list and not value:
        return "[]"
    raise _NotPlain


def _key(key: Any) -> str:
    if type(key) is not str or len(key) > MAX_KEY_CHARS:
        raise _NotPlain
    return _string(key)


def _lines(value: Any) -> list[str]:
    """The block lines of a non-empty dict or list, at indent 0."""
    out: list[str] = []
    if type(value) is dict:
        keys = sorted(value)
        for k in keys:
            item = value[k]
            kind = type(item)
            if (kind is dict or kind is list) and item:
                out.append(_key(k) + ":")
                pad = "  " if kind is dict else ""  # a list under a key is not indented
                out.extend(pad + line for line in _lines(item))
            else:
                out.append(_key(k) + ": " + _scalar(item))
        return out
    if type(value) is not list:
        raise _NotPlain
    for item in value:
        kind = type(item)
        if (kind is dict or kind is list) and item:
            inner = _lines(item)
            out.append("- " + inner[0])
            out.extend("  " + line for line in inner[1:])
        else:
            out.append("- " + _scalar(item))
    return out


def dump_plain_yaml(value: Any) -> bytes | None:
    """`value` (a dict) as a block YAML document in UTF-8, keys sorted; None when it holds a
    shape this writer leaves to PyYAML (a key that is not a string or is long, a non-finite
    float, a tuple, a date, a lone surrogate, ...)."""
    if type(value) is not dict:
        return None
    if not value:
        return b"{}\n"
    try:
        lines = _lines(value)
    except (_NotPlain, TypeError):  # TypeError: keys of mixed types do not sort
        return None
    return ("\n".join(lines) + "\n").encode("utf-8")
