"""`caseshelf export`, `caseshelf pull` (against the moto server over HTTP) and
`caseshelf workspace`, as subprocesses on a fresh embedded store."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.helpers import run_cli, run_main_here
from tests.serving import server_thread

pytestmark = pytest.mark.e2e

DEMO = {
    "id": "demo",
    "version": "1.0.0",
    "cases": [
        {
            "id": f"HumanEval/{i}",
            "inputs": {"user": f"write f{i}"},
            "expectations": {"ground_truth": f"def f{i}(): ..."},
            "tags": ["odd" if i % 2 else "even"],
        }
        for i in range(6)
    ],
    "shared_files": [{"dest": "SKILL.md", "text": "# skill\n"}],
}


def run(
    tmp_path: Path, *args: Any, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(tmp_path / "home", *args, cwd=tmp_path, env=env)


@pytest.fixture
def registered(tmp_path: Path) -> Path:
    (tmp_path / "demo.json").write_text(json.dumps(DEMO))
    got = run(tmp_path, "register", tmp_path / "demo.json")
    assert got.returncode == 0, got.stderr
    return tmp_path


def test_export_to_a_directory_then_again_is_reused(registered):
    tmp = registered
    first = run(tmp, "export", "demo@1.0.0", "--to", tmp / "out", "--tags", "even", "--json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["case_count"] == 3 and out["reused"] is False
    assert (tmp / "out" / "~HumanEval%2F0~42" / "SKILL.md").read_text() == "# skill\n"
    manifest = json.loads((tmp / "out" / "manifest.json").read_text())
    assert manifest["subset"]["tags"] == ["even"]
    again = run(tmp, "export", "demo", "--to", tmp / "out", "--tags", "even", "--json")
    assert json.loads(again.stdout)["reused"] is True


def test_export_of_an_unknown_version_fails_with_its_name(registered):
    got = run(registered, "export", "demo@9.9.9", "--to", registered / "x")
    assert got.returncode == 1 and "9.9.9" in got.stderr
    assert not (registered / "x").exists()


def test_export_to_s3_and_pull_over_http(registered, moto_server, aws_env):
    # Given a bucket on the moto server
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    s3.create_bucket(Bucket="pods")
    env = {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    tmp = registered
    # When the version is exported there (with its EvalHub Secret and the bundle) and pulled
    got = run(
        tmp,
        *("export", "demo@1.0.0", "--to", "s3://pods/evals/demo", "--json"),
        *("--secret-ref", "evalhub-s3", "--bundle", "--evalhub"),
        env=env,
    )
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["test_data_ref"] == {
        "s3": {"bucket": "pods", "key": "evals/demo/", "secret_ref": "evalhub-s3"}
    }
    assert out["bundle_key"] == "evals/demo.bundle.tar.gz"
    # Then stderr holds the progress with its total (the cases: the export is written as it
    # is planned, so its files are counted as they go), even under --json
    n = out["case_count"]
    assert f"exporting: 0/{n} cases" in got.stderr
    assert f"exporting: {n}/{n} cases, {out['file_count']} files" in got.stderr
    # And the EvalHub snippet and a Secret template with the four keys, placeholders only
    docs = list(yaml.safe_load_all(got.stderr[got.stderr.index("# EvalHub") :]))
    bench = docs[0]["benchmarks"][0]
    assert bench["test_data_ref"] == out["test_data_ref"] and bench["id"] == "demo"
    secret = docs[1]
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "evalhub-s3"
    assert secret["stringData"] == {
        k: f"<{k}>"
        for k in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
            "AWS_S3_ENDPOINT",
        )
    }
    assert "testing" not in got.stderr  # no credential of the caller is ever printed
    pulled = run(tmp, "pull", "s3://pods/evals/demo", tmp / "test_data", "--json", env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["file_count"] == out["file_count"]
    assert (
        f"pulling: {out['case_count']} cases, {out['file_count']}/{out['file_count']} files"
        in pulled.stderr
    )
    bundled = run(tmp, "pull", "s3://pods/evals/demo", tmp / "bundled", "--bundle", env=env)
    assert bundled.returncode == 0, bundled.stderr
    local = run(tmp, "export", "demo@1.0.0", "--to", tmp / "local")
    assert local.returncode == 0, local.stderr
    files = sorted(p.relative_to(tmp / "local") for p in (tmp / "local").rglob("*"))
    assert files == sorted(p.relative_to(tmp / "test_data") for p in (tmp / "test_data").rglob("*"))
    for rel in files:
        if (tmp / "local" / rel).is_file():
            assert (tmp / "local" / rel).read_bytes() == (tmp / "test_data" / rel).read_bytes()
            assert (tmp / "local" / rel).read_bytes() == (tmp / "bundled" / rel).read_bytes()
    # And a tampered object stops a second pull, naming it
    s3.put_object(Bucket="pods", Key="evals/demo/~HumanEval%2F1~42/reference.md", Body=b"x")
    bad = run(tmp, "pull", "s3://pods/evals/demo", tmp / "again", env=env)
    assert bad.returncode == 1 and "digest mismatch" in bad.stderr and "reference.md" in bad.stderr
    assert not (tmp / "again").exists()


def test_export_without_a_secret_ref_says_why_there_is_no_test_data_ref(
    registered, moto_server, aws_env
):
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    s3.create_bucket(Bucket="pods2")
    env = {"AWS_ENDPOINT_URL": moto_server, "AWS_DEFAULT_REGION": "us-east-1"}
    got = run(registered, "export", "demo", "--to", "s3://pods2/x", "--json", env=env)
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["test_data_ref"] is None and "secret_ref" in out["test_data_ref_problem"]
    assert "EvalHub rejects" in got.stderr
    bad = run(registered, "export", "demo", "--to", "s3://pods2/y", "--secret-ref", "Bad_Name")
    assert bad.returncode != 0 and "secret_ref" in bad.stderr and "RFC 1123" in bad.stderr
    assert not s3.list_objects_v2(Bucket="pods2", Prefix="y").get("Contents")
    unknown = run(registered, "export", "demo", "--to", registered / "z", "--format", "csv")
    assert unknown.returncode != 0 and "csv" in unknown.stderr
    assert not (registered / "z").exists()


def test_workspace_provisioning_warns_on_stderr_naming_the_entry(tmp_path):
    case = tmp_path / "eval" / "cases" / "case-001"
    case.mkdir(parents=True)
    (case / "input.yaml").write_text("prompt: hi\n")
    (case / "annotations.yaml").write_text("secret: judge only\n")
    (case / "strategy.md").write_text("plan\n")
    os.symlink("/etc/hostname", case / "host.md")
    (tmp_path / "eval" / "eval.yaml").write_text(
        "dataset:\n  path: cases\n  workspace:\n    files:\n      - strategy.md\n      - host.md\n"
        "      - {dest: input.yaml, source: eval/eval.yaml}\n"
    )
    got = run(
        tmp_path, "workspace", case, tmp_path / "ws", "--config", tmp_path / "eval" / "eval.yaml"
    )
    assert got.returncode == 0, got.stderr
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == ["input.yaml", "strategy.md"]
    assert (tmp_path / "ws" / "input.yaml").read_text() == "prompt: hi\n"
    assert "host.md" in got.stderr and "outside" in got.stderr
    assert "input.yaml" in got.stderr and "reserved" in got.stderr


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "export_s3.py"


def test_export_script_from_an_eval_yaml_tree_and_from_a_registered_version(
    registered, shared_data
):
    tmp = registered
    root = shared_data / "agent-eval-harness" / "opencode-smoke"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    env["CASESHELF_HOME"] = str(tmp / "home")
    spec = importlib.util.spec_from_file_location("export_s3", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    runs = iter(range(1000))

    def script(*args: Any) -> subprocess.CompletedProcess:
        argv = [str(a) for a in args]
        if next(runs) == 0:  # the first as the script it is, its process's exit code and streams
            return subprocess.run(
                [sys.executable, SCRIPT, *argv],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        return run_main_here(module.main, argv, cwd=tmp, environ=env, name=str(SCRIPT))

    tree = script("--config", root / "eval.yaml", "--project-root", root, "--to", tmp / "t")
    assert tree.returncode == 0, tree.stderr
    assert json.loads(tree.stdout)["case_count"] == 1
    case = root / "cases" / "case-001"
    for f in case.iterdir():
        assert (tmp / "t" / "case-001" / f.name).read_bytes() == f.read_bytes()
    reg = script("demo@1.0.0", "--ids", "HumanEval/2,HumanEval/4", "--to", tmp / "r")
    assert reg.returncode == 0, reg.stderr
    assert json.loads(reg.stdout)["case_count"] == 2
    bad = script("demo@1.0.0", "--ids", "nope", "--to", tmp / "bad")
    assert bad.returncode == 1 and "nope" in bad.stderr
    # And every format, from both forms
    rows = script("demo@1.0.0", "--format", "jsonl", "--to", tmp / "j")
    assert rows.returncode == 0, rows.stderr
    assert json.loads(rows.stdout)["format"] == "jsonl"
    assert (
        len((tmp / "j" / "cases.jsonl").read_text().splitlines())
        == json.loads(rows.stdout)["case_count"]
    )
    pkg = script("--config", root / "eval.yaml", "--project-root", root, "--to", tmp / "h")
    assert pkg.returncode == 0, pkg.stderr
    assert "no test_data_ref" in pkg.stderr  # a directory: there is no S3 ref to hand out
    wrong = script("demo@1.0.0", "--secret-ref", "Bad_Ref", "--to", tmp / "w")
    assert wrong.returncode == 1 and "secret_ref" in wrong.stderr and not (tmp / "w").exists()


def test_export_through_the_local_api(registered):
    # Given the local API over its own embedded store, with the demo registered through it
    from caseshelf import bootstrap
    from caseshelf.devserver import make_server

    tmp = registered
    settings = bootstrap.load_settings({}, home=str(tmp / "server-home"))
    server = make_server(settings, "127.0.0.1", 0, quiet=True)
    thread = server_thread(server)
    thread.start()
    try:
        assert run(tmp, "register", tmp / "demo.json", "--api", server.url).returncode == 0
        # When the export route is called twice
        first = run(
            tmp, "export", "demo@1.0.0", "--ids", "HumanEval/1", "--api", server.url, "--json"
        )
        again = run(
            tmp, "export", "demo@1.0.0", "--ids", "HumanEval/1", "--api", server.url, "--json"
        )
        elsewhere = run(tmp, "export", "demo", "--to", "s3://b/p", "--api", server.url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        bootstrap.use(None)
    # Then the first writes under the tenant's exports prefix and the second reuses it
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["prefix"] == f"t/local/exports/{out['export_id']}/" and out["case_count"] == 1
    assert out["reused"] is False and json.loads(again.stdout)["reused"] is True
    assert (tmp / "server-home" / "objects" / out["manifest_key"]).is_file()
    # And an S3 target is refused with --api
    assert elsewhere.returncode == 1 and "registry's bucket" in elsewhere.stderr
