"""Stored objects one at a time: read as a file, with ranged reads of a bounded size, so a reader
of a large upload holds one buffer of it, not the object (`open_object`); and one object's read
or write tried again when the store stayed unavailable through its client's retries
(`per_object`), so that a pull or an export of thousands of objects is not lost to one of them."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from caseshelf.domain.errors import BackendUnavailable, NotFound
from caseshelf.ports import BlobStore

READ_BYTES = 8 << 20  # one ranged read; also the reader's buffer
# Attempts of one object's read or write in a pull or an export (each one a request that the
# client already retries, with its own backoff, `caseshelf.adapters.aws`), and the pause between.
OBJECT_ATTEMPTS = 3
OBJECT_PAUSE_SECONDS = 1.0

_T = TypeVar("_T")
log = logging.getLogger(__name__)


def per_object(
    call: Callable[[], _T],
    *,
    attempts: int = OBJECT_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> _T:
    """`call()`, made again after a pause when it fails with `BackendUnavailable`, up to
    `attempts` times in all; the last failure is raised as it is (it names the object and the
    fault)."""
    for _ in range(attempts - 1):
        try:
            return call()
        except BackendUnavailable as exc:
            log.warning("storage unavailable, trying again: %s", exc.detail)
            sleep(OBJECT_PAUSE_SECONDS)
    return call()


class _ObjectRaw(io.RawIOBase):
    """The bytes of one object of `size` bytes, read from `store` with ranged gets."""

    def __init__(self, store: BlobStore, key: str, size: int) -> None:
        self._store, self._key, self._size = store, key, size
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move where the next ranged read starts (a zip's directory is read from its end)."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self._size - self._at)
        if want <= 0:
            return 0
        data = self._store.get_range(self._key, self._at, want)
        if not data:  # the object got shorter than its head said: end here, never loop
            return 0
        n = len(data)
        buffer[:n] = data
        self._at += n
        return n

    def readall(self) -> bytes:
        """The rest of the object, `READ_BYTES` per ranged read. (`io.RawIOBase.readall`, which
        a reader's `read()` calls, reads 8 KiB at a time: thousands of ranged reads for an
        upload, each a file opened on the embedded store and a request on S3.)"""
        parts = []
        while self._at < self._size:
            data = self._store.get_range(
                self._key, self._at, min(READ_BYTES, self._size - self._at)
            )
            if not data:  # (as `readinto`)
                break
            parts.append(data)
            self._at += len(data)
        return b"".join(parts)


def open_object(store: BlobStore, key: str) -> io.BufferedReader:
    """The object at `key` as a binary file (lines, `read(n)`, `seek`), read `READ_BYTES` at
    a time; `NotFound` when absent."""
    info = store.head(key)
    if info is None:
        raise NotFound(f"no object {key}")
    return io.BufferedReader(_ObjectRaw(store, key, info.size), buffer_size=READ_BYTES)


def write_pieces(
    store: BlobStore, key: str, pieces: Iterable[bytes], *, content_type: str | None = None
) -> int:
    """An object written from the bytes `pieces` yields, consumed as they come and never joined
    (the store's streaming writer: a multipart upload on S3): it appears whole once they are all
    written, or not at all. Its size."""
    writer = store.open_writer(key, content_type=content_type)
    try:
        for piece in pieces:
            writer.write(piece)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise
