"""Shared fixtures: the benchmark data, and the three storage backends every contract test runs on
(embedded files + SQLite, moto in-process, moto as a server over real HTTP).

The moto bucket and table are created from `infra/template.yaml` (see `tests/moto_infra.py`).
Credentials are dummies set per test; no real AWS account is ever reachable.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from caseshelf import bootstrap
from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.adapters.sqlite import SqliteIndex
from caseshelf.bootstrap import Services, Settings, build, build_adapters, load_settings
from caseshelf.client import jobs as client_jobs
from caseshelf.ports import BlobStore, Index
from tests.moto_infra import (
    create_bucket,
    create_table,
    free_port,
    list_moto_services_once,
    make_moto_dynamodb_atomic,
    share_aws_models,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT / ".." / "shared" / "data"
REGION = "us-east-1"
# A port's own contract (blob store, index, streamed and verified reads) runs over every
# implementation and fake of it: the embedded adapters, the AWS adapters on moto in process and
# on a moto server over HTTP.
BACKENDS = ("embedded", "moto", "moto_server")
# A service's contract runs over each implementation of the ports once: the embedded adapters,
# and the AWS adapters on a moto server, reached over HTTP as deployed code reaches AWS. Moto in
# process would run the same adapter code on the same fake without the HTTP.
SERVICE_BACKENDS = ("embedded", "moto_server")

share_aws_models()  # one parse of the AWS models per test process, not one per backend


# The files that take longest, slowest first (per-file sums of `--durations` over a full run).
# `make test` runs a file whole on one worker (`--dist loadfile`) and hands the files out in
# collection order (`--no-loadscope-reorder`; xdist would otherwise order them by their number
# of tests): the long ones start first and the many short ones fill in at the end, so neither
# worker is left with a long file when the other has finished.
SLOW_FIRST = (
    "tests/integration/test_sam_cli.py",  # on a clean clone, the layer's first build: minutes
    "tests/e2e/test_installed_package.py",  # a wheel built and installed into a virtualenv
    "tests/e2e/test_ui_browser.py",
    "tests/lambda/test_functions.py",  # the functions' cold starts in the Lambda emulation
    "tests/contract/test_chunks_contract.py",
    "tests/integration/test_fault_proxy.py",
    "tests/contract/test_registry_contract.py",
    "tests/integration/test_export_formats.py",
    "tests/unit/test_domain_canonical.py",
    "tests/contract/test_gc_interleaving.py",
    "tests/e2e/test_api_fuzz.py",
    "tests/contract/test_blobstore_contract.py",
    "tests/integration/test_registry_handler.py",
    "tests/contract/test_index_contract.py",
    "tests/contract/test_pipeline_contract.py",
    "tests/contract/test_crash_injection.py",
    "tests/e2e/test_export_cli.py",
    "tests/integration/test_upload_kinds.py",
    # ~10 s each, and collected near the end (only the unit tests after them): not left last
    "tests/lambda/test_cold_start.py",
    "tests/lambda/test_tmp_limit.py",
)


@pytest.hookimpl(tryfirst=True)  # the mark is read by the hooks that parametrize
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test of a service's contract (marked `services`) runs over `SERVICE_BACKENDS`."""
    if "backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker("services"):
        metafunc.definition.add_marker(
            pytest.mark.parametrize("backend", SERVICE_BACKENDS, indirect=True)
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the files of `SLOW_FIRST` first, in its order; the rest as collected.
    (Every worker collects the same order, which is the order the files are handed out in.)"""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {path: n for n, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(autouse=True, scope="session")
def user_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No test touches the real user's store: for the whole session (and every process a test
    starts) the user data directory, where a store is found last (`caseshelf.storehome`), is a
    temporary one. Tests name their store with CASESHELF_HOME, or point XDG_DATA_HOME at their
    own directory where finding the store is what they test."""
    path = tmp_path_factory.mktemp("user-data")
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_DATA_HOME", str(path))
    try:
        yield path
    finally:
        patch.undo()


@pytest.fixture(autouse=True)
def prompt_job_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client in this process looks at a job it follows every 0.1 s, not every 0.5 s
    (`caseshelf.client.jobs.JOB_POLL_SECONDS`): a test no longer waits out most of half a
    second after its job has ended. (Every 50 ms, the extra looks cost more CPU than that.)"""
    monkeypatch.setattr(client_jobs, "JOB_POLL_SECONDS", 0.1)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real benchmark data next to the repository (never copied into it)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark data not found at {SHARED_DATA.resolve()}")
    return SHARED_DATA.resolve()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and region; nothing that could reach a real account."""
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")


@dataclass
class Backend:
    """One storage backend with the services built on it by the composition root."""

    name: str
    settings: Settings
    store: BlobStore
    index: Index
    services: Services
    s3: Any = None  # the raw boto3 clients on the AWS backends, for assertions
    ddb: Any = None
    endpoint_url: str | None = None

    def rebuild(self, *, store: BlobStore | None = None, index: Index | None = None) -> Services:
        """Services over the same storage with one port swapped (e.g. a crashing index)."""
        return build(self.settings, store=store or self.store, index=index or self.index)


def aws_backend(name: str, endpoint_url: str | None) -> Backend:
    """A fresh bucket and table (unique names) on moto, built like the deployed ones."""
    suffix = uuid.uuid4().hex[:12]
    settings = load_settings(
        {},
        backend="aws",
        bucket=f"caseshelf-{suffix}",
        table=f"caseshelf-{suffix}",
        endpoint_url=endpoint_url,
        region=REGION,
    )
    store, index = build_adapters(settings)
    s3, ddb = store.client, index.client  # type: ignore[attr-defined]
    assert settings.bucket and settings.table
    create_bucket(s3, settings.bucket)
    create_table(ddb, settings.table)
    services = build(settings, store=store, index=index)
    return Backend(name, settings, store, index, services, s3, ddb, endpoint_url)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """One moto server on a free local port for the whole session; its endpoint URL."""
    from moto.server import ThreadedMotoServer

    make_moto_dynamodb_atomic()
    list_moto_services_once()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "embedded":
        settings = load_settings({}, home=str(tmp_path / "home"))
        store = LocalBlobStore(tmp_path / "home" / "objects")
        index = SqliteIndex(tmp_path / "home" / "index.sqlite")
        yield Backend("embedded", settings, store, index, build(settings, store=store, index=index))
        return
    request.getfixturevalue("aws_env")
    if request.param == "moto":
        from moto import mock_aws

        make_moto_dynamodb_atomic()
        with mock_aws():
            yield aws_backend("moto", None)
        return
    yield aws_backend("moto_server", request.getfixturevalue("moto_server"))


@pytest.fixture
def moto_installed(aws_env: None) -> Iterator[Backend]:
    """A fresh moto backend, installed as the handlers' composition root (`bootstrap.use`)."""
    from moto import mock_aws

    make_moto_dynamodb_atomic()
    with mock_aws():
        b = aws_backend("moto", None)
        bootstrap.use(b.services)
        try:
            yield b
        finally:
            bootstrap.use(None)


@pytest.fixture(params=["embedded", "moto"])
def installed_services(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Services]:
    """Services on a fresh embedded store, then on moto, installed as the handlers'
    composition root (`bootstrap.use`)."""
    if request.param == "moto":
        yield request.getfixturevalue("moto_installed").services
        return
    services = build(load_settings({}, home=str(tmp_path / "home")))
    bootstrap.use(services)
    try:
        yield services
    finally:
        bootstrap.use(None)


@pytest.fixture(scope="module")
def hub() -> Iterator[Any]:
    """The fake Hugging Face Hub and viewer (`tests.hf_fake.standard_hub`) over local HTTP."""
    from tests.hf_fake import standard_hub

    hub = standard_hub()
    yield hub
    hub.stop()
