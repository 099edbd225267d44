"""`caseshelf.inspect.dataset`: an inspect_ai dataset whose eval log names the version's
content digest. Judged by inspect_ai itself: a real `inspect eval` (the command, in its own
process) of a task on it, with inspect's `mockllm/model` (offline: its outputs carry their token
usage, so no tokenizer is fetched), and the log read back with `read_eval_log`."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest
from inspect_ai.dataset import FieldSpec, Sample
from inspect_ai.log import read_eval_log

import caseshelf
import caseshelf.inspect as cs_inspect
from caseshelf.domain.canonical import content_digest
from caseshelf.extras import MissingExtra
from tests.helpers import dev_server

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES = [
    {
        "id": "add",
        "inputs": {"user": "What is 2 + 2?"},
        "expectations": {"ground_truth": "4", "details": {"choices": ["3", "4"]}},
        "metadata": {"source": "arith"},
    },
    {"id": "sub", "inputs": {"user": "What is 5 - 3?"}, "expectations": {"ground_truth": "2"}},
    {"id": "mul", "inputs": {"user": "What is 3 * 3?"}, "expectations": {"ground_truth": "4"}},
]
TASK = """
import caseshelf.inspect
from inspect_ai import Task, task
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate


def answer(input, tools, tool_choice, config):
    out = ModelOutput.from_content(model="mockllm", content="4")
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


@task
def arith():
    return Task(
        dataset=caseshelf.inspect.dataset("arith@1.0.0"),
        solver=generate(),
        scorer=match(),
        model=get_model("mockllm/model", custom_outputs=answer),
    )
