"""Selection and diff services on the embedded store (local files + SQLite)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from caseshelf.api import dto
from caseshelf.bootstrap import Services, build, load_settings
from caseshelf.domain.errors import BadRequest, NotFound
from caseshelf.domain.identity import Identity
from caseshelf.domain.subset import SubsetRequest
from caseshelf.services.loaders import load_dataset
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")
OTHER = Identity("globex", "bob")
ADMIN = Identity("_shared", "root", frozenset({"admin"}))


class RecordingStore:
    """Passes every call through and remembers which keys were read."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reads: list[str] = []

    def get(self, key: str) -> bytes:
        self.reads.append(key)
        return self._inner.get(key)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.reads.append(key)
        return self._inner.get_range(key, offset, length)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def svc(tmp_path) -> Services:
    settings = load_settings({}, home=str(tmp_path / "home"))
    plain = build(settings)
    return build(settings, store=RecordingStore(plain.store), index=plain.index)  # type: ignore[arg-type]


def case(i: int, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "id": f"c{i:03d}",
        "inputs": {"user": f"question {i}"},
        "tags": ["even" if i % 2 == 0 else "odd"] + (["fizz"] if i % 3 == 0 else []),
        "graders": [{"id": "answer-match"}],
    }
    c.update(extra)
    return c


def register(svc: Services, who: Identity, version: str, cases: list[dict[str, Any]], **kw: Any):
    body = {"id": kw.pop("name", "qa"), "version": version, "cases": cases, **kw}
    return svc.registry.register(who, parse_dataset(body)).record


def subset(svc: Services, who: Identity = ME, ref: str = "1.0.0", name: str = "qa", **kw: Any):
    with_cases = kw.pop("with_cases", False)
    return svc.selection.select_subset(
        who, name, ref, SubsetRequest.model_validate(kw), with_cases=with_cases
    )


# -- subset ------------------------------------------------------------------------------


def test_subset_reads_only_the_manifest_unless_cases_are_asked(svc):
    # Given a version of 30 cases
    register(svc, ME, "1.0.0", [case(i) for i in range(30)])
    svc.registry.cache.clear()
    svc.store.reads.clear()
    # When a subset is selected by tags and limit
    res = subset(svc, tags=["fizz"], limit=4)
    # Then only the manifest was read, and the stamp tells the whole story
    assert all("/manifests/" in k for k in svc.store.reads)
    assert res.case_ids == ["c000", "c003", "c006", "c009"]
    assert res.subset.stamp is not None
    assert res.subset.stamp.model_dump(exclude_none=True) == {
        "id": "qa",
        "version": "1.0.0",
        "content_digest": res.record.content_digest,
        "total": 30,
        "selected": 4,
        "tags": ["fizz"],
        "limit": 4,
    }
    assert res.cases is None
    # And asked with cases, the bodies come back in dataset order
    with_cases = subset(svc, tags=["fizz"], limit=2, with_cases=True)
    assert [c["id"] for c in with_cases.cases] == ["c000", "c003"]
    assert with_cases.cases[0]["inputs"] == {"user": "question 0"}


def test_subset_without_selection_is_the_whole_version(svc):
    register(svc, ME, "1.0.0", [case(i) for i in range(5)])
    res = subset(svc)
    assert res.subset.stamp is None
    assert len(res.case_ids) == 5
    out = dto.subset_out(res).model_dump(mode="json")
    assert out["stamp"] is None


def test_subset_errors_are_bad_requests_naming_what_is_wrong(svc):
    register(svc, ME, "1.0.0", [case(i) for i in range(5)])
    with pytest.raises(BadRequest) as err:
        subset(svc, ids=["c001", "nope"])
    assert err.value.fields["case_ids"] == ["nope"]
    with pytest.raises(BadRequest, match="check tags and limit"):
        subset(svc, tags=["absent"])
    with pytest.raises(NotFound):
        subset(svc, ref="9.9.9", tags=["odd"])
    with pytest.raises(NotFound):
        subset(svc, OTHER, tags=["odd"])


