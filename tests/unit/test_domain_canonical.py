"""Canonical form, case digests and content digests (architecture §3-4).

Two cases that mean the same thing have the same bytes: key order, defaults given explicitly and
tag order or duplicates never change a digest. The properties below generate cases over the whole
envelope and rewrite them in every meaning-preserving way we know of.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from itertools import pairwise
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from caseshelf.domain.canonical import ContentDigester, canonical_json, content_digest, digest_of
from caseshelf.domain.envelope import (
    canonical_case,
    case_to_plain,
    cases_to_plain,
    parse_case,
)
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.models import DEFAULT_TIMEOUT_SEC, Case

pytestmark = pytest.mark.unit

PROPERTY = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- strategies over the envelope -------------------------------------------------------------

# Controls (C0, DEL, C1) and the invisible characters ids refuse (bidi controls, zero-width).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0]"
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)

case_ids = st.text(min_size=1, max_size=40).filter(lambda s: not _CONTROL.search(s))
segments = st.text(alphabet="abcxyz_-0123456789", min_size=1, max_size=6)
rel_paths = st.lists(segments, min_size=1, max_size=3).map("/".join)
digests = st.binary(min_size=1, max_size=8).map(lambda b: "sha256:" + hashlib.sha256(b).hexdigest())

inputs = st.fixed_dictionaries(
    {},
    optional={
        "user": st.text(max_size=30)
        | st.lists(st.text(max_size=10), max_size=3)
        # a file pointer, never a path string
        | st.fixed_dictionaries({"ref": rel_paths}),
        "hitl": st.lists(st.text(max_size=10), min_size=1, max_size=3),
        "memory_seeds": st.lists(json_values, max_size=2) | rel_paths,
        "session_id": st.text(max_size=10),
        "tool_fixtures": st.fixed_dictionaries({"ref": rel_paths})
        | st.fixed_dictionaries({"by_tool": st.dictionaries(st.text(max_size=5), json_values)}),
    },
)
expectations = st.fixed_dictionaries(
    {},
    optional={
        "ground_truth": json_values.filter(lambda v: v is not None),
        "metrics": json_objects.filter(bool),
        "details": json_objects.filter(bool),
    },
)
graders = st.lists(
    st.fixed_dictionaries(
        {"id": st.sampled_from(["answer-match", "tests-pass", "reward-file", "judge"])},
        optional={"config": json_objects.filter(bool)},
    ),
    max_size=3,
)
sources = (
    st.fixed_dictionaries({"git": st.just("https://example.org/r.git")}, optional={"ref": segments})
    | st.fixed_dictionaries({"files": st.dictionaries(rel_paths, st.text(max_size=10), max_size=2)})
    | st.fixed_dictionaries({"path": rel_paths})
)
envs = (
    st.fixed_dictionaries({"kind": st.just("prompt")}, optional={"system": st.text(max_size=10)})
    | st.fixed_dictionaries(
        {"kind": st.just("repo"), "source": sources},
        optional={"setup": st.lists(st.text(max_size=8), min_size=1, max_size=2)},
    )
    | st.fixed_dictionaries(
        {"kind": st.just("os-use")}, optional={"display": st.sampled_from([":0", ":1"])}
    )
    | st.fixed_dictionaries({"kind": st.just("browser")}, optional={"start_url": st.text()})
)
networks = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["none", "allowlist"]),
        "allowed_hosts": st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=2),
    },
).filter(bool)
resources = st.fixed_dictionaries(
    {},
    optional={
        k: st.integers(min_value=1, max_value=10**6)
        for k in ("cpu_millicores", "memory_mb", "storage_mb", "gpus")
    },
).filter(bool)
files = st.dictionaries(
    rel_paths,
    st.fixed_dictionaries({"digest": digests, "size": st.integers(min_value=0, max_value=10**9)}),
    max_size=3,
)

# A case as it would be written with nothing redundant in it: no defaults, tags unique.
cases = st.fixed_dictionaries(
    {"id": case_ids},
    optional={
        "inputs": inputs.filter(bool),
        "expectations": expectations.filter(bool),
        "env": envs,
        "image": st.text(min_size=1, max_size=20),
        "resources": resources,
        "network": networks,
        "timeout_sec": st.integers(min_value=1, max_value=10**6).filter(
            lambda t: t != DEFAULT_TIMEOUT_SEC
        ),
        "graders": graders.filter(bool),
        "tags": st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4, unique=True),
        "metadata": json_objects.filter(bool),
        "files": files.filter(bool),
    },
)


# -- meaning-preserving rewrites --------------------------------------------------------------


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def with_defaults(case: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """The same case with (a random choice of) its defaults written out, and its tags
    reordered and duplicated."""
    out = orjson.loads(orjson.dumps(case))

    def maybe() -> bool:
        return rnd.random() < 0.6

    top_defaults: dict[str, Any] = {
        "timeout_sec": DEFAULT_TIMEOUT_SEC,
        "graders": [],
        "tags": [],
        "metadata": {},
        "files": {},
        "image": None,
        "env": None,
        "resources": rnd.choice([None, {}]),
        "network": rnd.choice([None, {}, {"mode": "public"}, {"allowed_hosts": []}]),
    }
    for key, default in top_defaults.items():
        if key not in out and maybe():
            out[key] = default
    inp = out.setdefault("inputs", {}) if maybe() or "inputs" in out else None
    if inp is not None:
        for key, default in {"hitl": [], "user": None, "session_id": None}.items():
            if key not in inp and maybe():
                inp[key] = default
    exp = out.setdefault("expectations", {}) if maybe() or "expectations" in out else None
    if exp is not None:
        for key, default in {"ground_truth": None, "metrics": {}, "details": {}}.items():
            if key not in exp and maybe():
                exp[key] = default
    for grader in out.get("graders", []):
        if "config" not in grader and maybe():
            grader["config"] = {}
    net = out.get("network")
    if isinstance(net, dict):
        net.setdefault("allowed_hosts", [])
        if maybe():
            net.setdefault("mode", "public")
    res = out.get("resources")
    if isinstance(res, dict) and maybe():
        for key in ("cpu_millicores", "memory_mb", "storage_mb", "gpus"):
            res.setdefault(key, None)
    env = out.get("env")
    if isinstance(env, dict):
        if env["kind"] in ("repo", "os-use") and maybe():
            env.setdefault("setup", [])
        if env["kind"] == "repo" and "git" in env["source"]:
            env["source"].setdefault("ref", "HEAD") if maybe() else None
        if env["kind"] == "prompt" and maybe():
            env.setdefault("system", None)
    if out.get("tags"):
        tags = out["tags"] + [rnd.choice(out["tags"]) for _ in range(rnd.randint(0, 3))]
        rnd.shuffle(tags)
        out["tags"] = tags
    return shuffled(out, rnd)


def parse(item: dict[str, Any]) -> Case:
    return parse_case(item, index=0)


def reference_plain(case: Case) -> dict[str, Any]:
    """What the canonical plain form must be, by pydantic alone: every default left out, tags
    sorted and unique, and an optional sub-object left with nothing in it dropped (an empty
    `network` or `resources` means the same as none)."""
    plain = case.model_dump(mode="json", exclude_defaults=True)
    for name, info in Case.model_fields.items():
        if (
            plain.get(name) == {}
            and info.default is None
            and isinstance(getattr(case, name), BaseModel)
        ):
            del plain[name]
    if "tags" in plain:
        plain["tags"] = sorted(set(plain["tags"]))
    return plain


# -- properties -------------------------------------------------------------------------------


@PROPERTY
@given(case=cases, rnd=st.randoms(use_true_random=False))
def test_digest_is_invariant_under_key_order_defaults_and_tag_order(case, rnd):
    # Given a case and the same case rewritten with shuffled keys, explicit defaults and
    # shuffled, duplicated tags
    rewritten = with_defaults(case, rnd)
    # When both are canonicalised
    data, digest = canonical_case(parse(case))
    data2, digest2 = canonical_case(parse(rewritten))
    # Then their bytes and digests are identical
    assert data == data2
    assert digest == digest2


@PROPERTY
@given(case=cases)
def test_canonical_bytes_are_sorted_compact_json_and_the_digest_is_their_sha256(case):
    # Given any case
    data, digest = canonical_case(parse(case))
    # Then its bytes are sorted-key JSON without insignificant whitespace
    assert data == orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS)
    # and the digest is sha256 of exactly those bytes
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    # and a case written without redundancy canonicalises to what was written (tags sorted)
    expected = dict(case)
    if "tags" in expected:
        expected["tags"] = sorted(expected["tags"])
    got = orjson.loads(data)
    assert set(got) == set(expected)


@PROPERTY
@given(items=st.lists(cases, min_size=1, max_size=4), rnd=st.randoms(use_true_random=False))
def test_fast_path_plain_form_equals_pydantic_exclude_defaults(items, rnd):
    # Given cases, some with their defaults written out
    models = [parse(with_defaults(c, rnd) if rnd.random() < 0.5 else c) for c in items]
    # When the registration fast path turns them into plain form
    fast = cases_to_plain(models)
    # Then it is exactly pydantic's exclude_defaults dump (tags sorted), case by case
    assert fast == [reference_plain(m) for m in models]
    assert fast == [case_to_plain(m) for m in models]


def test_a_change_of_meaning_changes_the_digest():
    # Given a case and variants that differ in one value each
    base = {"id": "q1", "inputs": {"user": "2+2?"}, "expectations": {"ground_truth": "4"}}
    variants = [
        {**base, "timeout_sec": DEFAULT_TIMEOUT_SEC + 1},
        {**base, "network": {"mode": "none"}},
        {**base, "tags": ["x"]},
        {**base, "expectations": {"ground_truth": 4}},
        {**base, "id": "q2"},
    ]
    # Then every variant has its own digest
    digests = {canonical_case(parse(c))[1] for c in [base, *variants]}
    assert len(digests) == len(variants) + 1


def test_explicit_defaults_in_nested_models_are_omitted():
    # Given a case that spells out defaults inside optional and union-typed sub-objects
    case = parse(
        {
            "id": "r",
            "env": {"kind": "repo", "source": {"git": "g", "ref": "HEAD"}, "setup": []},
            "network": {"mode": "public", "allowed_hosts": []},
            "resources": {"gpus": None},
            "inputs": {"memory_seeds": "seeds/m.json", "hitl": []},
        }
    )
    # Then the canonical form carries none of them (and the path shorthand becomes a ref)
    assert case_to_plain(case) == {
        "id": "r",
        "env": {"kind": "repo", "source": {"git": "g"}},
        "inputs": {"memory_seeds": {"ref": "seeds/m.json"}},
    }


# -- non-finite numbers -----------------------------------------------------------------------

NON_FINITE = [math.nan, math.inf, -math.inf]


def _planted(where: str, bad: Any) -> dict[str, Any]:
    return {
        "metadata": {"id": "c", "metadata": {"score": bad}},
        "nested metadata": {"id": "c", "metadata": {"a": [1, {"b": bad}]}},
        "ground_truth": {"id": "c", "expectations": {"ground_truth": bad}},
        "ground_truth list": {"id": "c", "expectations": {"ground_truth": [0.5, bad]}},
        "metrics": {"id": "c", "expectations": {"metrics": {"acc": bad}}},
        "details": {"id": "c", "expectations": {"details": {"x": {"y": bad}}}},
        "grader config": {"id": "c", "graders": [{"id": "g", "config": {"t": bad}}]},
        "tool fixtures": {"id": "c", "inputs": {"tool_fixtures": {"by_tool": {"*": bad}}}},
        "memory seeds": {"id": "c", "inputs": {"memory_seeds": [bad]}},
    }[where]


WHERE = [
    "metadata",
    "nested metadata",
    "ground_truth",
    "ground_truth list",
    "metrics",
    "details",
    "grader config",
    "tool fixtures",
    "memory seeds",
]


@pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("where", WHERE)
def test_non_finite_numbers_are_refused_anywhere_in_a_case(where, bad):
    # Given a case with NaN or Infinity planted somewhere in free-form JSON
    item = _planted(where, bad)
    # When it is validated, Then it is refused naming the case
    with pytest.raises(BadRequest) as err:
        parse(item)
    assert "case 'c'" in str(err.value)
    if where != "tool fixtures":  # a two-member union reports its first member's error
        assert "NaN, Infinity" in str(err.value)


@pytest.mark.parametrize("where", WHERE)
def test_integers_beyond_64_bits_are_refused_rather_than_crash_canonicalisation(where):
    with pytest.raises(BadRequest) as err:
        parse(_planted(where, 2**64))
    if where != "tool fixtures":  # a two-member union reports its first member's error
        assert "beyond 64 bits" in str(err.value)


@PROPERTY
@given(value=json_values, bad=st.sampled_from(NON_FINITE), rnd=st.randoms(use_true_random=False))
def test_non_finite_is_found_wherever_it_hides(value, bad, rnd):
    # Given any JSON value with a NaN/Infinity put at a random place
    def plant(v: Any) -> Any:
        if isinstance(v, dict) and v and rnd.random() < 0.7:
            k = rnd.choice(list(v))
            return {**v, k: plant(v[k])}
        if isinstance(v, list) and v and rnd.random() < 0.7:
            i = rnd.randrange(len(v))
            return [*v[:i], plant(v[i]), *v[i + 1 :]]
        return bad

    planted = plant(value)
    # Then the metadata of a case holding it is refused, and canonical_json refuses it too
    with pytest.raises(BadRequest):
        parse({"id": "c", "metadata": {"v": planted}})
    with pytest.raises(BadRequest):
        canonical_json({"v": planted})


def test_a_lone_surrogate_in_free_form_json_is_a_bad_request_not_a_crash():
    case = parse({"id": "c", "metadata": {"k": "x\udc00"}})
    with pytest.raises(BadRequest) as err:
        canonical_case(case)
    assert err.value.fields["case_id"] == "c"


# -- unknown keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "key", "field"),
    [
        ({"id": "c", "prompt_text": "x"}, "prompt_text", "prompt_text"),
        ({"id": "c", "inputs": {"usr": "x"}}, "usr", "inputs.usr"),
        ({"id": "c", "expectations": {"answer": 1}}, "answer", "expectations.answer"),
        ({"id": "c", "network": {"mode": "none", "hosts": []}}, "hosts", "network.hosts"),
        ({"id": "c", "graders": [{"id": "g", "cfg": {}}]}, "cfg", "graders.0.cfg"),
        ({"id": "c", "resources": {"cpus": 2}}, "cpus", "resources.cpus"),
        ({"id": "c", "env": {"kind": "prompt", "sys": "x"}}, "sys", "env.prompt.sys"),
    ],
)
def test_unknown_keys_are_refused_naming_the_key_the_field_and_the_case(item, key, field):
    with pytest.raises(BadRequest) as err:
        parse(item)
    assert f"unknown key {key!r}" in str(err.value)
    assert "case 'c'" in str(err.value)
    assert err.value.fields["field"] == field


def test_tool_fixtures_with_other_keys_are_refused_naming_them():
    with pytest.raises(BadRequest, match="extra"):
        parse({"id": "c", "inputs": {"tool_fixtures": {"ref": "a", "extra": 1}}})


# -- case ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case_id",
    ["a", "HumanEval/0", "../x", ".hidden", "..", "é ü 名前", "x" * 256, "with space", "~tilde"],
)
def test_case_ids_of_1_to_256_chars_without_control_chars_are_accepted(case_id):
    assert parse({"id": case_id}).id == case_id


@pytest.mark.parametrize(
    "case_id",
    ["", "x" * 257, "a\x00b", "line\nbreak", "tab\there", "\x1f", "del\x7f"],
    ids=["empty", "257", "nul", "newline", "tab", "unit-sep", "del"],
)
def test_case_ids_empty_too_long_or_with_control_chars_are_refused(case_id):
    with pytest.raises(BadRequest) as err:
        parse({"id": case_id})
    assert err.value.fields["field"] == "id"


@PROPERTY
@given(case_id=st.text(min_size=1, max_size=300))
def test_case_id_rule_as_a_property(case_id):
    ok = len(case_id) <= 256 and not _CONTROL.search(case_id)
    if ok:
        assert parse({"id": case_id}).id == case_id
    else:
        with pytest.raises(BadRequest):
            parse({"id": case_id})


# -- content digests -------------------------------------------------------------------------


def _content(**over: Any) -> str:
    args: dict[str, Any] = {
        "description": "d",
        "tags": ["a", "b"],
        "shared_files": [{"dest": "x.txt", "digest": digest_of(b"x")}],
        "case_digests": [("c1", digest_of(b"1")), ("c2", digest_of(b"2"))],
    }
    args.update(over)
    return content_digest(**args)


def test_content_digest_covers_description_tags_shared_files_and_ordered_cases():
    base = _content()
    assert _content() == base
    assert _content(description="other") != base
    assert _content(tags=["a"]) != base
    assert _content(shared_files=[]) != base
    assert _content(case_digests=[("c2", digest_of(b"2")), ("c1", digest_of(b"1"))]) != base
    assert _content(case_digests=[("c1", digest_of(b"1")), ("c2", digest_of(b"3"))]) != base
    assert _content(case_digests=[("c1", digest_of(b"1")), ("c3", digest_of(b"2"))]) != base


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(cases, min_size=1, max_size=6),
    rnd=st.randoms(use_true_random=False),
    chunk=st.integers(1, 4),
)
def test_bulk_canonical_records_match_one_case_at_a_time(items, rnd, chunk):
    # Given cases, some with their defaults spelled out, written in bulk (any chunking)
    from caseshelf.domain.envelope import canonical_into

    models = [parse(with_defaults(c, rnd) if rnd.random() < 0.5 else c) for c in items]
    records = bytearray(b"xx")  # a buffer that already holds something
    ends, digests_, tags = canonical_into(cases_to_plain(models), records, chunk=chunk)
    # Then each record is exactly the case's canonical bytes, followed by a newline
    starts = [2, *ends[:-1]]
    expected = [canonical_case(m) for m in models]
    assert [bytes(records[a : b - 1]) for a, b in zip(starts, ends, strict=True)] == [
        data for data, _ in expected
    ]
    assert all(records[b - 1 : b] == b"\n" for b in ends)
    assert digests_ == [digest for _, digest in expected]
    assert tags == [p.get("tags", []) for p in cases_to_plain(models)]


@given(
    st.lists(st.tuples(st.text(max_size=6), st.text(max_size=6)), max_size=30),
    st.lists(st.integers(0, 30), max_size=5),
    st.text(max_size=10),
    st.lists(st.text(max_size=4), max_size=3),
    st.lists(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2), max_size=2),
)
def test_the_content_digest_fed_in_batches_equals_the_whole(pairs, cuts, description, tags, files):
    # Given pairs cut into batches anywhere (empty batches included)
    d = ContentDigester(description=description, tags=tags, shared_files=files)
    bounds = sorted({0, len(pairs), *(c for c in cuts if c <= len(pairs))})
    for a, b in pairwise(bounds):
        d.add(pairs[a:b])
    d.add([])
    # Then the digest is content_digest's of all of them at once
    whole = content_digest(
        description=description, tags=tags, shared_files=files, case_digests=pairs
    )
    assert d.digest() == whole
