"""Recipe-driven imports: rows from a source, mapped to cases, registered as one version.

- The recipe comes by ref (`{id, version}` or `id@version`, own tenant then `_shared`), inline (a
  whole recipe document), or by catalog id.
- No limit means the whole source (paging to exhaustion); an explicit `limit` is the only way to
  take fewer rows, and it is stamped in `produced_by`.
- `produced_by` = {via, recipe {id, version, content_digest}, source (with the Hub revision),
  origin, limit, rows_read}: provenance, never content.
- Rows stream through the mapper into `RegistryService.register_records`; any error before the
  commit point leaves nothing registered.
- `preview` reads the first rows only and registers nothing.
- `num_proc` (1 unless the deployment sets more) is how many processes may work on a plain
  local jsonl file's rows: opt-in, as Hugging Face `datasets`' `num_proc` is.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import PurePosixPath
from typing import Any, Protocol

from pydantic import Field, ValidationError

from caseshelf.domain.envelope import validation_problem
from caseshelf.domain.errors import BadRequest, CaseshelfError
from caseshelf.domain.identity import Identity
from caseshelf.domain.mapping import RecordBatch, RowMapper, record_batches, rows_to_cases
from caseshelf.domain.models import BumpKind, DatasetId, Label, Strict
from caseshelf.domain.recipe import (
    URL_HELP,
    CsvSource,
    FileSource,
    HuggingFaceSource,
    JsonSource,
    Recipe,
    SourceUrl,
    display_url,
    parse_recipe,
)
from caseshelf.services.recipes import RecipeService, StoredRecipe
from caseshelf.services.registry import RegisterResult, RegistryService

HF_SCHEME = "hf://"
PREVIEW_ROWS = 5


class RecipeRef(Strict):
    id: str
    version: str = "latest"


class SourceOverride(Strict):
    """What an import may say about the source on top of the recipe's: a file (`url` — local
    path, `s3://`, `https://`, or `hf://owner/name`), inline `text`, or the Hugging Face
    coordinates."""

    kind: str | None = Field(default=None, pattern="^(huggingface|jsonl|json|csv|parquet)$")
    url: SourceUrl | None = Field(default=None, description=URL_HELP)
    text: str | None = None
    dataset: str | None = None
    config: str | None = None
    split: str | None = None
    revision: str | None = None
    file: str | None = None
    records_path: str | None = Field(
        default=None, min_length=1, description="A json source: where its records are."
    )


class ImportRequest(Strict):
    """The body of `POST /benchmarks/import` (and `/preview`, which ignores the target)."""

    recipe: str | RecipeRef | dict[str, Any] = Field(
        description="A recipe id (registered or catalog; `id@version` pins one), a ref "
        "{id, version}, or a whole recipe inline."
    )
    source: SourceOverride | None = None
    dataset: DatasetId | None = Field(default=None, description="Default: the recipe's id.")
    version: Label | None = None
    bump: BumpKind | None = Field(default=None, description="Default minor, when no version.")
    limit: int | None = Field(default=None, ge=1, description="Take only the first N rows.")
    description: str | None = Field(default=None, description="Default: the recipe's.")
    tags: list[str] = Field(default_factory=list)


def parse_import(raw: Any) -> ImportRequest:
    if not isinstance(raw, dict):
        raise BadRequest("an import request is a JSON object")
    try:
        return ImportRequest.model_validate(raw)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        raise BadRequest(f"{loc}: {msg}", field=loc) from None


@dataclass(frozen=True)
class ResolvedRecipe:
    recipe: Recipe
    owner: str  # a tenant, `_shared`, or `inline`
    content_digest: str

    def stamp(self) -> dict[str, Any]:
        return {
            "id": self.recipe.id,
            "version": self.recipe.version,
            "content_digest": self.content_digest,
            "owner": self.owner,
        }


@dataclass(frozen=True)
class OpenedSource:
    rows: Rows
    provenance: dict[str, Any]
    offload: Offload | None = None  # runs the work on `rows` in several processes


@dataclass(frozen=True)
class Preview:
    recipe: ResolvedRecipe
    source: dict[str, Any]
    rows: list[dict[str, Any]]
    fields: list[str]
    cases: list[dict[str, Any]]
    errors: list[dict[str, Any]]


@dataclass(frozen=True)
class ImportResult:
    result: RegisterResult
    rows_read: int
    produced_by: dict[str, Any]


Progress = Callable[[int], None]
Rows = Iterator[tuple[int, dict[str, Any]]]
# Work over rows (`record_batches` with the recipe bound), and a way to run it elsewhere.
Work = Callable[[Rows], Iterator[Any]]
Offload = Callable[[Work], Iterator[Any]]


class RowReader(Protocol):
    """Rows of a file source (`caseshelf.adapters.sources.SourceReader`)."""

    def rows(self, source: FileSource) -> Rows: ...

    def offload(
        self, source: FileSource, *, limit: int | None = None, num_proc: int = 1
    ) -> Offload | None:
        """A way to run work over the source's rows (at most `limit`) in `num_proc`
        processes, when the source can be shared (a plain local jsonl file); None otherwise,
        and with `num_proc` 1. Items come back in row order, errors as the work raised them
        in row order."""


class HubRows(Protocol):
    rows: Rows
    provenance: dict[str, Any]


class Hub(Protocol):
    """Hugging Face (`caseshelf.adapters.huggingface.HuggingFace`)."""

    def open_source(
        self,
        dataset: str,
        *,
        config: str | None = None,
        split: str | None = None,
        revision: str | None = None,
        file: str | None = None,
        limit: int | None = None,
        token: str | None = None,
        prefer_rows: bool = False,
    ) -> HubRows: ...

    def search(self, query: str, *, limit: int = 20, token: str | None = None) -> list[Any]: ...

    def splits(self, dataset: str, *, token: str | None = None) -> list[dict[str, str]]: ...

    def files(
        self, dataset: str, *, revision: str | None = None, token: str | None = None
    ) -> tuple[str, list[str]]: ...


class TokenProvider(Protocol):
    def token(self, tenant: str) -> str | None:
        """The Hugging Face token to use for `tenant`, or None to go anonymous."""


ReaderFor = Callable[[Identity], RowReader]


class ImportService:
    def __init__(
        self,
        registry: RegistryService,
        recipes: RecipeService,
        *,
        reader_for: ReaderFor,
        hf: Hub,
        tokens: TokenProvider,
        num_proc: int = 1,
    ) -> None:
        self.registry = registry
        self.num_proc = num_proc  # processes an import may use (`RowReader.offload`)
        self.recipes = recipes
        self.reader_for = reader_for
        self.hf = hf
        self.tokens = tokens

    # -- recipe and source -----------------------------------------------------------------

    def resolve_recipe(
        self, identity: Identity, spec: str | RecipeRef | dict[str, Any]
    ) -> ResolvedRecipe:
        if isinstance(spec, dict):
            if set(spec) <= {"id", "version"} and "id" in spec:
                spec = RecipeRef.model_validate(spec)
            else:
                recipe = parse_recipe(spec)
                found = StoredRecipe(recipe, "inline")
                return ResolvedRecipe(recipe, "inline", found.content_digest)
        if isinstance(spec, str):
            name, _, ref = spec.partition("@")
            spec = RecipeRef(id=name, version=ref or "latest")
        stored = self.recipes.get(identity, spec.id, spec.version)
        return ResolvedRecipe(stored.recipe, stored.owner, stored.content_digest)

    def effective_source(
        self,
        recipe: Recipe,
        override: SourceOverride | None,
    ) -> HuggingFaceSource | FileSource:
        """The recipe's source with the request's override applied (a file for a recipe that
        names none, another split, an `hf://` dataset...)."""
        base = recipe.source
        if override is None:
            return base
        given = override.model_dump(exclude_none=True)
        url = given.get("url")
        if isinstance(url, str) and url.startswith(HF_SCHEME):
            given.pop("url")
            given["dataset"] = url[len(HF_SCHEME) :].strip("/")
            given.setdefault("kind", "huggingface")
        kind = given.pop("kind", None)
        if kind is None and ("url" in given or "text" in given):
            kind = base.kind if base.kind != "huggingface" else kind_of(given.get("url"))
        if kind is None and any(
            k in given for k in ("dataset", "config", "split", "revision", "file")
        ):
            kind = "huggingface"
        kind = kind or base.kind
        plain: dict[str, Any] = base.model_dump(exclude_defaults=True) if base.kind == kind else {}
        if kind != "huggingface":
            plain.pop("url", None)
            plain.pop("text", None)
        elif given.get("dataset", plain.get("dataset")) != plain.get("dataset"):
            # Another dataset: the recipe's config, split, revision and file were for its own.
            for key in ("config", "split", "revision", "file"):
                plain.pop(key, None)
        plain.update(given)
        plain["kind"] = kind
        wrapper = parse_recipe(
            {**recipe.model_dump(mode="json", exclude_defaults=True), "source": plain}
        )
        return wrapper.source

    def open_source(
        self,
        identity: Identity,
        source: HuggingFaceSource | FileSource,
        *,
        limit: int | None,
        preview: bool = False,
        reader: RowReader | None = None,
    ) -> OpenedSource:
        if isinstance(source, HuggingFaceSource):
            got = self.hf.open_source(
                source.dataset,
                config=source.config,
                split=source.split,
                revision=source.revision,
                file=source.file,
                limit=limit,
                token=self.tokens.token(identity.tenant),
                prefer_rows=preview,
            )
            return OpenedSource(got.rows, got.provenance)
        reader = reader or self.reader_for(identity)
        prov: dict[str, Any] = {"kind": source.kind}
        if isinstance(source, CsvSource):
            prov["header"] = source.header
            if source.delimiter != ",":
                prov["delimiter"] = source.delimiter
        if isinstance(source, JsonSource) and source.records_path:
            prov["records_path"] = source.records_path
        if getattr(source, "text", None) is not None:
            prov["inline"] = True
        elif isinstance(source.url, list):
            prov["url"] = [display_url(u) for u in source.url]
        elif source.url is not None:
            prov["url"] = display_url(source.url)
        offload = reader.offload(source, limit=limit, num_proc=self.num_proc)
        return OpenedSource(reader.rows(source), prov, offload)

    # -- preview ---------------------------------------------------------------------------

    def preview(
        self, identity: Identity, req: ImportRequest, *, rows: int = PREVIEW_ROWS
    ) -> Preview:
        """The first rows, the fields found, and the cases they would become; registers
        nothing. A row that does not map is reported with its error instead of failing."""
        resolved = self.resolve_recipe(identity, req.recipe)
        source = self.effective_source(resolved.recipe, req.source)
        count = min(rows, req.limit) if req.limit else rows
        opened = self.open_source(identity, source, limit=count, preview=True)
        taken = list(itertools.islice(opened.rows, count))
        fields: list[str] = []
        for _, row in taken:
            for key in row:
                if key not in fields:
                    fields.append(key)
        mapper = RowMapper(resolved.recipe)
        cases: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        for index, row in taken:
            try:
                cases.extend(rows_to_cases([(index, row)], resolved.recipe, mapper=mapper))
            except CaseshelfError as exc:
                errors.append({"row": index, "detail": exc.detail, **exc.fields})
        return Preview(resolved, opened.provenance, [r for _, r in taken], fields, cases, errors)

    # -- import ----------------------------------------------------------------------------

    def run(
        self,
        identity: Identity,
        req: ImportRequest,
        *,
        via: str = "import",
        progress: Progress | None = None,
        reader: RowReader | None = None,
        upload: dict[str, Any] | None = None,
    ) -> ImportResult:
        """Import the rows of `req.source` through its recipe. `upload` (`{filename, sha256,
        size}` of an uploaded file) stands in the provenance for the URL the server read the
        upload from, which is its own storage path, not the user's file."""
        identity.check_can_write()
        resolved = self.resolve_recipe(identity, req.recipe)
        recipe = resolved.recipe
        source = self.effective_source(recipe, req.source)
        opened = self.open_source(identity, source, limit=req.limit, reader=reader)
        if upload is not None:
            opened.provenance.pop("url", None)
            opened.provenance["upload"] = upload
        rows = opened.rows if req.limit is None else itertools.islice(opened.rows, req.limit)
        produced_by: dict[str, Any] = {
            "via": via,
            "recipe": resolved.stamp(),
            "source": opened.provenance,
            "origin": recipe.origin.model_dump(mode="json", exclude_none=True),
            "limit": req.limit,
        }
        counter = _Counter()
        work = partial(record_batches, recipe=recipe, max_case_bytes=self.registry.max_case_bytes)
        # With an offload (`num_proc` above 1), reading, mapping, canonicalising and hashing are
        # shared with worker processes, a block of the file at a time, while this one writes
        # packs; batches come back in order, errors with their row.
        batches = work(rows) if opened.offload is None else opened.offload(work)
        records = self._records(batches, counter, progress, produced_by)
        version, bump = req.version, req.bump
        if version is None and bump is None:
            bump = "minor"
        result = self.registry.register_records(
            identity,
            name=req.dataset or recipe.id,
            version=version,
            bump=bump,
            description=req.description if req.description is not None else recipe.description,
            tags=req.tags,
            produced_by=produced_by,
            records=records,
        )
        return ImportResult(result, counter.rows, produced_by)

    def _records(
        self,
        batches: Iterator[RecordBatch],
        counter: _Counter,
        progress: Progress | None,
        produced_by: dict[str, Any],
    ) -> Iterator[RecordBatch]:
        """The mapped rows' batches, counted. Once the last row is read, `rows_read` is stamped
        into `produced_by`, which the registry reads only after the last batch."""
        for batch in batches:
            yield batch
            counter.rows += len(batch.ids)
            if progress is not None:
                progress(counter.rows)
        if counter.rows == 0:
            raise BadRequest("the source has no rows: nothing to import", field="source")
        produced_by["rows_read"] = counter.rows

    # -- Hugging Face discovery ------------------------------------------------------------

    def hf_search(self, identity: Identity, query: str, *, limit: int = 20) -> list[dict[str, Any]]:
        found = self.hf.search(query, limit=limit, token=self.tokens.token(identity.tenant))
        keep = ("id", "downloads", "likes", "gated", "private", "lastModified", "tags")
        return [{k: d[k] for k in keep if k in d} for d in found if isinstance(d, dict)]

    def hf_splits(self, identity: Identity, dataset: str) -> list[dict[str, str]]:
        return self.hf.splits(dataset, token=self.tokens.token(identity.tenant))

    def hf_files(
        self, identity: Identity, dataset: str, *, revision: str | None = None
    ) -> tuple[str, list[str]]:
        return self.hf.files(dataset, revision=revision, token=self.tokens.token(identity.tenant))


class _Counter:
    rows = 0


def kind_of(url: str | list[str] | None) -> str:
    if isinstance(url, list):
        url = url[0]
    if url is None:
        raise BadRequest("give the source's kind (jsonl, json, csv, parquet)", field="source.kind")
    name = PurePosixPath(url.split("?", 1)[0]).name.lower()
    for ext in (".gz", ".bz2", ".zst"):
        name = name.removesuffix(ext)
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".json"):
        return "json"
    if name.endswith(".parquet"):
        return "parquet"
    raise BadRequest(
        f"cannot tell the kind of {display_url(url)} from its name; give source.kind",
        field="source.kind",
    )