def test_register_as_points_at_the_parent_packs(svc):
    # Given a registered version
    cases = [case(i) for i in range(20)]
    register(svc, ME, "1.0.0", cases)
    packs_before = {o.key for o in svc.store.list("t/acme/packs/")}
    # When a sample of it is registered as a derived version
    res = subset(
        svc, sample=5, seed=42, register_as={"id": "qa-mini", "bump": "minor"}, with_cases=True
    )
    reg = res.registered
    assert reg is not None and reg.created
    # Then no case bytes were written, and the new version reads back the same cases
    assert {o.key for o in svc.store.list("t/acme/packs/")} == packs_before
    assert reg.stats.case_bytes_written == 0
    assert reg.record.version == "1.0.0"
    assert reg.record.case_count == 5
    assert reg.record.produced_by == {
        "via": "subset",
        "parent": {"id": "qa", "version": "1.0.0", "digest": res.record.content_digest},
        "selection": {"sample": 5, "seed": 42},
    }
    page = svc.registry.list_cases(ME, "qa-mini", "1.0.0")
    assert page.items == res.cases
    # And its content digest is the one a direct registration of those cases gets
    direct = register(svc, ME, "1.0.0", [c for c in cases if c["id"] in res.case_ids], name="x")
    assert direct.content_digest == reg.record.content_digest
    # And registering the same selection again is idempotent
    again = subset(svc, sample=5, seed=42, register_as={"id": "qa-mini", "version": "1.0.0"})
    assert again.registered is not None and not again.registered.created


def test_register_as_from_a_shared_parent_copies_into_the_callers_tenant(svc):
    register(svc, ADMIN, "1.0.0", [case(i, files={"a.txt": {"text": f"f{i}"}}) for i in range(6)])
    res = subset(svc, ME, tags=["even"], register_as={"id": "mine", "version": "1.0.0"})
    assert res.registered is not None
    assert res.registered.record.tenant == "acme"
    assert res.registered.stats.case_bytes_written > 0
    rec = svc.registry.get_version(ME, "mine", "1.0.0")
    assert [c["id"] for _, c in svc.registry.case_records(rec, [0, 1, 2])] == res.case_ids
    body = svc.registry.render_version(rec)
    assert json.loads(body)["cases"][0]["files"] == {"a.txt": {"text": "f0"}}


# -- diff --------------------------------------------------------------------------------


def diff(svc: Services, base: str, cand: str, who: Identity = ME, **kw: Any):
    return svc.diff.diff_versions(who, kw.pop("name", "qa"), base, cand, **kw)


def test_diff_reads_only_the_changed_cases(svc):
    # Given v1 and v2 with one changed, one added and one removed case among 40
    v1 = [case(i) for i in range(40)]
    v2 = [case(i) for i in range(1, 40)] + [case(99)]
    v2[9] = case(10, inputs={"user": "question ten"})
    register(svc, ME, "1.0.0", v1)
    register(svc, ME, "2.0.0", v2, description="now with 99")
    # When diffed
    res = diff(svc, "1.0.0", "2.0.0")
    # Then
    assert res.summary == {"added": 1, "removed": 1, "changed": 1, "unchanged": 38}
    assert [(b.id, b.user) for b in res.added] == [("c099", "question 99")]
    assert [(b.id, b.user) for b in res.removed] == [("c000", "question 0")]
    out = dto.diff_out(res).model_dump(mode="json")
    assert out["changed"] == [
        {
            "id": "c010",
            "changes": [{"path": "/inputs/user", "before": "question 10", "after": "question ten"}],
        }
    ]
    assert out["meta"] == {
        "changes": [{"path": "/description", "before": "", "after": "now with 99"}],
        "case_order_changed": False,
    }
    assert out["base"]["version"] == "1.0.0" and out["candidate"]["version"] == "2.0.0"
    # And only a small share of the case bytes was read
    total = svc.registry.get_version(ME, "qa", "1.0.0").bytes
    assert 0 < res.stats.bytes_read < total


