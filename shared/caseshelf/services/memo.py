"""A cache bounded in bytes: the registry's manifests, roots and chunks, kept against the
memory of the function (or process) that reads them.

Manifests are immutable, so a cache keyed by their keys is always right; what has to be bounded
is how much of the process it holds. A whole manifest of 200,000 cases is tens of megabytes in
memory, so a bound by count (32 of them) outgrew a 1,024 MB function after ~25 versions. Each
entry here is accounted by `approx_bytes` (its Python objects, and the lazily decoded columns a
manifest may still grow, counted as if decoded), and the least recently used entries are dropped
while the total is over the bound.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

from caseshelf.domain.manifest import DigestColumn, IntColumn

V = TypeVar("V")

# Lambda's default memory for the registry's functions, where no function says its own.
DEFAULT_MEMORY_BYTES = 1024 * 1024 * 1024
# The cache may hold this share of the memory: the rest is the interpreter, the libraries, and
# the requests under way (a page, a window of an export, a download's buffers).
CACHE_SHARE = 0.25
_POINTER = 8
_STR = sys.getsizeof("")
_LIST = sys.getsizeof([])


def cache_bytes_for(memory_bytes: int) -> int:
    """The bound of the manifest cache for a process of `memory_bytes`."""
    return int(memory_bytes * CACHE_SHARE)


def _str_list_bytes(values: list[str]) -> int:
    return _LIST + _POINTER * len(values) + sum(map(sys.getsizeof, values))


def approx_bytes(value: Any, _depth: int = 0) -> int:
    """About how many bytes `value` holds in memory, with what it refers to: strings, bytes,
    numbers, arrays, lists, tuples, dicts, dataclasses and objects with attributes. A column a
    manifest decodes on first use (`IntColumn`, `DigestColumn`) counts as decoded, so an entry
    does not outgrow its account once cached."""
    if isinstance(value, str | bytes | bytearray | int | float | bool) or value is None:
        return sys.getsizeof(value)
    if isinstance(value, array):
        return sys.getsizeof(value)
    if isinstance(value, IntColumn):
        itemsize = array(value.code).itemsize
        return sys.getsizeof(value.text) + 64 + len(value) * itemsize
    if isinstance(value, DigestColumn):
        cut = _LIST + len(value) * (_POINTER + _STR + 64)
        return sys.getsizeof(value.text) + cut
    if _depth > 8:
        return sys.getsizeof(value)
    if isinstance(value, list) and value and all(type(v) is str for v in value):
        return _str_list_bytes(value)
    if isinstance(value, list | tuple):
        return sys.getsizeof(value) + sum(approx_bytes(v, _depth + 1) for v in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(
            approx_bytes(k, _depth + 1) + approx_bytes(v, _depth + 1) for k, v in value.items()
        )
    if is_dataclass(value):
        names = [f.name for f in fields(value)]
    else:
        names = list(getattr(value, "__dict__", ()))
    return sys.getsizeof(value) + sum(
        approx_bytes(getattr(value, n, None), _depth + 1) for n in names
    )


class ByteBoundedCache:
    """A least-recently-used cache holding at most `limit` bytes of values (`size_of` each).
    A value larger than the whole bound is handed back and not kept. Thread-safe; a value two
    threads miss at once may be loaded twice (both get it; one is kept)."""

    def __init__(self, limit: int, size_of: Callable[[Any], int] = approx_bytes) -> None:
        self.limit = limit
        self.used = 0
        self.evictions = 0
        self._size_of = size_of
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable, load: Callable[[], V]) -> V:
        """The value of `key`, loaded with `load()` on a miss."""
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                return hit[0]
        value = load()
        size = self._size_of(value)
        with self._lock:
            if key in self._entries or size > self.limit:
                return value
            self._entries[key] = (value, size)
            self.used += size
            while self.used > self.limit:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.used -= dropped
                self.evictions += 1
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.used = 0
