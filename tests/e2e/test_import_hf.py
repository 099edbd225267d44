"""Imports from Hugging Face through the service, against the local fake Hub over HTTP."""

import math

import pytest

from caseshelf.adapters.huggingface import HuggingFace, StaticToken
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import Forbidden, NotFound, Upstream
from caseshelf.domain.identity import Identity
from caseshelf.services.imports import parse_import
from tests.hf_fake import GOOD_TOKEN

pytestmark = pytest.mark.e2e

ME = Identity("acme", "alice")


@pytest.fixture
def svc(tmp_path, hub):
    hub.reset_counts()
    settings = load_settings(
        {}, home=str(tmp_path / "home"), hf_endpoint=hub.url, hf_viewer_url=hub.url
    )
    svc = build(settings)
    svc.imports.hf = HuggingFace(hub.url, hub.url, sleep=lambda s: None)
    return svc


def test_the_gsm8k_catalog_recipe_pages_the_viewer_and_pins_the_revision(svc, hub):
    done = svc.imports.run(ME, parse_import({"recipe": "gsm8k"}))
    rec = done.result.record
    assert (rec.name, rec.version, rec.case_count) == ("gsm8k", "1.0.0", 250)
    assert hub.counts["rows"] == math.ceil(250 / 100)
    source = rec.produced_by["source"]
    assert source["revision"] == "0123456789abcdef0123456789abcdef01234567"
    assert (source["dataset"], source["config"], source["split"], source["via"]) == (
        "openai/gsm8k",
        "main",
        "test",
        "rows",
    )
    assert rec.produced_by["origin"]["license"] == "MIT"
    assert rec.produced_by["recipe"] == {
        "id": "gsm8k",
        "version": "1.0.0",
        "content_digest": svc.recipes.get(ME, "gsm8k").content_digest,
        "owner": "_shared",
    }
    first = svc.registry.list_cases(ME, "gsm8k", "latest", limit=1).items[0]
    assert first["expectations"]["ground_truth"] == "1"


def test_an_hf_url_overrides_the_recipe_source_and_uses_the_parquet_fast_path(svc, hub):
    req = parse_import({"recipe": "gsm8k", "source": {"url": "hf://acme/parq"}, "dataset": "parq"})
    done = svc.imports.run(ME, req)
    assert done.result.record.case_count == 120
    assert done.produced_by["source"]["via"] == "parquet"
    assert hub.counts["file"] == 1 and hub.counts["rows"] == 0


def test_preview_reads_one_page_and_registers_nothing(svc, hub):
    got = svc.imports.preview(ME, parse_import({"recipe": "gsm8k"}))
    assert len(got.cases) == 5 and got.fields == ["question", "answer"]
    assert hub.counts["rows"] == 1
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "gsm8k", "latest")


def test_a_gated_dataset_needs_a_token(svc, hub):
    req = parse_import({"recipe": "gsm8k", "source": {"url": "hf://acme/gated"}, "dataset": "g"})
    with pytest.raises(Forbidden, match="gated"):
        svc.imports.run(ME, req)
    svc.imports.tokens = StaticToken(GOOD_TOKEN)
    assert svc.imports.run(ME, req).result.record.case_count == 5


def test_an_upstream_that_never_recovers_is_502_and_registers_nothing(svc, hub):
    req = parse_import({"recipe": "gsm8k", "source": {"url": "hf://acme/down"}, "dataset": "down"})
    with pytest.raises(Upstream):
        svc.imports.run(ME, req)
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "down", "latest")


def test_an_upstream_that_fails_after_the_first_page_registers_nothing(svc, hub):
    # Given a dataset whose viewer fails for good after 100 of its 250 rows
    req = parse_import(
        {"recipe": "gsm8k", "source": {"url": "hf://acme/dies-midway"}, "dataset": "midway"}
    )
    # When it is imported, the error is a 502 and not a 100-case version
    with pytest.raises(Upstream):
        svc.imports.run(ME, req)
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "midway", "latest")


def test_hf_discovery(svc):
    assert [d["id"] for d in svc.imports.hf_search(ME, "gsm")] == ["openai/gsm8k"]
    assert svc.imports.hf_splits(ME, "acme/multi") == [
        {"config": "a", "split": "train"},
        {"config": "a", "split": "test"},
    ]
    assert svc.imports.hf_files(ME, "acme/multi")[1] == ["data/test.jsonl"]