def test_diff_absent_and_null_are_told_apart_on_the_wire(svc):
    register(svc, ME, "1.0.0", [case(1, metadata={"a": None})])
    register(svc, ME, "1.0.1", [case(1, metadata={"b": 1})])
    out = dto.diff_out(diff(svc, "1.0.0", "1.0.1")).model_dump(mode="json")
    assert out["changed"][0]["changes"] == [
        {"path": "/metadata/a", "before": None},
        {"path": "/metadata/b", "after": 1},
    ]


def test_diff_of_a_version_with_itself_is_empty(svc):
    register(svc, ME, "1.0.0", [case(i) for i in range(3)])
    res = diff(svc, "1.0.0", "latest")
    assert res.summary == {"added": 0, "removed": 0, "changed": 0, "unchanged": 3}
    assert res.changed == [] and res.stats.objects_read == 0


def test_summary_mode_reads_no_case(svc):
    register(svc, ME, "1.0.0", [case(i) for i in range(3)])
    register(svc, ME, "1.1.0", [case(i, tags=["new"]) for i in range(3)])
    res = diff(svc, "1.0.0", "1.1.0", summary_only=True)
    assert res.summary["changed"] == 3
    assert res.changed is None and res.stats.objects_read == 0
    out = dto.diff_out(res).model_dump(mode="json")
    assert out["added"] is None and out["summary"]["changed"] == 3


def test_diff_across_two_datasets_of_one_tenant(svc):
    register(svc, ME, "1.0.0", [case(1), case(2)])
    register(svc, ME, "3.0.0", [case(2), case(3)], name="other")
    res = diff(svc, "1.0.0", "3.0.0", candidate_name="other")
    assert res.summary == {"added": 1, "removed": 1, "changed": 0, "unchanged": 1}
    assert res.candidate.name == "other"


def test_tombstoned_versions_need_include_deleted(svc):
    register(svc, ME, "1.0.0", [case(1)])
    register(svc, ME, "1.1.0", [case(2)])
    svc.registry.delete_version(ME, "qa", "1.1.0")
    with pytest.raises(NotFound):
        diff(svc, "1.0.0", "1.1.0")
    res = diff(svc, "1.0.0", "1.1.0", include_deleted=True)
    assert res.summary["added"] == 1


def test_another_tenants_data_is_never_diffable(svc):
    register(svc, ME, "1.0.0", [case(1)])
    register(svc, OTHER, "1.0.0", [case(2)], name="theirs")
    with pytest.raises(NotFound):
        diff(svc, "1.0.0", "1.0.0", OTHER)
    with pytest.raises(NotFound):
        diff(svc, "1.0.0", "1.0.0", candidate_name="theirs")
    with pytest.raises(NotFound):
        diff(svc, "1.0.0", "2.0.0")


# -- the real everdict example -----------------------------------------------------------


def test_everdict_repo_smoke_1_0_0_to_1_1_0(svc, shared_data):
    # Given the two published versions of repo-smoke
    # read as `caseshelf register` reads them (everdict's `task`/`timeoutSec` folded in)
    for v in ("1.0.0", "1.1.0"):
        raw, _ = load_dataset(shared_data / "everdict" / f"repo-smoke-{v}.json")
        svc.registry.register(ME, parse_dataset(raw))
    # When diffed
    res = diff(svc, "1.0.0", "1.1.0", name="repo-smoke")
    out = dto.diff_out(res).model_dump(mode="json")
    # Then one case is added, the description changed, and the others are unchanged
    assert out["summary"] == {"added": 1, "removed": 0, "changed": 0, "unchanged": 2}
    assert out["added"] == [
        {"id": "rename-file", "user": "Rename old.txt to new.txt, preserving its contents"}
    ]
    assert [c["path"] for c in out["meta"]["changes"]] == ["/description"]
    assert "adds a rename case" in out["meta"]["changes"][0]["after"]


