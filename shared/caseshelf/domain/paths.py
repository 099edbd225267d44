"""Path rules (DESIGN §6) for every place a path or key is built from input (CWE-22, CWE-59).

Pure string checks; the filesystem-side checks (symlinks, resolved roots) live with the code that
touches the disk and call these first.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from caseshelf.domain.errors import BadRequest

RESERVED_NAMES = frozenset(
    {
        "input.yaml",
        "input.yml",
        "input.json",
        "answers.yaml",
        "annotations.yaml",
        "batch.yaml",
        ".claude",
        "hooks",
        "tool_handlers.yaml",
    }
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def relative_path_problem(path: str) -> str | None:
    """Why `path` is not a safe relative POSIX path, or None when it is."""
    if not path or path.strip() in {"", ".", "/"}:
        return "is empty or names the root"
    if _CONTROL.search(path):
        return "contains a control character"
    if "\\" in path:
        return "contains a backslash"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "is absolute"
    parts = PurePosixPath(path).parts
    if any(part == ".." for part in parts):
        return "traverses to a parent ('..')"
    if any(part == "." for part in path.split("/")):
        return "contains a '.' segment"
    return None


def check_relative_path(path: str, *, what: str = "path") -> str:
    """Return the normalised path (no trailing slash, no empty segments) or raise BadRequest."""
    problem = relative_path_problem(path)
    if problem:
        raise BadRequest(f"{what} {path!r} {problem}", field=what, path=path)
    return "/".join(p for p in path.split("/") if p)


def destination_problem(dest: str) -> str | None:
    """Why a shared-file destination is refused: the relative-path rules plus reserved names."""
    problem = relative_path_problem(dest)
    if problem:
        return problem
    first = PurePosixPath(dest).parts[0]
    if first in RESERVED_NAMES:
        return f"lands on the reserved name {first!r}"
    return None


_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]+$")

# Files at the root of an export, next to the case directories: an id spelled like one of them is
# encoded, so its directory never takes the place of the file (a directory `manifest.json` cannot
# sit beside the file `manifest.json` on a disk).
EXPORT_ROOT_FILES = frozenset({"manifest.json", "bundle.tar.gz"})


def case_dir_name(case_id: str) -> str:
    """Map a case id to a directory name by a reversible, safe encoding.

    Identity for ids of `[A-Za-z0-9._-]` that do not start with '.' and are not the name of a file
    at the export root (`EXPORT_ROOT_FILES`); anything else is written as
    `~` + percent-encoding of its UTF-8 bytes, with only `[A-Za-z0-9_-]` left as they are, so the
    result never contains '/', never starts with '.', and can never equal '.' or '..'.
    """
    if (
        _SAFE_ID.fullmatch(case_id)
        and not case_id.startswith(".")
        and case_id not in EXPORT_ROOT_FILES
    ):
        return case_id
    out = ["~"]
    for byte in case_id.encode("utf-8"):
        ch = chr(byte)
        if ch.isascii() and (ch.isalnum() or ch in "_-"):
            out.append(ch)
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def case_id_from_dir(name: str) -> str:
    """Inverse of `case_dir_name`."""
    if not name.startswith("~"):
        return name
    raw = bytearray()
    body = name[1:]
    i = 0
    while i < len(body):
        if body[i] == "%":
            raw.append(int(body[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(body[i].encode("ascii"))
            i += 1
    return raw.decode("utf-8")
