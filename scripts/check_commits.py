"""Commit subjects say what changed in at most 72 characters; the why and the figures go in the
body. Checks every commit after BASE (default: the commit before the rule began) up to HEAD, and
a message file given as the `commit-msg` hook gets it.

    python scripts/check_commits.py                 # every commit since the rule began
    python scripts/check_commits.py --base main     # the commits of this branch
    python scripts/check_commits.py --message-file .git/COMMIT_EDITMSG   # as a commit-msg hook
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72
# The last commit before subjects were held to MAX_SUBJECT; history before it stays as it is.
RULE_BEGAN = "cb7d8aad6cd95f310c6c195726239d3ccbe67b41"


def problems(subject: str, body_separator: str | None) -> list[str]:
    """What is wrong with a commit message's subject line (and the line after it)."""
    found: list[str] = []
    if not subject.strip():
        found.append("the subject is empty")
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject is {len(subject)} characters (at most {MAX_SUBJECT})")
    if body_separator is not None and body_separator.strip():
        found.append("the subject is not followed by a blank line")
    return found


def check_message(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    if not lines:
        return ["the message is empty"]
    return problems(lines[0], lines[1] if len(lines) > 1 else None)


def commits(base: str) -> list[tuple[str, str]]:
    """(short hash, message) of every commit after `base`; of every commit there is when `base`
    is not in this clone's history (a shallow clone)."""
    known = subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"], capture_output=True)
    span = f"{base}..HEAD" if known.returncode == 0 else "HEAD"
    if known.returncode != 0:
        print(f"note: {base} is not in this clone; checking every commit there is", file=sys.stderr)
    out = subprocess.run(
        ["git", "log", "--no-merges", "--format=%h%x00%B%x01", span],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = []
    for entry in filter(None, (e.strip("\n") for e in out.split("\x01"))):
        sha, _, message = entry.partition("\x00")
        found.append((sha, message))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=RULE_BEGAN, help="check the commits after this one")
    parser.add_argument("--message-file", type=Path, help="check one message (commit-msg hook)")
    args = parser.parse_args(argv)
    if args.message_file is not None:
        bad = check_message(args.message_file.read_text(encoding="utf-8"))
        for p in bad:
            print(f"commit message: {p}", file=sys.stderr)
        return 1 if bad else 0
    failed = 0
    for sha, message in commits(args.base):
        for p in check_message(message):
            print(f"{sha}: {p}: {message.splitlines()[0][:80]!r}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
