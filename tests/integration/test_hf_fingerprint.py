"""`cs.to_hf(ref)`: a Hugging Face dataset whose fingerprint and info follow the content digest,
so that `datasets`' own cache keys (a transform's fingerprint starts from the dataset's) are the
same for the same content, wherever and however often it is loaded."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

import caseshelf
from caseshelf.client.frames import HF_LAYOUT, hf_fingerprint
from tests.helpers import dev_server

pytestmark = pytest.mark.integration
datasets = pytest.importorskip("datasets")

CASES = [
    {"id": "a", "inputs": {"user": "What is 2 + 2?"}, "expectations": {"ground_truth": "4"}},
    {"id": "b", "inputs": {"user": "What is 5 - 3?"}, "expectations": {"ground_truth": "2"}},
]
CHANGED = [CASES[0], {**CASES[1], "expectations": {"ground_truth": "two"}}]


def _length(row: dict[str, Any]) -> dict[str, Any]:
    return {"length": len(row["inputs.user"])}


def test_the_fingerprint_follows_the_content_digest(tmp_path: Path) -> None:
    cs = caseshelf.connect(home=tmp_path / "home")
    one = cs.register("hf", cases=CASES, version="1.0.0", description="arithmetic")
    other = cs.register("hf", cases=CHANGED, version="1.1.0")
    again = cs.register("hf-copy", cases=CASES, version="v2", description="arithmetic")
    assert again.content_digest == one.content_digest

    # When the same version is loaded twice, by two refs that name it
    first, second = cs.to_hf("hf@1.0.0"), cs.to_hf(f"hf@{one.content_digest}")
    # Then both have the fingerprint derived from its content digest
    assert first._fingerprint == second._fingerprint == hf_fingerprint(one.content_digest)
    assert re.fullmatch(r"[0-9a-f]{64}", first._fingerprint)
    # (the sha256 of the column layout and the digest, so a new layout changes it)
    expected = hashlib.sha256(f"{HF_LAYOUT}\n{one.content_digest}".encode()).hexdigest()
    assert first._fingerprint == expected
    # And a transform's cache key, which datasets derives from it, is the same too
    assert first.map(_length)._fingerprint == second.map(_length)._fingerprint
    # And other content has another fingerprint
    changed = cs.to_hf("hf@1.1.0")
    assert changed._fingerprint == hf_fingerprint(other.content_digest) != first._fingerprint
    assert changed.map(_length)._fingerprint != first.map(_length)._fingerprint
    # And the same content under another dataset and label has the same one
    assert cs.to_hf("hf-copy@v2")._fingerprint == first._fingerprint
    # And the rows are the cases, as before
    assert first["id"] == ["a", "b"] and changed["expectations.ground_truth"] == ["4", "two"]


def test_the_info_names_the_ref_the_digest_and_where_the_version_is(tmp_path: Path) -> None:
    cs = caseshelf.connect(home=tmp_path / "home")
    one = cs.register("hf", cases=CASES, version="1.0.0", description="arithmetic")
    info = cs.to_hf("hf").info
    assert info.description == f"hf@1.0.0 {one.content_digest}\n\narithmetic"
    assert info.dataset_name == "hf"
    assert str(info.version) == "1.0.0"
    assert info.homepage == f"caseshelf:hf@{one.content_digest}"
    # (`tags` is a column of every case, an empty list where a case has none)
    assert set(info.features) == {"id", "inputs.user", "expectations.ground_truth", "tags"}
    # A label datasets cannot hold as a version (not X.Y.Z) is left out of `version` only
    cs.register("hf", cases=CHANGED, version="v2")
    info = cs.to_hf("hf@v2").info
    assert info.version is None and info.description.startswith("hf@v2 sha256:")


def test_over_http_the_same_content_has_the_same_fingerprint(tmp_path: Path) -> None:
    local = caseshelf.connect(home=tmp_path / "local")
    local.register("hf", cases=CASES, version="1.0.0")
    here = local.to_hf("hf@1.0.0")
    with dev_server(tmp_path / "srv") as srv, caseshelf.connect(srv.url) as remote:
        out = remote.register("hf", cases=CASES, version="1.0.0")
        there = remote.to_hf("hf@1.0.0")
        assert there._fingerprint == here._fingerprint == hf_fingerprint(out.content_digest)
        assert there.info.homepage == f"{srv.url}/datasets/hf/versions/{out.content_digest}"
        assert there.to_list() == here.to_list()
