"""The container image of `caseshelf serve` (Dockerfile): built and run where a container engine
answers; everywhere, the build context it needs is what the image copies."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def engine() -> str | None:
    """Why no image can be built here, or None when a container engine answers."""
    if shutil.which("docker") is None:
        return "no docker command"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return "the docker command has no engine to talk to (a client only)"
    return None


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    copied: list[str] = []
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            copied += line.split()[1:-1]
    assert copied, "the Dockerfile copies nothing from the context"
    allowed = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.startswith("!")
    }
    for src in copied:
        assert (REPO / src).exists(), f"the Dockerfile copies {src}, which is not in the tree"
        assert src.rstrip("/") in allowed, f".dockerignore leaves {src} out of the context"


@pytest.mark.skipif(engine() is not None, reason=f"no container engine: {engine()}")
def test_the_image_serves_the_api_and_the_ui_on_a_volume() -> None:
    tag = f"caseshelf-test:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "build", "-t", tag, str(REPO)], check=True, timeout=900)
    volume = f"caseshelf-test-{uuid.uuid4().hex[:8]}"
    run = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "-p",
            "127.0.0.1::8000",
            "-v",
            f"{volume}:/data",
            "-e",
            "CASESHELF_SERVE_TOKEN=s3cret-s3cret-s3cret",
            tag,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    container = run.stdout.strip()
    try:
        port = (
            subprocess.run(
                ["docker", "port", container, "8000"], check=True, capture_output=True, text=True
            )
            .stdout.strip()
            .rsplit(":", 1)[1]
        )
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": "Bearer s3cret-s3cret-s3cret"}
        answer = None
        for _ in range(120):  # the server is up when it answers; bounded in count
            try:
                answer = httpx.get(f"{url}/datasets", headers=headers, timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        assert answer is not None and answer.status_code == 200, answer
        assert httpx.get(f"{url}/", headers=headers, timeout=5).status_code == 200
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        assert re.search(r"caseshelf API on http://", logs.stdout + logs.stderr)
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        subprocess.run(["docker", "volume", "rm", volume], capture_output=True)
        subprocess.run(["docker", "rmi", tag], capture_output=True)
