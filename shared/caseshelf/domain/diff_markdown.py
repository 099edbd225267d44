"""A diff as GitHub-flavoured Markdown, sized for a pull-request comment. Pure.

`render_diff_markdown(head, entries)` takes the diff as the API answers it, in plain values: the
head (`base`, `candidate`, `summary`, `meta`, as on every page of `GET /datasets/{id}/diff`)
and the entries in the diff's order as `(kind, entry)`, kind `changed`, `added` or `removed`.
The entries are read once, as they come (a diff of any size is held as counts and the first
`max_cases` entries of each kind), and the comment is:

- a title naming both versions, their digests, and a link to the diff in the UI when `ui_url`
  is given;
- the counts (changed, added, removed, unchanged) in a table, and the version's own changes
  (description, tags, shared files, case order);
- "Fields that changed": each field (a JSON pointer, list positions as `*`) with the number of
  changed cases where it changed, most first;
- the first `max_cases` changed cases, one row per changed field, before and after side by
  side: a long string is shown around the change, and the words that differ are marked (struck
  through before, bold after);
- the first `max_cases` added and removed cases with their input text.

GitHub refuses a comment longer than 65,536 characters (`COMMENT_LIMIT`). Rows are added while
they fit, never cut: when one does not fit, it and every row after it are left out, and the last
line says how many rows of which table were left out and where to get every entry.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson

from caseshelf.domain import textdiff

COMMENT_LIMIT = 65_536
DEFAULT_MAX_CASES = 20
CONTEXT = 60  # characters of unchanged text kept on each side of a change
CELL_MAX = 320  # characters of a value shown in one cell, at most
INPUT_MAX = 160
# Room kept for the line saying what was left out.
FOOTER_ROOM = 600

_INDEX = re.compile(r"/\d+(?=/|$)")
# Characters that mean something inline in a table cell (block syntax is not read there),
# escaped with a backslash; `<`, `>` and `&` become entities.
_MARKDOWN = re.compile(r"([\\`*_~\[\]|])")


@dataclass
class _Section:
    """A table: its rows made as they are taken (a comment holds a few hundred of thousands of
    changed cases, and the word diff of each row is the costly part), and how many there are."""

    title: str
    header: Sequence[str]
    rows: Iterable[str]
    count: int
    right: Sequence[str] = ()


@dataclass
class _Gathered:
    fields: Counter[str] = field(default_factory=Counter)
    changed: list[Mapping[str, Any]] = field(default_factory=list)
    added: list[Mapping[str, Any]] = field(default_factory=list)
    removed: list[Mapping[str, Any]] = field(default_factory=list)


def render_diff_markdown(
    head: Mapping[str, Any],
    entries: Iterable[tuple[str, Mapping[str, Any]]],
    *,
    ui_url: str | None = None,
    max_cases: int = DEFAULT_MAX_CASES,
    limit: int = COMMENT_LIMIT,
    every_entry_hint: str | None = None,
) -> str:
    """The comment (at most `limit` characters). `every_entry_hint` names where the whole
    diff is (a command line) in the note about what was left out."""
    got = _gather(entries, max_cases)
    links = _Links(head, ui_url.rstrip("/") if ui_url else None)
    out = [*_title(head, links), "", *_counts(head["summary"]), ""]
    meta = _meta(head["meta"])
    if meta:
        out += [*meta, ""]
    summary = head["summary"]
    sections = [
        _Section(
            "Fields that changed",
            ("field", "cases"),
            [f"| `{_code(path)}` | {n:,} |" for path, n in _by_count(got.fields)],
            len(got.fields),
            right=("cases",),
        ),
        _Section(
            _first("Changed cases", len(got.changed), summary["changed"]),
            ("case", "field", "before", "after"),
            (row for entry in got.changed for row in _changed_rows(entry, links)),
            sum(_changed_row_count(entry) for entry in got.changed),
        ),
        _Section(
            _first("Added cases", len(got.added), summary["added"]),
            ("case", "input"),
            (_brief_row(b, links.case(b["id"], "candidate")) for b in got.added),
            len(got.added),
        ),
        _Section(
            _first("Removed cases", len(got.removed), summary["removed"]),
            ("case", "input"),
            (_brief_row(b, links.case(b["id"], "base")) for b in got.removed),
            len(got.removed),
        ),
    ]
    return _fit(out, sections, limit, every_entry_hint)


def _gather(entries: Iterable[tuple[str, Mapping[str, Any]]], max_cases: int) -> _Gathered:
    got = _Gathered()
    for kind, entry in entries:
        if kind == "changed":
            got.fields.update({field_of(ch["path"]) for ch in entry.get("changes") or ()})
            if len(got.changed) < max_cases:
                got.changed.append(entry)
        elif kind == "added" and len(got.added) < max_cases:
            got.added.append(entry)
        elif kind == "removed" and len(got.removed) < max_cases:
            got.removed.append(entry)
    return got


def _fit(out: list[str], sections: Sequence[_Section], limit: int, hint: str | None) -> str:
    """`out` and the sections' rows while they fit in `limit` characters (with room for the
    note on what was left out); the first row that does not fit and all after it are left
    out, counted per table."""
    size = sum(len(line) + 1 for line in out)
    left: dict[str, int] = {}
    for section in sections:
        if not section.count:
            continue
        if left:
            left[section.title] = section.count
            continue
        top = [f"#### {section.title}", "", _header(section.header, section.right)]
        kept: list[str] = []
        used = sum(len(line) + 1 for line in top)
        for n, row in enumerate(section.rows):
            if size + used + len(row) + 1 + FOOTER_ROOM > limit:
                left[section.title] = section.count - n
                break
            kept.append(row)
            used += len(row) + 1
        if kept:
            out += [*top, *kept, ""]
            size += used + 1
    if left:
        out.append(_left_out_note(left, limit, hint))
    text = "\n".join(out).rstrip("\n") + "\n"
    return text if len(text) <= limit else text[: text.rfind("\n", 0, limit - 1) + 1]


def _left_out_note(left: Mapping[str, int], limit: int, hint: str | None) -> str:
    total = sum(left.values())
    parts = ", ".join(f"{n:,} of {title.split(' (')[0].lower()}" for title, n in left.items())
    where = f" `{hint}` gives every entry." if hint else ""
    return (
        f"_{total:,} more row{'s' if total != 1 else ''} left out ({parts}) to stay within "
        f"GitHub's {limit:,}-character comment limit.{where}_"
    )


# --- pieces ------------------------------------------------------------------------------------


class _Links:
    """Links into the UI (none without a base URL), by content digest: the versions a comment
    names stay what they were when a tag moves."""

    def __init__(self, head: Mapping[str, Any], ui: str | None) -> None:
        self.head, self.ui = head, ui

    def diff(self) -> str | None:
        if self.ui is None:
            return None
        b, c = self.head["base"], self.head["candidate"]
        url = (
            f"{self.ui}/datasets/{_seg(b['id'])}/diff?base={_seg(b['content_digest'])}"
            f"&candidate={_seg(c['content_digest'])}"
        )
        return url + (f"&candidate_id={_seg(c['id'])}" if c["id"] != b["id"] else "")

    def case(self, case_id: str, side: str) -> str | None:
        if self.ui is None:
            return None
        v = self.head[side]
        return (
            f"{self.ui}/datasets/{_seg(v['id'])}/versions/{_seg(v['content_digest'])}"
            f"/cases/{_seg(case_id)}"
        )


def _seg(value: str) -> str:
    return quote(value, safe="")


def _title(head: Mapping[str, Any], links: _Links) -> list[str]:
    b, c = head["base"], head["candidate"]
    cand = c["version"] if c["id"] == b["id"] else f"{c['id']}@{c['version']}"
    lines = [
        f"### Dataset diff: `{_code(b['id'])}@{_code(b['version'])}` → `{_code(cand)}`",
        "",
        f"`{b['content_digest'][:19]}…` → `{c['content_digest'][:19]}…`",
    ]
    url = links.diff()
    if url:
        lines[-1] += f" · [open the diff]({url})"
    return lines


def _counts(summary: Mapping[str, Any]) -> list[str]:
    rows = [f"| {k} | {summary[k]:,} |" for k in ("changed", "added", "removed", "unchanged")]
    return [_header(("cases", "count"), right=("count",)), *rows]


def _meta(meta: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for ch in meta.get("changes") or ():
        if not lines:
            lines = ["#### The version itself", "", _header(("field", "before", "after"))]
        before, after = _cells(ch)
        lines.append(f"| `{_code(ch['path'])}` | {before} | {after} |")
    if meta.get("case_order_changed"):
        lines += ["", "The cases both versions hold come in another order."]
    return lines


def _first(title: str, shown: int, total: int) -> str:
    return f"{title} ({total:,})" if shown >= total else f"{title} (first {shown:,} of {total:,})"


def _header(names: Sequence[str], right: Sequence[str] = ()) -> str:
    """A table's header and delimiter rows, the columns named in `right` aligned right."""
    rule = "".join("---:|" if n in right else "---|" for n in names)
    return "| " + " | ".join(names) + " |\n|" + rule


