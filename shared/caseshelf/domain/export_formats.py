"""The export formats other than `case-dirs` (docs/export.md "Formats"). Pure, like
`caseshelf.domain.export`: plain canonical cases in, planned files out.

- `jsonl` / `parquet`: `cases.jsonl` / `cases.parquet`, one row per case with the flat, typed
  columns of `ROW_COLUMNS` (free-form values as JSON text, so every row has the same type);
  companion files under `files/<case dir>/<path>` (the row's `files` column names them) and
  shared files once under `shared/<dest>`.
- `inspect`: `samples.jsonl`, one inspect_ai `Sample` per line with its default field names
  (`id`, `input`, `target`, `choices`, `metadata`, `files`, `sandbox`, `setup`); a sample's
  `files` map the path in the sandbox to the file in the export (relative to `samples.jsonl`),
  and a case with an image gets `files/<case dir>/compose.yaml` as its docker sandbox.
- `harbor`: one Harbor task package per case directory: `task.toml` (`[task]`, `[metadata]`,
  `[verifier]`, `[agent]`, `[environment]`), `instruction.md`, `environment/`, `tests/`,
  `solution/` (see `plan_harbor_case`); and Harbor's registry manifest `dataset.toml` at the
  root, every task pinned by Harbor's own digest of it (`caseshelf.domain.harbor_registry`).

A case a format cannot carry (no instruction text for `harbor` or `inspect`) is a `BadRequest`
naming the case and the field.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from caseshelf.domain import export_parquet
from caseshelf.domain.canonical import digest_of
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.export import (
    DEFAULT_TIMEOUT_SEC,
    ENV_KEYS,
    ROLE_DATA,
    ROLE_SHARED,
    CasePlan,
    ExportWarning,
    PlannedFile,
    SharedEntry,
    _Tree,
    environment_files,
    environment_of,
    file_mode,
    render_yaml,
)
from caseshelf.domain.harbor_registry import (
    MANIFEST_NAME as HARBOR_MANIFEST,
)
from caseshelf.domain.harbor_registry import (
    harbor_org,
    manifest_head,
    manifest_tail,
    manifest_task,
    rule_files,
    task_digest,
    task_name,
)
from caseshelf.domain.paths import (
    case_dir_name,
    export_destination_problem,
    export_path_problem,
)

ROW_FILES = {"jsonl": "cases.jsonl", "parquet": "cases.parquet", "inspect": "samples.jsonl"}
ROW_COLUMNS = (
    "id",
    "input",
    "inputs",
    "target",
    "expectations",
    "graders",
    "tags",
    "metadata",
    "environment",
    "image",
    "timeout_sec",
    "files",
)


def _json_text(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")


def _text_input(case: Mapping[str, Any]) -> str | None:
    user = (case.get("inputs") or {}).get("user")
    return user if isinstance(user, str) else None


def _companions(
    case: Mapping[str, Any], warnings: list[ExportWarning]
) -> list[tuple[str, PlannedFile]]:
    """(path in the case, planned file under `files/<case dir>/`) of each companion file."""
    own = case.get("files")
    if not own:
        return []
    case_id = case["id"]
    base = f"files/{case_dir_name(case_id)}"
    out = []
    for path, entry in sorted(own.items()):
        problem = export_path_problem(path)
        if problem:
            warnings.append(ExportWarning(f"files.{path}", f"skipped: {problem}", case_id))
            continue
        out.append(
            (
                path,
                PlannedFile(
                    f"{base}/{path}",
                    entry["digest"],
                    int(entry["size"]),
                    mode=file_mode(case, path),
                    role=ROLE_DATA,
                ),
            )
        )
    return out


def row_of(case: Mapping[str, Any], files: Sequence[tuple[str, PlannedFile]]) -> dict[str, Any]:
    """The `jsonl` / `parquet` row of a case: every field, flat and of one type per column."""
    truth = (case.get("expectations") or {}).get("ground_truth")
    env = environment_of(case)
    return {
        "id": case["id"],
        "input": _text_input(case),
        "inputs": _json_text(case.get("inputs") or {}),
        "target": truth if isinstance(truth, str) else None,
        "expectations": _json_text(case.get("expectations") or {}),
        "graders": _json_text(case.get("graders") or []),
        "tags": list(case.get("tags") or []),
        "metadata": _json_text(case.get("metadata") or {}),
        "environment": _json_text(env) if env is not None else None,
        "image": case.get("image"),
        "timeout_sec": int(case.get("timeout_sec") or DEFAULT_TIMEOUT_SEC),
        "files": [
            {"path": path, "digest": f.digest, "size": f.size, "export_path": f.path}
            for path, f in files
        ],
    }


_SORTED = orjson.OPT_SORT_KEYS
_EMPTY_MAP = "{}"
_EMPTY_LIST = "[]"


def _json_str(value: Any) -> str:
    """JSON text with sorted keys, as a `str`: the `bytes` orjson returns keep its whole
    working buffer (about 4 KB each, however short the text), which a window of rows would
    hold thousands of."""
    return orjson.dumps(value, option=_SORTED).decode("utf-8")


def add_parquet_rows(
    columns: Mapping[str, list[Any]],
    cases: Sequence[Mapping[str, Any]],
    files: Mapping[int, Sequence[tuple[str, PlannedFile]]],
) -> None:
    """Append the rows of `cases` to `columns`, column by column (`files`: the companion files
    of the cases that have any, by position): the values of `row_of`, built without a row dict
    per case and with the environment looked for with one set operation. What it buys:
    about half the time of building a parquet export's rows (`bench/bench_export.py`,
    `export-parquet`); `tests/unit/test_export_layout.py` checks it gives `row_of`'s values."""
    ids, inputs_text, inputs_json = columns["id"], columns["input"], columns["inputs"]
    targets, expectations, graders = columns["target"], columns["expectations"], columns["graders"]
    tags, metadata, environment = columns["tags"], columns["metadata"], columns["environment"]
    images, timeouts, file_lists = columns["image"], columns["timeout_sec"], columns["files"]
    dumps = _json_str
    env_keys = frozenset(ENV_KEYS)
    for i, case in enumerate(cases):
        get = case.get
        ids.append(case["id"])
        inputs = get("inputs")
        if inputs:
            user = inputs.get("user")
            inputs_text.append(user if type(user) is str else None)
            inputs_json.append(dumps(inputs))
        else:
            inputs_text.append(None)
            inputs_json.append(_EMPTY_MAP)
        exp = get("expectations")
        if exp:
            truth = exp.get("ground_truth")
            targets.append(truth if type(truth) is str else None)
            expectations.append(dumps(exp))
        else:
            targets.append(None)
            expectations.append(_EMPTY_MAP)
        value = get("graders")
        graders.append(dumps(value) if value else _EMPTY_LIST)
        tags.append(get("tags") or [])
        value = get("metadata")
        metadata.append(dumps(value) if value else _EMPTY_MAP)
        if env_keys.isdisjoint(case):
            environment.append(None)
            images.append(None)
            timeouts.append(DEFAULT_TIMEOUT_SEC)
        else:
            env = environment_of(case)
            environment.append(dumps(env) if env is not None else None)
            images.append(get("image"))
            timeouts.append(int(get("timeout_sec") or DEFAULT_TIMEOUT_SEC))
        own = files.get(i)
        file_lists.append(
            [
                {"path": path, "digest": f.digest, "size": f.size, "export_path": f.path}
                for path, f in own
            ]
            if own
            else []
        )


