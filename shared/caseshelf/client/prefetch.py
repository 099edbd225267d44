"""The answers of a paged listing, each next one fetched by a thread of its own while the reader
is on the last (`Prefetch`)."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

A = TypeVar("A")


class Prefetch(Generic[A]):
    """The answers of `fetch(cursor)` from `fetch(None)` on, each next one asked for with the
    cursor `next_of(answer)` reads off the last, until that is None.

    A thread of its own asks for the next answer as soon as the last has come, so the request
    is on its way before the reader starts on the answer it was given. At most one answer waits
    for the reader while the thread fetches the next. An error of `fetch` is raised to the
    reader in its turn, after the answers before it. `close()` lets the thread end after the
    fetch it is on (a daemon thread: a fetch is bounded by its transport's timeout)."""

    def __init__(
        self, fetch: Callable[[str | None], A], next_of: Callable[[A], str | None]
    ) -> None:
        self._fetch = fetch
        self._next_of = next_of
        self._answers: queue.Queue[tuple[A | None, BaseException | None]] = queue.Queue(maxsize=1)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def __iter__(self) -> Iterator[A]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="caseshelf-page", daemon=True)
            self._thread.start()
        while not self._closed.is_set():
            answer, error = self._answers.get()
            if error is not None:
                raise error
            assert answer is not None
            yield answer
            if self._next_of(answer) is None:
                return

    def _run(self) -> None:
        cursor: str | None = None
        while not self._closed.is_set():
            try:
                answer = self._fetch(cursor)
                cursor = self._next_of(answer)
            except BaseException as exc:  # the reader's to raise, in its turn
                self._answers.put((None, exc))
                return
            self._answers.put((answer, None))  # waits while the reader is a page behind
            if cursor is None:
                return

    def close(self) -> None:
        """Stop asking for answers. The one waiting is dropped, which frees a thread waiting
        to hand over the next: it ends after that, as the fetch it is on does."""
        self._closed.set()
        with contextlib.suppress(queue.Empty):
            self._answers.get_nowait()
