"""The lock file's model and TOML form (`caseshelf.domain.lockfile`), what a registry answer
means for a pin (`caseshelf.client.pins.judge`), and a subset of plain cases
(`caseshelf.domain.subset.select_cases`). Pure."""

from __future__ import annotations

import difflib
import tomllib

import pytest

from caseshelf.api.dto import Problem, TagMoveOut, VersionOut
from caseshelf.api.refs_dto import RefResolvedOut
from caseshelf.client.pins import judge, moved_line
from caseshelf.domain.lockfile import Lock, LockError, Pin, SubsetPin, parse_lock, render_lock
from caseshelf.domain.subset import Selection, select_cases

pytestmark = pytest.mark.integration

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def pin(ref: str = "gsm8k@stable", version: str = "1.1.0", digest: str = D1, **kw: object) -> Pin:
    fields = {"cases": 1319, "registry": "embedded", **kw}
    return Pin(ref=ref, version=version, digest=digest, **fields)  # type: ignore[arg-type]


def test_a_lock_renders_and_reads_back_the_same() -> None:
    # Given pins with every kind of value: a subset, a name with a dot, odd case ids
    lock = Lock(
        pins={
            "gsm8k": pin(),
            "gsm8k.easy": pin(
                ref="gsm8k@1.1.0",
                cases=2,
                registry="https://api.example.com/prod",
                subset=SubsetPin(
                    ids=['a"b', "c\\d", "tab\there", "\x7f"], tags=["easy"], total=1319, selected=2
                ),
            ),
            "mmlu": pin(
                ref="mmlu@sha256:" + "2" * 64,
                digest=D2,
                subset=SubsetPin(sample=5, seed="abc", total=10, selected=5),
                cases=5,
            ),
        }
    )
    # When it is rendered and read again
    text = render_lock(lock)
    # Then it is the same lock, TOML any reader takes, and the same bytes when written again
    assert parse_lock(text, "caseshelf.lock") == lock
    assert tomllib.loads(text)["pins"]["gsm8k.easy"]["subset"]["ids"][1] == "c\\d"
    assert render_lock(parse_lock(text, "caseshelf.lock")) == text
    assert '[pins."gsm8k.easy"]' in text


def test_pins_are_written_in_name_order_whatever_order_they_came_in() -> None:
    a = Lock(pins={"b": pin(), "a": pin(), "c": pin()})
    b = Lock(pins={"c": pin(), "a": pin(), "b": pin()})
    assert render_lock(a) == render_lock(b)
    heads = [ln for ln in render_lock(a).splitlines() if ln.startswith("[")]
    assert heads == ["[pins.a]", "[pins.b]", "[pins.c]"]


