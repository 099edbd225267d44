"""Presigned downloads on the embedded store: `caseshelf serve` answers `GET /_downloads/<token>`,
so `download` answers a URL as on AWS and `export --to DIR --api URL` unpacks the bundle; and
`import-tasks PATH --api URL` packs the tree and goes through an upload and its job."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caseshelf import bootstrap, connect
from caseshelf.adapters.localfs import LocalBlobStore
from caseshelf.devserver import DevServer
from tests.helpers import dev_server, forged
from tests.helpers import http_call as call
from tests.helpers import run_cli as caseshelf

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]


DEMO = {
    "id": "demo",
    "version": "1.0.0",
    "cases": [
        {
            "id": f"HumanEval/{i}",
            "inputs": {"user": f"write f{i}"},
            "expectations": {"ground_truth": f"def f{i}(): ..."},
            "tags": ["odd" if i % 2 else "even"],
            "files": {"tests/run.sh": {"text": f"#!/bin/sh\necho {i}\n"}},
        }
        for i in range(4)
    ],
    "shared_files": [{"dest": "SKILL.md", "text": "# skill\n"}],
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    # Not quiet: the request log is part of what is checked (no token in it)
    with dev_server(tmp_path / "home", quiet=False) as srv:
        yield srv


def token_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def document(server: DevServer, name: str, version: str) -> Any:
    """The download route's answer once the document is rendered: the first request starts
    its job (202), which the client follows; the route then answers the document."""
    url = f"{server.url}/datasets/{name}/versions/{version}/download"
    started = call(url)
    assert started.status == 202 and started.json["kind"] == "download", started.body
    with connect(server.url, env={}) as cs:
        cs.download(f"{name}@{version}")
    return call(url)


def test_download_streams_the_document_and_presigned_urls_are_served(
    server: DevServer, capfd: pytest.CaptureFixture[str]
) -> None:
    # Given a version registered through the local API
    reg = call(f"{server.url}/datasets", "POST", DEMO)
    assert reg.status == 201, reg.json
    # When its download is asked for (a job renders it first)
    got = document(server, "demo", "1.0.0")
    # Then the embedded store answers the document itself (architecture §7: a stream locally)
    assert got.status == 200
    assert got.headers["Content-Disposition"] == 'attachment; filename="demo-1.0.0.json"'
    assert got.json["id"] == "demo" and got.json["version"] == "1.0.0"
    # Which registers as it is, under another id, with the same content digest
    copy = call(f"{server.url}/datasets", "POST", dict(got.json, id="demo-copy"))
    assert copy.status == 201 and copy.json["content_digest"] == reg.json["content_digest"]
    # And a presigned URL of the stored document (as exports hand out) streams it too,
    # to a plain GET with no identity
    store = bootstrap.services().store
    key = next(o.key for o in store.list("t/acme/exports/downloads/"))
    url = store.presign_get(key, expires=60)
    assert url is not None and url.startswith(f"{server.url}/_downloads/")
    doc = call(url)
    assert doc.status == 200
    assert doc.headers["Content-Type"] == "application/json"
    assert int(doc.headers["Content-Length"]) == len(doc.body)
    assert doc.json == got.json
    # Named after its key when the URL names nothing, and as the URL says when it does
    assert doc.headers["Content-Disposition"] == f'attachment; filename="{key.rsplit("/", 1)[1]}"'
    named = store.presign_get(key, expires=60, filename="demo-1.0.0.json")
    assert named is not None
    assert call(named).headers["Content-Disposition"] == 'attachment; filename="demo-1.0.0.json"'
    # And the request log names the route, never the token
    err = capfd.readouterr().err
    assert "/_downloads/<token>" in err
    assert token_of(url) not in err


def test_download_tokens_are_checked(server: DevServer) -> None:
    assert call(f"{server.url}/datasets", "POST", DEMO).status == 201
    assert document(server, "demo", "1.0.0").status == 200
    store = bootstrap.services().store
    assert isinstance(store, LocalBlobStore)
    url = store.presign_get(next(o.key for o in store.list("t/acme/exports/")), expires=60)
    assert url is not None
    # A forged signature is 403, as problem+json, and shows nothing of the object
    refused = call(f"{server.url}/_downloads/{forged(token_of(url))}")
    assert refused.status == 403 and "signature" in refused.json["detail"]
    assert b'"cases"' not in refused.body
    # An expired token is 403
    store = bootstrap.services().store
    assert isinstance(store, LocalBlobStore)
    key = next(o.key for o in store.list("t/acme/exports/downloads/"))
    expired = store.tokens.sign(key, -5, method="GET")
    got = call(f"{server.url}/_downloads/{expired}")
    assert got.status == 403 and "expired" in got.json["detail"]
    # An upload URL's token does not read, and a download URL's token does not write
    upload_token = store.tokens.sign(key, 60)
    assert call(f"{server.url}/_downloads/{upload_token}").status == 403
    put = urllib.request.Request(f"{server.url}/_uploads/{token_of(url)}", data=b"{}", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(put, timeout=30)
    assert refused.value.code == 403
    assert json.loads(store.get(key))["id"] == "demo"
    # A valid token for an object that is gone is 404
    gone = store.tokens.sign("t/acme/exports/downloads/gone.json", 60, method="GET")
    assert call(f"{server.url}/_downloads/{gone}").status == 404
    # And the route is in no OpenAPI document
    assert "/_downloads" not in call(f"{server.url}/openapi.json").body.decode()


def test_cli_download_and_export_to_a_directory_through_the_local_api(
    server: DevServer, tmp_path: Path
) -> None:
    # Given a version registered through the local API
    assert call(f"{server.url}/datasets", "POST", DEMO).status == 201
    home = tmp_path / "cli"
    # When the CLI downloads it over the API
    got = caseshelf(
        home, "download", "demo@1.0.0", "-o", str(tmp_path / "d.json"), "--api", server.url
    )
    # Then it followed the URL to the document
    assert got.returncode == 0, got.stderr
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["id"] == "demo" and len(doc["cases"]) == 4
    # When it exports a subset into a local directory over the API
    out_dir = tmp_path / "out"
    exp = caseshelf(
        home,
        "export",
        "demo@1.0.0",
        "--to",
        str(out_dir),
        "--tags",
        "even",
        "--api",
        server.url,
        "--json",
    )
    # Then the bundle was fetched from the server and unpacked, verified, with its modes
    assert exp.returncode == 0, exp.stderr
    out = json.loads(exp.stdout)
    assert out["case_count"] == 2 and out["prefix"] == str(out_dir)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["subset"]["tags"] == ["even"]
    case = out_dir / "~HumanEval%2F0~42"
    assert (case / "SKILL.md").read_text() == "# skill\n"
    assert (case / "tests" / "run.sh").read_text() == "#!/bin/sh\necho 0\n"
    assert not (out_dir / "~HumanEval%2F1~42").exists()
    # And the same export from the embedded store (same tenant) writes the same files
    direct_home = tmp_path / "direct"
    (tmp_path / "demo.json").write_text(json.dumps(DEMO))
    acme = ("--tenant", "acme")
    assert caseshelf(direct_home, "register", str(tmp_path / "demo.json"), *acme).returncode == 0
    local_dir = tmp_path / "local"
    direct = caseshelf(
        direct_home, "export", "demo@1.0.0", "--to", str(local_dir), "--tags", "even", *acme
    )
    assert direct.returncode == 0, direct.stderr
    files = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if p.is_file())
    local = sorted(p.relative_to(local_dir).as_posix() for p in local_dir.rglob("*") if p.is_file())
    assert files == local
    for rel in files:
        assert (out_dir / rel).read_bytes() == (local_dir / rel).read_bytes(), rel


def test_cli_import_tasks_with_api_packs_the_tree_and_follows_the_job(
    server: DevServer, shared_data: Path, tmp_path: Path
) -> None:
    # Given the real Terminal-Bench tasks on disk (one of them without tests), and a server
    # whose request body limit is far below the dataset's size
    src = str(shared_data / "terminal-bench")
    options = ["--image-template", "reg/tb:{name}", "--skip-invalid", "--dataset", "tb"]
    limit = 64 * 1024
    server.settings = server.settings.model_copy(update={"max_body_bytes": limit})
    # When the CLI imports the directory against the local server
    got = caseshelf(tmp_path / "cli", "import-tasks", src, *options, "--api", server.url, "--json")
    # Then it packed and uploaded the tree, and the job's result is printed like an import
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert (out["id"], out["version"], out["case_count"]) == ("tb", "1.0.0", 9)
    assert [s["task"] for s in out["skipped"]] == ["evoeval/5"]
    assert "skipped 1 task: evoeval/5" in got.stderr
    job = call(f"{server.url}/jobs/{out['job_id']}").json
    assert job["state"] == "succeeded" and job["result"]["content_digest"] == out["content_digest"]
    version = call(f"{server.url}/datasets/tb/versions/1.0.0").json
    assert version["produced_by"]["via"] == "upload"
    # And the image template reached every case
    cases = call(f"{server.url}/datasets/tb/versions/1.0.0/cases?limit=100").json["items"]
    images = {c["id"]: c.get("image") for c in cases}
    assert images["evoeval/24"] == "reg/tb:24"  # {name}: the directory, no slash
    # And the whole version is more than one request body could have carried
    whole = document(server, "tb", "1.0.0")
    assert whole.status == 200 and len(whole.body) > limit
    # And the same tree imported in-process gives the same content
    direct = caseshelf(tmp_path / "direct", "import-tasks", src, *options, "--json")
    assert direct.returncode == 0, direct.stderr
    assert json.loads(direct.stdout)["content_digest"] == out["content_digest"]
    # And the finished upload is removed from the store
    assert list(bootstrap.services().store.list("t/acme/uploads/")) == []


def test_cli_import_tasks_case_dirs_with_api_uploads_the_project(
    server: DevServer, shared_data: Path, tmp_path: Path
) -> None:
    # Given an eval-harness project (eval.yaml and its case directories)
    config = str(shared_data / "agent-eval-harness" / "opencode-smoke" / "eval.yaml")
    args = ["import-tasks", config, "--format", "case-dirs", "--dataset", "smoke", "--json"]
    # When it is imported against the local server, and in-process
    got = caseshelf(tmp_path / "cli", *args, "--api", server.url)
    direct = caseshelf(tmp_path / "direct", *args)
    # Then the project went up as one archive and both give the same content
    assert got.returncode == 0, got.stderr
    assert direct.returncode == 0, direct.stderr
    out = json.loads(got.stdout)
    assert out["id"] == "smoke" and out["job_id"]
    assert out["content_digest"] == json.loads(direct.stdout)["content_digest"]
