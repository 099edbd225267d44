import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.identity import Identity
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.unit


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
