"""Path rules (architecture §6) for every place a path or key is built from input (CWE-22, CWE-59).

Pure string checks; the filesystem-side checks (symlinks, resolved roots) live with the code that
touches the disk and call these first.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
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


def reserved_form(segment: str) -> str:
    """A path segment as file systems may take it: NFC, case-folded, without the trailing dots
    and spaces Windows drops. `INPUT.YAML`, `input.yaml.` and `input.yaml ` are `input.yaml`."""
    return unicodedata.normalize("NFC", segment).rstrip(". ").casefold()


# What every file system an export may land on takes (ext4, APFS, NTFS: 255 bytes a name), and a
# path short enough that the case directory and a destination still fit macOS's 1,024-byte
# PATH_MAX: a longer one is refused at registration (`case_file_problem`, `destination_problem`).
SEGMENT_MAX_BYTES = 255
PATH_MAX_BYTES = 1024
# Windows device names: a file or directory named so (with any extension) is the device.
_DEVICE = re.compile(r"^(?:con|prn|aux|nul|conin\$|conout\$|(?:com|lpt)[0-9\u00b9\u00b2\u00b3])$")
PATH_LIMITS = (
    f"a path segment is at most {SEGMENT_MAX_BYTES} bytes, a path at most {PATH_MAX_BYTES} bytes "
    "(UTF-8), and no segment is a Windows device name (CON, PRN, AUX, NUL, COM0-9, LPT0-9, with "
    "any extension) or ends in '.' or ' ': rename it to fit"
)


def is_device_name(segment: str) -> bool:
    """`con`, `NUL.txt`, `lpt1.tar.gz`, `com1 .log`: the name Windows takes for a device."""
    return _DEVICE.match(segment.split(".", 1)[0].rstrip(" ").casefold()) is not None


def portable_segment_problem(segment: str) -> str | None:
    """Why one path segment cannot be written on every system an export may land on."""
    size = len(segment.encode("utf-8"))
    if size > SEGMENT_MAX_BYTES:
        return f"has a segment of {size} bytes ({segment[:40]!r}...)"
    if is_device_name(segment):
        return f"holds {segment!r}, a Windows device name"
    if segment.endswith((".", " ")):
        return f"holds {segment!r}, which ends in {segment[-1]!r} (Windows drops it)"
    return None


def length_problem(path: str) -> str | None:
    """Why `path` is too long to write anywhere: a segment over 255 bytes or a path over
    1,024 (the export skips such a file of a version registered before the limits)."""
    size = len(path.encode("utf-8"))
    if size > PATH_MAX_BYTES:
        return f"is {size} bytes long; {PATH_LIMITS}"
    for part in path.split("/"):
        if len(part.encode("utf-8")) > SEGMENT_MAX_BYTES:
            return f"{portable_segment_problem(part)}; {PATH_LIMITS}"
    return None


def export_path_problem(path: str) -> str | None:
    """Why an export does not write a file of a case at `path` (it skips it with a warning):
    not a safe relative path, or too long to write (a version registered before the limits)."""
    return relative_path_problem(path) or length_problem(path)


def portable_path_problem(path: str) -> str | None:
    """Why a stored path is refused at registration: too long (`length_problem`), or a
    segment Windows cannot hold (`portable_segment_problem`), with the limits stated."""
    problem = length_problem(path)
    if problem:
        return problem
    for part in path.split("/"):
        problem = portable_segment_problem(part)
        if problem:
            return f"{problem}; {PATH_LIMITS}"
    return None


# Names that are never a case's own file at any depth: agent configuration a pod would act on.
AGENT_CONFIG_NAMES = frozenset({".claude"})
# Names never a case's own file at the top of its directory (the pod's hook directory).
TOP_ONLY_CASE_NAMES = frozenset({"hooks"})


def export_destination_problem(dest: str) -> str | None:
    """Why an export does not write a shared file at `dest`: the relative-path rules, reserved
    names matched on every segment as a file system may read it (`reserved_form`), and the
    length limits."""
    problem = relative_path_problem(dest)
    if problem:
        return problem
    for part in PurePosixPath(dest).parts:
        if reserved_form(part) in RESERVED_NAMES:
            return f"lands on the reserved name {part!r}"
    return length_problem(dest.strip("/"))


def destination_problem(dest: str) -> str | None:
    """Why a shared-file destination is refused when given: `export_destination_problem`,
    and a segment Windows cannot hold (`portable_path_problem`)."""
    return export_destination_problem(dest) or portable_path_problem(dest.strip("/"))


def case_file_problem(path: str) -> str | None:
    """Why a case's own file path is refused: not normalised (`a//b`, `a/`, where `a/b` is
    meant: two spellings must never collapse into one file), agent configuration
    (`AGENT_CONFIG_NAMES` at any depth, `TOP_ONLY_CASE_NAMES` at the top), or a spelling of a
    generated name that differs from it only as a file system would ignore (`INPUT.YAML`)."""
    problem = relative_path_problem(path)
    if problem:
        return problem
    if "/".join(p for p in path.split("/") if p) != path:
        return "is not normalised (an empty segment or a trailing '/')"
    parts = path.split("/")
    for part in parts:
        if reserved_form(part) in AGENT_CONFIG_NAMES:
            return f"holds {part!r}: agent configuration never reaches a pod from a case"
    top = reserved_form(parts[0])
    if top in TOP_ONLY_CASE_NAMES:
        return f"starts with {parts[0]!r}: a hook directory never reaches a pod from a case"
    if len(parts) == 1 and top in RESERVED_NAMES and parts[0] != top:
        return f"is a spelling of the reserved name {top!r}: write it as {top!r}"
    return portable_path_problem(path)


def case_file_clash(paths: list[str]) -> tuple[str, str] | None:
    """Two paths of one case that a case-insensitive (or trailing-dot-dropping) file system
    would take for one file (`a/B.txt`, `A/b.txt`); None when there are none. (A file where
    another path has a directory is the export's to skip, with a warning.)"""
    seen: dict[str, str] = {}
    for path in sorted(paths):
        folded = "/".join(reserved_form(p) for p in path.split("/"))
        other = seen.setdefault(folded, path)
        if other != path:
            return other, path
    return None


# Characters no case id holds (architecture §3): controls, and the invisible ones that make two ids
# look alike or reorder how an id (or a path built from it) reads: bidirectional embeddings,
# overrides and isolates, zero-width spaces and joiners, the byte-order mark.
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufeff\uffa0]"
)


