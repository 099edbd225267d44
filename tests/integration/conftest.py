"""Integration-test set-up: the one slow external build starts as soon as it is collected; and
the Python client on a fresh embedded store (`local`), on the local server over HTTP (`remote`),
and both in turn (`cs`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import caseshelf
from caseshelf.client import Client
from tests.helpers import dev_server


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def local(home: Path) -> Iterator[Client]:
    with caseshelf.connect(home=home, tenant="acme", principal="alice") as cs:
        yield cs


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[Client]:
    with dev_server(tmp_path / "srv") as srv, caseshelf.connect(srv.url) as cs:
        yield cs


@pytest.fixture(params=["in-process", "http"])
def cs(request: pytest.FixtureRequest) -> Client:
    return request.getfixturevalue("local" if request.param == "in-process" else "remote")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start `sam build` in the background when its test is selected, so the suite's other
    tests run while it downloads the layer's dependencies (tests/integration/test_sam_cli.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # spread over workers, the worker that runs the file starts it (`sam` fixture)
    if not any(
        item.nodeid.startswith("tests/integration/test_sam_cli.py") for item in session.items
    ):
        return
    from tests.integration.test_sam_cli import start_build

    build = Path(tempfile.mkdtemp(prefix="caseshelf-sam-")) / "build"
    proc = start_build(build)
    if proc is not None:
        session.config.sam_build = (proc, build)  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop a build no test waited for (a run cut short), and remove what it wrote."""
    import shutil

    started = getattr(session.config, "sam_build", None)
    if started is None:
        return
    proc, build = started
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=30)
    shutil.rmtree(build.parent, ignore_errors=True)
