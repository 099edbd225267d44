"""Export to S3 (moto in-process and moto server over HTTP) and the pod-side pull over HTTP, on
real data: GSM8K registered from its JSONL rows, and the agent-eval-harness case trees."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import urllib.request
from pathlib import Path

import orjson
import pytest
import yaml

from caseshelf.adapters.s3 import S3BlobStore
from caseshelf.domain.errors import BadRequest, Upstream
from caseshelf.domain.identity import Identity
from caseshelf.services.exports import ExportRequest, ExportService
from caseshelf.services.pull import pull
from caseshelf.services.registry import parse_dataset
from caseshelf.services.workspace import load_eval_config

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")


def gsm8k_dataset(shared_data: Path, limit: int | None = None) -> dict:
    """GSM8K rows mapped to cases: the question is what the agent sees, the number after
    '#### ' is the ground truth, the worked solution is kept for judges."""
    rows = (shared_data / "gsm8k" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    cases = []
    for i, line in enumerate(rows[:limit] if limit else rows):
        row = json.loads(line)
        final = row["answer"].rsplit("#### ", 1)[1].strip()
        cases.append(
            {
                "id": f"gsm8k/{i}",
                "inputs": {"user": row["question"]},
                "expectations": {"ground_truth": final, "details": {"solution": row["answer"]}},
                "graders": [{"id": "exact_match"}],
                "metadata": {"row": i},
                "tags": ["gsm8k"],
            }
        )
    return {
        "id": "gsm8k",
        "version": "1.0.0",
        "cases": cases,
        "shared_files": [{"dest": "GRADING.md", "text": "Answer with the final number only.\n"}],
    }


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _case_files(dataset_dir: Path) -> dict[str, bytes]:
    """Every file of every case directory under `dataset_dir`, by `<case>/<path>`."""
    return {
        f"{case.name}/{rel}": data
        for case in sorted(dataset_dir.iterdir())
        if case.is_dir()
        for rel, data in _tree(case).items()
    }


def test_gsm8k_exports_to_a_local_directory(shared_data, tmp_path):
    # Given GSM8K registered on the embedded backend
    from caseshelf.bootstrap import build, load_settings

    svc = build(load_settings({}, home=str(tmp_path / "home")))
    svc.registry.register(ME, parse_dataset(gsm8k_dataset(shared_data)))
    # When it is exported
    res = svc.exports.export_version(ME, "gsm8k", "1.0.0", to=str(tmp_path / "out"))
    # Then all 1319 cases are there, with the question, the final answer and the shared file
    assert res.case_count == 1319
    case = tmp_path / "out" / "~gsm8k%2F0"
    question = yaml.safe_load((case / "input.yaml").read_text(encoding="utf-8"))["prompt"]
    assert question.startswith("Janet\u2019s ducks lay 16 eggs")
    assert (case / "reference.md").read_text() == "18"
    assert yaml.safe_load((case / "annotations.yaml").read_text())["graders"] == [
        {"id": "exact_match"}
    ]
    assert (case / "GRADING.md").read_text().startswith("Answer with")
    assert len(list((tmp_path / "out").iterdir())) == 1319 + 1
    assert res.file_count == 1319 * 4


@pytest.mark.parametrize("backend", ["moto", "moto_server"], indirect=True)
def test_gsm8k_exports_to_the_registry_bucket_with_bundle_and_test_data_ref(
    backend, shared_data, tmp_path
):
    # Given 60 GSM8K cases registered on S3
    svc = backend.services
    svc.registry.register(ME, parse_dataset(gsm8k_dataset(shared_data, limit=60)))
    # When exported with no target, asking for the bundle
    request = ExportRequest(bundle=True, secret_ref="evalhub-s3")
    res = svc.exports.export_version(ME, "gsm8k", "latest", request)
    # Then it lands under the tenant's exports prefix of the registry bucket
    bucket = backend.settings.bucket
    assert res.prefix == f"s3://{bucket}/t/local/exports/{res.export_id}/"
    assert res.test_data_ref == {
        "s3": {
            "bucket": bucket,
            "key": f"t/local/exports/{res.export_id}/",
            "secret_ref": "evalhub-s3",
        }
    }
    keys = [o.key for o in backend.store.list(res.key_prefix)]
    assert len(keys) == res.file_count + 1  # + manifest; the bundle is beside the prefix
    assert res.bundle_key == f"t/local/exports/{res.export_id}.bundle.tar.gz"
    bundle_tags = backend.s3.get_object_tagging(Bucket=bucket, Key=res.bundle_key)["TagSet"]
    assert {"Key": "caseshelf-area", "Value": "exports"} in bundle_tags
    tags = backend.s3.get_object_tagging(Bucket=bucket, Key=res.manifest_key)["TagSet"]
    assert {"Key": "caseshelf-area", "Value": "exports"} in tags
    # And the presigned bundle URL serves every file (over HTTP on the moto server)
    assert res.bundle_url and res.bundle_key
    if backend.name == "moto_server":
        with urllib.request.urlopen(res.bundle_url) as resp:
            raw = resp.read()
            # saved under the version's name, not the bundle's key
            disposition = resp.headers["Content-Disposition"]
        assert disposition == 'attachment; filename="gsm8k-1.0.0.case-dirs.tar.gz"'
    else:
        raw = backend.store.get(res.bundle_key)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(raw))) as tar:
        names = {m.name for m in tar if m.isreg()}
    assert len(names) == res.file_count + 1
    # And asking again writes nothing
    again = svc.exports.export_version(ME, "gsm8k", "1.0.0")
    assert again.reused and again.export_id == res.export_id
    assert again.case_count == 60


@pytest.mark.parametrize("backend", ["moto_server"], indirect=True)
def test_pull_over_http_gives_back_the_local_export(backend, shared_data, tmp_path):
    # Given an export to another bucket, through the moto server
    svc = backend.services
    svc.registry.register(ME, parse_dataset(gsm8k_dataset(shared_data, limit=30)))
    backend.s3.create_bucket(Bucket="pods")
    exports = ExportService(
        svc.registry, store_for_bucket=lambda b: S3BlobStore(backend.s3, b), concurrency=8
    )
    req = ExportRequest(subset={"limit": 26}, bundle=True)
    res = exports.export_version(ME, "gsm8k", "1.0.0", req, to="s3://pods/evals/gsm8k")
    local = exports.export_version(ME, "gsm8k", "1.0.0", req, to=str(tmp_path / "local"))
    assert res.export_id == local.export_id and res.case_count == 26
    # When a pod pulls it, listing the bucket 50 keys at a time, as S3 answers 1,000 (106 keys:
    # three pages)
    store = S3BlobStore(backend.s3, "pods", list_page=50)
    pages: list[str] = []
    backend.s3.meta.events.register(
        "before-parameter-build.s3.ListObjectsV2", lambda **kw: pages.append("page")
    )
    got = pull(store, "evals/gsm8k", tmp_path / "test_data", concurrency=8)
    assert len(pages) == 3
    # Then the directory is byte for byte the local export
    assert got.file_count == 26 * 4
    assert _tree(tmp_path / "test_data") == _tree(tmp_path / "local")
    # And the bundle path gives the same
    pull(store, "evals/gsm8k/", tmp_path / "bundle_data", bundle=True)
    assert _tree(tmp_path / "bundle_data") == _tree(tmp_path / "local")


@pytest.mark.parametrize("backend", ["moto_server"], indirect=True)
def test_pull_over_http_refuses_traversal_and_tampering(backend, tmp_path):
    svc = backend.services
    svc.registry.register(
        ME,
        parse_dataset(
            {"id": "d", "version": "1", "cases": [{"id": "a", "inputs": {"user": "hi"}}]}
        ),
    )
    res = svc.exports.export_version(ME, "d", "1")
    bucket = backend.settings.bucket
    prefix = res.key_prefix
    assert prefix
    # A key with a parent segment
    evil = prefix + "a/../../evil.txt"
    backend.s3.put_object(Bucket=bucket, Key=evil, Body=b"x")
    with pytest.raises(BadRequest, match="refusing key"):
        pull(backend.store, prefix, tmp_path / "one")
    assert not (tmp_path / "one").exists()
    backend.s3.delete_object(Bucket=bucket, Key=evil)
    # A tampered object
    backend.s3.put_object(Bucket=bucket, Key=prefix + "a/input.yaml", Body=b"prompt: rm -rf\n")
    with pytest.raises(Upstream, match="digest mismatch"):
        pull(backend.store, prefix, tmp_path / "two")
    assert not (tmp_path / "two").exists()
    assert [p.name for p in tmp_path.iterdir()] == []


# --- on-disk case trees -----------------------------------------------------------------------


@pytest.mark.parametrize("tree", ["anova-example", "opencode-smoke"])
def test_agent_eval_harness_tree_exports_byte_for_byte(shared_data, tmp_path, tree):
    # Given an eval.yaml case tree on disk
    root = shared_data / "agent-eval-harness" / tree
    config = load_eval_config(root / "eval.yaml", project_root=root)
    warnings: list[str] = []
    from caseshelf.bootstrap import build, load_settings

    svc = build(load_settings({}, home=str(tmp_path / "home")))
    exports = ExportService(svc.registry, warn=warnings.append)
    # When it is exported straight from disk
    res = exports.export_tree(config, to=str(tmp_path / "out"))
    # Then every case file comes back byte for byte, and nothing else but the manifest
    source = _case_files(config.dataset_dir)
    out = _tree(tmp_path / "out")
    manifest = orjson.loads(out.pop("manifest.json"))
    assert out == source
    assert res.case_count == len([c for c in config.dataset_dir.iterdir() if c.is_dir()])
    for entry in manifest["cases"].values():
        for rel, meta in entry["files"].items():
            data = out[f"{entry['dir']}/{rel}"]
            assert meta["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert warnings == []
    # And asking again reuses it
    assert exports.export_tree(config, to=str(tmp_path / "out")).reused


def test_terminal_bench_import_exports_its_task_files_byte_for_byte(shared_data, tmp_path):
    # Given the real Terminal-Bench tasks imported (the one without tests skipped)
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.paths import case_dir_name
    from caseshelf.services.tasks import import_task_tree, read_path

    svc = build(load_settings({}, home=str(tmp_path / "home")))
    root = shared_data / "terminal-bench"
    result, skipped = import_task_tree(
        svc.registry,
        ME,
        read_path(root),
        "terminal-bench",
        image_template="reg/tb:{id}",
        skip_invalid=True,
        dataset="tb",
        version="1.0.0",
    )
    assert [s.task for s in skipped] == ["evoeval/5"]
    # When it is exported
    res = svc.exports.export_version(ME, "tb", "1.0.0", to=str(tmp_path / "out"))
    # Then every task file is in its case directory, unchanged, next to the generated ones
    assert res.case_count == result.record.case_count == 9
    for case in svc.registry.list_cases(ME, "tb", "1.0.0", limit=100).items:
        out = tmp_path / "out" / case_dir_name(case["id"])
        task_dir = root / case["metadata"]["task"]
        for rel in case["files"]:
            assert (out / rel).read_bytes() == (task_dir / rel).read_bytes(), rel
        assert (out / "input.yaml").is_file() and (out / "annotations.yaml").is_file()
        assert not any(p.is_symlink() for p in out.rglob("*"))
        # executable task files stay executable
        for rel in case["metadata"].get("file_modes", {}):
            assert (out / rel).stat().st_mode & 0o111, rel
    executables = sum(
        len(c["metadata"].get("file_modes", {}))
        for c in svc.registry.list_cases(ME, "tb", "1.0.0", limit=100).items
    )
    assert executables > 0
    # And a pull of its bundle restores the executable bits too
    from caseshelf.services.pull import install_bundle

    store_res = svc.exports.export_version(ME, "tb", "1.0.0", ExportRequest(bundle=True))
    assert store_res.bundle_key
    install_bundle(svc.store.get(store_res.bundle_key), tmp_path / "pulled")
    manifest = orjson.loads((tmp_path / "pulled" / "manifest.json").read_bytes())
    modes = [
        (entry["dir"], rel)
        for entry in manifest["cases"].values()
        for rel, meta in entry["files"].items()
        if meta.get("mode")
    ]
    assert len(modes) == executables
    for d, rel in modes:
        assert (tmp_path / "pulled" / d / rel).stat().st_mode & 0o111


@pytest.mark.parametrize("tree", ["anova-example", "opencode-smoke"])
def test_agent_eval_harness_tree_round_trips_through_import_and_export(shared_data, tmp_path, tree):
    # Given an eval.yaml case tree imported by the case-dirs on-ramp
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.services.casedirs import build_case_dir_dataset

    root = shared_data / "agent-eval-harness" / tree
    built = build_case_dir_dataset(root / "eval.yaml", dataset="harness", version="1.0.0")
    svc = build(load_settings({}, home=str(tmp_path / "home")))
    svc.registry.register(ME, parse_dataset(built.body))
    # When the registered version is exported
    svc.exports.export_version(ME, "harness", "1.0.0", to=str(tmp_path / "out"))
    # Then the export is the case tree, byte for byte, plus the manifest
    config = load_eval_config(root / "eval.yaml", project_root=root)
    source = _case_files(config.dataset_dir)
    out = _tree(tmp_path / "out")
    out.pop("manifest.json")
    assert out == source