def case_id_problem(case_id: str) -> str | None:
    """Why a case id is refused, or None: it holds a control, bidi-override or zero-width
    character (named by its code point)."""
    m = _INVISIBLE.search(case_id)
    if m is None:
        return None
    ch = m.group()
    name = unicodedata.name(ch, "control character")
    return (
        f"holds U+{ord(ch):04X} ({name}) at position {m.start()}: invisible characters are refused"
    )


_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]+$")

# Files at the root of an export, next to the case directories: an id spelled like one of them is
# encoded, so its directory never takes the place of the file (a directory `manifest.json` cannot
# sit beside the file `manifest.json` on a disk). `dataset.toml` is a harbor export's registry
# manifest; exports written before it was one named a case `dataset.toml` plainly, which
# `accepted_dir_names` still reads.
_LEGACY_ROOT_FILES = frozenset({"manifest.json", "bundle.tar.gz"})
EXPORT_ROOT_FILES = _LEGACY_ROOT_FILES | {"dataset.toml"}


# The longest directory name written (bytes; file systems allow 255), and the length of the
# readable part kept when an encoded id is longer and is shortened with its digest.
DIR_NAME_MAX = 240
_SHORT_PREFIX = 160
_SHORT_MARK = "~~"
_CASE_MARK = "~"