def test_subset_cases_come_in_pages_within_the_answer_budget(svc):
    # Given a selection service whose answers hold a few cases' bytes
    from caseshelf.services.selection import SelectionService

    # (quote-heavy metadata: escaped, each case is about twice its stored size)
    pad = {"metadata": {"q": '"' * 500}}
    register(svc, ME, "1.0.0", [case(i, **pad) for i in range(10)])
    bounded = SelectionService(svc.registry, answer_bytes=6000)
    request = SubsetRequest.model_validate({"limit": 8})
    # When the cases are asked for, page after page
    first = bounded.select_subset(ME, "qa", "1.0.0", request, with_cases=True)
    pages = [first]
    while pages[-1].cases_next_cursor:
        cursor = pages[-1].cases_next_cursor
        pages.append(
            bounded.select_subset(ME, "qa", "1.0.0", request, with_cases=True, cursor=cursor)
        )
    # Then each page holds fewer than the 8 and together they are the selection, in order
    assert len(pages) > 1 and all(p.case_ids == first.case_ids for p in pages)
    assert all(len(p.cases or ()) < 8 for p in pages)
    assert [c["id"] for p in pages for c in p.cases or ()] == first.case_ids
    whole = svc.selection.select_subset(ME, "qa", "1.0.0", request, with_cases=True)
    assert [c for p in pages for c in p.cases or ()] == whole.cases


# -- diff pages --------------------------------------------------------------------------


def _pages(svc: Services, base: str, cand: str, limit: int, **kw: Any) -> list[Any]:
    pages = [diff(svc, base, cand, limit=limit, **kw)]
    while pages[-1].next_cursor:
        pages.append(diff(svc, base, cand, cursor=pages[-1].next_cursor, limit=limit, **kw))
    return pages


def _entries(res: Any) -> list[tuple[str, str]]:
    return (
        [("changed", c.id) for c in res.changed]
        + [("added", b.id) for b in res.added]
        + [("removed", b.id) for b in res.removed]
    )


def test_diff_pages_list_changed_then_added_then_removed_and_join_to_the_whole_diff(svc):
    # Given v2 with 7 changed, 5 added and 4 removed cases among 40
    v1 = [case(i) for i in range(40)]
    v2 = [case(i, inputs={"user": f"q{i}"}) if i % 5 == 0 else case(i) for i in range(4, 40)]
    v2 += [case(100 + i) for i in range(5)]
    register(svc, ME, "1.0.0", v1)
    register(svc, ME, "2.0.0", v2)
    whole = diff(svc, "1.0.0", "2.0.0")
    # When paged 3 entries at a time
    pages = _pages(svc, "1.0.0", "2.0.0", 3)
    # Then the pages hold every entry once, in the documented order, and each page carries
    # the whole diff's summary
    assert len(pages) == 6  # 7 + 5 + 4 = 16 entries
    assert all(len(_entries(p)) == 3 for p in pages[:-1]) and len(_entries(pages[-1])) == 1
    got = [e for p in pages for e in _entries(p)]
    assert got == _entries(whole)
    assert [k for k, _ in got] == ["changed"] * 7 + ["added"] * 5 + ["removed"] * 4
    assert all(p.summary == whole.summary for p in pages)
    assert pages[-1].next_cursor is None
    joined = [c for p in pages for c in p.changed]
    assert [(c.id, c.changes) for c in joined] == [(c.id, c.changes) for c in whole.changed]


def test_a_diff_page_reads_only_its_own_cases(svc):
    # Given two versions where every case changed
    register(svc, ME, "1.0.0", [case(i) for i in range(60)])
    register(svc, ME, "2.0.0", [case(i, inputs={"user": f"q{i}"}) for i in range(60)])
    # When one page of 5 is asked for
    res = diff(svc, "1.0.0", "2.0.0", limit=5)
    # Then 5 cases of each side are read, not 60
    assert len(res.changed) == 5 and res.summary["changed"] == 60
    whole = diff(svc, "1.0.0", "2.0.0")
    assert 0 < res.stats.bytes_read * 6 < whole.stats.bytes_read