def test_moving_one_pin_changes_only_its_lines() -> None:
    # Given a lock of three pins, and the same lock with one of them moved
    before = Lock(pins={"a": pin(), "b": pin(), "c": pin()})
    after = before.with_pin("b", pin(version="1.2.0", digest=D2, cases=1334))
    # When both are rendered
    diff = [
        ln
        for ln in difflib.unified_diff(
            render_lock(before).splitlines(), render_lock(after).splitlines(), lineterm="", n=0
        )
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    # Then the diff is the moved pin's version, digest and count, nothing else
    assert diff == [
        '-version = "1.1.0"',
        f'-digest = "{D1}"',
        "-cases = 1319",
        '+version = "1.2.0"',
        f'+digest = "{D2}"',
        "+cases = 1334",
    ]


GOOD = render_lock(Lock(pins={"a": pin(ref="a@1"), "gsm8k": pin()}))


def _last(text: str, old: str, new: str) -> str:
    head, _, tail = text.rpartition(old)
    return head + new + tail


@pytest.mark.parametrize(
    ("text", "marker", "pin_name", "words"),
    [
        (_last(GOOD, "cases = 1319", "casez = 1319"), "casez", "gsm8k", "unknown key 'casez'"),
        (GOOD.replace(f'digest = "{D1}"', 'digest = "sha256:XYZ"', 1), "XYZ", "a", "digest"),
        (GOOD + "\n[pins.b\n", "[pins.b", None, "not TOML"),
        (GOOD.replace("format = 1", "format = 2"), "format", None, "newer caseshelf"),
        (GOOD + "\nextra = 1\n", "extra", "gsm8k", "unknown key 'extra'"),
        (GOOD.replace('"gsm8k@stable"', '"gsm8k stable"'), "gsm8k stable", "gsm8k", "ref"),
    ],
)
def test_a_bad_lock_is_an_error_naming_the_file_line_and_pin(
    text: str, marker: str, pin_name: str | None, words: str
) -> None:
    line = next(n for n, ln in enumerate(text.splitlines(), 1) if marker in ln)
    with pytest.raises(LockError) as err:
        parse_lock(text, "repo/caseshelf.lock")
    assert err.value.fields["line"] == line
    assert err.value.fields.get("pin") == pin_name
    assert err.value.detail.startswith(f"repo/caseshelf.lock:{line}:")
    assert words in err.value.detail
    assert "nothing was rewritten" in err.value.detail


def version(v: str = "1.1.0", digest: str = D1, **kw: object) -> VersionOut:
    fields = {
        "id": "gsm8k",
        "version": v,
        "content_digest": digest,
        "case_count": 1319,
        "bytes": 1,
        "description": "",
        "tags": [],
        "version_tags": [],
        "created_at": "2026-12-07T09:00:00.000Z",
        "created_by": "carol",
        "owner": "acme",
        **kw,
    }
    return VersionOut.model_validate(fields)


def test_judge_says_what_each_answer_means_for_the_pin() -> None:
    p = pin()
    ok = RefResolvedOut(ref=p.ref, version=version(), pinned=version())
    assert judge("gsm8k", p, ok, 5).status == "ok"
    # a version gone from the registry
    missing = Problem(title="Not Found", status=404, detail="no version gsm8k@sha256:…")
    gone = judge("gsm8k", p, RefResolvedOut(ref=p.ref, pinned_problem=missing), 5)
    assert gone.status == "gone" and gone.problem and gone.problem.startswith("gsm8k: 1.1.0")
    # tombstoned
    dead = version(deleted_at="2026-12-08T10:00:00.000Z", deleted_by="dave")
    t = judge("gsm8k", p, RefResolvedOut(ref=p.ref, pinned=dead), 5)
    assert t.status == "tombstoned" and t.problem and "by dave, 2026-12-08 10:00" in t.problem
    # the label holds other content than locked
    other = judge("gsm8k", p, RefResolvedOut(ref=p.ref, pinned=version(digest=D2)), 5)
    assert other.status == "mismatch"
    # the tag moved: who moved it, from where to where, when
    move = TagMoveOut(
        seq=3, tag="stable", from_version="1.1.0", to_version="1.2.0", by="alice",
        at="2026-12-07T10:02:11.000Z",
    )  # fmt: skip
    moved = judge(
        "gsm8k",
        p,
        RefResolvedOut(ref=p.ref, version=version("1.2.0", D2), moved=move, pinned=version()),
        5,
    )
    assert moved.status == "moved"
    assert moved_line(moved) == "gsm8k: stable moved 1.1.0 -> 1.2.0 (by alice, 2026-12-07 10:02)"
    # `latest` moves when a version is registered: its creator and time
    latest = pin(ref="gsm8k@latest")
    newer = RefResolvedOut(ref=latest.ref, version=version("1.2.0", D2), pinned=version())
    assert moved_line(judge("gsm8k", latest, newer, 5)) == (
        "gsm8k: latest moved 1.1.0 -> 1.2.0 (by carol, 2026-12-07 09:00)"
    )


def test_a_subset_of_plain_cases_is_the_selection_the_manifest_gives() -> None:
    ids = [f"c{i}" for i in range(10)]
    tags = [["easy"] if i % 2 else ["hard"] for i in range(10)]
    digests = [f"{i:064x}" for i in range(10)]
    assert select_cases(ids, tags, digests, Selection(tags=("easy",), limit=3)) == [1, 3, 5]
    assert select_cases(ids, tags, digests, Selection(ids=("c9", "c2"))) == [2, 9]
    sample = select_cases(ids, tags, digests, Selection(sample=4, seed=7))
    assert len(sample) == 4 and sample == sorted(sample)
    assert select_cases(ids, tags, digests, Selection()) == list(range(10))


def test_the_lock_holds_ids_labels_digests_and_seeds_to_the_models_rules() -> None:
    from caseshelf.domain import lockfile, models, subset

    assert lockfile.DATASET_ID_PATTERN == models.DATASET_ID_PATTERN
    assert lockfile.LABEL_PATTERN == models.LABEL_PATTERN
    assert lockfile.DIGEST_PATTERN == models.DIGEST_PATTERN
    assert str(lockfile.Seed) == str(subset.Seed)
