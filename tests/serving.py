"""Test servers (`socketserver` servers) run in a thread, that stop as soon as they are told."""

from __future__ import annotations

import socketserver
import threading

# How often a server's loop looks whether `shutdown()` was called: socketserver's default,
# 0.5 s, is what each server's teardown waits for (a quarter second on average), and the suite
# starts hundreds of them.
POLL_SECONDS = 0.05


def server_thread(server: socketserver.BaseServer) -> threading.Thread:
    """A daemon thread (not started) that runs `server.serve_forever()`."""
    return threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, daemon=True
    )
