"""Container tasks (Terminal-Bench, Harbor) -> cases. Pure: a task is its name and its files.

A task arrives as `TaskSource(name, files)` where `files` maps each relative POSIX path of the
task directory to its bytes (and `modes` keeps the executable bits). The mappers decide the case;
they never read a disk, and their errors name the task.

Rules (architecture §6: reference images, never build):

- the image is a prebuilt reference: Terminal-Bench's literal compose `image:` (never a `${...}`
  variable) or Harbor's `[environment].docker_image`, else `image_template` with `{id}` (the case
  id) and `{name}` (the task directory name) filled in; a per-task image wins over the template;
  neither is a `BadRequest` naming the task;
- every file of the task is a case file, sent inline (`{text}` for UTF-8, `{base64}` otherwise);
  executable bits are kept in `metadata.file_modes`;
- the tests are what the format's own runner would run (docs/onramps.md): Terminal-Bench's
  `run-tests.sh`, else the harness's default pytest runner over `tests/test_outputs.py`;
  Harbor's `tests/test.sh`, per step `steps/<name>/tests/test.sh` else the shared one;
- the case id is the task's `key` (`task_keys`: its path below the folders all tasks share).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

from caseshelf.domain.boundedyaml import load_yaml
from caseshelf.domain.canonical import inline_body
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.paths import relative_path_problem

TERMINAL_BENCH = "terminal-bench"
HARBOR = "harbor"

TB_MARKER = "task.yaml"
HARBOR_MARKER = "task.toml"

TB_TEST_COMMAND = "bash /tests/run-tests.sh"
# Without a run-tests.sh the Terminal-Bench harness runs its default runner over the task's
# `tests/`: it sets up uv with pytest and runs `uv run pytest $TEST_DIR/test_outputs.py -rA`
# with TEST_DIR=/tests. This is that command, with the directory spelled out.
TB_DEFAULT_TEST_FILE = "tests/test_outputs.py"
TB_DEFAULT_TEST_COMMAND = "uv run pytest /tests/test_outputs.py -rA"
HARBOR_TEST_COMMAND = "bash /tests/test.sh"
HARBOR_TEST_SCRIPT = "tests/test.sh"
IMAGE_TEMPLATE_EXAMPLE = "--image-template 'registry.example.com/tasks/{name}:latest'"

_VAR = re.compile(r"\$\{?[A-Za-z_]")

# Paths made only of safe segments need no further checks (the common case, and a hot loop).
_SIMPLE_PATH = re.compile(
    r"^(?!\.\.?(?:/|$))[A-Za-z0-9_+@=,-][A-Za-z0-9._+@=,-]*"
    r"(?:/(?!\.\.?(?:/|$))[A-Za-z0-9._+@=,-]+)*$"
)


def _load_yaml(text: str) -> Any:
    return load_yaml(text, timestamps=True)


@dataclass(frozen=True)
class TaskSource:
    """One task directory: its name (the last path segment) and every file in it."""

    name: str
    files: Mapping[str, bytes]
    modes: Mapping[str, int] = field(default_factory=dict)
    location: str = ""  # where it was read from (relative path in the tree), for messages
    key: str = ""  # the case id before any prefix; the name when empty (see `task_keys`)

    @property
    def case_key(self) -> str:
        return self.key or self.name


@dataclass(frozen=True)
class Skipped:
    task: str
    reason: str


def task_keys(locations: list[str]) -> dict[str, str]:
    """The case id (before any prefix) of each task directory: its path below the folders
    every task shares (`evoeval/24` for a tree of several collections, `24` for the collection
    alone, or for one wrapped in a folder of an archive). Unique in the tree, it gives the path
    back as it is, and a task keeps its id when a task of the same name is added elsewhere."""
    parts = [PurePosixPath(loc).parts for loc in locations]
    shared = 0
    if parts:
        parents = [p[:-1] for p in parts]
        while all(len(p) > shared and p[shared] == parents[0][shared] for p in parents):
            shared += 1
    return {loc: "/".join(p[shared:]) for loc, p in zip(locations, parts, strict=True)}


# --- helpers ----------------------------------------------------------------------------------


def _fail(task: str, message: str, field_: str | None = None) -> BadRequest:
    return BadRequest(f"task {task!r}: {message}", case_id=task, field=field_)


def file_entries(files: Mapping[str, bytes], task: str) -> dict[str, dict[str, str]]:
    """The case `files` of a task: UTF-8 bodies as `{text}`, others as `{base64}`."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted(files):
        problem = None if _SIMPLE_PATH.match(path) else relative_path_problem(path)
        if problem:
            raise _fail(task, f"file {path!r} {problem}", "files")
        out[path] = inline_body(files[path])  # binary as base64, never as escaped text
    return out