"""


def _inspect_eval(workdir: Path, home: Path) -> Any:
    """`inspect eval task.py` in its own process; the log it wrote."""
    (workdir / "task.py").write_text(dedent(TASK))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASESHELF_")}
    env["CASESHELF_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT / "shared"), env.get("PYTHONPATH")) if p
    )
    inspect_cmd = Path(sys.executable).with_name("inspect")
    got = subprocess.run(
        [str(inspect_cmd), "eval", "task.py", "--log-dir", "logs", "--display", "none"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    logs = sorted((workdir / "logs").iterdir())
    assert len(logs) == 1, logs
    return read_eval_log(str(logs[0]))


def test_an_inspect_eval_logs_the_version_and_digest_it_ran_on(tmp_path: Path) -> None:
    # Given two versions of a dataset in the embedded store
    home = tmp_path / "home"
    cs = caseshelf.connect(home=home)
    v1 = cs.register("arith", cases=CASES, version="1.0.0")
    v2 = cs.register("arith", cases=[*CASES[:2], {**CASES[2], "id": "div"}], version="1.1.0")
    assert v1.content_digest != v2.content_digest

    # When inspect runs a task on arith@1.0.0 (not the latest)
    log = _inspect_eval(tmp_path, home)

    # Then the eval ran, and its log names the version and its content digest
    assert log.status == "success", log.error
    ds = log.eval.dataset
    assert ds.name == "arith@1.0.0"
    assert ds.location == f"caseshelf:arith@{v1.content_digest}"
    assert ds.samples == 3
    assert ds.sample_ids == ["add", "sub", "mul"]
    assert cs_inspect.logged_version(log) == cs_inspect.LoggedVersion(
        "arith", "1.0.0", v1.content_digest
    )
    # And each sample carries its case's digest: the registry's, since they hash, with the
    # version's description, tags and shared files, to its content digest
    assert log.samples is not None
    digests = {s.id: s.metadata["case_digest"] for s in log.samples}  # (the log sorts them)
    pairs = [(i, digests[i]) for i in ds.sample_ids]
    version = cs.get("arith@1.0.0")
    assert (
        content_digest(
            description=version.description,
            tags=version.tags,
            shared_files=[],
            case_digests=[(str(i), d) for i, d in pairs],
        )
        == v1.content_digest
    )
    # And the samples were scored against the ground truth (mockllm answers "4")
    scores = {s.id: s.scores["match"].value for s in log.samples if s.scores}
    assert scores == {"add": "C", "sub": "I", "mul": "C"}


def test_over_http_the_location_is_the_versions_url_and_the_samples_are_the_same(
    tmp_path: Path,
) -> None:
    with dev_server(tmp_path / "srv") as srv, caseshelf.connect(srv.url) as remote:
        out = remote.register("arith", cases=CASES, version="1.0.0")
        # When the dataset is loaded over HTTP by a tag-free ref (latest)
        ds = cs_inspect.dataset("arith", client=remote)
        # Then its location is the API's route of the version pinned by digest
        assert ds.name == "arith@1.0.0"
        assert ds.location == f"{srv.url}/datasets/arith/versions/{out.content_digest}"
        assert remote.get(f"arith@{out.content_digest}").version == "1.0.0"
    # And the samples are those the embedded store gives for the same cases
    local = caseshelf.connect(home=tmp_path / "local")
    local.register("arith", cases=CASES, version="1.0.0")
    here = cs_inspect.dataset("arith@1.0.0", client=local)
    assert [s.model_dump() for s in here] == [s.model_dump() for s in ds]


def test_the_default_fields_and_a_field_spec_of_dotted_paths(tmp_path: Path) -> None:
    cs = caseshelf.connect(home=tmp_path / "home")
    out = cs.register("arith", cases=CASES, version="1.0.0")
    # The default: input from inputs.user, target from expectations.ground_truth, choices
    # from expectations.details.choices, the case's metadata kept
    first = cs_inspect.dataset("arith@1.0.0", client=cs)[0]
    assert (first.id, first.input, first.target, first.choices) == (
        "add",
        "What is 2 + 2?",
        "4",
        ["3", "4"],
    )
    assert first.metadata is not None
    assert first.metadata["source"] == "arith"
    assert first.metadata["case_id"] == "add"
    assert first.metadata["case_digest"].startswith("sha256:")
    # A FieldSpec names dotted paths of the case's record
    spec = FieldSpec(input="inputs.user", target="metadata.source", metadata=["metadata.source"])
    got = cs_inspect.dataset("arith@1.0.0", spec, client=cs)
    assert got[0].target == "arith" and got[1].target == ""
    assert got[0].metadata == {
        "metadata.source": "arith",
        "case_id": "add",
        "case_digest": first.metadata["case_digest"],
    }

    # A function may give several samples a case; each keeps its case's digest
    def two(record: dict[str, Any]) -> list[Sample]:
        text = record["inputs.user"]
        return [Sample(id=f"{record['id']}-{n}", input=f"{text} ({n})") for n in (1, 2)]

    many = cs_inspect.pinned_dataset(cs, "arith", "1.0.0", out.content_digest, two)
    assert [s.id for s in many][:2] == ["add-1", "add-2"]
    assert {s.metadata["case_digest"] for s in many[:2]} == {first.metadata["case_digest"]}
    assert many.name == "arith@1.0.0"


def test_a_case_the_mapping_cannot_make_a_sample_of_is_named(tmp_path: Path) -> None:
    cs = caseshelf.connect(home=tmp_path / "home")
    cs.register("arith", cases=CASES, version="1.0.0")
    with pytest.raises(caseshelf.BadRequest) as err:
        cs_inspect.dataset("arith@1.0.0", FieldSpec(input="inputs.missing"), client=cs)
    assert err.value.fields["case_id"] == "add"
    assert "sample_fields" in err.value.detail
    with pytest.raises(caseshelf.BadRequest, match="content digest"):
        cs_inspect.pinned_dataset(cs, "arith", "1.0.0", "1.0.0")
    with pytest.raises(caseshelf.NotFound):
        cs_inspect.dataset("arith@2.0.0", client=cs)


def test_a_log_of_another_dataset_is_not_read_as_a_version() -> None:
    from inspect_ai.log import EvalDataset

    with pytest.raises(caseshelf.BadRequest, match=r"caseshelf\.inspect\.dataset"):
        cs_inspect.logged_version(EvalDataset(name="gsm8k", location="data/gsm8k.jsonl"))


def test_without_inspect_ai_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # an import of it fails
    monkeypatch.setitem(sys.modules, "inspect_ai.dataset", None)
    monkeypatch.delitem(sys.modules, "caseshelf.inspect")
    with pytest.raises(MissingExtra) as err:
        importlib.import_module("caseshelf.inspect")
    assert "pip install 'caseshelf[inspect]'" in err.value.detail
    assert err.value.fields["extra"] == "inspect"
