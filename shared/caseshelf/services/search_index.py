"""A version's search index: the text of every case, case-folded, one line a case, so a text
search of the whole version is one substring scan in memory instead of reading and parsing
every record (`caseshelf.services.browse`).

The index is made by the pass over the version's records that makes its numbers
(`BrowseService.stats`, which the version page asks for) and kept by content digest under the
caller's tenant, in
the transient `exports/` area beside the numbers (expired by the bucket's lifecycle rule; made
again when missing). The last index read is kept in memory for the next page of a search.
Until a version has one, its text searches scan its records (`caseshelf.services.search_scan`),
which answer the same pages: a search never waits for the index to be made.

Layout of the object: `INDEX_MAGIC`, the number of cases `n` (8 bytes, little-endian), the
`n + 1` offsets of the lines (8 bytes each), then the lines (`caseshelf.domain.browse.index_line`,
each followed by a newline).

A version whose records are over `MAX_INDEXED_BYTES` has no index: its text searches are the
bounded scan of every page (the index would not fit a function's memory). A process makes and
reads the index only of a version whose records are at most `index_bytes_for` its memory (an
eighth: the index is about as large as the records and is held twice while it is made and
stored, beside the registry's cache of a quarter, `caseshelf.services.memo`); a larger one's
text searches scan its records (`caseshelf.services.search_scan`), which answer the same pages.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from caseshelf.domain import layout
from caseshelf.domain.browse import index_line
from caseshelf.domain.canonical import hex_of
from caseshelf.domain.errors import NotFound

INDEX_MAGIC = b"caseshelf.search/1\n"
# The most record bytes a version may hold and have an index (its lines are about as long).
MAX_INDEXED_BYTES = 256 * 1024 * 1024
# The share of the process's memory a version's records may be and have their index made or read.
INDEX_SHARE = 0.125


def index_bytes_for(memory_bytes: int) -> int:
    """The largest version (record bytes) a process of `memory_bytes` makes or reads an index
    of."""
    return min(MAX_INDEXED_BYTES, int(memory_bytes * INDEX_SHARE))


def index_key(tenant: str, content_digest: str) -> str:
    return f"{layout.root(tenant)}exports/search/{hex_of(content_digest)}.idx"


@dataclass(frozen=True)
class SearchIndex:
    content_digest: str
    offsets: array[int]  # line k is text[offsets[k] : offsets[k + 1] - 1]
    text: bytes

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def find(self, needle: str, start: int, stop: int, limit: int) -> list[int]:
        """The positions in `[start, stop)` whose line holds `needle`, at most `limit`, in
        order."""
        probe = needle.encode("utf-8")
        text, offsets = self.text, self.offsets
        found: list[int] = []
        at, end = offsets[start], offsets[stop]
        while len(found) < limit:
            hit = text.find(probe, at, end)
            if hit < 0:
                break
            line = bisect_right(offsets, hit) - 1
            found.append(line)
            at = offsets[line + 1]  # the next case's line
        return found

    def to_bytes(self) -> bytes:
        return INDEX_MAGIC + len(self).to_bytes(8, "little") + self.offsets.tobytes() + self.text

    @classmethod
    def from_bytes(cls, content_digest: str, data: bytes) -> SearchIndex:
        """A kept index; `ValueError` when it is not one or does not hold together."""
        if not data.startswith(INDEX_MAGIC):
            raise ValueError("not a search index")
        at = len(INDEX_MAGIC)
        n = int.from_bytes(data[at : at + 8], "little")
        at += 8
        offsets = array("Q")
        offsets.frombytes(data[at : at + 8 * (n + 1)])
        text = data[at + 8 * (n + 1) :]
        if len(offsets) != n + 1 or offsets[0] != 0 or offsets[-1] != len(text):
            raise ValueError("a search index that does not hold together")
        return cls(content_digest, offsets, text)


class IndexBuilder:
    """The index of a version, made a case at a time (in order), into one buffer (no object
    a line)."""

    def __init__(self) -> None:
        self._text = bytearray()
        self._offsets = array("Q", [0])

    def add(self, case: Mapping[str, Any]) -> None:
        self._text += index_line(case)
        self._text += b"\n"
        self._offsets.append(len(self._text))

    def add_all(self, cases: Iterable[Mapping[str, Any]]) -> None:
        for case in cases:
            self.add(case)

    def build(self, content_digest: str) -> SearchIndex:
        text = bytes(self._text)
        self._text = bytearray()  # the buffer goes: the index holds the one copy
        return SearchIndex(content_digest, self._offsets, text)


class LastIndex:
    """The last index read or made, for the next page of the same search (one at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: str | None = None
        self._index: SearchIndex | None = None

    def get(self, key: str) -> SearchIndex | None:
        with self._lock:
            return self._index if key == self._key else None

    def put(self, key: str, index: SearchIndex) -> None:
        with self._lock:
            self._key, self._index = key, index


def read_index(store: Any, key: str, content_digest: str, count: int) -> SearchIndex | None:
    """The index kept at `key`, or None when there is none (or one that does not fit)."""
    try:
        index = SearchIndex.from_bytes(content_digest, store.get(key))
    except (NotFound, ValueError):
        return None
    return index if len(index) == count else None
