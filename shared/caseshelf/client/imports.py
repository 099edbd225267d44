"""The client's imports: benchmark rows through a recipe, Terminal-Bench and Harbor tasks,
bundles, and the Hugging Face catalogue."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caseshelf.client.base import _body, _drop_none
from caseshelf.client.jobs import JobsMixin

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.dto import TaskImportOut
    from caseshelf.api.import_dto import (
        BenchmarkOut,
        BundleOut,
        HfDatasetOut,
        HfFilesOut,
        HfSplitOut,
        ImportOut,
        PreviewOut,
        RecipeRegisterOut,
    )


class ImportsMixin(JobsMixin):
    """Imports of benchmarks, tasks and bundles."""

    def import_tasks(
        self,
        format: str,
        body: Mapping[str, Any] | BaseModel | None = None,
        *,
        wait: float = 3600.0,
        **fields: Any,
    ) -> TaskImportOut:
        """Register Terminal-Bench or Harbor tasks (`format`: `terminal-bench` | `harbor`) from
        `s3=...`, `upload_id=...` or `archive_base64=...`. The API imports them as a job: this
        follows it (at most `wait` seconds) and answers what it registered, or raises the
        error it failed with (an invalid task named, a limit)."""
        from caseshelf.api.dto import TaskImportOut  # lazy: pydantic, ~0.2 s

        request = dict(_body(body) or {})
        request.update(fields)
        return self._as(TaskImportOut, self._job_result(("datasets", format), request, wait))

    def import_(
        self,
        source: Any = None,
        *,
        recipe: Any,
        dataset: str | None = None,
        version: str | None = None,
        bump: str | None = None,
        limit: int | None = None,
        **fields: Any,
    ) -> ImportOut:
        """Import a benchmark's rows through a recipe and register them as a version.

        `recipe`: a recipe id (registered or catalog), `{id, version}`, or a whole recipe.
        `source`: overrides the recipe's (`{kind, url, ...}`, or a URL/path string)."""
        from caseshelf.api.import_dto import ImportOut  # lazy: pydantic, ~0.2 s

        body = self._import_body(source, recipe, dataset, version, bump, limit, fields)
        return self._as(ImportOut, self.call("POST", "benchmarks", "import", body=body))

    def preview(
        self, source: Any = None, *, recipe: Any, limit: int | None = None, **fields: Any
    ) -> PreviewOut:
        """The first rows of a source, the fields found and the cases they would become."""
        from caseshelf.api.import_dto import PreviewOut  # lazy: pydantic, ~0.2 s

        body = self._import_body(source, recipe, None, None, None, limit, fields)
        return self._as(PreviewOut, self.call("POST", "benchmarks", "preview", body=body))

    @staticmethod
    def _import_body(
        source: Any,
        recipe: Any,
        dataset: str | None,
        version: str | None,
        bump: str | None,
        limit: int | None,
        fields: Mapping[str, Any],
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"recipe": _body(recipe)}
        if isinstance(source, str | Path):
            body["source"] = {"url": str(source)}
        elif source is not None:
            body["source"] = _body(source)
        body.update(
            _drop_none({"dataset": dataset, "version": version, "bump": bump, "limit": limit})
        )
        body.update(fields)
        return body

    def benchmarks(self) -> list[BenchmarkOut]:
        """The catalog's benchmarks."""
        from caseshelf.api.import_dto import BenchmarkOut  # lazy: pydantic, ~0.2 s

        return list(self._page(BenchmarkOut, self.call("GET", "benchmarks")).items)

    def publish_catalog(self) -> list[RecipeRegisterOut]:
        """Register the catalog's recipes into `_shared` (a `_shared` admin only)."""
        from caseshelf.api.import_dto import RecipeRegisterOut  # lazy: pydantic, ~0.2 s

        data = self.call("POST", "benchmarks", "publish")
        return list(self._page(RecipeRegisterOut, data).items)

    def hf_search(self, q: str, *, limit: int = 20) -> list[HfDatasetOut]:
        from caseshelf.api.import_dto import HfDatasetOut  # lazy: pydantic, ~0.2 s

        data = self.call("GET", "benchmarks", "hf", "search", query={"q": q, "limit": limit})
        return list(self._page(HfDatasetOut, data).items)

    def hf_splits(self, dataset: str) -> list[HfSplitOut]:
        from caseshelf.api.import_dto import HfSplitOut  # lazy: pydantic, ~0.2 s

        data = self.call("GET", "benchmarks", "hf", "splits", query={"dataset": dataset})
        return list(self._page(HfSplitOut, data).items)

    def hf_files(self, dataset: str, *, revision: str | None = None) -> HfFilesOut:
        from caseshelf.api.import_dto import HfFilesOut  # lazy: pydantic, ~0.2 s

        query = {"dataset": dataset, "revision": revision}
        return self._as(HfFilesOut, self.call("GET", "benchmarks", "hf", "files", query=query))

    def import_bundle(self, bundle: Mapping[str, Any] | str | Path) -> BundleOut:
        """Import an everdict bundle: the document, or the path of its JSON or YAML file. Every
        dataset and recipe is validated before any is registered; the answer gives each item's
        outcome (`registered`, `unchanged`, `conflict`)."""
        from caseshelf.api.import_dto import BundleOut  # lazy: pydantic, ~0.2 s

        if isinstance(bundle, str | Path):
            from caseshelf.services.loaders import read_document  # lazy: services, pydantic: ~0.2 s

            bundle = read_document(Path(bundle))
        return self._as(BundleOut, self.call("POST", "bundles", body=bundle))