def _by_count(fields: Counter[str]) -> list[tuple[str, int]]:
    return sorted(fields.items(), key=lambda item: (-item[1], item[0]))


def field_of(pointer: str) -> str:
    """A change's field: its JSON pointer with list positions as `*` (`/inputs/user/2` ->
    `/inputs/user/*`), so a field that changed at several positions counts once a case."""
    return _INDEX.sub("/*", pointer)


def _case_cell(case_id: str, url: str | None) -> str:
    text = f"`{_code(case_id)}`"
    return f"[{text}]({url})" if url else text


def _changed_row_count(entry: Mapping[str, Any]) -> int:
    """How many rows `_changed_rows` makes of `entry`, without making them."""
    return 1 if entry.get("oversized") else len(entry.get("changes") or ())


def _changed_rows(entry: Mapping[str, Any], links: _Links) -> list[str]:
    cell = _case_cell(entry["id"], links.case(entry["id"], "candidate"))
    if entry.get("oversized"):
        return [f"| {cell} | | _too large to show here_ | _open the case to compare_ |"]
    rows = []
    for n, change in enumerate(entry.get("changes") or ()):
        before, after = _cells(change)
        rows.append(
            f"| {cell if n == 0 else ''} | `{_code(change['path'])}` | {before} | {after} |"
        )
    return rows