def _file_modes(modes: Mapping[str, int]) -> dict[str, str]:
    return {p: f"{m & 0o777:04o}" for p, m in sorted(modes.items()) if m & 0o111}


def _literal_image(value: Any) -> str | None:
    if isinstance(value, str) and value.strip() and not _VAR.search(value):
        return value.strip()
    return None


def _template_image(template: str | None, case_id: str, name: str) -> str | None:
    if not template:
        return None
    return template.replace("{id}", case_id).replace("{name}", name)


def _timeout(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return max(1, math.ceil(value))


def _unique(values: list[Any]) -> list[str]:
    out: list[str] = []
    for v in values:
        if isinstance(v, str) and v.strip() and v.strip() not in out:
            out.append(v.strip())
    return out


def _jsonable(value: Any) -> Any:
    """YAML/TOML values as JSON values (dates and times as ISO text)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _text(files: Mapping[str, bytes], path: str, task: str) -> str:
    try:
        return files[path].decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(task, f"{path} is not UTF-8 text", path) from None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_MB = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_to_mb(value: Any, task: str, field_: str) -> int:
    """A size as megabytes (binary units): a number is MB already; a string is a number with
    an optional unit `K`/`M`/`G`/`T` (`Ki`, `KB`, `Mi`, ... read the same); no unit means MB."""
    if isinstance(value, bool):
        raise _fail(task, f"{field_} is not a size: {value!r}", field_)
    if isinstance(value, (int, float)):
        return max(1, math.ceil(value))
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            number, unit = float(m.group(1)), m.group(2).upper()
            return max(1, math.ceil(number * _MB[unit] if unit else number))
    raise _fail(task, f"{field_} is not a size: {value!r}", field_)


def _cpus_to_millicores(value: Any, task: str, field_: str) -> int:
    """CPUs (`1`, `1.5`, `"0.5"`, or Kubernetes-style `"500m"`) as millicores."""
    count: float | None = None
    if isinstance(value, str):
        text = value.strip()
        try:
            count = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
        except ValueError:
            count = None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        count = float(value)
    if count is None or not math.isfinite(count) or count <= 0:
        raise _fail(task, f"{field_} is not a CPU count: {value!r}", field_)
    return max(1, round(count * 1000))


# --- Terminal-Bench ---------------------------------------------------------------------------


def _tb_instruction(doc: dict[str, Any], task: str) -> tuple[str, dict[str, str]]:
    """The instruction text and the other described variants (LiveCodeBench-Pro style
    `descriptions: [{key, description}]` with `instruction: <key>`)."""
    instruction = doc.get("instruction")
    variants: dict[str, str] = {}
    descriptions = doc.get("descriptions")
    if isinstance(descriptions, list):
        for entry in descriptions:
            if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                variants[entry["key"]] = str(entry.get("description", ""))
    if isinstance(instruction, str) and instruction in variants:
        text = variants.pop(instruction)
        return text, variants
    if isinstance(instruction, str) and instruction.strip():
        return instruction, variants
    if "base" in variants:
        return variants.pop("base"), variants
    raise _fail(task, "task.yaml has no instruction", "instruction")


def _compose(files: Mapping[str, bytes], task: str) -> dict[str, Any]:
    for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if name in files:
            try:
                doc = _load_yaml(files[name].decode("utf-8"))
            except (yaml.YAMLError, UnicodeDecodeError) as exc:
                raise _fail(task, f"{name} is not valid YAML: {exc}", name) from None
            return doc if isinstance(doc, dict) else {}
    return {}


def _compose_service(compose: dict[str, Any]) -> dict[str, Any]:
    services = compose.get("services")
    if not isinstance(services, dict) or not services:
        return {}
    svc = services.get("client") or services.get("main") or next(iter(services.values()))
    return svc if isinstance(svc, dict) else {}


def _compose_resources(svc: dict[str, Any], task: str) -> dict[str, int]:
    limits = (((svc.get("deploy") or {}).get("resources") or {}).get("limits")) or {}
    out: dict[str, int] = {}
    if not isinstance(limits, dict):
        return out
    if limits.get("cpus") is not None:
        out["cpu_millicores"] = _cpus_to_millicores(limits["cpus"], task, "deploy.limits.cpus")
    if limits.get("memory") is not None:
        out["memory_mb"] = size_to_mb(limits["memory"], task, "deploy.limits.memory")
    return out


def _tb_runner(files: Mapping[str, bytes], task: str) -> dict[str, Any]:
    """The grader config of the tests the Terminal-Bench harness would run: the task's own
    `run-tests.sh` when it has one, else the harness's default runner, which runs pytest over
    `tests/test_outputs.py` (TB: run-tests.sh is optional when the tests need only pytest)."""
    tests = [p for p in files if p.startswith("tests/") and p != "tests/run-tests.sh"]
    if "run-tests.sh" in files or "tests/run-tests.sh" in files:
        if not tests:
            raise _fail(task, "is incomplete: no tests (no file under tests/)", "tests")
        return {"cmd": TB_TEST_COMMAND}
    if TB_DEFAULT_TEST_FILE not in files:
        raise _fail(
            task,
            "is incomplete: no tests (neither a run-tests.sh nor the tests/test_outputs.py "
            "that the harness's default runner runs)",
            "tests",
        )
    return {"cmd": TB_DEFAULT_TEST_COMMAND, "runner": "default"}


def no_image_error(task: str, why: str) -> BadRequest:
    """The error of a container task that names no prebuilt image: it says which option fixes
    it, with an example."""
    return _fail(
        task,
        f"names no prebuilt image ({why}); give an image template with {IMAGE_TEMPLATE_EXAMPLE} "
        "(API: image_template), where {id} is the case id and {name} the task directory",
        "image",
    )


TB_METADATA_SKIP = frozenset({"instruction", "descriptions", "tags"})


def terminal_bench_case(
    task: TaskSource, *, image_template: str | None = None, id_prefix: str = ""
) -> dict[str, Any]:
    """The raw case of one Terminal-Bench task directory."""
    case_id = f"{id_prefix}{task.case_key}"
    files = task.files
    if TB_MARKER not in files:
        raise _fail(case_id, "has no task.yaml", TB_MARKER)
    try:
        doc = _load_yaml(_text(files, TB_MARKER, case_id))
    except yaml.YAMLError as exc:
        raise _fail(case_id, f"task.yaml is not valid YAML: {exc}", TB_MARKER) from None
    if not isinstance(doc, dict):
        raise _fail(case_id, "task.yaml is not a mapping", TB_MARKER)
    grader_config: dict[str, Any] = _tb_runner(files, case_id)
    instruction, variants = _tb_instruction(doc, case_id)

    svc = _compose_service(_compose(files, case_id))
    image = _literal_image(svc.get("image")) or _template_image(image_template, case_id, task.name)
    if image is None:
        raise no_image_error(case_id, "the compose file has no literal image:")

    if isinstance(doc.get("parser_name"), str):
        grader_config["parser_name"] = doc["parser_name"]
    test_timeout = _timeout(doc.get("max_test_timeout_sec"))
    if test_timeout:
        grader_config["timeout_sec"] = test_timeout

    tags = _unique([doc.get("difficulty"), *(doc.get("tags") or []), doc.get("category")])
    metadata: dict[str, Any] = {"source": TERMINAL_BENCH, "task": task.location or task.name}
    for key, value in doc.items():
        if key not in TB_METADATA_SKIP:
            metadata[str(key)] = _jsonable(value)
    if variants:
        metadata["descriptions"] = variants
    modes = _file_modes(task.modes)
    if modes:
        metadata["file_modes"] = modes

    case: dict[str, Any] = {
        "id": case_id,
        "inputs": {"user": instruction},
        "image": image,
        "graders": [{"id": "tests-pass", "config": grader_config}],
        "tags": tags,
        "metadata": metadata,
        "files": file_entries(files, case_id),
    }
    agent_timeout = _timeout(doc.get("max_agent_timeout_sec"))
    if agent_timeout:
        case["timeout_sec"] = agent_timeout
    resources = _compose_resources(svc, case_id)
    if resources:
        case["resources"] = resources
    return case


# --- Harbor -----------------------------------------------------------------------------------


def _harbor_resources(env: dict[str, Any], task: str) -> dict[str, int]:
    out: dict[str, int] = {}
    if env.get("cpus") is not None:
        out["cpu_millicores"] = _cpus_to_millicores(env["cpus"], task, "environment.cpus")
    for key, old in (("memory_mb", "memory"), ("storage_mb", "storage")):
        if env.get(key) is not None:
            out[key] = size_to_mb(env[key], task, f"environment.{key}")
        elif env.get(old) is not None:
            out[key] = size_to_mb(env[old], task, f"environment.{old}")
    gpus = env.get("gpus")
    if gpus:
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            raise _fail(task, f"environment.gpus is not a count: {gpus!r}", "environment.gpus")
        out["gpus"] = gpus
    return out


HARBOR_ENV_KNOWN = frozenset(
    {
        "docker_image",
        "cpus",
        "memory_mb",
        "storage_mb",
        "memory",
        "storage",
        "gpus",
        "allow_internet",
    }
)


def harbor_case(
    task: TaskSource,
    *,
    image_template: str | None = None,
    id_prefix: str = "",
    catalog: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The raw case of one Harbor task directory.

    A multi-step task (`[[steps]]`) is carried whole: `inputs.user` is the list of the steps'
    instructions in order, the grader's config lists the steps (name, min_reward, timeouts,
    verifier env), and every step file stays a case file under `steps/<name>/`.
    """
    case_id = f"{id_prefix}{task.case_key}"
    files = task.files
    doc = _harbor_toml(files, case_id)
    env = doc.get("environment") or {}
    agent = doc.get("agent") or {}
    steps = doc.get("steps") or []
    user, step_tests = _harbor_instructions(files, steps, case_id)

    image = _literal_image(env.get("docker_image")) or _template_image(
        image_template, case_id, task.name
    )
    if image is None:
        raise no_image_error(case_id, "[environment].docker_image is not set")

    grader_config = _harbor_grader(doc.get("verifier") or {}, steps, step_tests)
    case: dict[str, Any] = {
        "id": case_id,
        "inputs": {"user": user},
        "image": image,
        "graders": [{"id": "reward-file", "config": grader_config}],
    }
    a_timeout = _harbor_agent_timeout(agent, steps)
    if a_timeout:
        case["timeout_sec"] = a_timeout
    resources = _harbor_resources(env, case_id)
    if resources:
        case["resources"] = resources
    if env.get("allow_internet") is False:
        case["network"] = {"mode": "none"}

    task_table = doc.get("task") or {}
    meta_table = doc.get("metadata") or {}
    tags = _unique(
        [
            *(task_table.get("keywords") or []),
            *(meta_table.get("tags") or []),
            meta_table.get("difficulty"),
            meta_table.get("category"),
        ]
    )
    if tags:
        case["tags"] = tags
    case["metadata"] = _harbor_metadata(task, doc, catalog)
    case["files"] = file_entries(files, case_id)
    return case


def _harbor_toml(files: Mapping[str, bytes], case_id: str) -> dict[str, Any]:
    """The task's `task.toml`, parsed."""
    if HARBOR_MARKER not in files:
        raise _fail(case_id, "has no task.toml", HARBOR_MARKER)
    try:
        return tomllib.loads(_text(files, HARBOR_MARKER, case_id))
    except tomllib.TOMLDecodeError as exc:
        raise _fail(case_id, f"task.toml is not valid TOML: {exc}", HARBOR_MARKER) from None


def _harbor_instructions(
    files: Mapping[str, bytes], steps: list[Any], case_id: str
) -> tuple[str | list[str], list[str]]:
    """The task's instruction (a multi-step task: each step's, in order) and each step's test
    script; a task without them is refused, naming the file it lacks."""
    step_tests: list[str] = []
    if steps:
        instructions = []
        for n, step in enumerate(steps):
            name = step.get("name") if isinstance(step, dict) else None
            if not isinstance(name, str) or relative_path_problem(name):
                raise _fail(case_id, f"step {n} has no usable name", f"steps.{n}.name")
            path = f"steps/{name}/instruction.md"
            if path not in files:
                raise _fail(case_id, f"step {name!r} has no {path}", path)
            step_tests.append(_harbor_step_test(files, name, case_id))
            instructions.append(_text(files, path, case_id))
        return instructions, step_tests
    if "instruction.md" not in files:
        raise _fail(case_id, "has no instruction.md", "instruction.md")
    if HARBOR_TEST_SCRIPT not in files:
        raise _fail(
            case_id,
            f"is incomplete: no {HARBOR_TEST_SCRIPT} (the script Harbor's verifier runs)",
            HARBOR_TEST_SCRIPT,
        )
    return _text(files, "instruction.md", case_id), step_tests


def _harbor_grader(
    verifier: dict[str, Any], steps: list[Any], step_tests: list[str]
) -> dict[str, Any]:
    """The `reward-file` grader's config: the verifier's command, timeout and env, and the
    steps with the test script each runs."""
    grader_config: dict[str, Any] = {"cmd": HARBOR_TEST_COMMAND}
    v_timeout = _timeout(verifier.get("timeout_sec"))
    if v_timeout:
        grader_config["timeout_sec"] = v_timeout
    if verifier.get("env"):
        grader_config["env"] = _jsonable(verifier["env"])
    if steps:
        grader_config["steps"] = [
            {**_jsonable(s), "test_path": test} for s, test in zip(steps, step_tests, strict=True)
        ]
    return grader_config


def _harbor_agent_timeout(agent: dict[str, Any], steps: list[Any]) -> int | None:
    """The agent's timeout: the task's, or, when every step has one, their sum."""
    a_timeout = _timeout(agent.get("timeout_sec"))
    if steps:
        step_timeouts = [_timeout((s.get("agent") or {}).get("timeout_sec")) for s in steps]
        if all(step_timeouts):
            a_timeout = sum(t for t in step_timeouts if t)
    return a_timeout


def _harbor_metadata(
    task: TaskSource, doc: dict[str, Any], catalog: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The case's metadata: where the task came from, and every table of `task.toml` the case's
    own fields do not carry, kept as it is."""
    env = doc.get("environment") or {}
    agent = doc.get("agent") or {}
    task_table = doc.get("task") or {}
    meta_table = doc.get("metadata") or {}
    metadata: dict[str, Any] = {"source": HARBOR, "task": task.location or task.name}
    for key in ("version", "schema_version"):
        if key in doc:
            metadata[key] = _jsonable(doc[key])
    if task_table:
        metadata["harbor_task"] = _jsonable(
            {k: v for k, v in task_table.items() if k != "keywords"}
        )
    if task_table.get("authors"):
        metadata["authors"] = _jsonable(task_table["authors"])
    if meta_table:
        metadata["harbor_metadata"] = _jsonable(meta_table)
    env_rest = {k: v for k, v in env.items() if k not in HARBOR_ENV_KNOWN}
    if env_rest:
        metadata["environment"] = _jsonable(env_rest)
    if agent:
        metadata["agent"] = _jsonable(agent)
    extra = {
        k: v
        for k, v in doc.items()
        if k
        not in {
            "version",
            "schema_version",
            "environment",
            "agent",
            "verifier",
            "task",
            "metadata",
            "steps",
        }
    }
    if extra:
        metadata["harbor_extra"] = _jsonable(extra)
    if catalog:
        entry = catalog.get(task.name)
        if entry:
            metadata["catalog"] = _jsonable(entry)
    modes = _file_modes(task.modes)
    if modes:
        metadata["file_modes"] = modes
    return metadata


def _harbor_step_test(files: Mapping[str, bytes], step: str, task: str) -> str:
    """The test script a step's verifier runs: Harbor merges the task's top-level `tests/`
    with the step's `steps/<name>/tests/` (the step's files win), then runs `test.sh` there."""
    for path in (f"steps/{step}/tests/test.sh", HARBOR_TEST_SCRIPT):
        if path in files:
            return path
    raise _fail(
        task,
        f"step {step!r} is incomplete: neither steps/{step}/tests/test.sh nor a shared "
        f"{HARBOR_TEST_SCRIPT}",
        f"steps/{step}/tests/test.sh",
    )


# --- Harbor dataset manifests -----------------------------------------------------------------


def harbor_catalog(
    registry_json: Any | None, dataset_toml: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(per-task catalog entries by task name, dataset-level facts) from Harbor's manifests:
    `registry.json` (`recipes[]`/`tasks[]` with `name`, `description`, `path`, `version`) and
    `dataset.toml` (`[dataset]` name/version, `[[tasks]]` name/digest/version)."""
    per_task: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    if isinstance(registry_json, dict):
        if isinstance(registry_json.get("git_url"), str):
            facts["git_url"] = registry_json["git_url"]
        for key in ("recipes", "tasks", "datasets"):
            for entry in registry_json.get(key) or []:
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    name = entry["name"]
                    path = entry.get("path")
                    short = PurePosixPath(path).name if isinstance(path, str) and path else name
                    per_task[short] = {k: v for k, v in entry.items() if k != "name"} | {
                        "name": name
                    }
    elif isinstance(registry_json, list):
        for entry in registry_json:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                facts.setdefault("datasets", []).append(
                    {k: entry[k] for k in ("name", "version", "description") if k in entry}
                )
    if dataset_toml:
        try:
            doc = tomllib.loads(dataset_toml)
        except tomllib.TOMLDecodeError as exc:
            raise BadRequest(
                f"dataset.toml is not valid TOML: {exc}", field="dataset.toml"
            ) from None
        ds = doc.get("dataset") or {}
        for key in ("name", "version", "description"):
            if key in ds:
                facts[key] = _jsonable(ds[key])
        for entry in doc.get("tasks") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                name = PurePosixPath(entry["name"]).name
                per_task.setdefault(name, {}).update({k: _jsonable(v) for k, v in entry.items()})
    return per_task, facts
