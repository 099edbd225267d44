"""Rules the test suite keeps about itself, read from its own files:

- `tests/unit` holds pure domain tests: a unit test file imports nothing of caseshelf but
  `caseshelf.domain` (what touches adapters, services, processes or sockets is integration);
- every test checks something: an `assert`, `pytest.raises`/`warns`, `pytest.fail`, or a call
  of a helper that asserts;
- no test checks only inside a loop that could run zero times (a loop over anything but a
  literal collection), since such a test passes having checked nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]
# Calls that check without a visible `assert`: pytest's and schemathesis's.
CHECKING_CALLS = frozenset({"raises", "warns", "deprecated_call", "fail", "validate_response"})


def parsed() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(TESTS.rglob("*.py"))}


def found_tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            yield node


def called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def asserting_helpers(trees: dict[Path, ast.Module]) -> set[str]:
    """Names of the suite's own functions (not tests) that hold an `assert`."""
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and not node.name.startswith("test")
                and any(isinstance(n, ast.Assert) for n in ast.walk(node))
            ):
                names.add(node.name)
    return names


def checks(node: ast.AST, helpers: set[str]) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Call):
        return called_name(node) in CHECKING_CALLS or called_name(node) in helpers
    return False


def literal(iterable: ast.expr) -> bool:
    """A collection the loop surely goes through: a non-empty literal or a constant range."""
    if isinstance(iterable, ast.List | ast.Tuple | ast.Set):
        return bool(iterable.elts)
    if isinstance(iterable, ast.Dict):
        return bool(iterable.keys)
    if isinstance(iterable, ast.Call) and called_name(iterable) in {"range", "enumerate", "zip"}:
        return all(literal(a) or isinstance(a, ast.Constant) for a in iterable.args)
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
        return iterable.func.attr in {"items", "keys", "values"} and literal(iterable.func.value)
    return False


def test_unit_tests_import_only_the_domain() -> None:
    offending = []
    for path, tree in parsed().items():
        if path.parent.name != "unit":
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("caseshelf") and not name.startswith("caseshelf.domain"):
                    offending.append(f"{path.relative_to(TESTS)}:{node.lineno} imports {name}")
    assert offending == [], "a unit test that needs more than the domain is an integration test"


def test_every_test_checks_something_and_not_only_in_a_loop_that_may_not_run() -> None:
    trees = parsed()
    helpers = asserting_helpers(trees)
    unchecked, loop_only = [], []
    for path, tree in trees.items():
        for fn in found_tests(tree):
            found = [n for n in ast.walk(fn) if checks(n, helpers)]
            where = f"{path.relative_to(TESTS)}:{fn.lineno} {fn.name}"
            if not found:
                unchecked.append(where)
                continue
            in_loops = {
                id(n)
                for loop in ast.walk(fn)
                if isinstance(loop, ast.For | ast.AsyncFor) and not literal(loop.iter)
                for n in ast.walk(loop)
                if checks(n, helpers)
            }
            if all(id(n) in in_loops for n in found):
                loop_only.append(where)
    assert unchecked == [], "tests that check nothing"
    assert loop_only == [], "tests whose every check is in a loop that may run zero times"
    # (and the rule itself sees this very file's tests)
    assert len(list(found_tests(trees[Path(__file__).resolve()]))) == 2