def _brief_row(brief: Mapping[str, Any], url: str | None) -> str:
    text = brief.get("user") or ""
    return f"| {_case_cell(brief['id'], url)} | {_escape(_clip(text, INPUT_MAX))} |"


# --- values, around the change, with the words that differ marked ------------------------------


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def _cells(change: Mapping[str, Any]) -> tuple[str, str]:
    """The before and after cells of a change: `_absent_` on the side where it does not exist,
    else each side's text around the change with the differing words marked."""
    has_b, has_a = "before" in change, "after" in change
    if not (has_b and has_a):
        present = _escape(_clip(_text(change["before" if has_b else "after"]), CELL_MAX))
        return (present, "_absent_") if has_b else ("_absent_", present)
    b, a = change["before"], change["after"]
    if type(b) is not type(a):  # a value of another JSON type: changed whole, as JSON
        return _whole(_json(b), "~~"), _whole(_json(a), "**")
    return word_diff(_text(b), _text(a))


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _whole(text: str, mark: str) -> str:
    return _wrap(_clip(text, CELL_MAX), mark)


def word_diff(before: str, after: str) -> tuple[str, str]:
    """Both texts as cell Markdown: the words only `before` has struck through, the words
    only `after` has in bold, each shown from about `CONTEXT` characters before its first change
    to `CONTEXT` after its last (`…` where cut, between words), at most `CELL_MAX` characters.
    The changes are `caseshelf.domain.textdiff.word_diff`'s."""
    left: list[tuple[str, bool]] = []
    right: list[tuple[str, bool]] = []
    for op, text in textdiff.word_diff(before, after):
        if op == "=":  # word by word, so that a cut falls between words
            words = [(t, False) for t in textdiff.tokens(text)]
            left += words
            right += words
        elif op == "-":
            left.append((text, True))
        else:
            right.append((text, True))
    return _marked(left, "~~"), _marked(right, "**")


def _marked(pieces: list[tuple[str, bool]], mark: str) -> str:
    text = "".join(p for p, _ in pieces)
    marks = [i for i, (_, m) in enumerate(pieces) if m]
    if not text:
        return "_empty_"
    if not marks:
        return _escape(_clip(text, CELL_MAX))
    starts = [0]
    for p, _ in pieces:
        starts.append(starts[-1] + len(p))
    lo = max(0, starts[marks[0]] - CONTEXT)
    hi = min(len(text), starts[marks[-1] + 1] + CONTEXT, max(lo, starts[marks[0]]) + CELL_MAX)
    out: list[str] = []
    shown_lo, shown_hi = len(text), 0
    for (piece, changed), start in zip(pieces, starts, strict=False):
        end = start + len(piece)
        if changed:  # a change is shown as far as the window goes, cut inside if need be
            part = piece[max(lo - start, 0) : max(hi - start, 0)]
            if not part:
                continue
            out.append(_wrap(part, mark))
            shown_lo, shown_hi = min(shown_lo, max(start, lo)), max(shown_hi, min(end, hi))
        elif lo <= start and end <= hi:  # an unchanged word only whole
            out.append(_escape(piece))
            shown_lo, shown_hi = min(shown_lo, start), max(shown_hi, end)
    return ("…" if shown_lo > 0 else "") + "".join(out) + ("…" if shown_hi < len(text) else "")


def _wrap(part: str, mark: str) -> str:
    """`part` marked; its surrounding white space stays outside the marks (GFM does not take
    `** a**` as bold)."""
    core = part.strip()
    if not core:
        return _escape(part)
    lead, trail = part[: len(part) - len(part.lstrip())], part[len(part.rstrip()) :]
    return f"{_escape(lead)}{mark}{_escape(core)}{mark}{_escape(trail)}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _code(text: str) -> str:
    """Text inside a code span in a table cell: `|` escaped (GFM splits the cells before it
    reads code spans), backticks as quotes, white space as spaces."""
    text = " ".join(text.split()) if any(c in text for c in "\r\n\t") else text
    return _pictures(text).replace("`", "'").replace("|", "\\|")


def _escape(text: str) -> str:
    """Text as Markdown that shows it as it is, on one line of a table cell (line breaks as
    `<br>`)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MARKDOWN.sub(r"\\\1", text).replace("\r\n", "\n").replace("\t", " ")
    return _mentions(_pictures(text.replace("\n", "<br>")))


def _pictures(text: str) -> str:
    """Control characters as their visible pictures (U+2400...)."""
    return "".join(chr(0x2400 + ord(c)) if ord(c) < 32 else c for c in text)


def _mentions(text: str) -> str:
    """`@` followed by a zero-width space: a case that reads `@pytest.fixture` must not notify
    a GitHub user called pytest."""
    return text.replace("@", "@\u200b")


__all__ = ["COMMENT_LIMIT", "DEFAULT_MAX_CASES", "field_of", "render_diff_markdown", "word_diff"]
