"""Bulk work without the cyclic garbage collector in the way, for the entry points that do it.

Validating a large dataset document builds hundreds of thousands of small objects (the parsed
document, then each case validated) that all stay alive until the registration ends. The
cyclic collector, triggered by those allocations, rescans the growing heap again and again for
nothing (`parse_dataset` of 100,000 cases takes about four times as long with it running). A
streamed registration holds a window of models, but `caseshelf register FILE` of a `.json` file
over 5 MiB on the embedded store still parses the whole document in its process before
streaming its cases, so it pays the same.

The collector is process-wide state, so no service pauses it: the entry points that take whole
documents do (the registry function's handler, the importer function's upload jobs, the CLI's
register and validate), scoped, and everything is as it was once the last of them ends. The CLI's
register and validate pause it for a large file too (the upload's job runs in the CLI's process
on the embedded store).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # how many pauses are open (threads of the local server may overlap)
_was_enabled = False  # the collector's state when the first of them began


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off for the block; on leaving the last open pause, it is set back
    to what the first one found (a collector that was off stays off). Nesting and overlapping
    threads are safe: the state is restored once, by the last to leave."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                _promote_unscanned()
                gc.enable()


def _promote_unscanned() -> None:
    """Move every object the collector tracks into its oldest generation, unscanned.

    What was allocated during a pause is still in the youngest generation when it ends, so the
    first allocation after it would scan all of it at once (1.7 million objects after
    registering 100,000 cases), for objects that mostly die by reference count a moment later
    (the document and its models). A collection would promote
    the survivors to the older generations anyway; this moves them there without the scan (two
    list splices: `freeze` into the permanent generation, `unfreeze` back out into the oldest),
    so nothing stays frozen. Cyclic garbage made during the pause waits for the next full
    collection. Skipped when something else froze objects (a server that freezes before it
    forks): `unfreeze` would thaw them too."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
