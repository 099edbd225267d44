"""The Hugging Face adapter against a local fake of the viewer and Hub, over real HTTP."""

import math

import pytest

from caseshelf.adapters.huggingface import HuggingFace, SecretsManagerTokens
from caseshelf.domain.errors import BadRequest, Forbidden, NotFound, Upstream
from tests.hf_fake import GOOD_TOKEN

pytestmark = pytest.mark.e2e


@pytest.fixture
def hf(hub):
    hub.reset_counts()
    delays: list[float] = []
    client = HuggingFace(hub.url, hub.url, sleep=delays.append, backoff=0.01)
    client.delays = delays  # type: ignore[attr-defined]
    return client


def test_rows_are_paged_100_at_a_time_to_the_total(hf, hub):
    got = hf.open_source("openai/gsm8k", config="main", split="test")
    rows = list(got.rows)
    assert [i for i, _ in rows] == list(range(250))
    assert hub.counts["rows"] == math.ceil(250 / 100)
    assert got.provenance == {
        "kind": "huggingface",
        "dataset": "openai/gsm8k",
        "revision": "0123456789abcdef0123456789abcdef01234567",
        "config": "main",
        "split": "test",
        "via": "rows",
    }


def test_an_explicit_limit_stops_paging_early(hf, hub):
    rows = list(hf.open_source("openai/gsm8k", config="main", split="test", limit=150).rows)
    assert len(rows) == 150
    assert hub.counts["rows"] == 2


def test_the_parquet_listing_is_the_fast_path_with_one_file_fetch(hf, hub):
    got = hf.open_source("acme/parq", config="default", split="test")
    rows = list(got.rows)
    assert len(rows) == 120 and rows[0][1]["question"].startswith("Row 0")
    assert got.provenance["via"] == "parquet"
    assert hub.counts["file"] == 1 and hub.counts["rows"] == 0


def test_a_single_split_is_found_without_asking(hf):
    got = hf.open_source("acme/parq")
    assert (got.provenance["config"], got.provenance["split"]) == ("default", "test")


def test_several_splits_need_a_choice_listing_them(hf):
    with pytest.raises(BadRequest, match="a/train, a/test"):
        hf.open_source("acme/multi")


def test_a_repo_file_is_read_at_the_pinned_revision(hf):
    got = hf.open_source("acme/multi", file="data/test.jsonl")
    assert list(got.rows) == [(0, {"question": "q", "answer": "a\n#### 1"})]
    assert got.provenance["via"] == "file"


def test_gated_datasets_explain_how_to_get_access(hf, hub):
    with pytest.raises(Forbidden, match=r"gated or private.*HF_TOKEN") as exc:
        hf.open_source("acme/gated")
    assert exc.value.fields["gated"] is True
    rows = list(hf.open_source("acme/gated", token=GOOD_TOKEN).rows)
    assert len(rows) == 5
    assert f"Bearer {GOOD_TOKEN}" in hub.tokens_seen


def test_5xx_is_retried_with_backoff_then_502(hf, hub):
    with pytest.raises(Upstream, match="after 4 attempts"):
        hf.open_source("acme/down")
    assert hub.counts["info"] == 4
    assert hf.delays == [0.01, 0.02, 0.04]


def test_a_flaky_upstream_recovers_within_the_retries(hf):
    assert len(list(hf.open_source("acme/flaky").rows)) == 5


def test_429_is_retried_with_backoff_like_5xx(hf, hub):
    # Given a viewer that throttles the first two requests with 429
    rows = list(hf.open_source("acme/throttled").rows)
    # Then the import waits and retries instead of failing
    assert len(rows) == 5
    assert hf.delays[:2] == [0.01, 0.02]


def test_a_page_that_never_recovers_mid_paging_is_502(hf, hub):
    # Given a split whose second /rows page always answers 503
    got = hf.open_source("acme/dies-midway", config="default", split="test")
    with pytest.raises(Upstream, match=r"rows 100-200.*after 4 attempts"):
        list(got.rows)
    # Then the first page was read once and the failing one retried to the limit
    assert hub.counts["rows"] == 1 + 4


def test_a_partial_dataset_is_never_taken_as_the_whole(hf):
    with pytest.raises(BadRequest, match="only part"):
        list(hf.open_source("acme/huge").rows)
    assert len(list(hf.open_source("acme/huge", limit=10).rows)) == 10


def test_unknown_dataset_is_404(hf):
    with pytest.raises(NotFound):
        hf.open_source("nobody/nothing")


def test_a_pinned_revision_that_is_not_current_cannot_use_the_viewer(hf):
    with pytest.raises(NotFound):
        hf.open_source("openai/gsm8k", revision="feedface")


def test_search_and_files(hf):
    assert [d["id"] for d in hf.search("acme/p")] == ["acme/parq"]
    assert hf.files("acme/multi")[1] == ["data/test.jsonl"]


def test_secrets_manager_tokens_go_tenant_first_then_shared():
    secrets = {"caseshelf/hf-token/_shared": "shared-token"}
    tokens = SecretsManagerTokens(get_secret=secrets.get)
    assert tokens.token("acme") == "shared-token"
    secrets["caseshelf/hf-token/acme"] = "acme-token\n"
    assert tokens.token("acme") == "acme-token"
