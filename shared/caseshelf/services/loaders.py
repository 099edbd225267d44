"""Reading dataset files from disk: `.json`, `.jsonl`, `.yaml`/`.yml`.

`load_dataset_file` is the one place a dataset file becomes a plain dataset document
(`{id, version, description, tags, cases, shared_files, ...}`); `caseshelf register` and
`caseshelf validate` read through it. Parse errors name the file and the position; nothing here
validates the envelope (that is `caseshelf.services.registry.parse_dataset`).

Shapes: an object is a dataset document; a list (a JSON/YAML list, or the lines of a `.jsonl`
file) is the list of its cases, and the id and version come from the command line.

Lab Dataset YAML (`apiVersion: lab/v1`, `kind: Dataset`, `metadata`, `spec.items`) and the
legacy item shapes load too: every item goes through `normalise_item`, and each deprecated shape
is reported once per file per notice code (`docs/migration.md`).
"""

from __future__ import annotations

import re
import shlex
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import yaml

from caseshelf.domain.boundedyaml import load_yaml
from caseshelf.domain.envelope import normalise_item
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.legacy import plain_row
from caseshelf.domain.models import DATASET_ID_PATTERN
from caseshelf.domain.notices import BARE_LIST, notice_message
from caseshelf.domain.paths import check_relative_path
from caseshelf.domain.strictjson import loads as strict_loads
from caseshelf.domain.strictjson import parsed_exactly

JSON_SUFFIXES = frozenset({".json"})
JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})
YAML_SUFFIXES = frozenset({".yaml", ".yml"})
# Files of a benchmark's rows, never dataset files: they are imported through a recipe.
ROW_SUFFIXES = {".csv": "CSV", ".tsv": "TSV", ".parquet": "Parquet"}


# The sections of an everdict bundle (`caseshelf.services.bundles`), known here so that a
# bundle given where one dataset is expected is named as such.
DATASETS = "datasets"
RECIPES = "benchmarkRecipes"
# Sections of an everdict bundle that are not datasets or recipes: reported as skipped.
OTHER_SECTIONS = ("harnessTemplates", "harnesses", "judges", "rubrics", "models", "runtimes")
BUNDLE_KEYS = frozenset({"id", "version", "description", DATASETS, RECIPES, *OTHER_SECTIONS})


def is_bundle(doc: Any) -> bool:
    """A document is a bundle when it is an object with a `datasets` or `benchmarkRecipes`
    list and nothing a dataset document has instead (`cases`, `items`, `kind`)."""
    if not isinstance(doc, dict) or {"cases", "items", "kind", "apiVersion"} & doc.keys():
        return False
    return any(isinstance(doc.get(k), list) for k in (DATASETS, RECIPES)) and (
        doc.keys() <= BUNDLE_KEYS
    )


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BadRequest(f"{path}: no such file", field="file") from None
    except IsADirectoryError:
        raise BadRequest(f"{path}: is a directory, not a dataset file", field="file") from None
    except PermissionError:
        raise BadRequest(f"{path}: permission denied", field="file") from None


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"{path}: not UTF-8 (byte {exc.start}: {exc.reason})", field="file"
        ) from None


def parse_json(path: Path, data: bytes | str) -> Any:
    """One JSON document, every value as written (`caseshelf.domain.strictjson`): a key given
    twice is refused, an integer beyond 64 bits is kept exactly (and refused by the models)."""
    return strict_loads(data, where=str(path))


def parse_jsonl(path: Path, data: bytes) -> list[Any]:
    """One JSON value per non-blank line; errors name the line."""
    return _jsonl_values(path, [(n, line) for n, line in enumerate(data.splitlines(), start=1)])


