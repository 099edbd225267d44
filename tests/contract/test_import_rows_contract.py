"""Rows of an import registered as they stream (`register_records`): an id given twice is
refused naming both rows however far apart they are (the earlier one's chunk stored already),
and leaves no version, on every backend."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from caseshelf.domain.errors import BadRequest, NotFound
from caseshelf.domain.mapping import RecordBatch
from caseshelf.services.registry import RegistryService
from tests.conftest import Backend
from tests.contract.test_registry_contract import ALICE

pytestmark = pytest.mark.contract


def batches(ids: list[str], size: int = 1000) -> list[RecordBatch]:
    out = []
    for at in range(0, len(ids), size):
        part = ids[at : at + size]
        records = [orjson.dumps({"id": cid, "inputs": {"user": f"q {cid}"}}) for cid in part]
        out.append(
            RecordBatch(
                ids=part,
                lengths=[len(r) for r in records],
                data=b"\n".join([*records, b""]),
                tags=None,
                digests=[hashlib.sha256(r).hexdigest() for r in records],
            )
        )
    return out


def register(registry: RegistryService, ids: list[str]) -> None:
    registry.register_records(
        ALICE,
        name="rows",
        version="1.0.0",
        bump=None,
        description="",
        tags=[],
        produced_by=None,
        records=iter(batches(ids)),
    )


def test_an_id_repeated_far_from_its_first_row_names_both_rows(backend: Backend) -> None:
    registry = backend.services.registry
    # Given 9,000 rows where row 8,500 repeats the id of row 10 (its chunk long stored)
    ids = [f"r{i}" for i in range(9_000)]
    ids[8_500] = "r10"
    # When they are imported, then both rows are named, and no version is left
    with pytest.raises(BadRequest) as exc:
        register(registry, ids)
    assert exc.value.detail == "rows 10 and 8500 both map to case id 'r10'"
    assert exc.value.fields["rows"] == [10, 8500]
    with pytest.raises(NotFound):
        registry.get_version(ALICE, "rows", "1.0.0")
    # And the same rows without the repeat register, every case there
    ids[8_500] = "r8500"
    register(registry, ids)
    assert registry.get_version(ALICE, "rows", "1.0.0").case_count == 9_000
