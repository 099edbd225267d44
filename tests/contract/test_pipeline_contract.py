"""One registration pipeline: a dataset streamed a window at a time (`register_stream`) answers
what the same document registered whole answers, on every backend; errors name the case across
windows, and a refused stream leaves no version."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from caseshelf.domain.errors import BadRequest, Conflict, NotFound, TooLarge
from caseshelf.services.registry import RegistryService, parse_dataset, parse_head
from tests.conftest import Backend
from tests.contract.test_registry_contract import ALICE, SHARED_ADMIN, cases

pytestmark = [pytest.mark.contract, pytest.mark.services]


@pytest.fixture
def registry(backend: Backend) -> RegistryService:
    return backend.services.registry


def windows(items: list[Any], size: int = 7) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def with_files(n: int) -> list[dict[str, Any]]:
    out = cases(n)
    out[3]["files"] = {"tests/a.py": {"text": "assert True\n"}}
    out[20]["files"] = {"big.bin": {"base64": "AAEC" * 200_000}}
    return out


def test_a_streamed_dataset_is_the_same_version_as_the_whole_document(
    registry: RegistryService,
) -> None:
    # Given one dataset, with file bodies and a shared file
    doc = {
        "id": "gsm",
        "version": "1.0.0",
        "description": "math",
        "tags": ["b", "a"],
        "shared_files": [{"dest": "env/setup.sh", "text": "echo hi\n"}],
    }
    items = with_files(40)
    # When it is registered streamed, and its copy whole under another name
    streamed = registry.register_stream(ALICE, parse_head(doc), windows(items))
    whole = registry.register(ALICE, parse_dataset({**doc, "id": "copy", "cases": items}))
    # Then both have the same content digest and the same cases
    assert streamed.created and whole.created
    assert streamed.record.content_digest == whole.record.content_digest
    assert streamed.record.case_count == 40
    a = registry.list_cases(ALICE, "gsm", "1.0.0", limit=100).items
    b = registry.list_cases(ALICE, "copy", "1.0.0", limit=100).items
    assert a == b
    assert registry.render_version(streamed.record) == registry.render_version(
        whole.record
    ).replace(b'"id":"copy"', b'"id":"gsm"')
    # And registering the stream again is idempotent; a bump of it registers nothing
    again = registry.register_stream(ALICE, parse_head(doc), windows(items, 3))
    assert (again.created, again.record) == (False, streamed.record)
    bumped = registry.register_stream(
        ALICE, parse_head({**doc, "version": None, "bump": "minor"}), windows(items)
    )
    assert (bumped.created, bumped.record.version) == (False, "1.0.0")
    # And validating it answers what validating the whole document answers
    check = registry.validate_stream(ALICE, parse_head(doc), windows(items))
    assert (check.content_digest, check.case_count, check.would_conflict) == (
        streamed.record.content_digest,
        40,
        False,
    )


def test_a_streamed_v2_reuses_the_records_of_v1(registry: RegistryService) -> None:
    head = {"id": "gsm", "version": "1"}
    v1 = registry.register_stream(ALICE, parse_head(head), windows(cases(300), 50))
    changed = cases(300, changed={5, 150})
    v2 = registry.register_stream(ALICE, parse_head({**head, "version": "2"}), windows(changed))
    assert v2.created and v2.stats.cases_reused == 298
    assert v2.stats.case_bytes_written < v1.stats.case_bytes_written * 0.03
    got = registry.list_cases(ALICE, "gsm", "2", cursor=None, limit=300).items
    assert [c["expectations"]["ground_truth"] for c in got][150] == "301"


@pytest.mark.parametrize(
    ("bad", "error", "needle"),
    [
        (lambda c: c.__setitem__(30, {**c[30], "inputs": {"nope": 1}}), BadRequest, "'q00030'"),
        (lambda c: c.__setitem__(30, {"inputs": {"user": "x"}}), BadRequest, "index 30"),
        (lambda c: c.__setitem__(30, {**c[2]}), BadRequest, "duplicate case ids: q00002"),
        (
            lambda c: c.__setitem__(30, {**c[30], "inputs": {"user": "z" * 5_000}}),
            TooLarge,
            "'q00030'",
        ),
        (
            lambda c: c.__setitem__(
                30, {**c[30], "files": {"f": {"digest": "sha256:" + "0" * 64, "size": 1}}}
            ),
            BadRequest,
            "no stored body",
        ),
    ],
    ids=["bad-field", "no-id", "repeated-id", "too-large", "missing-ref"],
)
def test_a_refused_stream_names_the_case_and_registers_nothing(
    registry: RegistryService,
    bad: Any,
    error: type[Exception],
    needle: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "max_case_bytes", 4_000)
    items = cases(40)
    bad(items)
    with pytest.raises(error, match=needle):
        registry.register_stream(ALICE, parse_head({"id": "gsm", "version": "1"}), windows(items))
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "gsm", "1")


def test_an_id_repeated_windows_apart_is_refused_naming_both_cases(
    registry: RegistryService, backend: Backend
) -> None:
    # Given a stream of 60 cases in windows of 7 whose case 45 repeats the id of case 4
    items = cases(60)
    items[45] = {**items[45], "id": items[4]["id"]}
    head = parse_head({"id": "gsm", "version": "1"})
    # Then registering it is refused naming the id and both cases
    with pytest.raises(BadRequest) as exc:
        registry.register_stream(ALICE, head, windows(items))
    wanted = "duplicate case ids: q00004 (the cases at index 4 and 45)"
    assert exc.value.detail == wanted
    assert exc.value.fields == {"case_ids": ["q00004"], "indices": [4, 45]}
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "gsm", "1")
    # And so is validating it, and registering it where its label is taken
    with pytest.raises(BadRequest, match=r"\(the cases at index 4 and 45\)"):
        registry.validate_stream(ALICE, head, windows(items))
    registry.register_stream(ALICE, head, windows(cases(60)))
    before = sorted(o.key for o in backend.store.list("t/"))
    with pytest.raises(BadRequest, match=r"\(the cases at index 4 and 45\)"):
        registry.register_stream(ALICE, head, windows(items))
    assert sorted(o.key for o in backend.store.list("t/")) == before


def test_a_taken_label_with_other_content_is_a_conflict_and_stores_nothing(
    registry: RegistryService, backend: Backend
) -> None:
    head = parse_head({"id": "gsm", "version": "1"})
    registry.register_stream(ALICE, head, windows(cases(20)))
    before = sorted(o.key for o in backend.store.list("t/"))
    with pytest.raises(Conflict):
        registry.register_stream(ALICE, head, windows(cases(20, changed={1})))
    assert sorted(o.key for o in backend.store.list("t/")) == before


def test_the_head_of_a_stream_is_validated_like_a_document() -> None:
    with pytest.raises(BadRequest, match="unknown key"):
        parse_head({"id": "gsm", "version": "1", "colour": "red"})
    with pytest.raises(BadRequest, match="holds no cases"):
        parse_head({"id": "gsm", "version": "1", "cases": []})
    with pytest.raises(BadRequest, match="version"):
        parse_head({"id": "gsm"})


def test_a_derived_version_keeps_the_bodies_of_its_parent_in_any_tenant(
    registry: RegistryService,
) -> None:
    # Given a version with file bodies and a shared file, in the tenant and in _shared
    doc = {
        "id": "gsm",
        "version": "1.0.0",
        "shared_files": [{"dest": "env/setup.sh", "text": "echo hi\n"}],
        "cases": with_files(30),
    }
    mine = registry.register(ALICE, parse_dataset(doc)).record
    shared = registry.register(SHARED_ADMIN, parse_dataset(doc)).record
    for parent in (mine, shared):
        # When some of its cases become a version of another dataset
        derived = registry.register_derived(
            ALICE,
            name=f"pick-{parent.tenant}",
            version="1",
            bump=None,
            parent=parent,
            indices=[3, 20, 29],
            produced_by={"subset": True},
        )
        # Then its cases and bodies read back as the parent's
        got = registry.list_cases(ALICE, f"pick-{parent.tenant}", "1").items
        assert [c["id"] for c in got] == ["q00003", "q00020", "q00029"]
        body = registry.file_body(derived.record, got[1]["files"]["big.bin"]["digest"])
        assert len(body) == 600_000
        rendered = orjson.loads(registry.render_version(derived.record))
        assert rendered["shared_files"] == [{"dest": "env/setup.sh", "text": "echo hi\n"}]
        # And the same tenant's derived version stores no case bytes of its own
        if parent.tenant == ALICE.tenant:
            assert derived.stats.case_bytes_written == 0
            assert derived.stats.cases_reused == 3
        else:
            assert derived.stats.case_bytes_written > 0