def _jsonl_values(path: Path, lines: Iterable[tuple[int, bytes]]) -> list[Any]:
    """The values of numbered JSONL lines (blank ones skipped), every value as written."""
    items = []
    raws = []
    for lineno, line in lines:
        if not line.strip():
            continue
        try:
            items.append(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise BadRequest(
                f"{path}: invalid JSON on line {lineno} column {exc.colno}: {exc.msg}",
                field="file",
                row=lineno,
            ) from None
        raws.append((lineno, line))
    if not parsed_exactly([line for _, line in raws], items):
        items = [strict_loads(line, where=f"{path}: line {n}") for n, line in raws]
    return items


def parse_yaml(path: Path, text: str) -> Any:
    try:
        return load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise BadRequest(
            f"{path}: invalid YAML{where}: {exc.problem or exc}", field="file"
        ) from None
    except yaml.YAMLError as exc:
        raise BadRequest(f"{path}: invalid YAML: {exc}", field="file") from None


def refuse_row_file(path: Path) -> None:
    """A CSV, TSV or Parquet file is rows, not a dataset file: say so, and how to import it."""
    kind = next((ROW_SUFFIXES[s] for s in map(str.lower, path.suffixes) if s in ROW_SUFFIXES), None)
    if kind is None:
        return
    name = shlex.quote(str(path))
    raise BadRequest(
        f"{path} is a {kind} file of rows, not a dataset file (.json, .jsonl or .yaml of cases): "
        f"import it through a recipe: `caseshelf preview {name}` writes one from its columns, "
        f"then `caseshelf import {name} --recipe recipe.yaml`",
        field="file",
    )


def read_document(path: str | Path) -> Any:
    """The parsed content of a JSON, JSONL or YAML file (chosen by suffix; JSON otherwise)."""
    p = Path(path)
    refuse_row_file(p)
    return parse_document(p, _read_bytes(p))


def parse_document(path: str | Path, data: bytes) -> Any:
    """`data` parsed as the file `path` names (its suffix chooses JSON, JSONL or YAML), e.g. an
    uploaded dataset document; errors name `path`."""
    p = Path(path)
    refuse_row_file(p)
    suffix = p.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return parse_jsonl(p, data)
    if suffix in YAML_SUFFIXES:
        return parse_yaml(p, _decode(p, data))
    return parse_json(p, data.removeprefix(b"\xef\xbb\xbf"))


def as_dataset(doc: Any, path: str | Path) -> dict[str, Any]:
    """A parsed document as a dataset document: an object as it is, a list as its cases."""
    if isinstance(doc, dict):
        return doc
    if isinstance(doc, list):
        return {"cases": doc}
    raise BadRequest(
        f"{path}: a dataset file holds an object {{id, version, cases, ...}} or a list of cases, "
        f"not {type(doc).__name__ if doc is not None else 'nothing'}",
        field="file",
    )


def load_dataset_file(path: str | Path) -> dict[str, Any]:
    """Read a dataset file into a plain dataset document (not yet validated).

    Legacy shapes are folded into the envelope; each deprecation is issued once per file per
    code as a `DatasetShapeWarning` (use `load_dataset` to get them back as lines instead)."""
    doc, notices = load_dataset(path)
    for line in notices:
        warnings.warn(line, DatasetShapeWarning, stacklevel=2)
    return doc


# --- lab Dataset YAML and the legacy shapes (envelope migration) ----------------------------

LAB_API_VERSIONS = frozenset({"lab/v1"})
_DATASET_ID = re.compile(DATASET_ID_PATTERN)


class DatasetShapeWarning(FutureWarning):
    """A dataset file used a deprecated shape; it still loads (see docs/migration.md)."""


class _Codes:
    """Notice codes of one file, in first-seen order, each once."""

    def __init__(self) -> None:
        self.codes: list[str] = []

    def add(self, codes: list[str]) -> None:
        for code in codes:
            if code not in self.codes:
                self.codes.append(code)


def lab_item_id(item: dict[str, Any]) -> dict[str, Any]:
    """A lab item with an integer id carries it as text, as the lab itself reads it
    (`str(item["id"])`); any other id is left for validation."""
    cid = item.get("id")
    if isinstance(cid, int) and not isinstance(cid, bool):
        return {**item, "id": str(cid)}
    return item


def _normalise_items(
    items: Any, path: str | Path, codes: _Codes, *, lab: bool = False, start: int = 0
) -> list[Any]:
    """Items with the legacy shapes folded in; `start`: the index of the first (a window of a
    longer list)."""
    if not isinstance(items, list):
        raise BadRequest(f"{path}: items must be a list", field="items")
    out: list[Any] = []
    for index, item in enumerate(items, start=start):
        if not isinstance(item, dict):
            out.append(item)  # left for validation, which names the index
            continue
        if lab:
            item = lab_item_id(item)
        elif plain_row(item):
            raise rows_not_cases(path, item, index)
        try:
            plain, raised = normalise_item(item)
        except BadRequest as exc:
            fields = {"index": index, **exc.fields}
            raise BadRequest(f"{path}: {exc.detail} (item index {index})", **fields) from None
        codes.add(raised)
        out.append(plain)
    return out


def rows_not_cases(path: str | Path, item: dict[str, Any], index: int) -> BadRequest:
    """The error for a file of plain rows given as cases, with the commands that import it."""
    keys = ", ".join(list(item)[:12])
    name = shlex.quote(str(path))
    return BadRequest(
        f"{path}: item {index} is a plain row ({keys}), not a case (a case has `id` and "
        f"`inputs.user`); import rows through a recipe: `caseshelf preview {name}` writes one "
        f"from the fields it finds (`--id-field NAME` names the id field; without one, ids are "
        f"row numbers), then `caseshelf import {name} --recipe recipe.yaml`",
        index=index,
        field="items",
    )


def _stem_id(path: Path) -> str | None:
    stem = path.name.split(".")[0]
    return stem if _DATASET_ID.match(stem) else None


def _lab_dataset(doc: dict[str, Any], path: Path, codes: _Codes) -> dict[str, Any]:
    api = doc.get("apiVersion")
    if api not in LAB_API_VERSIONS:
        raise BadRequest(
            f"{path}: apiVersion {api!r} is not supported (expected {sorted(LAB_API_VERSIONS)})",
            field="apiVersion",
        )
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise BadRequest(f"{path}: metadata and spec must be mappings", field="spec")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{path}: metadata.name is required", field="metadata.name")
    if "items" in spec:
        items = spec["items"]
    elif "path" in spec:
        rel = check_relative_path(str(spec["path"]), what="spec.path")
        items_doc = read_document(path.parent / rel)
        items = items_doc.get("items") if isinstance(items_doc, dict) else items_doc
    else:
        raise BadRequest(f"{path}: spec.items is required", field="spec.items")
    raw: dict[str, Any] = {"id": name, "cases": _normalise_items(items, path, codes, lab=True)}
    if meta.get("version") is not None:
        raw["version"] = str(meta["version"])
    if meta.get("description"):
        raw["description"] = str(meta["description"]).strip()
    if meta.get("tags"):
        raw["tags"] = list(meta["tags"])
    # What a dataset version has no field for (display name, schemas, groups, ...) is kept as
    # provenance, so loading loses nothing.
    source: dict[str, Any] = {"kind": "lab-dataset", "file": path.name}
    if meta.get("display_name"):
        source["display_name"] = meta["display_name"]
    if spec.get("groups") is not None:
        source["groups"] = spec["groups"]
    rest = {k: v for k, v in spec.items() if k not in {"items", "groups"}}
    if rest:
        source["spec"] = rest
    raw["produced_by"] = {"source": source}
    return raw


def dataset_from_document(doc: Any, path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """A parsed document as a dataset document, legacy shapes folded in, and the notice codes
    it raised (each once, in first-seen order)."""
    p = Path(path)
    codes = _Codes()
    yaml_file = p.suffix.lower() in YAML_SUFFIXES
    if isinstance(doc, list):
        if yaml_file:
            codes.add([BARE_LIST])
        raw: dict[str, Any] = {"cases": _normalise_items(doc, p, codes, lab=yaml_file)}
        if yaml_file and _stem_id(p):
            raw["id"] = _stem_id(p)
        return raw, codes.codes
    if isinstance(doc, dict) and ("kind" in doc or "apiVersion" in doc) and "cases" not in doc:
        if doc.get("kind") != "Dataset":
            raise BadRequest(f"{p}: kind {doc.get('kind')!r} is not a Dataset", field="kind")
        return _lab_dataset(doc, p, codes), codes.codes
    if isinstance(doc, dict) and "items" in doc and "cases" not in doc:
        # The flat `{name, description, version, tags, items}` shorthand: no Dataset kind.
        codes.add([BARE_LIST])
        raw = {k: v for k, v in doc.items() if k not in {"items", "name", "count", "groups"}}
        raw["cases"] = _normalise_items(doc["items"], p, codes, lab=True)
        if doc.get("groups") is not None:
            # The lab's item groups (`[{id, description?, count?}]`): dataset facts with no
            # field of their own, kept as provenance.
            source: dict[str, Any] = {"kind": "lab-dataset", "file": p.name}
            source["groups"] = doc["groups"]
            raw["produced_by"] = {"source": source}
        name = doc.get("name", doc.get("id"))
        if name is not None:
            raw["id"] = str(name)
        elif _stem_id(p):
            raw["id"] = _stem_id(p)
        return raw, codes.codes
    if is_bundle(doc):
        raise BadRequest(
            f"{p}: this is a bundle (datasets and recipes together), not one dataset; import it "
            "with `caseshelf import-bundle`",
            field="file",
        )
    raw = as_dataset(doc, p)
    if "cases" in raw:
        raw = {**raw, "cases": _normalise_items(raw["cases"], p, codes)}
    return raw, codes.codes


def load_dataset(path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """(dataset document, warning lines): each line names the file, the notice code and its
    `docs/migration.md#<code>` anchor; print them on stderr."""
    doc, codes = dataset_from_document(read_document(path), path)
    return doc, [notice_message(code, str(path)) for code in codes]


# --- streaming: a window of cases at a time -------------------------------------------------

STREAM_CASES = 1000  # cases per window
STREAM_BYTES = 8 << 20  # a window of large cases closes early


def with_overrides(
    doc: dict[str, Any],
    *,
    dataset: str | None = None,
    version: str | None = None,
    bump: str | None = None,
    base: str | None = None,
) -> dict[str, Any]:
    """A dataset document (or a streamed one's head) with `dataset`, `version`, `bump` and
    `base` put over its own, as the CLI's options and a dataset upload's fields give them: a
    version given drops the document's bump, and a bump its version."""
    body = dict(doc)
    if dataset is not None:
        body["id"] = dataset
    if version is not None:
        body["version"] = version
        body.pop("bump", None)
    if bump is not None:
        body["bump"] = bump
        body.pop("version", None)
    if base is not None:
        body["base"] = base
    return body


@dataclass
class DatasetStream:
    """A dataset file read a window of cases at a time: the document without its cases
    (`head`), the cases in windows, legacy shapes folded in (`batches`, consumed once), and the
    notice lines of the deprecated shapes met so far (each once; complete once `batches` is)."""

    head: dict[str, Any]
    batches: Iterator[list[Any]]
    notices: list[str] = field(default_factory=list)


def stream_dataset(path: str | Path) -> DatasetStream:
    """`load_dataset`, streamed where the format allows: the lines of a `.jsonl`/`.ndjson` file
    are read a window at a time, so memory holds a window of cases, not the file. A `.json` or
    `.yaml` document is parsed whole (one value), then handed on a window at a time."""
    p = Path(path)
    if p.suffix.lower() not in JSONL_SUFFIXES:
        return _split(*load_dataset(p), p)
    try:
        fh = p.open("rb")
    except FileNotFoundError:
        raise BadRequest(f"{p}: no such file", field="file") from None
    except IsADirectoryError:
        raise BadRequest(f"{p}: is a directory, not a dataset file", field="file") from None
    except PermissionError:
        raise BadRequest(f"{p}: permission denied", field="file") from None
    return _jsonl_stream(p, fh)


def stream_dataset_from(fh: IO[bytes], filename: str) -> DatasetStream:
    """`stream_dataset` of a dataset file read from `fh` (an upload, say), its format named by
    `filename`'s suffix. Nothing is read from disk besides `fh`: a lab Dataset must hold its
    items (`spec.items`), not name a file beside it (`spec.path`)."""
    p = Path(Path(filename).name)
    refuse_row_file(p)
    if p.suffix.lower() in JSONL_SUFFIXES:
        return _jsonl_stream(p, fh)
    data = fh.read()
    fh.close()
    if p.suffix.lower() in YAML_SUFFIXES:
        doc = parse_yaml(p, _decode(p, data))
    else:
        doc = parse_json(p, data.removeprefix(b"\xef\xbb\xbf"))
    spec = doc.get("spec") if isinstance(doc, dict) else None
    if isinstance(spec, dict) and "path" in spec and "items" not in spec:
        raise BadRequest(
            f"{p}: spec.path names a file beside the document; send the items inline (spec.items)",
            field="spec.path",
        )
    raw, codes = dataset_from_document(doc, p)
    return _split(raw, [notice_message(code, str(p)) for code in codes], p)


def _split(doc: dict[str, Any], notices: list[str], path: Path) -> DatasetStream:
    """A whole document as a stream: its head, and its cases a window at a time."""
    if "cases" not in doc:
        raise BadRequest(f"{path}: cases: Field required", field="cases")
    cases = doc["cases"]
    if not isinstance(cases, list):
        raise BadRequest(f"{path}: cases: Input should be a valid list", field="cases")
    head = {k: v for k, v in doc.items() if k != "cases"}
    return DatasetStream(head, _windows(cases), notices)


def _jsonl_stream(path: Path, fh: IO[bytes]) -> DatasetStream:
    stream = DatasetStream({}, iter(()))
    stream.batches = _jsonl_windows(path, fh, stream.notices)
    return stream


def _windows(cases: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(cases), STREAM_CASES):
        yield cases[start : start + STREAM_CASES]


def _jsonl_windows(path: Path, fh: IO[bytes], notices: list[str]) -> Iterator[list[Any]]:
    """The cases of a JSONL file a window at a time; errors name the line."""
    codes = _Codes()
    start = 0
    with fh:
        window: list[tuple[int, bytes]] = []
        size = 0
        for lineno, line in enumerate(fh, start=1):
            window.append((lineno, line))
            size += len(line)
            if len(window) >= STREAM_CASES or size >= STREAM_BYTES:
                items = _normalise_items(_jsonl_values(path, window), path, codes, start=start)
                _note(codes, notices, path)
                start += len(items)
                window, size = [], 0
                yield items
        if window:
            items = _normalise_items(_jsonl_values(path, window), path, codes, start=start)
            _note(codes, notices, path)
            yield items


def _note(codes: _Codes, notices: list[str], path: Path) -> None:
    for code in codes.codes[len(notices) :]:
        notices.append(notice_message(code, str(path)))
