"""A generator that holds a thread pool (`read_ahead`, the chunk reads of `_read_each`, the
span reads of `_fetch_concurrently`) may be left unfinished and closed later, wherever the
garbage collector finds it. That can be inside
`threading`'s bookkeeping in a thread that is starting, which holds
`threading._shutdown_locks_lock`; joining a thread there takes that lock again and never
returns: the whole process stops (a suite run stopped this way, in `Thread.start`). Closing
such a generator must not join its threads. Each check runs in a process of its own, so that
the old behaviour fails the test instead of stopping the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration

# A close stopped on a join never returns; a close that does not join returns at once. The
# bound only turns the first into a failure.
NEVER_RETURNS_S = 120

SCRIPT = textwrap.dedent(
    """
    import threading
    from caseshelf.services.storage import _fetch_concurrently, _read_each
    from caseshelf.services.windowread import read_ahead

    def close_where_a_starting_thread_would(gen):
        next(gen)  # the pool's threads started, the next read handed out
        with threading._shutdown_locks_lock:  # what `Thread._bootstrap_inner` holds
            gen.close()

    close_where_a_starting_thread_would(read_ahead(lambda n: [n], 5))
    close_where_a_starting_thread_would(_read_each(lambda k: k, ["a", "b", "c", "d", "e"], 2))
    close_where_a_starting_thread_would(_fetch_concurrently(lambda k: b"", range(5), 2))
    print("closed")
    """
)


def test_closing_a_generator_holding_a_pool_does_not_join_its_threads() -> None:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            capture_output=True,
            text=True,
            timeout=NEVER_RETURNS_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("closing the generator waited for its pool's threads under the threading lock")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "closed"
