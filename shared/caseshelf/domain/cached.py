"""A version's content as the local cache keeps it, and its verification. Pure.

The cache holds a version as its cases' canonical records (the bytes the registry stores and
hashes, one per line), the version's description, tags and shared files, and the bodies of its
files. That is everything its content digest is computed from (architecture §4), so a cached
version is verified by computing the digest again from what is on disk: the case digest of every
record, then the content digest over `[id, case digest]` in order — the registry's own functions,
so the cache can neither disagree with the registry nor serve a byte that changed.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from caseshelf.domain.canonical import ContentDigester, canonical_json
from caseshelf.domain.errors import Corrupt


@dataclass(frozen=True)
class VersionContent:
    """A version's content: `records` are the cases' canonical JSON, in dataset order;
    `files` the file bodies by hex digest (companion and shared files)."""

    description: str
    tags: list[str]
    shared_files: list[dict[str, str]]
    records: list[bytes]
    files: dict[str, bytes] = field(default_factory=dict)

    def meta(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "tags": self.tags,
            "shared_files": self.shared_files,
        }


@dataclass(frozen=True)
class Verified:
    """Cases that hashed to `content_digest`, with each case's digest (hex) beside it."""

    content_digest: str
    cases: list[dict[str, Any]]
    case_digests: list[str]


def _body(entry: Mapping[str, Any], where: str) -> bytes:
    if "text" in entry:
        return str(entry["text"]).encode("utf-8")
    if "base64" in entry:
        return base64.b64decode(str(entry["base64"]), validate=True)
    raise Corrupt(f"{where}: a file with neither text nor base64 in a downloaded version")


def _stored(body: bytes, files: dict[str, bytes]) -> tuple[str, int]:
    hex_digest = hashlib.sha256(body).hexdigest()
    files[hex_digest] = body
    return "sha256:" + hex_digest, len(body)


def content_of_document(doc: Mapping[str, Any]) -> VersionContent:
    """The content of a downloaded version (the dataset document the download route gives:
    canonical cases with every file body inline): each inline body back into `{digest, size}`,
    as the registry stores it, and the bodies kept by digest."""
    return fetched_content(doc)[0]


def fetched_content(doc: Mapping[str, Any]) -> tuple[VersionContent, Verified]:
    """`content_of_document`, and what its records verify to: the cases as parsed from the
    document (the stored form: what a parse of each record gives), every record hashed, and the
    content digest they make. One parse of the document, not one more of every record."""
    files: dict[str, bytes] = {}
    records: list[bytes] = []
    cases: list[dict[str, Any]] = []
    dumps = orjson.dumps
    for case in doc.get("cases") or ():
        if "files" in case:
            stored = {}
            for path, entry in case["files"].items():
                digest, size = _stored(_body(entry, f"case {case.get('id')!r} file {path}"), files)
                stored[path] = {"digest": digest, "size": size}
            case = {**case, "files": stored}
            records.append(canonical_json(case, checked=True))
        else:
            # A downloaded case is canonical JSON, its keys sorted at every level, and a parse
            # keeps their order: dumped as it is, it is its stored bytes again (half the time
            # of sorting them once more). A document that was not canonical gives other bytes,
            # and the content digest computed from them refuses it.
            records.append(dumps(case))
        cases.append(case)
    content = _content(doc, records, files)
    return content, _digested(content, cases)


def _content(
    doc: Mapping[str, Any], records: list[bytes], files: dict[str, bytes]
) -> VersionContent:
    """The version around `records`: the document's description, tags and shared files (each
    inline body back into its digest, kept in `files`)."""
    shared = []
    for f in doc.get("shared_files") or ():
        digest, _ = _stored(_body(f, f"shared file {f.get('dest')}"), files)
        shared.append({"dest": f["dest"], "digest": digest})
    return VersionContent(
        description=str(doc.get("description", "")),
        tags=list(doc.get("tags") or ()),
        shared_files=shared,
        records=records,
        files=files,
    )


# Canonical JSON sorts keys: a download document is `{"cases":[`, its cases joined by commas,
# then `],"description":` and the rest. Outside a string, a comma followed by `{"` and a key ends
# an object in a list; a case's keys sorted before its required `id` can only be these.
_HEAD = b'{"cases":['
_AFTER_CASES = b'],"description":'
_BETWEEN_CASES = re.compile(rb',(?=\{"(?:env|expectations|files|graders|id)":)')
_CASE_ID = re.compile(rb'"id":("[^"\\]*(?:\\.[^"\\]*)*")')


def document_content(body: bytes) -> tuple[VersionContent, str] | None:
    """A download document's content and the content digest its records make, cut out of its
    bytes unparsed: a quarter of the CPU of `fetched_content`. None where that cannot be done
    (inline case files, not a canonical document): parse it then. The cut is proved by the
    digest alone, so a caller compares it with the one it expects and parses on a mismatch."""
    end = body.rfind(_AFTER_CASES)
    if not body.startswith(_HEAD) or end < len(_HEAD) or body.find(b'"files":{', 0, end) >= 0:
        return None  # inline case files: their cases are not the stored records
    records = _BETWEEN_CASES.split(body) if end > len(_HEAD) else [body]
    tail = len(body) - end  # what the last piece holds after its case
    if len(records[-1]) < tail or not records[-1].endswith(body[end:]):
        return None
    records[0] = records[0][len(_HEAD) :]
    records[-1] = records[-1][: len(records[-1]) - tail]
    if records == [b""]:
        records = []
    ids = []
    for record in records:
        found = _CASE_ID.search(record)  # its own id, unless a key sorted before it holds one
        if found is None:
            return None
        ids.append(found.group(1))
    try:
        content = _content(orjson.loads(b"{" + body[end + 2 :]), records, {})
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError, Corrupt):
        return None
    return content, _digest_as_written(content, ids)


def _digest_as_written(content: VersionContent, ids: list[bytes]) -> str:
    """The content digest of `content` whose records have these ids, each as JSON as its record
    holds it: the pairs hashed are written as bytes, so no tuple a case is made (100,000 of them
    had the collector pass over every object of the process, 0.1 s)."""
    sha = hashlib.sha256
    pairs = [
        b"[" + i + b',"sha256:' + sha(r).hexdigest().encode() + b'"]'
        for i, r in zip(ids, content.records, strict=True)
    ]
    digester = ContentDigester(
        description=content.description, tags=content.tags, shared_files=content.shared_files
    )
    digester.add_encoded(b",".join(pairs))
    return digester.digest()


def _digested(content: VersionContent, cases: list[dict[str, Any]]) -> Verified:
    sha = hashlib.sha256
    digests = [sha(r).hexdigest() for r in content.records]
    digester = ContentDigester(
        description=content.description, tags=content.tags, shared_files=content.shared_files
    )
    digester.add([(c["id"], "sha256:" + d) for c, d in zip(cases, digests, strict=True)])
    return Verified(digester.digest(), cases, digests)


def verify_records(
    records: Sequence[bytes],
    *,
    description: str,
    tags: Sequence[str],
    shared_files: Sequence[Mapping[str, str]],
) -> Verified:
    """Parse every record and compute the content digest they give, with the case digests."""
    content = VersionContent(
        description=description,
        tags=list(tags),
        shared_files=[dict(f) for f in shared_files],
        records=list(records),
    )
    return _digested(content, list(map(orjson.loads, records)))


__all__ = [
    "Verified",
    "VersionContent",
    "content_of_document",
    "document_content",
    "fetched_content",
    "verify_records",
]
