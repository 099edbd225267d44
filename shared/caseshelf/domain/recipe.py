"""Recipes: a benchmark's source and the mapping of its rows to cases, as data (architecture §6).

`Recipe` is the one wire model of a recipe and `Mapping` the one model of a mapping: the mapper
(`caseshelf.domain.mapping`), the registry, the API, the CLI and the JSON Schema in
`docs/schemas/recipe.schema.json` all read them. Unknown keys are errors, never dropped.

Keys are snake_case. camelCase spellings (`idField`, `graderTemplates`, `taskType`) are accepted
as aliases on input, so recipes written for camelCase tools load as they are; every recipe is
stored and served in snake_case.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import orjson
from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from caseshelf.domain.canonical import canonical_json, digest_of, json_problem
from caseshelf.domain.envelope import validation_problem
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.models import DatasetId, Grader, Label
from caseshelf.domain.paths import relative_path_problem
from caseshelf.domain.templates import TemplateError, compile_field, compile_template


class RecipeModel(BaseModel):
    """Base of every recipe model: unknown keys are errors; camelCase aliases accepted."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        alias_generator=AliasGenerator(validation_alias=to_camel),
        validate_by_name=True,
        validate_by_alias=True,
        defer_build=True,
    )


Category = Literal["qa", "coding", "browser", "tool", "agent"]


class Origin(RecipeModel):
    """Where a benchmark comes from, for citation and provenance."""

    homepage: str | None = None
    paper: str | None = None
    code: str | None = None
    data: str | None = None
    leaderboard: str | None = None
    authors: str | None = None
    license: str | None = None
    citation: str | None = None
    task_type: str | None = None


# The fields a source of several files adds to each row: the file's name without extensions,
# and the row's number in that file.
FILE_FIELD, ROW_FIELD = "_file", "_row"

# A source's files: one URL, or a list of them read in the order given (as the `data_files` of
# `datasets.load_dataset`); a local URL may be a directory (its files of the source's kind,
# sorted by path) or a glob (`data/*.csv`, `**` for sub-directories; sorted).
SourceUrl = str | Annotated[list[str], Field(min_length=1, max_length=10_000)]
URL_HELP = (
    "A local path, s3://bucket/key or https:// URL, or a list of them; a local path may be a "
    "directory or a glob. Several files add `_file` (the name without extensions) and `_row` "
    "(the row's number in its file) to every row."
)


def source_urls(url: str | list[str]) -> list[str]:
    """A source's URL field as a list."""
    return [url] if isinstance(url, str) else list(url)


class _ByUrlOrText(RecipeModel):
    url: SourceUrl | None = Field(default=None, description=URL_HELP)
    text: str | None = Field(default=None, description="The source's content, inline.")

    @model_validator(mode="after")
    def _not_both(self) -> _ByUrlOrText:
        if self.url is not None and self.text is not None:
            raise ValueError("give the source as url or as text, not both")
        return self


class HuggingFaceSource(RecipeModel):
    kind: Literal["huggingface"]
    dataset: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
    config: str | None = None
    split: str | None = None
    revision: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$", description="Hub revision."
    )
    file: str | None = Field(
        default=None, description="A file in the dataset repo (jsonl, csv or parquet)."
    )
    gated: bool = False

    @field_validator("file")
    @classmethod
    def _safe_file(cls, v: str | None) -> str | None:
        if v is not None:
            problem = relative_path_problem(v)
            if problem:
                raise ValueError(f"file {v!r} {problem}")
        return v


class JsonlSource(_ByUrlOrText):
    kind: Literal["jsonl"]


class CsvSource(_ByUrlOrText):
    kind: Literal["csv"]
    header: bool = Field(default=True, description="Whether the first line names the columns.")
    columns: list[str] | None = Field(
        default=None, description="Column names (required without a header row)."
    )
    delimiter: str = Field(default=",", min_length=1, max_length=1)

    @model_validator(mode="after")
    def _names(self) -> CsvSource:
        if not self.header and not self.columns:
            raise ValueError("a csv source without a header row needs columns")
        if self.columns is not None and len(set(self.columns)) != len(self.columns):
            raise ValueError("csv columns must be distinct")
        return self


