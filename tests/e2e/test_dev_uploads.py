"""Uploads on the embedded store: `caseshelf serve` answers `PUT /_uploads/<token>` and runs the
S3 worker on what lands; the CLI's `import FILE --api URL` goes through it end to end. Also the
recipe `revive` and `publish-catalog` commands."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from caseshelf import bootstrap
from caseshelf.devserver import DevServer
from tests.helpers import dev_server, forged, tar_gz
from tests.helpers import http_call as call
from tests.helpers import run_cli as caseshelf

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    with dev_server(tmp_path / "home") as srv:
        yield srv


def test_cli_import_with_api_uploads_to_the_local_server_and_follows_the_job(
    server: DevServer, shared_data: Path, tmp_path: Path
) -> None:
    # Given the local server on the embedded store, and GSM8K's test rows on disk
    rows = shared_data / "gsm8k" / "test.jsonl"
    # When the CLI imports the file against the server
    got = caseshelf(
        tmp_path / "cli",
        "import",
        str(rows),
        "--recipe",
        "recipes/gsm8k.yaml",
        "--dataset",
        "gsm8k-upload",
        "--api",
        server.url,
        "--json",
    )
    # Then it uploaded the file, the worker registered it, and the CLI reports the version
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert (out["id"], out["version"], out["case_count"]) == ("gsm8k-upload", "1.0.0", 1319)
    assert out["produced_by"]["via"] == "upload" and out["produced_by"]["rows_read"] == 1319
    job = call(f"{server.url}/jobs/{out['job_id']}").json
    assert job["state"] == "succeeded" and job["result"]["content_digest"] == out["content_digest"]
    # And the same file imported in-process gives the same content
    direct = caseshelf(
        tmp_path / "direct", "import", str(rows), "--recipe", "recipes/gsm8k.yaml", "--json"
    )
    assert json.loads(direct.stdout)["content_digest"] == out["content_digest"]
    # And the finished upload is removed from the store
    store = bootstrap.services().store
    assert list(store.list("t/acme/uploads/")) == []


def test_a_terminal_bench_archive_goes_through_a_dev_upload(
    server: DevServer, shared_data: Path
) -> None:
    # Given a pending tasks upload and its URL on the local server
    up = call(
        f"{server.url}/uploads",
        "POST",
        {
            "kind": "tasks",
            "format": "terminal-bench",
            "filename": "evoeval.tar.gz",
            "image_template": "registry.example/tb:{id}",
            "skip_invalid": True,
        },
    ).json
    assert up["upload_url"].startswith(f"{server.url}/_uploads/")
    # When the archive of the real evoeval tasks is PUT there
    data = tar_gz(shared_data / "terminal-bench" / "evoeval", "evoeval")
    put = call(up["upload_url"], "PUT", raw=data)
    assert put.status == 200 and put.headers["ETag"].startswith('"')
    server.wait_for_workers(60)
    # Then the job registered the four complete tasks and reported the incomplete one
    job = call(f"{server.url}/jobs/{up['job_id']}").json
    assert job["state"] == "succeeded", job
    assert (job["result"]["id"], job["result"]["case_count"]) == ("evoeval", 4)
    assert job["result"]["skipped"][0]["task"] == "5"
    # And a second PUT on the same URL finds the job done and registers nothing more
    assert call(up["upload_url"], "PUT", raw=data).status == 200
    server.wait_for_workers(60)
    assert call(f"{server.url}/jobs/{up['job_id']}").json["state"] == "succeeded"
    versions = call(f"{server.url}/datasets/evoeval/versions").json
    assert len(versions["items"]) == 1


def test_upload_urls_are_signed_limited_and_need_a_length(server: DevServer) -> None:
    up = call(
        f"{server.url}/uploads",
        "POST",
        {"filename": "rows.jsonl", "recipe": "gsm8k", "dataset": "x"},
    ).json
    url = up["upload_url"]
    # A token whose signature does not match is refused, and nothing lands
    refused = call(
        f"{server.url}/_uploads/{forged(url.rsplit('/', 1)[1])}",
        "PUT",
        raw=b'{"question": "q", "answer": "#### 1"}\n',
    )
    assert refused.status == 403 and "signature" in refused.json["detail"]
    assert bootstrap.services().store.head(up["key"]) is None
    # A body over the server's upload limit is 413
    server.settings = server.settings.model_copy(update={"max_upload_bytes": 8})
    too_big = call(url, "PUT", raw=b"x" * 64)
    assert too_big.status == 413 and too_big.json["limit"] == 8
    # A PUT without a Content-Length is 411
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    conn.putrequest("PUT", parts.path)
    conn.endheaders()
    assert conn.getresponse().status == 411
    conn.close()
    # And the job is still waiting for its file
    assert call(f"{server.url}/jobs/{up['job_id']}").json["state"] == "pending"


def test_recipe_revive_and_catalog_publishing_from_the_cli(
    server: DevServer, tmp_path: Path
) -> None:
    home = tmp_path / "cli"
    # A tombstoned recipe version comes back with `recipes revive`
    assert caseshelf(home, "recipes", "register", "recipes/truthfulqa.yaml").returncode == 0
    assert caseshelf(home, "recipes", "rm", "truthfulqa-csv@1.0.0").returncode == 0
    assert caseshelf(home, "recipes", "get", "truthfulqa-csv").returncode == 1
    revived = caseshelf(home, "recipes", "revive", "truthfulqa-csv@1.0.0", "--json")
    assert revived.returncode == 0, revived.stderr
    assert json.loads(revived.stdout)["deleted_at"] is None
    assert caseshelf(home, "recipes", "revive", "truthfulqa-csv").returncode == 2
    # Publishing the catalog needs an admin of _shared
    refused = caseshelf(home, "recipes", "publish-catalog", "--roles", "admin")
    assert refused.returncode == 1 and "_shared" in refused.stderr
    admin = ("--tenant", "_shared", "--roles", "admin", "--json")
    first = caseshelf(home, "recipes", "publish-catalog", *admin)
    assert first.returncode == 0, first.stderr
    assert [r["created"] for r in json.loads(first.stdout)["items"]] == [True] * 5
    again = caseshelf(home, "recipes", "publish-catalog", *admin)
    assert [r["created"] for r in json.loads(again.stdout)["items"]] == [False] * 5
    # And the same over the local server's API
    over_http = caseshelf(home, "recipes", "publish-catalog", "--api", server.url, *admin)
    assert over_http.returncode == 0, over_http.stderr
    items = json.loads(over_http.stdout)["items"]
    assert len(items) == 5 and all(r["created"] for r in items)
    shared = call(f"{server.url}/recipes?shared=true").json
    assert [r["id"] for r in shared["items"]] == [r["id"] for r in items]


def test_a_case_tree_imports_the_same_through_the_api_as_in_process(
    server: DevServer, tmp_path: Path
) -> None:
    # Given a project in the harness's layout: eval/demo/eval.yaml, a shared skill file at the
    # project root, a case file symlinked to a project companion and one to a sibling case
    project = tmp_path / "project"
    cases = project / "eval" / "demo" / "cases"
    for name in ("c1", "c2"):
        (cases / name).mkdir(parents=True)
        (cases / name / "input.yaml").write_text(f"prompt: do {name}\n")
    (cases / "c2" / "secret.md").write_text("c2 only\n")
    (project / "docs").mkdir()
    (project / "docs" / "guide.md").write_text("guide\n")
    (project / "skills").mkdir()
    (project / "skills" / "SKILL.md").write_text("skill\n")
    (cases / "c1" / "guide.md").symlink_to(project / "docs" / "guide.md")
    (cases / "c1" / "peek.md").symlink_to(cases / "c2" / "secret.md")
    (project / "eval" / "demo" / "eval.yaml").write_text(
        "name: demo\ndataset:\n  path: cases\n  workspace:\n    files:\n"
        "      - {dest: skill.md, source: skills/SKILL.md}\n"
    )
    args = ["import-tasks", str(project / "eval" / "demo"), "--format", "case-dirs", "--json"]
    # When it is imported in-process and through the API (an upload of the packed project)
    local = caseshelf(tmp_path / "direct", *args)
    remote = caseshelf(tmp_path / "cli", *args, "--api", server.url)
    # Then both read the same project: same content, the companion materialized, the sibling
    # case's file left out with a warning, the shared file read from the project root (the
    # same content digest covers the shared files)
    assert local.returncode == 0 and remote.returncode == 0, (local.stderr, remote.stderr)
    assert json.loads(local.stdout)["content_digest"] == json.loads(remote.stdout)["content_digest"]
    assert "peek.md" in local.stderr and "peek.md" in remote.stderr
    cases_out = call(f"{server.url}/datasets/demo/versions/latest/cases").json["items"]
    c1 = next(c for c in cases_out if c["id"] == "c1")
    assert set(c1["files"]) == {"guide.md", "input.yaml"}