def case_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical case a `jsonl` / `parquet` row holds (files as `{digest, size}`): what a
    reader of the row gets back, to the byte of its content digest."""
    case: dict[str, Any] = {"id": row["id"]}
    for key in ("inputs", "expectations", "metadata"):
        value = orjson.loads(row[key])
        if value:
            case[key] = value
    graders = orjson.loads(row["graders"])
    if graders:
        case["graders"] = graders
    if row["tags"]:
        case["tags"] = list(row["tags"])
    if row["environment"] is not None:
        env = orjson.loads(row["environment"])
        for key in ENV_KEYS:
            if key in env and not (key == "timeout_sec" and env[key] == DEFAULT_TIMEOUT_SEC):
                case[key] = env[key]
    if row["files"]:
        case["files"] = {
            f["path"]: {"digest": f["digest"], "size": f["size"]} for f in row["files"]
        }
    return case


PARQUET_SCHEMA_FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "string"),
    ("input", "string"),
    ("inputs", "string"),
    ("target", "string"),
    ("expectations", "string"),
    ("graders", "string"),
    ("tags", "list<string>"),
    ("metadata", "string"),
    ("environment", "string"),
    ("image", "string"),
    ("timeout_sec", "int64"),
    ("files", "list<struct<path, digest, size, export_path>>"),
)


def parquet_schema() -> Any:
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import

    files = pa.list_(
        pa.struct(
            [
                ("path", pa.string()),
                ("digest", pa.string()),
                ("size", pa.int64()),
                ("export_path", pa.string()),
            ]
        )
    )
    types = {"string": pa.string(), "int64": pa.int64(), "list<string>": pa.list_(pa.string())}
    return pa.schema(
        [(name, files if name == "files" else types[kind]) for name, kind in PARQUET_SCHEMA_FIELDS]
    )


def parquet_table(columns: Mapping[str, list[Any]]) -> Any:
    """Rows given column by column (`ROW_COLUMNS` -> values) as an Arrow table of
    `parquet_schema()`. Each column is converted with its type given (`Table.from_pydict` with a
    schema infers first, then casts: several times slower)."""
    import pyarrow as pa  # lazy: pyarrow takes ~0.35 s to import

    schema = parquet_schema()
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _parquet_bytes(table: Any) -> bytes:
    """The rows as one parquet file (zstd)."""
    import pyarrow.parquet as pq  # lazy: pyarrow takes ~0.35 s to import

    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _compose(image: str) -> bytes:
    doc = {"services": {"default": {"image": image, "command": "tail -f /dev/null", "init": True}}}
    return render_yaml(doc)


def sample_of(
    case: Mapping[str, Any],
    files: Sequence[tuple[str, PlannedFile]],
    compose: str | None,
    root: str,
) -> dict[str, Any]:
    """The inspect_ai sample of a case (its default field names). `root` is the directory of
    `samples.jsonl` in the export, which the file paths are relative to."""
    case_id = case["id"]
    user = (case.get("inputs") or {}).get("user")
    if isinstance(user, str):
        sample_input: Any = user
    elif isinstance(user, list) and user and all(isinstance(u, str) for u in user):
        sample_input = [{"role": "user", "content": u} for u in user]
    else:
        raise BadRequest(
            f"case {case_id!r}: the inspect format needs the prompt text in inputs.user; "
            + ("it is a file reference" if isinstance(user, dict) else "the case has none"),
            case_id=case_id,
            field="inputs.user",
        )
    expectations = case.get("expectations") or {}
    truth = expectations.get("ground_truth")
    if isinstance(truth, str):
        target: Any = truth
    elif isinstance(truth, list) and all(isinstance(t, str) for t in truth):
        target = truth
    elif truth is None:
        target = ""
    else:
        target = _json_text(truth)
    sample: dict[str, Any] = {"id": case_id, "input": sample_input, "target": target}
    choices = (expectations.get("details") or {}).get("choices")
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        sample["choices"] = choices
    extra = {
        k: case[k] for k in ("expectations", "graders", "tags") if case.get(k) not in (None, {}, [])
    }
    env = environment_of(case)
    if env is not None:
        extra["environment"] = env
    metadata = dict(case.get("metadata") or {})
    metadata["caseshelf"] = extra
    sample["metadata"] = metadata
    if files:
        sample["files"] = {path: posixpath.relpath(f.path, root or ".") for path, f in files}
    if compose is not None:
        sample["sandbox"] = ["docker", posixpath.relpath(compose, root or ".")]
    setup = ((case.get("env") or {}).get("setup")) or []
    if setup:
        sample["setup"] = "\n".join(setup) + "\n"
    return sample


class CaseWindow(Sequence[Mapping[str, Any]]):
    """Consecutive cases of an export read from the store: their canonical records as stored
    (each already checked against its digest), parsed into cases only when a case is first
    asked for. The records are held as blocks of lines (one record, or records one newline
    apart as a pack holds them: canonical JSON has no line break of its own), so that a window
    read from packs in bulk is not cut into records it does not need cut. A parquet window
    whose rows Arrow builds from the records (`export_parquet.arrow_rows`) is never parsed in
    Python."""

    def __init__(self, records: Iterable[bytes] = ()) -> None:
        # True when the version holds no file bodies at all, so that no case of the window
        # can have companion files (set by the reader, which knows)
        self.without_files = False
        self._blocks: list[bytes] = []
        self._count = 0
        self._records: list[bytes] | None = None
        self._cases: list[dict[str, Any]] | None = None
        self.add(records)

    def add(self, records: Iterable[bytes]) -> None:
        """Append records, one each."""
        before = len(self._blocks)
        self._blocks.extend(records)
        self._count += len(self._blocks) - before
        self._records = self._cases = None

    def add_lines(self, lines: bytes, count: int) -> None:
        """Append `count` records given as one block, one newline between them."""
        self._blocks.append(lines)
        self._count += count
        self._records = self._cases = None

    @property
    def records(self) -> list[bytes]:
        """The records, one each."""
        if self._records is None:
            if len(self._blocks) == self._count:
                self._records = self._blocks
            else:
                self._records = [r for block in self._blocks for r in block.split(b"\n")]
        return self._records

    def joined(self) -> bytes:
        """The records one per line."""
        return self._blocks[0] if len(self._blocks) == 1 else b"\n".join(self._blocks)

    def cases(self) -> list[dict[str, Any]]:
        if self._cases is None:
            self._cases = list(map(orjson.loads, self.records))
        return self._cases

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: Any) -> Any:
        return self.cases()[i]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.cases())


@dataclass
class RowWindow:
    """Some consecutive cases of a one-row-per-case format: the files they add beside the row
    file (companions under `files/`, an inspect sample's compose file), and their rows, as lines
    of `cases.jsonl` / `samples.jsonl` or as a parquet table."""

    data: list[PlannedFile] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)  # jsonl / inspect lines, one buffer
    # parquet: a `pyarrow.Table` of `parquet_schema()`, or a function building it (which the
    # streamed export runs on a thread of its own)
    table: Any = None
    count: int = 0


def plan_row_window(
    fmt: str, cases: Iterable[Mapping[str, Any]], warnings: list[ExportWarning]
) -> RowWindow:
    """The rows of `cases` in format `fmt` (`jsonl`, `parquet` or `inspect`). A case the format
    cannot carry is a `BadRequest` naming it (see `sample_of`). Parquet rows of a `CaseWindow`
    are built by Arrow from its records where they can be (`export_parquet.arrow_rows`)."""
    if fmt == "parquet" and isinstance(cases, CaseWindow) and len(cases):
        raw = cases.joined()
        if cases.without_files or b'"files":' not in raw:  # no case has companion files
            return RowWindow(table=partial(_window_table, cases, raw), count=len(cases))
    window = RowWindow()
    columns: dict[str, list[Any]] = {c: [] for c in ROW_COLUMNS}
    parquet_cases: list[Mapping[str, Any]] = []
    parquet_files: dict[int, list[tuple[str, PlannedFile]]] = {}
    for case in cases:
        case_id = case["id"]
        files = _companions(case, warnings)
        if files:
            window.data.extend(f for _, f in files)
        if fmt == "inspect":
            own = {path for path, _ in files}
            base = f"files/{case_dir_name(case_id)}"
            for path, body in sorted(environment_files(case).items()):
                if path in own or export_path_problem(path):
                    continue  # a file of the case wins, as in a case directory
                f = PlannedFile(f"{base}/{path}", digest_of(body), len(body), body, role=ROLE_DATA)
                files.append((path, f))
                window.data.append(f)
            compose = None
            if case.get("image"):
                body = _compose(case["image"])
                compose = f"files/{case_dir_name(case_id)}.compose.yaml"
                window.data.append(
                    PlannedFile(compose, digest_of(body), len(body), body, role=ROLE_DATA)
                )
            window.text += orjson.dumps(sample_of(case, files, compose, ""))
            window.text += b"\n"
        elif fmt == "jsonl":
            window.text += orjson.dumps(row_of(case, files))
            window.text += b"\n"
        else:
            if files:
                parquet_files[len(parquet_cases)] = files
            parquet_cases.append(case)
        window.count += 1
    if fmt == "parquet":
        add_parquet_rows(columns, parquet_cases, parquet_files)
        window.table = parquet_table(columns)
    return window


def _window_table(cases: CaseWindow, raw: bytes) -> Any:
    """The parquet rows of a window without companion files: built by Arrow from the records
    where it can (`export_parquet.arrow_rows`), else case by case."""
    table = export_parquet.arrow_rows(raw, len(cases), parquet_schema())
    if table is None:
        columns: dict[str, list[Any]] = {c: [] for c in ROW_COLUMNS}
        add_parquet_rows(columns, cases.cases(), {})
        table = parquet_table(columns)
    return table


def row_file(fmt: str, body: bytes) -> PlannedFile:
    """The planned row file (`cases.jsonl`, `cases.parquet`, `samples.jsonl`) of `body`."""
    return PlannedFile(ROW_FILES[fmt], digest_of(body), len(body), body, role=ROLE_DATA)


def shared_row_files(shared_files: Sequence[SharedEntry]) -> list[PlannedFile]:
    """Shared files of a row format: once, under `shared/<dest>`."""
    return [
        PlannedFile(f"shared/{s.dest}", s.digest, s.size, role=ROLE_SHARED)
        for s in shared_files
        if export_destination_problem(s.dest) is None
    ]


def plan_rows(
    fmt: str,
    cases: Iterable[Mapping[str, Any]],
    shared_files: Sequence[SharedEntry],
    warnings: list[ExportWarning],
) -> tuple[list[PlannedFile], int]:
    """(files, case count) of a one-row-per-case format, all at once: the row file first, then
    the shared files, then the files of the cases (the order of the streamed export too)."""
    seen: set[str] = set()

    def once(cases: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        for case in cases:
            if case["id"] in seen:
                raise BadRequest(f"case {case['id']!r} appears twice", case_id=case["id"])
            seen.add(case["id"])
            yield case

    window = plan_row_window(fmt, once(cases), warnings)
    table = window.table() if callable(window.table) else window.table
    body = _parquet_bytes(table) if fmt == "parquet" else bytes(window.text)
    return [row_file(fmt, body), *shared_row_files(shared_files), *window.data], window.count


# --- harbor -----------------------------------------------------------------------------------

HARBOR_TEST = "tests/test.sh"
DEFAULT_IMAGE = "python:3.12-slim"
_TB_MOVES = {"solution.sh": "solution/solve.sh", "run-tests.sh": "tests/test.sh"}
# Terminal-Bench's own files that stay at the package root: its task description, and its
# compose file, which names the harness's T_BENCH_* variables (Harbor builds environment/).
_TB_ROOT = frozenset({"task.yaml", "docker-compose.yaml", "docker-compose.yml"})


def _harbor_target(path: str, kind: str) -> str:
    """Where a file of the case goes in its Harbor package (`kind`: harbor, terminal-bench or
    other)."""
    if kind == "harbor" or path.startswith("tests/"):
        return path
    if kind == "terminal-bench":
        if path in _TB_MOVES:
            return _TB_MOVES[path]
        return path if path in _TB_ROOT else f"environment/{path}"  # the build context
    return f"environment/app/{path}"  # the agent's workspace, copied into /app


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return orjson.dumps(value).decode("utf-8")  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _task_toml(case: Mapping[str, Any], verifier_env: Mapping[str, str], name: str) -> bytes:
    timeout = float(case.get("timeout_sec") or DEFAULT_TIMEOUT_SEC)
    resources = case.get("resources") or {}
    metadata: dict[str, Any] = {"caseshelf_id": case["id"]}
    if case.get("tags"):
        metadata["tags"] = list(case["tags"])
    environment: dict[str, Any] = {}
    if case.get("image"):
        environment["docker_image"] = case["image"]
    if resources.get("cpu_millicores"):
        environment["cpus"] = max(1, round(resources["cpu_millicores"] / 1000))
    if resources.get("memory_mb"):
        environment["memory_mb"] = int(resources["memory_mb"])
    if resources.get("storage_mb"):
        environment["storage_mb"] = int(resources["storage_mb"])
    if resources.get("gpus"):
        environment["gpus"] = int(resources["gpus"])
    network = case.get("network") or {}
    if network.get("mode") == "none":
        environment["network_mode"] = "no-network"
    elif network.get("mode") == "allowlist":
        environment["network_mode"] = "allowlist"
        environment["allowed_hosts"] = list(network.get("allowed_hosts") or [])
    lines = ['version = "1.0"', "", "[task]", f"name = {_toml_value(name)}", "", "[metadata]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in metadata.items()]
    lines += ["", "[verifier]", f"timeout_sec = {timeout!r}"]
    if verifier_env:
        pairs = ", ".join(f"{k} = {_toml_value(v)}" for k, v in verifier_env.items())
        lines.append(f"env = {{ {pairs} }}")
    lines += ["", "[agent]", f"timeout_sec = {timeout!r}"]
    lines += ["", "[environment]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in environment.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _row_test(case: Mapping[str, Any]) -> bytes:
    """The verifier of a row case: the agent writes its answer to /app/answer.txt; the test
    compares it (trimmed) with the reference in /tests/reference.txt and writes the reward."""
    del case
    script = """#!/bin/bash
# Reward 1 when /app/answer.txt equals the reference answer (surrounding whitespace ignored).
mkdir -p /logs/verifier
expected="$(cat /tests/reference.txt)"
actual="$(cat /app/answer.txt 2>/dev/null)"
trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
if [ "$(trim "$actual")" = "$(trim "$expected")" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
    return script.encode("utf-8")


def _row_solution(truth: str) -> bytes:
    return (
        "#!/bin/bash\nmkdir -p /app\ncat > /app/answer.txt <<'CASESHELF_ANSWER'\n"
        + truth.rstrip("\n")
        + "\nCASESHELF_ANSWER\n"
    ).encode("utf-8")


def _dockerfile(case: Mapping[str, Any], with_app: bool) -> bytes:
    image = case.get("image") or DEFAULT_IMAGE
    lines = [f"FROM {image}", "WORKDIR /app"]
    if with_app:
        lines.append("COPY app/ /app/")
    for command in (case.get("env") or {}).get("setup") or []:
        lines.append("RUN " + command)
    return ("\n".join(lines) + "\n").encode("utf-8")


def _grader_test(cmd: str) -> bytes:
    """The verifier of a case whose grader is a command (HumanEval's pytest run): the tests are
    copied next to the agent's work in /app, the command runs there, its exit code is the
    reward."""
    script = f"""#!/bin/bash
# Reward 1 when the case's grader command passes in /app (the tests copied in first).
mkdir -p /logs/verifier /app/tests
cp -r /tests/. /app/tests/
cd /app
if {cmd}; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
    return script.encode("utf-8")


def _grader_command(case: Mapping[str, Any]) -> str | None:
    for grader in case.get("graders") or []:
        cmd = (grader.get("config") or {}).get("cmd")
        if isinstance(cmd, str) and cmd.strip():
            return cmd
    return None


def plan_harbor_case(
    case: Mapping[str, Any],
    shared_files: Sequence[SharedEntry],
    warnings: list[ExportWarning],
    org: str = "caseshelf",
) -> CasePlan:
    """One Harbor task package. A Harbor import keeps its files as they are (its `task.toml`
    and `instruction.md` included); a Terminal-Bench import has its `Dockerfile`, compose file,
    `solution.sh` and `run-tests.sh` moved to `environment/`, `solution/solve.sh` and
    `tests/test.sh`; any other case gets a generated `task.toml` (its `[task] name` is the
    task's Harbor name under `org`: `caseshelf.domain.harbor_registry.task_name`),
    `instruction.md` from its text prompt, an `environment/Dockerfile` (its image, else
    `DEFAULT_IMAGE`, with the files of `env.source.files` copied to /app, their `tests/` going
    to `tests/`) and a verifier: its grader's command when it has one (HumanEval's pytest run),
    else a comparison of `/app/answer.txt` with its text ground truth (and a solution writing
    it). Shared files go under `environment/` at their dest (what the image is built from)."""
    case_id = case["id"]
    dirname = case_dir_name(case_id)
    own: Mapping[str, Mapping[str, Any]] = case.get("files") or {}
    harbor_import = "task.toml" in own
    kind = "harbor" if harbor_import else "terminal-bench" if "task.yaml" in own else "other"
    tree = _Tree()
    planned: list[PlannedFile] = []

    def add(path: str, body: bytes, mode: int = 0o644, role: str = "harbor") -> None:
        tree.add(path)
        planned.append(
            PlannedFile(f"{dirname}/{path}", digest_of(body), len(body), body, mode, role)
        )

    for path in sorted(own):
        entry = own[path]
        target = _harbor_target(path, kind)
        problem = export_path_problem(target) or tree.clash(target)
        if problem:
            warnings.append(ExportWarning(f"files.{path}", f"skipped: {problem}", case_id))
            continue
        tree.add(target)
        mode = file_mode(case, path)
        if target in (HARBOR_TEST, "solution/solve.sh"):
            mode = 0o755
        planned.append(
            PlannedFile(f"{dirname}/{target}", entry["digest"], int(entry["size"]), mode=mode)
        )
    if not harbor_import:
        app_files = any(f.path.startswith(f"{dirname}/environment/app/") for f in planned)
        for path, body in sorted(environment_files(case).items()):
            target = path if path.startswith("tests/") else f"environment/app/{path}"
            if export_path_problem(target) or tree.clash(target):
                warnings.append(
                    ExportWarning(f"env.source.files.{path}", "not written: clash", case_id)
                )
                continue
            add(target, body)
            app_files = app_files or not path.startswith("tests/")
        verifier_env = {"TEST_DIR": "/tests"} if kind == "terminal-bench" else {}
        add("task.toml", _task_toml(case, verifier_env, task_name(case, org)))
        if "instruction.md" not in tree.files:
            add("instruction.md", _instruction(case))
        if not any(p.startswith("environment/") and p.count("/") == 1 for p in tree.files):
            add("environment/Dockerfile", _dockerfile(case, app_files))
        if HARBOR_TEST not in tree.files:
            _add_verifier(case, tree, add)
    for sf in shared_files:
        dest = f"environment/{sf.dest}"
        problem = export_destination_problem(sf.dest) or tree.clash(dest)
        if problem:
            warnings.append(
                ExportWarning(f"shared file {sf.dest!r}", f"skipped: {problem}", case_id)
            )
            continue
        tree.add(dest)
        planned.append(PlannedFile(f"{dirname}/{dest}", sf.digest, sf.size, role=ROLE_SHARED))
    planned.sort(key=lambda f: f.path)
    return CasePlan(case_id, dirname, tuple(planned))


def _instruction(case: Mapping[str, Any]) -> bytes:
    """A generated Harbor task's `instruction.md`: the case's text prompt."""
    text = _text_input(case)
    if text is None:
        raise BadRequest(
            f"case {case['id']!r}: a Harbor task needs its instruction text in inputs.user "
            "(the case has none, or a file reference)",
            case_id=case["id"],
            field="inputs.user",
        )
    return text.encode("utf-8")


def _add_verifier(
    case: Mapping[str, Any], tree: _Tree, add: Callable[[str, bytes, int], None]
) -> None:
    """A generated Harbor task's verifier: its grader's command when it has one, else a
    comparison with its text ground truth (and a solution writing it)."""
    cmd = _grader_command(case)
    if cmd is not None:
        add(HARBOR_TEST, _grader_test(cmd), 0o755)
        return
    truth = (case.get("expectations") or {}).get("ground_truth")
    if not isinstance(truth, str):
        raise BadRequest(
            f"case {case['id']!r}: a Harbor task needs a verifier (tests/test.sh); the case "
            "has none and no text ground truth to check an answer against",
            case_id=case["id"],
            field="expectations.ground_truth",
        )
    add(HARBOR_TEST, _row_test(case), 0o755)
    add("tests/reference.txt", truth.encode("utf-8"), 0o644)
    if "solution/solve.sh" not in tree.files:
        add("solution/solve.sh", _row_solution(truth), 0o755)


def harbor_task(
    case: Mapping[str, Any], plan: CasePlan, org: str, bodies: Mapping[str, bytes]
) -> bytes:
    """The `[[tasks]]` entry of a case's Harbor package in `dataset.toml`: its name and Harbor's
    digest of its files. `bodies` (by hex digest) holds the stored bodies of the package's
    `.gitignore` and `.harborignore` files, when it has any."""
    cut = len(plan.dir) + 1
    files = {f.path[cut:]: f for f in plan.files}
    rules = {}
    for rel in rule_files(files):
        f = files[rel]
        body = f.body if f.body is not None else bodies.get(f.digest[7:])
        if body is None:
            raise KeyError(f"case {plan.case_id!r}: the body of {rel} is needed for its digest")
        rules[rel] = body
    digest = task_digest(((rel, f.digest) for rel, f in files.items()), rules)
    return manifest_task(task_name(case, org), digest)


def harbor_manifest(
    dataset: Mapping[str, Any],
    tasks: Iterable[bytes],
    *,
    content_digest: str,
    export_id: str,
    case_count: int,
    subset: Mapping[str, Any] | None,
) -> bytes:
    """`dataset.toml` whole (the streamed export writes the same pieces as it goes)."""
    tail = manifest_tail(
        dataset,
        content_digest=content_digest,
        export_id=export_id,
        case_count=case_count,
        subset=subset,
    )
    return manifest_head(dataset) + b"".join(tasks) + tail


def harbor_manifest_file(body: bytes) -> PlannedFile:
    return PlannedFile(HARBOR_MANIFEST, digest_of(body), len(body), body, role="harbor")


def export_org(dataset: Mapping[str, Any]) -> str:
    """The org of a harbor export's task names: `harbor_org` of the dataset id."""
    return harbor_org(str(dataset.get("id") or "caseshelf"))