class JsonSource(_ByUrlOrText):
    """A `.json` file holding the records: an array of objects, or an object with the array
    under `records_path` (a dotted key path such as `data` or `data.rows`). A `url` naming a
    local directory reads every `*.json` file in it (by name, sorted) as one record, and adds
    the file's stem as the row field `_stem` (ARC-style tasks whose id is the file name)."""

    kind: Literal["json"]
    records_path: str | None = Field(
        default=None,
        min_length=1,
        description="Where the records are inside the top-level object (dotted keys).",
    )


class ParquetSource(RecipeModel):
    kind: Literal["parquet"]
    url: SourceUrl | None = Field(default=None, description=URL_HELP)


Source = Annotated[
    HuggingFaceSource | JsonlSource | JsonSource | CsvSource | ParquetSource,
    Field(discriminator="kind"),
]
SourceKind = Literal["huggingface", "jsonl", "json", "csv", "parquet"]
FileSource = JsonlSource | JsonSource | CsvSource | ParquetSource

FieldMap = list[str] | dict[str, Any]


class Mapping(RecipeModel):
    """Row -> case rules. Every `*_field` takes a field expression (`name`, `a.b`, or
    `name|filter:arg|...`); every `*_template` a template (`... {field} ...`)."""

    id_field: str | None = Field(
        default=None, description="Case id; default `<recipe id>-<row index>`."
    )
    id_template: str | None = Field(
        default=None,
        description="Case id from a template (`{_file}-{_row}`); wins over id_field.",
    )
    task_field: str | None = Field(default=None, description="inputs.user from one field.")
    task_template: str | None = Field(
        default=None, description="inputs.user from a template; wins over task_field."
    )
    start_url_field: str | None = Field(default=None, description="Browser env start_url.")
    prompt_env: bool = Field(default=False, description="env {kind: prompt}.")
    answer_field: str | None = Field(
        default=None,
        description="expectations.ground_truth; a non-empty answer adds an answer-match grader.",
    )
    answer_mode: str | None = Field(
        default=None, description="The answer-match grader's `mode` (e.g. exact, numeric)."
    )
    git_field: str | None = Field(default=None, description="Repo env source {git}.")
    ref_field: str | None = Field(default=None, description="Repo env ref (default HEAD).")
    files_template: dict[str, str] | None = Field(
        default=None, description="Repo env source {files: {path: template}}."
    )
    repo_path: str | None = Field(
        default=None, description="Repo env source {path}: the repo inside the image."
    )
    os_use_env: bool = Field(default=False, description="env {kind: os-use}.")
    os_use_setup: list[str] = Field(
        default_factory=list, description="os-use setup lines (templates)."
    )
    display: str | None = None
    screenshot_path: str | None = None
    image_field: str | None = Field(
        default=None, description="Per-row image reference; wins over image."
    )
    image: str | None = Field(default=None, description="Recipe-wide prebuilt image reference.")
    placement: str | None = Field(
        default=None, description="Where the env runs (e.g. docker); any value needs an image."
    )
    test_cmd_field: str | None = Field(default=None, description="A tests-pass grader's cmd.")
    tag_fields: list[str] = Field(
        default_factory=list, description="Case tags from these fields; empty values dropped."
    )
    extra_graders: list[Grader] = Field(
        default_factory=list, description="Graders added to every case, as given."
    )
    details_fields: FieldMap = Field(
        default_factory=list,
        description="expectations.details: field names, or {key: value} where every string "
        "inside a value is a template.",
    )
    metadata_fields: FieldMap = Field(
        default_factory=list, description="metadata: field names, or {key: value with templates}."
    )
    hitl_field: str | None = Field(default=None, description="inputs.hitl (a list or a string).")

    @field_validator("files_template")
    @classmethod
    def _safe_paths(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for path in v or {}:
            problem = relative_path_problem(path)
            if problem:
                raise ValueError(f"files_template path {path!r} {problem}")
            if "/".join(p for p in path.split("/") if p) != path:
                raise ValueError(f"files_template path {path!r} has empty segments")
        return v

    @model_validator(mode="after")
    def _expressions(self) -> Mapping:
        """Compile every field expression and template now, so a bad one fails at
        registration naming its key, not at import time."""
        for name in (
            "id_field",
            "task_field",
            "start_url_field",
            "answer_field",
            "git_field",
            "ref_field",
            "image_field",
            "test_cmd_field",
            "hitl_field",
        ):
            expr = getattr(self, name)
            if expr is not None:
                _check(lambda e=expr: compile_field(e), name)
        for i, expr in enumerate(self.tag_fields):
            _check(lambda e=expr: compile_field(e), f"tag_fields.{i}")
        if self.task_template is not None:
            _check(lambda: compile_template(self.task_template or ""), "task_template")
        if self.id_template is not None:
            _check(lambda: compile_template(self.id_template or ""), "id_template")
        for path, tpl in (self.files_template or {}).items():
            _check(lambda t=tpl: compile_template(t), f"files_template.{path}")
        for i, tpl in enumerate(self.os_use_setup):
            _check(lambda t=tpl: compile_template(t), f"os_use_setup.{i}")
        for attr in ("details_fields", "metadata_fields"):
            value = getattr(self, attr)
            if isinstance(value, dict):
                for key, tpl in value.items():
                    _check_value(tpl, f"{attr}.{key}")
            else:
                for i, expr in enumerate(value):
                    _check(lambda e=expr: compile_field(e), f"{attr}.{i}")
        if self.task_field is None and self.task_template is None:
            raise ValueError("a mapping needs task_field or task_template (the case's task)")
        return self


def _check(fn: Any, where: str) -> None:
    try:
        fn()
    except TemplateError as exc:
        raise ValueError(f"{where}: {exc}") from None


class Recipe(RecipeModel):
    """A versioned, registrable recipe: which rows, and how each becomes a case."""

    id: DatasetId
    version: Label
    description: str = ""
    category: Category
    origin: Origin = Field(default_factory=Origin)
    source: Source
    mapping: Mapping
    grader_templates: list[Grader] = Field(
        default_factory=list,
        description="Graders added to every case; every string in config is a template.",
    )

    @model_validator(mode="after")
    def _grader_templates(self) -> Recipe:
        for i, g in enumerate(self.grader_templates):
            _check_value(g.config, f"grader_templates.{i}.config")
        return self


def _check_value(value: Any, where: str) -> None:
    """Every template inside a value compiles, and every number is one canonical JSON holds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if json_problem(value) is not None:
            raise ValueError(f"{where}: NaN, Infinity and integers beyond 64 bits are not allowed")
    elif isinstance(value, str):
        _check(lambda: compile_template(value), where)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_value(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_value(v, f"{where}.{i}")


def display_url(url: str | list[str]) -> str:
    """A source URL as errors and provenance show it: without query string or credentials
    (presigned URLs carry signatures there)."""
    if isinstance(url, list):  # a list of files: shown as the list
        return ", ".join(display_url(u) for u in url)
    parts = urlsplit(url)
    if parts.scheme in ("http", "https", "s3"):
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    return url


def parse_recipe(raw: Any) -> Recipe:
    """Validate a recipe document; 400 naming the key (an unknown one included) on error."""
    if not isinstance(raw, dict):
        raise BadRequest("a recipe is a JSON object")
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        # A discriminated union puts the kind in the path (`source.csv.header`): drop it.
        parts = loc.split(".")
        if len(parts) > 1 and parts[0] == "source" and parts[1] in _KINDS:
            loc = ".".join([parts[0], *parts[2:]])
        raise BadRequest(f"recipe: {loc}: {msg}", field=loc) from None


_KINDS = {"huggingface", "jsonl", "json", "csv", "parquet"}


def recipe_plain(recipe: Recipe) -> dict[str, Any]:
    """The recipe as plain snake_case JSON, defaults omitted (what is stored and hashed)."""
    return recipe.model_dump(mode="json", exclude_defaults=True)


def recipe_bytes(recipe: Recipe) -> bytes:
    return canonical_json(recipe_plain(recipe), checked=True)


def recipe_digest(recipe: Recipe) -> str:
    return digest_of(recipe_bytes(recipe))


def recipe_from_bytes(data: bytes) -> Recipe:
    return parse_recipe(orjson.loads(data))


def recipe_json_schema() -> dict[str, Any]:
    """The JSON Schema of a recipe (snake_case names; camelCase aliases are accepted too)."""
    schema = Recipe.model_json_schema(by_alias=False, mode="validation")
    schema["$id"] = "https://caseshelf.dev/schemas/recipe.schema.json"
    schema["title"] = "Recipe"
    return schema
