"""Bulk work without the cyclic garbage collector in the way."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Parsing or validating a large dataset allocates hundreds of thousands of small objects
    that all stay alive; the cyclic collector would rescan them again and again for nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # What survived is long-lived and acyclic (models, plain dicts): move it out of the
            # collector's generations instead of having the next collection walk all of it.
            gc.freeze()
            gc.enable()
