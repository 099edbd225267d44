"""The package's route table (`caseshelf.functions.FUNCTIONS`) is what the embedded client and
`caseshelf serve` route by; `infra/template.yaml` is what AWS deploys. They must say the same."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from caseshelf.functions import FUNCTIONS
from caseshelf.gateway import handler_for, load_routes, template_functions

pytestmark = pytest.mark.integration

TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "template.yaml"


def test_the_table_and_the_template_declare_the_same_functions_routes_and_events() -> None:
    declared = {tf.entry.name: tf.entry for tf in template_functions(TEMPLATE)}
    tabled = {fn.name: replace(fn, module="") for fn in FUNCTIONS}
    assert set(tabled) == set(declared), "a function is in one of them only"
    for name, entry in declared.items():
        mine = tabled[name]
        # Order of routes is not meaning; everything else is compared whole
        assert sorted(mine.routes) == sorted(entry.routes), f"{name}: routes differ"
        assert replace(mine, routes=()) == replace(entry, routes=()), f"{name} differs"


def test_each_functions_entry_point_is_a_one_line_import_of_its_package_module() -> None:
    by_name = {fn.name: fn for fn in FUNCTIONS}
    assert template_functions(TEMPLATE)
    for tf in template_functions(TEMPLATE):
        module, _, attr = tf.handler.rpartition(".")
        source = (tf.code_dir / f"{module}.py").read_text(encoding="utf-8")
        tree = ast.parse(source)
        assert len(tree.body) == 1, f"{tf.code_dir}/{module}.py does more than import"
        stmt = tree.body[0]
        assert isinstance(stmt, ast.ImportFrom)
        assert stmt.module == by_name[tf.entry.name].module
        assert attr in {a.name for a in stmt.names}


def test_every_route_resolves_to_a_callable_handler_in_the_package() -> None:
    assert load_routes()
    for route in load_routes():
        assert route.module.startswith("caseshelf.functions.")
        assert callable(handler_for(route))


def test_the_queue_table_and_the_templates_queues_say_the_same() -> None:
    from caseshelf.functions import QUEUES
    from caseshelf.gateway import load_template

    resources = load_template(TEMPLATE)["Resources"]
    declared = {
        name: res.get("Properties") or {}
        for name, res in resources.items()
        if res.get("Type") == "AWS::SQS::Queue" and name.startswith(("Export", "ImportJob"))
    }
    assert {q.name for q in QUEUES} == set(declared)
    for q in QUEUES:
        redrive = declared[q.name].get("RedrivePolicy")
        if q.dead_letter is None:
            assert redrive is None, f"{q.name} has a redrive policy the table lacks"
            continue
        assert redrive["deadLetterTargetArn"] == {"GetAtt": f"{q.dead_letter}.Arn"}
        assert redrive["maxReceiveCount"] == q.max_receive_count