def _legacy_dir_name(case_id: str, root_files: frozenset[str] = _LEGACY_ROOT_FILES) -> str:
    """The encoding before case marks and shortening: identity for plain ids, else `~` plus
    percent-encoding (`case_dir_name` keeps it as the readable part of every name)."""
    if _SAFE_ID.fullmatch(case_id) and not case_id.startswith(".") and case_id not in root_files:
        return case_id
    out = ["~"]
    for byte in case_id.encode("utf-8"):
        ch = chr(byte)
        if ch.isascii() and (ch.isalnum() or ch in "_-"):
            out.append(ch)
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def _portable_base(case_id: str) -> str:
    """The readable part of a case directory's name: the legacy encoding, except that an id
    Windows cannot hold as a name (a device name such as `con` or `lpt1.txt`, or one ending in
    '.') is always encoded (`~con`, `~lpt1%2Etxt`, `~a%2E`), so it differs from every plain
    id there too (`a.` and `a` are one name on Windows)."""
    base = _legacy_dir_name(case_id, EXPORT_ROOT_FILES)
    if base.startswith("~") or not (is_device_name(base) or base.endswith(".")):
        return base
    return "~" + "".join(
        ch if ch.isascii() and (ch.isalnum() or ch in "_-") else f"%{ord(ch):02X}" for ch in base
    )


def case_dir_name(case_id: str) -> str:
    """Map a case id to a directory name: safe, at most `DIR_NAME_MAX` bytes, and distinct
    for distinct ids even on a case-insensitive file system.

    The readable part: the id itself for ids of `[A-Za-z0-9._-]` that do not start with '.', are
    not the name of a file at the export root (`EXPORT_ROOT_FILES`), are no Windows device name
    (`con`, `lpt1.txt`) and do not end in '.'; anything else is `~` +
    percent-encoding of its UTF-8 bytes, with only `[A-Za-z0-9_-]` left as they are, so the
    name never contains '/', never starts with '.', and can never equal '.' or '..'.

    Then, when the readable part holds an upper-case letter, `~` + the hex mask of where its
    upper-case letters are (`A` is `A~1`, `a` stays `a`, `AA` is `AA~3`): ids that differ only
    in case get names that differ in more than case. A name still longer than `DIR_NAME_MAX`
    keeps the first `_SHORT_PREFIX` bytes of its readable part and ends in `~~` + 32 hex of the
    id's sha256; `case_id_from_dir` cannot invert those, an export's `manifest.json` does.
    """
    base = _portable_base(case_id)
    mask = _upper_mask(base)
    name = f"{base}{_CASE_MARK}{mask:x}" if mask else base
    if len(name) <= DIR_NAME_MAX:  # (all ASCII: characters are bytes)
        return name
    cut = base[:_SHORT_PREFIX]
    if "%" in cut[-2:]:  # never cut a %XX escape in two
        cut = cut[: cut.rindex("%")]
    digest = hashlib.sha256(case_id.encode("utf-8")).hexdigest()[:32]
    return f"{cut}{_SHORT_MARK}{digest}"


def _upper_mask(base: str) -> int:
    """Bit i set when the i-th character of `base` outside its %XX escapes is upper case."""
    mask, i, n = 0, 0, 0
    while i < len(base):
        if base[i] == "%" and base.startswith("~"):
            i += 3
            continue
        if "A" <= base[i] <= "Z":
            mask |= 1 << n
        i += 1
        n += 1
    return mask


def is_shortened_dir_name(name: str) -> bool:
    return _SHORT_MARK in name[1:]


def case_id_from_dir(name: str) -> str:
    """Inverse of `case_dir_name` (and of the encoding before case marks); `BadRequest` for a
    shortened name, whose id only the export's manifest holds."""
    if is_shortened_dir_name(name):
        raise BadRequest(
            f"directory {name!r} is a shortened case id: read the id from the export's "
            "manifest.json",
            path=name,
        )
    mark = name.find(_CASE_MARK, 1)
    if mark > 0:
        name = name[:mark]
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


def accepted_dir_names(case_id: str) -> frozenset[str]:
    """The directory names an export may hold for `case_id`: today's, and the one exports
    written before case marks, shortening and device-name encoding used (still read back)."""
    return frozenset({case_dir_name(case_id), _legacy_dir_name(case_id)})
