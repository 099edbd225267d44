"""The web UI's real consumers: `caseshelf serve` as a subprocess on a free loopback port, and
the system Chromium (Debian `chromium`) driven by Playwright. Shared by the browser tests and
the UI benchmark.

Playwright's own browser builds are never downloaded: it is pointed at `/usr/bin/chromium`
(`executable_path`), started headless with a fresh profile and without any of the browser's
own network traffic (updates, sync, field trials)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("CASESHELF_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
    "--metrics-recording-only",
]


def missing_browser() -> str | None:
    """Why the browser cannot run here, or None when it can."""
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (Debian package `chromium`; .ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (the dev extra)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def caseshelf_command() -> list[str]:
    exe = Path(sys.executable).with_name("caseshelf")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "caseshelf.cli"]


@contextmanager
def serve(
    home: Path, *, log: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """`caseshelf serve` over the embedded store at `home` (with `env` on top of this process's
    environment); yields its URL."""
    port = free_port()
    env = {**os.environ, **(env or {}), "CASESHELF_HOME": str(home), "CASESHELF_BACKEND": "local"}
    for var in ("CASESHELF_PUBLIC_URL", "CASESHELF_API", "CASESHELF_TENANT", "CASESHELF_PRINCIPAL"):
        env.pop(var, None)
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [*caseshelf_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"caseshelf serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(url + "/config.json", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise RuntimeError("caseshelf serve did not start within 60 s") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log and hasattr(out, "close"):
            out.close()


def api(url: str, method: str = "GET", body: Any = None, timeout: float = 120) -> tuple[int, Any]:
    """One JSON call to the API: (status, decoded body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            payload = resp.read()
            return resp.status, json.loads(payload) if payload else None
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        return exc.code, json.loads(payload) if payload else None


@contextmanager
def chromium(profile: Path, *, args: Sequence[str] = ()) -> Iterator[Any]:
    """A headless system Chromium with a fresh profile at `profile` (and `args` on top of the
    usual switches): yields the browser context."""
    from playwright.sync_api import sync_playwright

    shutil.rmtree(profile, ignore_errors=True)
    profile.mkdir(parents=True)
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            args=[*CHROMIUM_ARGS, *args],
            headless=True,
            viewport={"width": 1280, "height": 900},
            locale="en-US",
        )
        try:
            yield context
        finally:
            context.close()
