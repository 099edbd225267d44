"""How the CLI's code is laid out, read from its own files: every command is a function at
module level of its capability module (importable and callable alone), no function in
`caseshelf.cli` is over 80 lines, and its modules import one another without a circle."""

from __future__ import annotations

import ast
import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import caseshelf.cli
from caseshelf.cli import COMMAND_MODULES, begin

pytestmark = pytest.mark.integration

CLI = Path(caseshelf.cli.__file__).parent
MAX_LINES = 80


def modules() -> dict[str, ast.Module]:
    """Each module of `caseshelf.cli` by its dotted name, parsed."""
    found = {}
    for path in sorted(CLI.glob("*.py")):
        name = "caseshelf.cli" if path.stem == "__init__" else f"caseshelf.cli.{path.stem}"
        found[name] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def imported(tree: ast.Module, known: set[str]) -> set[str]:
    """The modules of `known` that `tree` imports anywhere (in functions and TYPE_CHECKING
    blocks too); `from P import M` of a module M counts as P.M."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                target = full if full in known else node.module
                if target in known:
                    out.add(target)
    return out


def circle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path of imports from `start` back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        here, path = stack.pop()
        for nxt in sorted(graph[here]):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_cli_modules_import_one_another_without_a_circle() -> None:
    trees = modules()
    graph = {name: imported(tree, set(trees)) - {name} for name, tree in trees.items()}
    circles = [c for name in sorted(graph) if (c := circle_from(name, graph)) is not None]
    assert circles == [], "an import circle in caseshelf.cli: " + "; ".join(
        " -> ".join(c) for c in circles
    )
    # (the graph is the real one: the start-up path's edges are in it)
    assert "caseshelf.cli.common" in graph["caseshelf.cli.root"]
    assert "caseshelf.cli.root" in graph["caseshelf.cli"]


def test_no_function_of_the_cli_is_over_80_lines() -> None:
    trees = modules()
    functions = [
        (name, node)
        for name, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    long = [
        f"{name}.{fn.name}: {fn.end_lineno - fn.lineno + 1} lines"
        for name, fn in functions
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > MAX_LINES
    ]
    assert long == []
    assert len(functions) > 100  # (every module was read)


def declared(app: typer.Typer) -> Iterator[tuple[str, Any]]:
    """(name, callback) of every command declared on `app` and its sub-apps."""
    for info in app.registered_commands:
        yield info.name or "", info.callback
    for group in app.registered_groups:
        assert group.typer_instance is not None
        for name, callback in declared(group.typer_instance):
            yield f"{group.name} {name}", callback


def test_every_command_is_a_module_level_function_of_its_module() -> None:
    commands: list[tuple[str, str, Any]] = []
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(f"caseshelf.cli.{module_name}")
        app = typer.Typer()
        module.register_commands(app)
        commands += [(module_name, name, cb) for name, cb in declared(app)]
    closures = [
        f"{module_name}: {name} is {cb.__wrapped__.__qualname__}"
        for module_name, name, cb in commands
        if "<locals>" in cb.__wrapped__.__qualname__
        or getattr(
            importlib.import_module(f"caseshelf.cli.{module_name}"), cb.__wrapped__.__name__, None
        )
        is not cb.__wrapped__
    ]
    assert closures == []
    assert len(commands) >= 45  # (every module declared its commands)


def test_a_command_function_runs_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from caseshelf.cli.registry import versions
    from caseshelf.cli.store import info

    monkeypatch.setenv("CASESHELF_HOME", str(tmp_path / "store"))
    monkeypatch.delenv("CASESHELF_BACKEND", raising=False)
    begin(json_out=True)
    info()
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "local"
    assert out["store"] == str(tmp_path / "store")
    with pytest.raises(typer.BadParameter, match="give the dataset id alone"):
        versions("demo@1.0.0")