def test_a_diff_cursor_pins_both_versions(svc):
    # Given a diff of 1.0.0 against `latest` (2.0.0), paged
    register(svc, ME, "1.0.0", [case(i) for i in range(10)])
    register(svc, ME, "2.0.0", [case(i, inputs={"user": f"q{i}"}) for i in range(10)])
    first = diff(svc, "1.0.0", "latest", limit=4)
    assert first.next_cursor
    # When `latest` moves before the next page
    register(svc, ME, "3.0.0", [case(i) for i in range(3)])
    nxt = diff(svc, "1.0.0", "latest", cursor=first.next_cursor, limit=4)
    # Then the next page is still of 2.0.0
    assert nxt.candidate.version == "2.0.0"
    assert nxt.summary == first.summary
    assert [c.id for c in nxt.changed] == ["c004", "c005", "c006", "c007"]


@pytest.mark.parametrize("cursor", ["bogus", "cG9zOjQ", "ZGlmZjp4Ong6MQ"])
def test_a_bad_diff_cursor_is_400_naming_the_cursor(svc, cursor):
    register(svc, ME, "1.0.0", [case(1)])
    with pytest.raises(BadRequest) as err:
        diff(svc, "1.0.0", "1.0.0", cursor=cursor)
    assert err.value.fields["field"] == "cursor"


def test_a_diff_cursor_of_another_dataset_is_not_found(svc):
    register(svc, ME, "1.0.0", [case(1)])
    register(svc, ME, "2.0.0", [case(2)])
    register(svc, ME, "1.0.0", [case(7)], name="other")
    cursor = diff(svc, "1.0.0", "2.0.0", limit=1).next_cursor
    assert cursor
    with pytest.raises(NotFound):
        diff(svc, "1.0.0", "1.0.0", name="other", cursor=cursor)


@pytest.mark.parametrize("limit", [0, 1001])
def test_a_diff_limit_out_of_range_is_400(svc, limit):
    register(svc, ME, "1.0.0", [case(1)])
    with pytest.raises(BadRequest) as err:
        diff(svc, "1.0.0", "1.0.0", limit=limit)
    assert err.value.fields["field"] == "limit"


def test_the_next_page_of_a_series_reuses_the_kept_plan_and_only_that(svc, monkeypatch):
    # Given a paged diff, and the plans the service makes counted
    register(svc, ME, "1.0.0", [case(i) for i in range(12)])
    register(svc, ME, "2.0.0", [case(i, inputs={"user": f"q{i}"}) for i in range(12)])
    register(svc, ME, "3.0.0", [case(i) for i in range(5)])
    made: list[str] = []
    plan = svc.diff._plan

    def counted(base: Any, cand: Any) -> Any:
        made.append(f"{base.version}->{cand.version}")
        return plan(base, cand)

    monkeypatch.setattr(svc.diff, "_plan", counted)
    pages = _pages(svc, "1.0.0", "2.0.0", 5)
    # Then the series made one plan for its three pages, with the same answers as planning
    # each page afresh
    assert len(pages) == 3 and made == ["1.0.0->2.0.0"]
    svc.diff._last_plan = None
    fresh = _pages(svc, "1.0.0", "2.0.0", 5)
    assert [_entries(p) for p in fresh] == [_entries(p) for p in pages]
    assert len(made) == 4
    # And another pair is planned anew, not answered from the kept plan
    svc.diff._last_plan = type(svc.diff)(svc.registry)._last_plan
    assert diff(svc, "1.0.0", "2.0.0", limit=5).summary["changed"] == 12
    assert diff(svc, "1.0.0", "3.0.0", limit=5).summary["removed"] == 7
    assert made[-2:] == ["1.0.0->2.0.0", "1.0.0->3.0.0"]
