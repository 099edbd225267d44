"""A probe function for the Lambda emulation's own tests: it reports what its execution
environment looks like from inside and, on request, uses memory or /tmp up to a given size."""

from __future__ import annotations

import errno
import multiprocessing
import os
from typing import Any

_held: list[bytearray] = []


def _writable(path: str) -> str:
    try:
        with open(os.path.join(path, ".probe"), "wb") as fh:
            fh.write(b"x")
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    os.unlink(os.path.join(path, ".probe"))
    return "writable"


def _semaphore() -> str:
    try:
        multiprocessing.Lock()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "made"


def _fill_tmp(nbytes: int) -> dict[str, Any]:
    """Take `nbytes` of /tmp (allocated, not written: the boundary without the disk writes)."""
    fd = os.open("/tmp/fill", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        return {"error": errno.errorcode.get(exc.errno or 0, str(exc))}
    finally:
        os.close(fd)
        os.unlink("/tmp/fill")
    return {"error": None}


def handler(event: dict[str, Any], context: Any) -> Any:
    if "allocate_mb" in event:
        _held.append(bytearray(event["allocate_mb"] * 1024 * 1024))
        _held.clear()
        return {"allocated_mb": event["allocate_mb"]}
    if "fill_tmp" in event:
        return _fill_tmp(int(event["fill_tmp"]))
    if "answer_bytes" in event:
        return "x" * int(event["answer_bytes"])
    st = os.statvfs("/tmp")
    return {
        "env": dict(os.environ),
        "uid": os.getuid(),
        "cwd": os.getcwd(),
        "dev_shm": os.path.exists("/dev/shm"),
        "semaphore": _semaphore(),
        "task": _writable("/var/task"),
        "opt": _writable("/opt"),
        "root": _writable("/"),
        "tmp": _writable("/tmp"),
        "tmp_bytes": st.f_bavail * st.f_frsize,
        "memory_limit_in_mb": int(context.memory_limit_in_mb),
        "function_name": context.function_name,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "request_len": len(event.get("pad", "")),
    }
