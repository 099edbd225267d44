"""`Prefetch`: the next page of a listing asked for by a thread while the reader is on the last,
in order, bounded, with errors in their turn."""

from __future__ import annotations

import threading
import time

import pytest

from caseshelf.client.prefetch import Prefetch

pytestmark = pytest.mark.integration

WAIT = 5.0  # seconds a test waits for the thread before failing


class Pages:
    """A listing of `count` pages whose answers are their numbers; cursor "k" asks for page k.
    Records each cursor asked for, and raises at page `fail` when given."""

    def __init__(self, count: int, fail: int | None = None) -> None:
        self.count, self.fail = count, fail
        self.asked: list[str | None] = []
        self.changed = threading.Condition()

    def fetch(self, cursor: str | None) -> int:
        page = 0 if cursor is None else int(cursor)
        with self.changed:
            self.asked.append(cursor)
            self.changed.notify_all()
        if page == self.fail:
            raise RuntimeError(f"page {page} failed")
        return page

    def next_of(self, page: int) -> str | None:
        return str(page + 1) if page + 1 < self.count else None

    def wait_for(self, asked: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.asked) >= asked, timeout=WAIT)


def test_the_answers_come_in_order_and_stop_at_the_last() -> None:
    pages = Pages(5)
    assert list(Prefetch(pages.fetch, pages.next_of)) == [0, 1, 2, 3, 4]
    assert pages.asked == [None, "1", "2", "3", "4"]


def test_the_next_page_is_asked_for_while_the_reader_holds_the_last() -> None:
    # Given a reader that has the first answer and does nothing with it yet
    pages = Pages(10)
    fetched = Prefetch(pages.fetch, pages.next_of)
    reading = iter(fetched)
    assert next(reading) == 0
    # Then the second page is asked for without the reader asking
    assert pages.wait_for(2)
    # And no more than one answer waits for it, with one more on its way
    time.sleep(0.2)
    assert len(pages.asked) <= 3
    fetched.close()


def test_an_error_is_raised_after_the_answers_before_it() -> None:
    pages = Pages(5, fail=2)
    got = []
    with pytest.raises(RuntimeError, match="page 2 failed"):
        for answer in Prefetch(pages.fetch, pages.next_of):
            got.append(answer)
    assert got == [0, 1]


def test_close_ends_the_thread_even_when_it_waits_to_hand_over() -> None:
    # Given a reader that took one answer and stopped, the thread holding the next ones back
    pages = Pages(100)
    fetched = Prefetch(pages.fetch, pages.next_of)
    reading = iter(fetched)
    next(reading)
    assert pages.wait_for(3)
    # When the reader closes it
    fetched.close()
    # Then the thread ends, having asked for at most one more page
    thread = fetched._thread
    assert thread is not None
    thread.join(WAIT)
    assert not thread.is_alive()
    assert len(pages.asked) <= 4
