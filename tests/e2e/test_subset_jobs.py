"""A subset registered as a version (`register_as`) is a job the client follows: in process on
the embedded store (the client delivers the queued job to the importer itself) and over real
HTTP against `caseshelf serve` (the server's own deliveries run it). Either way `subset`
answers what it answered when the route registered at once, or raises the job's error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import caseshelf
from caseshelf.client.core import Client
from caseshelf.domain.errors import Conflict
from tests.helpers import dev_server

pytestmark = pytest.mark.e2e

CASES = [
    {"id": f"c{i}", "inputs": {"user": f"q{i}"}, "tags": ["even" if i % 2 == 0 else "odd"]}
    for i in range(12)
]


@pytest.fixture(params=["embedded", "local-server"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Client]:
    home = tmp_path / "home"
    if request.param == "embedded":
        with caseshelf.connect(home=home, tenant="acme", principal="alice") as c:
            yield c
        return
    with dev_server(home) as srv, caseshelf.connect(srv.url, tenant="acme", principal="alice") as c:
        yield c


def test_subset_register_as_follows_its_job(client: Client) -> None:
    client.register("qa", cases=CASES, version="1.0.0")
    plain = client.subset("qa@latest", tags=["even"], limit=4, with_cases=True)
    # The registration is a job; the client answers the selection and the version it made
    made = client.subset("qa@latest", tags=["even"], limit=4, register_as="qa-even@1.0.0")
    assert made.registered is not None and made.registered.created
    assert made.registered.case_count == 4 and made.registered.version == "1.0.0"
    assert made.case_ids == plain.case_ids == ["c0", "c2", "c4", "c6"]
    assert made.stamp == plain.stamp and made.cases is None
    derived = client.get("qa-even@1.0.0")
    assert derived.produced_by is not None and derived.produced_by["via"] == "subset"
    assert [c.id for c in client.cases("qa-even@1.0.0")] == plain.case_ids
    # With the cases too, and the same version again: nothing new is registered
    again = client.subset(
        "qa@1.0.0", tags=["even"], limit=4, register_as="qa-even@1.0.0", with_cases=True
    )
    assert again.registered is not None and not again.registered.created
    assert again.cases == plain.cases
    # Another selection under that label fails the job; the client raises its error
    with pytest.raises(Conflict) as failed:
        client.subset("qa@1.0.0", tags=["odd"], register_as="qa-even@1.0.0")
    assert "qa-even" in failed.value.detail
