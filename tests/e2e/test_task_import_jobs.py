"""Task imports through the tasks API are jobs the client follows: in process on the embedded
store (the client delivers the queued job to the importer itself) and over real HTTP against
`caseshelf serve` (the server's own deliveries run it). Either way `import_tasks` answers what
was registered, or raises the error the job failed with."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

import caseshelf
from caseshelf.client.core import Client
from caseshelf.domain.errors import BadRequest
from tests.helpers import dev_server, tar_gz

pytestmark = pytest.mark.e2e


@pytest.fixture(params=["embedded", "local-server"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Client]:
    home = tmp_path / "home"
    if request.param == "embedded":
        with caseshelf.connect(home=home, tenant="acme", principal="alice") as c:
            yield c
        return
    with dev_server(home) as srv, caseshelf.connect(srv.url, tenant="acme", principal="alice") as c:
        yield c


def test_import_tasks_follows_its_job(client: Client, shared_data: Path) -> None:
    data = tar_gz(shared_data / "terminal-bench" / "evoeval", "evoeval")
    body = {
        "archive_base64": base64.b64encode(data).decode(),
        "image_template": "reg/tb:{id}",
        "dataset": "evoeval",
        "version": "1.0.0",
    }
    # An invalid task fails the job; the client raises its error, naming the task and the way on
    with pytest.raises(BadRequest) as failed:
        client.import_tasks("terminal-bench", body)
    assert "task '5'" in failed.value.detail and "skip_invalid" in failed.value.detail
    assert failed.value.fields.get("case_ids") == ["5"]
    # With skip_invalid the job registers the rest, and the client answers as the route did
    done = client.import_tasks("terminal-bench", body, skip_invalid=True)
    assert done.created and done.case_count == 4 and [s.task for s in done.skipped] == ["5"]
    again = client.import_tasks("terminal-bench", body, skip_invalid=True)
    assert not again.created and again.content_digest == done.content_digest
