"""Word-level diff of two texts, for showing what changed inside a long string. Pure.

`word_diff(before, after)` splits both texts into word, space and punctuation tokens and lists
the runs of the text as `(op, text)` segments, `op` one of `"="` (on both sides), `"-"` (only
before) and `"+"` (only after). Joining the `=` and `-` texts gives `before` back, the `=` and
`+` texts `after`. `around_changes(segments, context)` shortens the unchanged runs to `context`
characters either side of a change (`…` marks a cut), so a one-word edit near the end of a long
question shows where it is. `marked(segments)` is the plain-text form, git's `--word-diff`
markers: `[-old-]{+new+}`. Renderers (the CLI's colours, Markdown, the web UI) read the same
segments.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher
from typing import Final, Literal

Op = Literal["=", "-", "+"]
Segment = tuple[Op, str]

# A word, a run of spaces, or one other character: joined, the tokens are the text again.
_TOKEN: Final = re.compile(r"\w+|\s+|[^\w\s]")
ELLIPSIS: Final = "…"


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def word_diff(before: str, after: str) -> list[Segment]:
    """The segments that turn `before` into `after`, word by word; runs of one op are joined."""
    a, b = tokens(before), tokens(after)
    out: list[Segment] = []

    def put(op: Op, text: str) -> None:
        if not text:
            return
        if out and out[-1][0] == op:
            out[-1] = (op, out[-1][1] + text)
        else:
            out.append((op, text))

    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            put("=", "".join(a[i1:i2]))
            continue
        put("-", "".join(a[i1:i2]))
        put("+", "".join(b[j1:j2]))
    return out


def around_changes(segments: list[Segment], context: int = 40) -> list[Segment]:
    """`segments` with each unchanged run longer than its context cut to `context` characters
    next to the changes it touches: the head keeps its end, the tail its start, a run between
    two changes both ends, with `…` where text was left out."""
    out: list[Segment] = []
    last = len(segments) - 1
    for n, (op, text) in enumerate(segments):
        if op != "=" or len(text) <= context:
            out.append((op, text))
            continue
        keep_start, keep_end = n > 0, n < last
        if keep_start and keep_end:
            if len(text) > 2 * context + 1:
                text = text[:context] + ELLIPSIS + text[-context:]
        elif keep_start:
            text = text[:context] + ELLIPSIS
        elif keep_end:
            text = ELLIPSIS + text[-context:]
        out.append((op, text))
    return out


def marked(segments: list[Segment]) -> str:
    """The segments as one plain text: removed runs as `[-…-]`, inserted runs as `{+…+}`."""
    parts = []
    for op, text in segments:
        if op == "-":
            parts.append(f"[-{text}-]")
        elif op == "+":
            parts.append(f"{{+{text}+}}")
        else:
            parts.append(text)
    return "".join(parts)
