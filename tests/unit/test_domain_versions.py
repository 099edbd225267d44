"""Version labels, their order, bumps and ref resolution (architecture §5)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caseshelf.domain.errors import BadRequest, NotFound
from caseshelf.domain.versions import (
    VersionRecord,
    check_label,
    check_tags,
    latest,
    next_version,
    ordered,
    resolve_ref,
    semver,
)

pytestmark = pytest.mark.unit


def digest(n: int) -> str:
    return "sha256:" + f"{n:064x}"


def rec(
    version: str,
    seq: int = 0,
    *,
    deleted: bool = False,
    tags: tuple[str, ...] = (),
    content: int | None = None,
) -> VersionRecord:
    return VersionRecord(
        tenant="acme",
        kind="dataset",
        name="ds",
        version=version,
        content_digest=digest(content if content is not None else seq + 1),
        manifest_key=f"m/{version}",
        case_count=1,
        bytes=1,
        created_at=f"2026-11-{seq % 28 + 1:02d}T00:00:00.000Z",
        created_by="alice",
        seq=seq,
        version_tags=tags,
        deleted_at="2026-11-30T00:00:00.000Z" if deleted else None,
        deleted_by="alice" if deleted else None,
    )


def records(*labels: str) -> list[VersionRecord]:
    """Records registered in the order given."""
    return [rec(label, seq) for seq, label in enumerate(labels)]


# -- labels ------------------------------------------------------------------------------------


@pytest.mark.parametrize("label", ["1.0.0", "v1", "2024-06-01", "a", "A.b_c-d", "x" * 64, "rc.1"])
def test_labels_of_1_to_64_safe_chars_are_accepted(label):
    assert check_label(label) == label


@pytest.mark.parametrize(
    "label", ["", "x" * 65, "latest", "1.0.0+build", "a b", "a/b", "é", "sha256:ab", "a\n"]
)
def test_labels_outside_the_rule_and_latest_are_refused(label):
    with pytest.raises(BadRequest) as err:
        check_label(label)
    assert err.value.fields["field"] == "version"


def test_version_tags_follow_the_label_rule_and_are_deduplicated_in_order():
    assert check_tags(["stable", "prod", "stable"]) == ["stable", "prod"]
    with pytest.raises(BadRequest, match="latest"):
        check_tags(["latest"])
    with pytest.raises(BadRequest):
        check_tags(["has space"])


# -- order ------------------------------------------------------------------------------------

# The precedence example of semver.org §11, plus the two-digit minor of architecture §5.
SEMVER_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.2.0",
    "1.9.0",
    "1.10.0",
    "2.0.0",
    "10.0.0",
]


def test_semver_labels_order_by_precedence_whatever_the_registration_order():
    # Given semver labels registered in a shuffled order
    shuffled = SEMVER_ORDER[:]
    random.Random(7).shuffle(shuffled)
    # When they are ordered
    got = [r.version for r in ordered(records(*shuffled))]
    # Then the order is semver precedence
    assert got == SEMVER_ORDER


def test_non_semver_labels_keep_registration_order_and_sort_before_semver():
    # Given a mix registered as: 1.0.0, "exp-b", 0.1.0, "exp-a"
    recs = records("1.0.0", "exp-b", "0.1.0", "exp-a")
    # Then non-semver come first in registration order, then semver by precedence
    assert [r.version for r in ordered(recs)] == ["exp-b", "exp-a", "0.1.0", "1.0.0"]


@settings(max_examples=200, deadline=None)
@given(
    a=st.tuples(*[st.integers(0, 10**6)] * 3),
    b=st.tuples(*[st.integers(0, 10**6)] * 3),
)
def test_release_order_is_numeric_per_component(a, b):
    ka, kb = semver("{}.{}.{}".format(*a)), semver("{}.{}.{}".format(*b))
    assert ka is not None and kb is not None
    assert (ka < kb) == (a < b)


@pytest.mark.parametrize("label", ["1.0", "01.0.0", "1.0.0-01", "v1.0.0", "1.0.0-", "1..0"])
def test_labels_that_are_not_strict_semver_are_not_semver(label):
    assert semver(label) is None


def test_latest_is_the_highest_live_version():
    recs = records("1.9.0", "1.10.0", "1.2.0")
    assert latest(recs).version == "1.10.0"
    recs[1] = rec("1.10.0", 1, deleted=True)
    assert latest(recs).version == "1.9.0"


def test_latest_without_semver_is_the_last_registered_and_semver_wins_once_present():
    assert latest(records("b", "a", "c")).version == "c"
    assert latest(records("0.0.1", "b", "c")).version == "0.0.1"


def test_latest_of_nothing_live_is_none():
    assert latest([rec("1.0.0", deleted=True)]) is None
    assert latest([]) is None


# -- bumps ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bump", ["major", "minor", "patch"])
def test_first_bump_is_1_0_0(bump):
    assert next_version([], bump) == "1.0.0"
    # labels that are not semver do not count
    assert next_version(records("draft", "exp"), bump) == "1.0.0"


@pytest.mark.parametrize(
    ("highest", "bump", "expected"),
    [
        ("1.2.3", "major", "2.0.0"),
        ("1.2.3", "minor", "1.3.0"),
        ("1.2.3", "patch", "1.2.4"),
        ("1.9.0", "minor", "1.10.0"),
        # a pre-release bumps to its release where that is the next step up
        ("2.0.0-rc.1", "major", "2.0.0"),
        ("2.0.0-rc.1", "minor", "2.0.0"),
        ("2.0.0-rc.1", "patch", "2.0.0"),
        ("1.3.0-beta", "minor", "1.3.0"),
        ("1.3.0-beta", "major", "2.0.0"),
        ("1.2.4-rc.2", "patch", "1.2.4"),
        ("1.2.4-rc.2", "minor", "1.3.0"),
    ],
)
def test_bumps_from_the_highest_version(highest, bump, expected):
    recs = records("0.1.0", highest, "notes")
    assert next_version(recs, bump) == expected


def test_bump_counts_tombstoned_versions_so_it_never_lands_on_a_hidden_label():
    # Given 1.1.0 was registered then tombstoned
    recs = [rec("1.0.0", 0), rec("1.1.0", 1, deleted=True)]
    # When the next minor is asked for, Then it is after 1.1.0
    assert next_version(recs, "minor") == "1.2.0"
    assert next_version(recs, "patch") == "1.1.1"


def test_unknown_bump_is_refused():
    with pytest.raises(BadRequest, match="bump"):
        next_version(records("1.0.0"), "huge")


# -- refs -------------------------------------------------------------------------------------


def test_resolve_by_label_and_latest():
    recs = records("1.0.0", "1.1.0", "0.9.0")
    assert resolve_ref(recs, "1.0.0").version == "1.0.0"
    assert resolve_ref(recs, "latest").version == "1.1.0"


def test_a_version_tag_resolves_to_the_highest_live_version_carrying_it():
    recs = [
        rec("1.0.0", 0, tags=("stable",)),
        rec("1.2.0", 1, tags=("stable", "prod")),
        rec("1.10.0", 2, tags=("stable",), deleted=True),
        rec("1.1.0", 3, tags=("stable",)),
    ]
    assert resolve_ref(recs, "stable").version == "1.2.0"
    assert resolve_ref(recs, "prod").version == "1.2.0"
    # a tombstoned version never answers a tag, even when deleted ones are included
    assert resolve_ref(recs, "stable", include_deleted=True).version == "1.2.0"


def test_a_label_wins_over_a_version_tag_of_the_same_name():
    recs = [rec("1.0.0", 0), rec("2.0.0", 1, tags=("1.0.0",))]
    assert resolve_ref(recs, "1.0.0").version == "1.0.0"


def test_resolve_by_content_digest():
    recs = [rec("1.0.0", 0, content=5), rec("2.0.0", 1, content=6), rec("2.1.0", 2, content=5)]
    # the same content under two labels answers the highest of them
    assert resolve_ref(recs, digest(5)).version == "2.1.0"
    assert resolve_ref(recs, digest(6)).version == "2.0.0"
    with pytest.raises(NotFound):
        resolve_ref(recs, digest(7))


@pytest.mark.parametrize("ref", ["sha256:abc", "sha256:" + "G" * 64, "sha256:" + "0" * 65])
def test_a_malformed_digest_ref_is_a_bad_request(ref):
    with pytest.raises(BadRequest):
        resolve_ref(records("1.0.0"), ref)


@pytest.mark.parametrize("ref", ["a b", "v1/2", "x" * 65, "", "../1.0.0", "sha1:abc"])
def test_a_ref_outside_the_label_rule_is_a_bad_request_not_a_miss(ref):
    # A label or a version tag obeys the label rule, so such a ref is a mistake, not a miss
    with pytest.raises(BadRequest) as err:
        resolve_ref(records("1.0.0"), ref, name="ds")
    assert err.value.fields["field"] == "ref"


def test_a_tombstoned_version_resolves_only_with_include_deleted():
    recs = [rec("1.0.0", 0), rec("1.1.0", 1, deleted=True, content=9)]
    with pytest.raises(NotFound):
        resolve_ref(recs, "1.1.0")
    with pytest.raises(NotFound):
        resolve_ref(recs, digest(9))
    assert resolve_ref(recs, "1.1.0", include_deleted=True).version == "1.1.0"
    assert resolve_ref(recs, digest(9), include_deleted=True).version == "1.1.0"
    assert resolve_ref(recs, "latest").version == "1.0.0"


def test_an_unknown_ref_is_not_found_naming_the_dataset_and_ref():
    with pytest.raises(NotFound) as err:
        resolve_ref(records("1.0.0"), "9.9.9", name="ds")
    assert "ds@9.9.9" in str(err.value)
    assert err.value.fields["ref"] == "9.9.9"
    with pytest.raises(NotFound):
        resolve_ref([], "latest", name="ds")


@pytest.mark.parametrize("name", ["ds\n", "", "-ds", "a/b", "x" * 129, ".ds"])
def test_dataset_ids_outside_the_rule_are_refused(name):
    from caseshelf.domain.versions import check_dataset_id

    with pytest.raises(BadRequest):
        check_dataset_id(name)


@pytest.mark.parametrize("tenant", ["acme\n", "", "..", "a/b", "-x"])
def test_tenants_outside_the_rule_are_refused(tenant):
    from caseshelf.domain.layout import check_tenant

    with pytest.raises(BadRequest):
        check_tenant(tenant)
