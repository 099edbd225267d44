"""The one YAML loader of the package: safe constructors, bounded work, no silent overwrite.

PyYAML's safe loaders build an alias as a reference to the anchored value, so a "billion laughs"
document of a few hundred bytes loads quickly and then explodes in whatever walks it next
(validation, canonical JSON). `load_yaml` composes the node graph first (libyaml's C composer
where present), measures it without expanding anything, and refuses before constructing a value:

- nesting deeper than `MAX_DEPTH` (counted through aliases);
- aliases that would add more than `MAX_ALIAS_NODES` nodes once expanded (the whole cost of
  anchors to whoever walks the value), or an alias that contains itself;
- a mapping that names a key twice (YAML 1.2 forbids it; PyYAML keeps the last value). Keys
  brought in by a merge (`<<: *base`) may be overridden, as the merge key means.

Errors are `YamlLimitError`, a `yaml.YAMLError`: every caller that already turns invalid YAML into
its own error (naming its file, task or case) does the same for these.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

MAX_DEPTH = 200
MAX_ALIAS_NODES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class YamlLimitError(yaml.YAMLError):
    """A YAML document refused for the work it would cost, or for a duplicate key."""


_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
# The booleans, integers and floats YAML 1.1 (PyYAML's resolver) and YAML 1.2 (its core schema:
# ruamel.yaml, Go's yaml.v3) both write this way and read as the same value, with the first
# characters each can start with.
_AGREED = (
    (_BOOL_TAG, r"true|True|TRUE|false|False|FALSE", "tTfF"),
    (_INT_TAG, r"[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+", "-+0123456789"),
    (
        _FLOAT_TAG,
        r"[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?|\.[0-9]+(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        "-+0123456789.",
    ),
)


class _DatasetResolver(Resolver):
    """How a dataset file's plain scalars are read: as the text they were written with, unless
    YAML 1.1 and YAML 1.2 read them as the same null, boolean or number (a case means the text
    it was written with, and a file must not mean one thing to one reader and another to the
    next). So dates and times stay text (JSON has no date type), and so do `yes`, `no`, `on`
    and `off` (YAML 1.1's booleans), `3:2` (YAML 1.1's base 60: 182), `010` (YAML 1.1's octal:
    8; YAML 1.2's 10), `1_000`, `0b11`, `1e3` and `0o17`."""


def _dataset_resolvers() -> dict[str, list[tuple[str, re.Pattern[str]]]]:
    kept = {_TIMESTAMP_TAG, _BOOL_TAG, _INT_TAG, _FLOAT_TAG}
    table: dict[str, list[tuple[str, re.Pattern[str]]]] = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in kept]
        for first, resolvers in Resolver.yaml_implicit_resolvers.items()
    }
    for tag, pattern, firsts in _AGREED:
        rx = re.compile(f"^(?:{pattern})$")
        for first in firsts:
            table.setdefault(first, []).append((tag, rx))
    return {first: resolvers for first, resolvers in table.items() if resolvers}


_DatasetResolver.yaml_implicit_resolvers = _dataset_resolvers()

_CParser: Any = getattr(yaml, "CParser", None)


def _loader_class(resolver: type[Resolver]) -> type:
    if _CParser is not None:  # libyaml: the same safe constructors, many times faster

        class CLoader(_CParser, SafeConstructor, resolver):  # type: ignore[misc, valid-type]
            def __init__(self, stream: str) -> None:
                _CParser.__init__(self, stream)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)

        return CLoader

    class PyLoader(
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.composer.Composer,
        SafeConstructor,
        resolver,  # type: ignore[misc, valid-type]
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return PyLoader


_LOADERS = {True: _loader_class(Resolver), False: _loader_class(_DatasetResolver)}


def _where(node: Node) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "?"


def check_node_graph(
    root: Node, *, max_depth: int = MAX_DEPTH, max_alias_nodes: int = MAX_ALIAS_NODES
) -> None:
    """Refuse a composed document that is too deep, expands too far through its aliases, holds
    a recursive alias or repeats a key. Iterative, and each distinct node is measured once: the
    check costs what the document's text does, whatever its aliases would expand to."""
    # expanded size and depth of each distinct node measured so far, by id
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    distinct = 0
    on_path: set[int] = set()
    # (node, children visited yet?) ; children are pushed after their parent is first seen
    stack: list[tuple[Node, bool]] = [(root, False)]
    depth_of_path = 0
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            depth_of_path -= 1
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            height[key] = 1 + max((height[id(k)] for k in kids), default=0)
            if height[key] > max_depth:
                raise YamlLimitError(
                    f"YAML nested deeper than {max_depth} levels (at {_where(node)})"
                )
            continue
        if key in size:
            continue  # an alias of a node already measured
        if key in on_path:
            raise YamlLimitError(f"YAML alias refers to itself (at {_where(node)})")
        distinct += 1
        depth_of_path += 1
        if depth_of_path > max_depth:
            raise YamlLimitError(f"YAML nested deeper than {max_depth} levels (at {_where(node)})")
        if isinstance(node, MappingNode):
            _check_keys(node)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)
    expanded = size[id(root)]
    if expanded - distinct > max_alias_nodes:
        raise YamlLimitError(
            f"YAML aliases expand to {expanded} nodes from {distinct} written "
            f"(at most {max_alias_nodes} more through aliases): refused as an alias bomb"
        )


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_keys(node: MappingNode) -> None:
    seen: dict[tuple[str, str], Node] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        k = (key_node.tag, key_node.value)
        if k in seen:
            raise YamlLimitError(
                f"duplicate key {key_node.value!r} at {_where(key_node)} "
                f"(first at {_where(seen[k])}): a key is given once"
            )
        seen[k] = key_node


def load_yaml(text: str | bytes, *, timestamps: bool = False) -> Any:
    """The value of one YAML document, built by the safe constructors after `check_node_graph`.

    `timestamps=False` reads it as a dataset file: dates and times, and whatever YAML 1.1 and
    1.2 read differently, stay the text written (`_DatasetResolver`). True reads it as
    `yaml.safe_load` does (YAML 1.1, `datetime`s built), as the tools that write task and eval
    configs read them. Raises `yaml.YAMLError` (its `YamlLimitError` for the bounds)."""
    loader = _LOADERS[timestamps](text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # the pure-Python composer, on a very deep document
            raise YamlLimitError(f"YAML nested deeper than {MAX_DEPTH} levels") from None
        if node is None:
            return None
        check_node_graph(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: the problem and where, without PyYAML's multi-line layout."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        return f"{exc.problem or exc.context or 'invalid YAML'}{where}"
    return " ".join(str(exc).split())
