"""`caseshelf import|preview|recipes` as a subprocess, on the embedded store."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli as caseshelf
from tests.hf_fake import GOOD_TOKEN, standard_hub

pytestmark = pytest.mark.e2e


def test_import_gsm8k_with_the_local_recipe_prints_version_count_and_digest(tmp_path, shared_data):
    got = caseshelf(
        tmp_path,
        "import",
        str(shared_data / "gsm8k" / "test.jsonl"),
        "--recipe",
        "recipes/gsm8k.yaml",
    )
    assert got.returncode == 0, got.stderr
    assert "1.0.0" in got.stdout and "1319" in got.stdout
    assert "sha256:" in got.stdout
    again = caseshelf(
        tmp_path,
        "import",
        str(shared_data / "gsm8k" / "test.jsonl"),
        "--recipe",
        "recipes/gsm8k.yaml",
        "--limit",
        "10",
        "--json",
    )
    out = json.loads(again.stdout)
    assert (out["version"], out["case_count"], out["produced_by"]["limit"]) == ("1.1.0", 10, 10)


def test_import_from_the_hub_through_the_catalog_recipe(tmp_path):
    hub = standard_hub()
    try:
        env = {"HF_ENDPOINT": hub.url, "CASESHELF_HF_VIEWER_URL": hub.url}
        got = caseshelf(
            tmp_path,
            "import",
            "hf://openai/gsm8k",
            "--config",
            "main",
            "--split",
            "test",
            "--recipe",
            "gsm8k",
            "--json",
            env=env,
        )
        assert got.returncode == 0, got.stderr
        out = json.loads(got.stdout)
        assert out["case_count"] == 250
        assert (
            out["produced_by"]["source"]["revision"] == "0123456789abcdef0123456789abcdef01234567"
        )
        assert hub.counts["rows"] == 3
    finally:
        hub.stop()


def test_a_gated_hub_dataset_needs_hf_token_and_says_how_to_get_access(tmp_path):
    hub = standard_hub()
    try:
        env = {"HF_ENDPOINT": hub.url, "CASESHELF_HF_VIEWER_URL": hub.url, "HF_TOKEN": ""}
        args = ("import", "hf://acme/gated", "--recipe", "gsm8k", "--dataset", "g")
        # Without a token: the error explains gated access, and nothing is registered
        denied = caseshelf(tmp_path, *args, env=env)
        assert denied.returncode == 1
        assert "gated" in denied.stderr and "HF_TOKEN" in denied.stderr
        # With HF_TOKEN set, the same import goes through, the token sent to the Hub
        ok = caseshelf(tmp_path, *args, "--json", env={**env, "HF_TOKEN": GOOD_TOKEN})
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["case_count"] == 5
        assert f"Bearer {GOOD_TOKEN}" in hub.tokens_seen
    finally:
        hub.stop()


def test_preview_and_recipe_commands(tmp_path, shared_data):
    got = caseshelf(
        tmp_path,
        "preview",
        str(shared_data / "truthfulqa" / "TruthfulQA_mini.csv"),
        "--recipe",
        "recipes/truthfulqa.yaml",
        "--json",
    )
    assert got.returncode == 0, got.stderr
    preview = json.loads(got.stdout)
    assert len(preview["cases"]) == 5 and "Correct Answers" in preview["fields"]
    valid = caseshelf(tmp_path, "recipes", "validate", "recipes/truthfulqa.yaml")
    assert valid.returncode == 0 and "valid truthfulqa-csv@1.0.0" in valid.stdout
    assert caseshelf(tmp_path, "recipes", "register", "recipes/truthfulqa.yaml").returncode == 0
    got = caseshelf(tmp_path, "recipes", "get", "truthfulqa-csv")
    assert got.returncode == 0 and "task_field: Question" in got.stdout
    listed = json.loads(caseshelf(tmp_path, "recipes", "ls", "--json").stdout)
    assert [r["id"] for r in listed["items"]] == ["truthfulqa-csv"]
    assert caseshelf(tmp_path, "recipes", "rm", "truthfulqa-csv@1.0.0").returncode == 0
    bad = caseshelf(tmp_path, "import", "nowhere.jsonl", "--recipe", "recipes/gsm8k.yaml")
    assert bad.returncode == 1 and "no such file" in bad.stderr


def test_preview_prints_each_row_and_the_case_it_becomes_with_brackets_intact(tmp_path):
    # Given rows whose text looks like console markup, one of which does not map
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"q": "close [/b] and [bold]keep[/bold] [a, b]", "a": "#### 1"}\n{"a": "#### 2"}\n'
    )
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "id: t\nversion: 1.0.0\ncategory: qa\nsource: {kind: jsonl}\n"
        "mapping: {task_field: q, answer_field: 'a|after:####|strip'}\n"
    )
    # When it is previewed for a person (no --json)
    got = caseshelf(tmp_path, "preview", str(rows), "--recipe", str(recipe))
    # Then the fields, each row, and its case or its error are shown, text unaltered
    assert got.returncode == 0, got.stderr
    out = got.stdout
    assert "fields  q, a" in out
    assert out.index("row 0") < out.index("becomes") < out.index("row 1")
    assert out.count("close [/b] and [bold]keep[/bold] [a, b]") == 2
    assert "row 1: missing field 'q'" in out
    assert "1 of 2 rows mapped; nothing was registered" in got.stderr
    assert caseshelf(tmp_path, "ls", "--json").stdout.count('"id"') == 0


def test_a_directory_of_json_tasks_imports_with_the_file_stem_as_id(tmp_path):
    # Given ARC-style tasks, one .json file each, named by their id, and a recipe for them
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "aa11.json").write_text('{"train": [], "test": [{"input": [[1, 2]]}]}')
    (tasks / "bb22.json").write_text('{"train": [], "test": [{"input": [[3]]}]}')
    (tmp_path / "arc.yaml").write_text(
        "id: arc-mini\nversion: 1.0.0\ncategory: qa\nsource: {kind: json}\nmapping:\n"
        "  id_field: _stem\n  task_template: 'Transform: {test[0].input|tojson}'\n"
    )
    # When the directory is imported with that recipe
    got = caseshelf(tmp_path / "home", "--json", "import", tasks, "--recipe", tmp_path / "arc.yaml")
    assert got.returncode == 0, got.stderr
    # Then each file is a case named by its stem
    cases = caseshelf(tmp_path / "home", "--json", "cases", "arc-mini@latest")
    items = json.loads(cases.stdout)["items"]
    assert [(c["id"], c["inputs"]["user"]) for c in items] == [
        ("aa11", "Transform: [[1,2]]"),
        ("bb22", "Transform: [[3]]"),
    ]


def test_import_with_num_proc_registers_the_version_of_one_process(tmp_path):
    # Given a jsonl file of a few blocks (`SPLIT_BLOCK_BYTES`), imported in one process
    path = tmp_path / "rows.jsonl"
    answer = "step one; step two; " * 25
    with path.open("w") as fh:
        for i in range(16_000):
            fh.write(json.dumps({"question": f"question {i}?", "answer": f"{answer}#### {i}"}))
            fh.write("\n" if i % 1000 else "\n\n")
    args = ("import", path, "--recipe", "recipes/gsm8k.yaml", "--json")
    one = caseshelf(tmp_path, *args, "--dataset", "one", process=True)
    assert one.returncode == 0, one.stderr
    # When it is imported with --num-proc 2 (and with CASESHELF_NUM_PROC=2)
    two = caseshelf(tmp_path, *args, "--dataset", "two", "--num-proc", "2", process=True)
    env = caseshelf(tmp_path, *args, "--dataset", "env", env={"CASESHELF_NUM_PROC": "2"})
    # Then each registers the same cases
    assert two.returncode == 0 and env.returncode == 0, two.stderr + env.stderr
    digests = {json.loads(got.stdout)["content_digest"] for got in (one, two, env)}
    assert len(digests) == 1
    assert json.loads(two.stdout)["case_count"] == 16_000


def test_num_proc_through_the_api_is_refused_naming_the_servers_setting(tmp_path):
    got = caseshelf(
        tmp_path,
        "--api",
        "http://127.0.0.1:9",
        "import",
        "x.jsonl",
        "-r",
        "gsm8k",
        "--num-proc",
        "2",
    )
    assert got.returncode == 2
    assert "--num-proc" in got.stderr and "CASESHELF_NUM_PROC" in got.stderr
