"""Deprecation notices raised while loading legacy dataset shapes.

Each code is stable and points at its section of `docs/migration.md` (the anchor is the code
itself). Asking for a code that is not registered is a programming error, never a user error.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCS_PAGE = "docs/migration.md"

LEGACY_ITEM = "dataset.legacy_item"
ROLE_LIST_USER = "dataset.role_list_user"
LEGACY_EXPECTATIONS = "dataset.legacy_expectations"
BARE_LIST = "dataset.bare_list"


@dataclass(frozen=True)
class Notice:
    code: str
    still_loads: str
    use_instead: str

    @property
    def anchor(self) -> str:
        return f"{DOCS_PAGE}#{self.code}"


NOTICES: dict[str, Notice] = {
    n.code: n
    for n in (
        Notice(
            LEGACY_ITEM,
            "item-level prompt/query/question/text/input/user/task, turns, expected_answer, "
            "ground_truth, expected, memory_seeds, session_id, hitl_responses or camelCase keys",
            "inputs.* and expectations.ground_truth",
        ),
        Notice(
            ROLE_LIST_USER,
            "inputs.user as a list of {role, content}",
            "inputs.user as a string or a list of strings",
        ),
        Notice(
            LEGACY_EXPECTATIONS,
            "app-specific keys directly on expectations (correct_action, governance, ...)",
            "expectations.details.<key>",
        ),
        Notice(
            BARE_LIST,
            "a bare YAML list of items (no kind: Dataset)",
            "apiVersion: lab/v1 / kind: Dataset / spec.items",
        ),
    )
}


def notice(code: str) -> Notice:
    """The notice for `code`; an unknown code is a bug in the caller."""
    try:
        return NOTICES[code]
    except KeyError:
        raise LookupError(f"unknown notice code {code!r}; register it in NOTICES") from None


def notice_message(code: str, source: str) -> str:
    """The one warning line a loader prints for `code` in the file `source`."""
    n = notice(code)
    return (
        f"{source}: {n.code}: {n.still_loads} is deprecated; use {n.use_instead} (see {n.anchor})"
    )
