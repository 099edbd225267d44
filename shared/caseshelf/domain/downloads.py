"""What a download is called on the user's disk: `<dataset>-<version>.<ext>` (`gsm8k-1.1.0.json`,
not the stored object's digest name), said in a `Content-Disposition` header that a browser
and S3 (`ResponseContentDisposition` of a presigned GET) both take. Pure."""

from __future__ import annotations

from urllib.parse import quote

# What a filename may keep as it is in the header's quoted form (RFC 6266): printable ASCII but
# the quote and the backslash, which would end or escape the quoted string.
_PLAIN = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


def download_name(dataset: str, version: str, ext: str) -> str:
    """`<dataset>-<version>.<ext>`: `ext` without its dot (`json`, `jsonl`, `harbor.tar.gz`)."""
    return f"{dataset}-{version}.{ext}"


def attachment(filename: str) -> str:
    """The `Content-Disposition` value that saves a download as `filename`: the name itself
    where it is plain ASCII, else an ASCII stand-in (`_` for each other character) and the
    exact name as `filename*` (UTF-8, percent-encoded). Path separators become `_`: a name,
    never a path."""
    name = filename.replace("/", "_").replace("\\", "_")
    plain = "".join(c if c in _PLAIN else "_" for c in name) or "download"
    if plain == name:
        return f'attachment; filename="{plain}"'
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"
