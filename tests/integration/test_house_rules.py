"""Rules the test suite keeps about itself, read from its own files:

- `tests/unit` holds pure domain tests: a unit test file imports nothing of caseshelf but
  `caseshelf.domain` (what touches adapters, services, processes or sockets is integration);
- every test checks something: an `assert`, `pytest.raises`/`warns`, `pytest.fail`, or a call
  of a helper that asserts;
- no test checks only inside a loop that could run zero times (a loop over anything but a
  literal collection), since such a test passes having checked nothing.

And rules the package keeps, read from `shared/caseshelf`:

- no import circles: the graph of its modules' imports (at module level, inside functions and
  under `TYPE_CHECKING`) has no cycle;
- an import inside a function says why it is there, with a `# lazy: <reason>` comment on its
  line (a measured start-up cost);
- no function is longer than 80 lines;
- no tracked file is a leftover of a merge or an editor (`.orig`, `.rej`, `.bak`, `.swp`, `~`).

Each rule has an allow-list of what is known to break it today; it must only shrink (an entry
that no longer breaks the rule fails too, so that the list is kept true).
"""

from __future__ import annotations

import ast
import gc
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "shared" / "caseshelf"
LAZY_MARK = "# lazy:"
MAX_FUNCTION_LINES = 80
# Calls that check without a visible `assert`: pytest's and schemathesis's.
CHECKING_CALLS = frozenset({"raises", "warns", "deprecated_call", "fail", "validate_response"})


def parsed(root: Path) -> dict[Path, ast.Module]:
    """Every file under `root`, parsed. The cyclic garbage collector waits while the trees are
    built: they hold no cycles, and its passes over the growing trees took half the time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.py"))}
    finally:
        if collecting:
            gc.enable()


@pytest.fixture(scope="module")
def suite_trees() -> dict[Path, ast.Module]:
    """The suite's files, parsed once for the rules about tests (which only read the trees)."""
    return parsed(TESTS)


@pytest.fixture(scope="module")
def package_trees() -> dict[Path, ast.Module]:
    """The package's files, parsed once for the rules about the package."""
    return parsed(PACKAGE)


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


def test_unit_tests_import_only_the_domain(suite_trees: dict[Path, ast.Module]) -> None:
    offending = []
    for path, tree in suite_trees.items():
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


def test_every_test_checks_something_and_not_only_in_a_loop_that_may_not_run(
    suite_trees: dict[Path, ast.Module],
) -> None:
    trees = suite_trees
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
    # (and the rule itself sees this very file's tests, every one)
    seen = {t.name for t in found_tests(trees[Path(__file__).resolve()])}
    assert seen == {name for name in globals() if name.startswith("test_")}


# --- the package's own rules ------------------------------------------------------------------

# Circles known today, each as the set of its modules (none: a new one fails).
KNOWN_CIRCLES: list[frozenset[str]] = []

# Imports inside functions without a `# lazy:` reason, by file (relative to shared/caseshelf):
# how many each holds today.
UNMARKED_LAZY_IMPORTS: dict[str, int] = {}

# Functions over MAX_FUNCTION_LINES today, as "file:qualified name", each to leave the list as
# it is split.
LONG_FUNCTIONS: frozenset[str] = frozenset()


def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(
    name: str, path: Path, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]
) -> Iterator[str]:
    """The package's modules an import statement of module `name` loads: `from a import b`
    loads module `a.b` when there is one, else `a`."""
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names if a.name in modules)
        return
    base = node.module or ""
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            yield f"{base}.{alias.name}"
        elif base in modules:
            yield base


def import_graph(trees: dict[Path, ast.Module]) -> dict[str, dict[str, list[int]]]:
    """module -> imported module -> the lines importing it, every import statement counted
    (module level, inside functions, under `TYPE_CHECKING`)."""
    modules = package_modules()
    graph: dict[str, dict[str, list[int]]] = {name: {} for name in modules}
    for name, path in modules.items():
        for node in ast.walk(trees[path]):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in imported_modules(name, path, node, modules):
                    if target != name:
                        graph[name].setdefault(target, []).append(node.lineno)
    return graph


def circles(graph: dict[str, dict[str, list[int]]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def describe(circle: frozenset[str], graph: dict[str, dict[str, list[int]]]) -> str:
    ties = [
        f"{a} -> {b} (line {', '.join(map(str, graph[a][b]))})"
        for a in sorted(circle)
        for b in sorted(graph[a])
        if b in circle
    ]
    return "; ".join(ties)


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b": [1]}, "b": {"c": [2]}, "c": {"a": [3]}, "d": {"a": [4]}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]
    assert "c -> a (line 3)" in describe(frozenset({"a", "b", "c"}), graph)


def test_no_import_circles(package_trees: dict[Path, ast.Module]) -> None:
    graph = import_graph(package_trees)
    found = circles(graph)
    new = [describe(c, graph) for c in found if c not in KNOWN_CIRCLES]
    gone = [sorted(c) for c in KNOWN_CIRCLES if c not in found]
    assert new == [], "import circles: move what both sides need to a module below them"
    assert gone == [], "circles no longer there: take them out of KNOWN_CIRCLES"


def function_nodes(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function of a module with its qualified name (`Class.method`, `outer.inner`)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from function_nodes(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from function_nodes(node, f"{prefix}{node.name}.")
        else:
            yield from function_nodes(node, prefix)


def test_imports_inside_functions_say_why(package_trees: dict[Path, ast.Module]) -> None:
    unmarked: dict[str, list[int]] = {}
    for path, tree in package_trees.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        inside = {
            node.lineno
            for _, fn in function_nodes(tree)
            for node in ast.walk(fn)
            if isinstance(node, ast.Import | ast.ImportFrom)
        }
        missing = sorted(n for n in inside if LAZY_MARK not in lines[n - 1])
        if missing:
            unmarked[path.relative_to(PACKAGE).as_posix()] = missing
    grown = {f: n for f, n in unmarked.items() if len(n) > UNMARKED_LAZY_IMPORTS.get(f, 0)}
    shrunk = {
        f: len(unmarked.get(f, []))
        for f, n in UNMARKED_LAZY_IMPORTS.items()
        if len(unmarked.get(f, [])) < n
    }
    assert grown == {}, f"imports inside functions need a `{LAZY_MARK} <reason>` comment"
    assert shrunk == {}, "fewer unmarked imports than UNMARKED_LAZY_IMPORTS allows: lower it"


def test_functions_are_at_most_80_lines(package_trees: dict[Path, ast.Module]) -> None:
    long: set[str] = set()
    for path, tree in package_trees.items():
        for name, fn in function_nodes(tree):
            assert isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES:
                long.add(f"{path.relative_to(PACKAGE).as_posix()}:{name}")
    assert sorted(long - LONG_FUNCTIONS) == [], f"functions over {MAX_FUNCTION_LINES} lines"
    assert sorted(LONG_FUNCTIONS - long) == [], "no longer over the limit: take out of the list"


LEFTOVER_SUFFIXES = (".orig", ".rej", ".bak", ".swp", "~")


def test_no_tracked_file_is_a_merge_or_editor_leftover() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=TESTS.parent, capture_output=True, check=True
    ).stdout.decode()
    tracked = listed.split("\0")
    assert len(tracked) > 100, "git listed too few files to be this repository"
    assert [f for f in tracked if f.endswith(LEFTOVER_SUFFIXES)] == []
