"""Canonical form and content digests through the registry: a dataset document's own keys and
values, and one content registered twice (the pure rules are tests/unit/test_domain_canonical)."""

from __future__ import annotations

import math

import pytest

from caseshelf.domain.canonical import content_digest
from caseshelf.domain.envelope import canonical_case
from caseshelf.domain.errors import BadRequest
from tests.unit.test_domain_canonical import parse

pytestmark = pytest.mark.integration


def test_non_finite_float_fields_and_dataset_provenance_are_refused():
    from caseshelf.services.registry import parse_dataset

    with pytest.raises(BadRequest):
        parse_dataset(
            {"id": "d", "version": "1", "cases": [{"id": "a"}], "produced_by": {"x": math.nan}}
        )
    with pytest.raises(BadRequest):
        parse({"id": "c", "timeout_sec": math.inf})


def test_unknown_dataset_key_is_refused_naming_it():
    from caseshelf.services.registry import parse_dataset

    with pytest.raises(BadRequest, match="unknown key 'owner'"):
        parse_dataset({"id": "d", "version": "1", "cases": [], "owner": "me"})


def test_content_digest_excludes_provenance_creator_and_version_tags(tmp_path):
    # Given one dataset content registered twice under different labels, by different people,
    # with different provenance
    from caseshelf.adapters.localfs import LocalBlobStore
    from caseshelf.adapters.sqlite import SqliteIndex
    from caseshelf.domain.identity import Identity
    from caseshelf.services.registry import RegistryService, parse_dataset

    registry = RegistryService(
        LocalBlobStore(tmp_path / "objects"), SqliteIndex(tmp_path / "index.sqlite")
    )
    doc = {
        "id": "ds",
        "description": "same",
        "tags": ["t"],
        "cases": [{"id": "a", "inputs": {"user": "hi"}, "metadata": {"k": 1, "j": 2}}],
    }
    first = registry.register(
        Identity("acme", "alice"),
        parse_dataset({**doc, "version": "1.0.0", "produced_by": {"recipe": "gsm8k@1"}}),
    )
    # (the second spells its case with other key order and an explicit default)
    doc["cases"] = [
        {"metadata": {"j": 2, "k": 1}, "timeout_sec": 1800, "inputs": {"user": "hi"}, "id": "a"}
    ]
    second = registry.register(
        Identity("acme", "bob"),
        parse_dataset({**doc, "version": "2.0.0", "produced_by": {"source": "elsewhere"}}),
    )
    registry.set_version_tags(Identity("acme", "alice"), "ds", "2.0.0", ["stable"])
    # Then both versions have the same content digest
    assert first.record.content_digest == second.record.content_digest
    tagged = registry.get_version(Identity("acme", "alice"), "ds", "stable")
    assert tagged.content_digest == first.record.content_digest
    # and the digest is the documented function of content alone
    case_digest = canonical_case(parse(doc["cases"][0]))[1]
    assert first.record.content_digest == content_digest(
        description="same", tags=["t"], shared_files=[], case_digests=[("a", case_digest)]
    )
