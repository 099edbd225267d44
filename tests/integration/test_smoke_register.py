import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration


def test_register_then_read_back(tmp_path):
    svc = build(load_settings({}, home=str(tmp_path)))
    me = Identity("local", "alice")
    body = parse_dataset(
        {"id": "demo", "version": "1.0.0", "cases": [{"id": "a", "inputs": {"user": "hi"}}]}
    )
    res = svc.registry.register(me, body)
    assert res.created
    page = svc.registry.list_cases(me, "demo", "latest")
    assert page.items == [{"id": "a", "inputs": {"user": "hi"}}]


def test_a_yaml_dataset_keeps_the_answers_as_written(tmp_path):
    # Given a YAML dataset whose answers YAML 1.1 would read as a boolean and a base-60 number
    from caseshelf.services.loaders import read_document

    path = tmp_path / "answers.yaml"
    path.write_text(
        "id: answers\nversion: 1.0.0\ncases:\n"
        "- {id: q1, inputs: {user: Is the sky blue}, expectations: {ground_truth: yes}}\n"
        "- {id: q2, inputs: {user: The ratio}, expectations: {ground_truth: 3:2}}\n"
        "- {id: q3, inputs: {user: How many}, expectations: {ground_truth: 12}}\n"
    )
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    me = Identity("local", "alice")
    # When it is registered from the file
    svc.registry.register(me, parse_dataset(read_document(path)))
    # Then each answer is the text written, and a number both YAML versions agree on stays one
    cases = svc.registry.list_cases(me, "answers", "1.0.0").items
    assert [c["expectations"]["ground_truth"] for c in cases] == ["yes", "3:2", 12]
