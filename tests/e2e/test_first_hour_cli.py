"""A new user's first hour on real data, through the CLI: GSM8K imported, its cases edited and
registered as a new version, and the diff that shows the change."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT, run_cli

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]


def cli(home: Path, *args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    got = run_cli(home, *args, cwd=cwd or home.parent)
    return got


def flat(text: str) -> str:
    """Text as words on one line (a usage error's box wraps its message)."""
    return " ".join(text.replace("\u2502", " ").split())


def ok(got: subprocess.CompletedProcess[str]) -> str:
    assert got.returncode == 0, got.stderr
    return got.stdout


@pytest.fixture(scope="module")
def gsm8k(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """A store with gsm8k@1.0.0 imported from the upstream jsonl, and 1.1.0 registered from
    its exported cases with `gsm8k-5` edited near the end of its question."""
    work = tmp_path_factory.mktemp("gsm8k")
    home = work / "home"
    ok(
        cli(
            home,
            "import",
            shared_data / "gsm8k" / "test.jsonl",
            "--recipe",
            REPO_ROOT / "recipes" / "gsm8k.yaml",
        )
    )
    lines = ok(cli(home, "cases", "gsm8k", "--all", "--jsonl")).splitlines()
    edited = []
    for line in lines:
        case = json.loads(line)
        if case["id"] == "gsm8k-5":
            assert "How much" in case["inputs"]["user"][-60:]
            case["inputs"]["user"] = case["inputs"]["user"].replace("How much", "Exactly how much")
        edited.append(json.dumps(case))
    (work / "v2.jsonl").write_text("\n".join(edited) + "\n")
    ok(cli(home, "register", work / "v2.jsonl", "--dataset", "gsm8k", "--bump", "minor"))
    return home


def test_a_diff_shows_the_changed_words_of_a_long_question(gsm8k: Path) -> None:
    out = ok(cli(gsm8k, "diff", "gsm8k@1.0.0", "1.1.0"))
    lines = out.splitlines()
    at = lines.index("    /inputs/user")
    change = lines[at + 1]
    # one line, cut to the words around the change, the change marked word by word
    assert change.startswith("    ~  …")
    assert change.endswith("[-How-]{+Exactly how+} much does he need to pay for them?")
    assert "Kylar went to the store" not in change
    assert "1 changed, 1318 unchanged" in out

    whole = ok(cli(gsm8k, "diff", "gsm8k@1.0.0", "1.1.0", "--full"))
    assert "    ~  Kylar went to the store to buy glasses" in whole
    assert "[-How-]{+Exactly how+} much" in whole


def test_a_diff_on_a_terminal_is_in_colour(gsm8k: Path) -> None:
    code, _, drawn = run_on_a_terminal(gsm8k, "diff", "gsm8k@1.0.0", "1.1.0", stream="stdout")
    assert code == 0
    line = next(x for x in drawn.splitlines() if "Exactly how" in x)
    assert "\x1b[1;7;32mExactly how\x1b[0m" in line and "{+" not in line
    code, _, drawn = run_on_a_terminal(
        gsm8k, "diff", "gsm8k@1.0.0", "1.1.0", "--no-color", stream="stdout"
    )
    assert "[-How-]{+Exactly how+}" in drawn


def test_a_diff_in_colour_marks_words_with_styles_not_brackets(gsm8k: Path) -> None:
    out = ok(cli(gsm8k, "diff", "gsm8k@1.0.0", "1.1.0", "--color"))
    assert "\x1b[" in out and "[-How-]" not in out
    line = next(x for x in out.splitlines() if "Exactly how" in x)
    assert "\x1b[1;7;32mExactly how\x1b[0m" in line and "\x1b[1;7;31mHow\x1b[0m" in line
    plain = ok(cli(gsm8k, "diff", "gsm8k@1.0.0", "1.1.0", "--no-color"))
    assert "\x1b[" not in plain and "{+Exactly how+}" in plain


def test_a_version_from_exported_cases_keeps_its_base_metadata(gsm8k: Path) -> None:
    base = json.loads(ok(cli(gsm8k, "get", "gsm8k@1.0.0", "--json")))
    new = json.loads(ok(cli(gsm8k, "get", "gsm8k@1.1.0", "--json")))
    assert new["description"] == base["description"] != ""
    assert new["tags"] == base["tags"]
    assert new["produced_by"] == base["produced_by"]
    assert new["produced_by"]["recipe"]["id"] == "gsm8k"
    # and the diff shows the one edited case, no `/description → ""`
    out = ok(cli(gsm8k, "diff", "gsm8k@1.0.0", "1.1.0"))
    assert "/description" not in out


def test_plain_rows_are_refused_with_the_commands_that_import_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "rows.jsonl").write_text('{"id":"q1","question":"1+1?","answer":"2"}\n')
    got = cli(home, "register", "rows.jsonl")
    assert got.returncode == 1
    assert "rows.jsonl: item 0 is a plain row (id, question, answer), not a case" in got.stderr
    assert "caseshelf preview rows.jsonl" in got.stderr
    assert "caseshelf import rows.jsonl --recipe recipe.yaml" in got.stderr
    assert "deprecated" not in got.stderr and "warning" not in got.stderr

    # the drafted recipe imports the file as printed
    drafted = cli(home, "preview", "rows.jsonl")
    recipe = ok(drafted)
    assert "id_field: id" in recipe and "task_field: question" in recipe
    assert "answer_field: answer" in recipe and "1 of 1 rows mapped" in drafted.stderr
    (tmp_path / "recipe.yaml").write_text(recipe)
    ok(cli(home, "import", "rows.jsonl", "--recipe", "recipe.yaml"))
    case = json.loads(ok(cli(home, "cases", "rows", "--all", "--jsonl")))
    assert case["id"] == "q1" and case["inputs"]["user"] == "1+1?"
    assert case["expectations"]["ground_truth"] == "2"


def test_rows_without_ids_get_row_numbers_or_the_id_field_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rows = [{"question": f"{n}+1?", "answer": str(n + 1), "ref": f"k{n}"} for n in range(3)]
    (tmp_path / "noid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = cli(home, "register", "noid.jsonl", "--dataset", "x", "--version", "1.0.0")
    assert got.returncode == 1 and "is a plain row (question, answer, ref)" in got.stderr

    drafted = cli(home, "preview", "noid.jsonl")
    assert "ids noid-<row number>" in drafted.stderr
    (tmp_path / "r.yaml").write_text(ok(drafted))
    ok(cli(home, "import", "noid.jsonl", "--recipe", "r.yaml"))
    ids = [json.loads(x)["id"] for x in ok(cli(home, "cases", "noid", "--all", "--jsonl")).split()]
    assert ids == ["noid-0", "noid-1", "noid-2"]
    # --id-field on import names the id field over the recipe's
    ok(
        cli(
            home,
            "import",
            "noid.jsonl",
            "--recipe",
            "r.yaml",
            "--id-field",
            "ref",
            "--bump",
            "major",
        )
    )
    ids = [json.loads(x)["id"] for x in ok(cli(home, "cases", "noid", "--all", "--jsonl")).split()]
    assert ids == ["k0", "k1", "k2"]


def test_a_csv_given_to_register_points_to_import(tmp_path: Path, shared_data: Path) -> None:
    csv = shared_data / "truthfulqa" / "TruthfulQA_mini.csv"
    got = cli(tmp_path / "home", "register", csv, "--dataset", "t", "--version", "1.0.0")
    assert got.returncode == 1
    assert f"{csv} is a CSV file of rows, not a dataset file" in got.stderr
    assert f"caseshelf import {csv} --recipe recipe.yaml" in got.stderr


def test_mmlu_imports_from_its_directory_a_glob_or_a_list(
    tmp_path: Path, shared_data: Path
) -> None:
    home = tmp_path / "home"
    recipe = REPO_ROOT / "recipes" / "mmlu-subjects.yaml"
    test_dir = shared_data / "mmlu" / "test"
    out = ok(cli(home, "import", test_dir, "--recipe", recipe, "--json"))
    assert json.loads(out)["case_count"] == 200
    ids = ok(cli(home, "subset", "mmlu", "--tags", "global_facts")).split()
    assert ids[:2] == ["global_facts-0", "global_facts-1"] and len(ids) == 100

    # the same files as a glob, or listed in another order: the same cases, in that order
    glob = ok(cli(home, "import", f"{test_dir}/*_test.csv", "--recipe", recipe, "--json"))
    assert json.loads(glob)["created"] is False
    files = [test_dir / "global_facts_test.csv", test_dir / "abstract_algebra_test.csv"]
    out = ok(cli(home, "import", *files, "--recipe", recipe, "--dataset", "mmlu-r", "--json"))
    assert json.loads(out)["case_count"] == 200
    first = json.loads(ok(cli(home, "cases", "mmlu-r", "--all", "--jsonl")).splitlines()[0])
    assert first["id"] == "global_facts-0" and first["metadata"] == {"subject": "global_facts"}

    got = cli(home, "import", f"{test_dir}/nope*.csv", "--recipe", recipe)
    assert got.returncode == 1 and "no file matches this pattern" in got.stderr


def test_a_recipe_drafted_for_a_directory_ids_cases_by_file_and_row(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rows = tmp_path / "rows"
    rows.mkdir()
    for part in ("b", "a"):
        (rows / f"{part}.jsonl").write_text(
            "".join(json.dumps({"prompt": f"{part}{n}", "target": n}) + "\n" for n in range(2))
        )
    drafted = cli(home, "preview", "rows")
    recipe = ok(drafted)
    assert "id_template: '{_file}-{_row}'" in recipe and "- _file" in recipe
    (tmp_path / "r.yaml").write_text(recipe)
    ok(cli(home, "import", "rows", "--recipe", "r.yaml"))
    cases = [
        json.loads(x) for x in ok(cli(home, "cases", "rows", "--all", "--jsonl")).split("\n")[:-1]
    ]
    assert [(c["id"], c["tags"]) for c in cases] == [
        ("a-0", ["a"]),
        ("a-1", ["a"]),
        ("b-0", ["b"]),
        ("b-1", ["b"]),
    ]


# -- errors that say what to do next -----------------------------------------------------------


def test_version_errors_say_what_to_do_next(gsm8k: Path) -> None:
    # a conflict suggests --bump
    v2 = gsm8k.parent / "v2.jsonl"  # the fixture's edited cases
    got = cli(gsm8k, "register", v2, "--dataset", "gsm8k", "--version", "1.0.0")
    assert got.returncode == 1
    assert "gsm8k@1.0.0 is already registered with" in got.stderr
    assert "--bump minor" in got.stderr
    # an unknown version lists the closest labels there are
    got = cli(gsm8k, "get", "gsm8k@1.0.9")
    assert got.returncode == 1 and "no version gsm8k@1.0.9; the closest: 1.0.0" in got.stderr
    got = cli(gsm8k, "cases", "gsm8k@7")
    assert "no version gsm8k@7; the latest: 1.1.0, 1.0.0" in got.stderr
    # `:` for `@`
    got = cli(gsm8k, "get", "gsm8k:1.0.0")
    assert got.returncode == 2
    assert "a version is named with '@', not ':': gsm8k@1.0.0" in flat(got.stderr)
    # a refused pattern in words, never as a regular expression
    got = cli(gsm8k, "register", v2, "--dataset", "gsm8k", "--version", "bad/label")
    assert got.returncode == 1
    assert "version labels are 1\u201364 letters, digits, '.', '_' or '-'" in got.stderr
    assert "[A-Za-z" not in got.stderr and "pattern" not in got.stderr
    got = cli(gsm8k, "get", "gsm8k@bad/x")
    assert "1\u201364 letters" in flat(got.stderr) and "[A-Za-z" not in got.stderr


def test_a_diff_against_a_deleted_version_says_how_to_revive_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for version, user in (("1.0.0", "a"), ("1.1.0", "b")):
        doc = {"id": "qa", "version": version, "cases": [{"id": "c", "inputs": {"user": user}}]}
        (tmp_path / f"{version}.json").write_text(json.dumps(doc))
        ok(cli(home, "register", f"{version}.json"))
    ok(cli(home, "rm", "qa@1.1.0"))
    got = cli(home, "diff", "qa@1.0.0", "1.1.0")
    assert got.returncode == 1
    assert "qa@1.1.0 is deleted: revive it (`caseshelf revive qa@1.1.0`)" in got.stderr
    assert "--include-deleted" in got.stderr
    out = ok(cli(home, "diff", "qa@1.0.0", "1.1.0", "--include-deleted"))
    assert "[-a-]{+b+}" in out
    ok(cli(home, "get", "qa@1.1.0", "--include-deleted"))


def test_a_missing_field_lists_the_fields_the_rows_have(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "rows.jsonl").write_text('{"question": "1+1?", "answer": "2", "level": 1}\n')
    recipe = {
        "id": "r",
        "version": "1.0.0",
        "category": "qa",
        "source": {"kind": "jsonl"},
        "mapping": {"task_field": "qestion", "answer_field": "answer"},
    }
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    got = cli(home, "import", "rows.jsonl", "--recipe", "r.json")
    assert got.returncode == 1
    assert (
        "row 0: missing field 'qestion'; did you mean 'question'? "
        "the row has 'question', 'answer', 'level'"
    ) in got.stderr


def test_task_import_errors_name_the_format_and_every_invalid_task(
    tmp_path: Path, shared_data: Path
) -> None:
    home = tmp_path / "home"
    got = cli(home, "import-tasks", shared_data / "harbor", "--format", "terminal-bench")
    assert got.returncode == 1
    assert "it holds task.toml files: import it with --format harbor" in got.stderr
    # every invalid task is listed, and --skip-invalid is the way on
    tb = shared_data / "terminal-bench"
    got = cli(home, "import-tasks", tb, "--image-template", "reg/tb:{name}", "--dataset", "tb")
    assert got.returncode == 1
    assert "1 of 10 tasks are invalid" not in got.stderr  # one: said as one
    assert "a task is invalid:\n  task 'evoeval/5': is incomplete" in got.stderr
    assert "import the others with --skip-invalid" in got.stderr
    got = cli(home, "import-tasks", tb, "--dataset", "tb")
    lines = [x for x in got.stderr.splitlines() if x.startswith("  task '")]
    assert len(lines) == 10 and "and 9 more" not in got.stderr
    assert "10 of 10 tasks are invalid" in got.stderr
    ids = [x.split("'")[1] for x in lines]
    assert "evoeval/24" in ids and "deveval/cpp-area-calculation-implementation" in ids
    # --skip-invalid says which it left out
    got = cli(home, "import-tasks", tb, "--image-template", "r:{name}", "--skip-invalid")
    assert got.returncode == 0, got.stderr
    assert "skipped 1 task: evoeval/5" in got.stderr


# -- quiet by default --------------------------------------------------------------------------


def run_on_a_terminal(home: Path, *args: object, stream: str = "stderr") -> tuple[int, str, str]:
    """The CLI as a process whose `stream` (stderr or stdout) is a terminal (a pty), the other
    a file: (exit code, the file's text, everything drawn on the terminal)."""
    import os
    import pty
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    env |= {"CASESHELF_HOME": str(home), "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    master, slave = pty.openpty()
    out_path = home.parent / "stdout.txt"
    with out_path.open("wb") as out:
        on_tty = {"stdout": slave, "stderr": out} if stream == "stdout" else {}
        proc = subprocess.Popen(
            [sys.executable, "-m", "caseshelf.cli", *map(str, args)],
            stdin=subprocess.DEVNULL,
            stdout=on_tty.get("stdout", out),
            stderr=on_tty.get("stderr", slave),
            env=env,
            cwd=home.parent,
        )
        os.close(slave)
        drawn = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal's other end closed: the process is done with it
                break
            if not data:
                break
            drawn.append(data)
        os.close(master)
        code = proc.wait(timeout=120)
    return code, out_path.read_text(), b"".join(drawn).decode("utf-8", "replace")


def test_an_export_to_a_directory_is_one_live_bar_and_no_evalhub_warning(
    tmp_path: Path, shared_data: Path
) -> None:
    home = tmp_path / "home"
    recipe = REPO_ROOT / "recipes" / "mmlu-subjects.yaml"
    ok(cli(home, "import", shared_data / "mmlu" / "test", "--recipe", recipe))
    code, out, drawn = run_on_a_terminal(home, "export", "mmlu", "--to", tmp_path / "out")
    assert code == 0, drawn
    assert "cases     200" in out
    # one bar, redrawn in place ("\r", erase line), never a line per step
    lines = [x for x in drawn.split("\n") if "exporting" in x]
    assert len(lines) == 1 and "\r\x1b[2K" in lines[0] and "200/200" in lines[0]
    assert "EvalHub" not in drawn and "test_data_ref" not in drawn
    # asked for, the EvalHub note is there
    code, _, drawn = run_on_a_terminal(
        home, "export", "mmlu", "--to", tmp_path / "out2", "--evalhub"
    )
    assert code == 0 and "no test_data_ref" in drawn
    # off a terminal: a few plain lines for a log, still no EvalHub warning
    got = cli(home, "export", "mmlu", "--to", tmp_path / "out3")
    assert got.returncode == 0 and "EvalHub" not in got.stderr
    assert 1 < len([x for x in got.stderr.splitlines() if x.startswith("exporting:")]) <= 12


def test_every_bar_takes_one_decision(tmp_path: Path) -> None:
    from caseshelf import cli as cli_module
    from caseshelf.cli.export import wants_evalhub

    # off a terminal (these tests' stderr), no live bar: progress() hands out a no-op
    assert cli_module.live_progress() is False
    with cli_module.progress("x", 3) as bar:
        bar.advance(1)  # drawn nowhere
    assert wants_evalhub("s3://b/p", False, None)
    assert not wants_evalhub(str(tmp_path), False, None)
    assert wants_evalhub(str(tmp_path), True, None) and wants_evalhub("/x", False, "s")
