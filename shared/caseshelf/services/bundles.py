"""everdict bundles: one file that holds datasets and recipes together, imported as the dataset
versions and recipe versions it holds.

A bundle is everdict's `Bundle` manifest: `{id, version, description?, datasets[],
benchmarkRecipes[], harnessTemplates[], harnesses[], judges[], rubrics[], models[],
runtimes[]}`. Its `datasets` are dataset versions (everdict's `Dataset`, read as `caseshelf
register` reads a dataset file, camelCase and legacy shapes folded in) and its
`benchmarkRecipes` are recipes (`BenchmarkAdapterSpec`, read with the camelCase aliases). The
other sections describe how to run an agent, which a dataset registry does not keep: they are
reported as skipped, never dropped silently.

Every dataset and every recipe is validated as if registered alone, before anything is
registered: one invalid item fails the whole bundle, naming the section, the index and the id of
each invalid one, and nothing is registered. Then each is registered in turn, datasets first;
like everdict's applier, one item's outcome (registered, already registered, or a conflict with
a version of other content) does not stop the others, and every outcome is reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caseshelf.domain.errors import BadRequest, CaseshelfError, Conflict
from caseshelf.domain.notices import notice_message
from caseshelf.domain.recipe import parse_recipe, recipe_plain
from caseshelf.services.loaders import (
    BUNDLE_KEYS,
    DATASETS,
    OTHER_SECTIONS,
    RECIPES,
    dataset_from_document,
)
from caseshelf.services.registry import parse_dataset

if TYPE_CHECKING:
    from caseshelf.domain.identity import Identity
    from caseshelf.services.recipes import RecipeService
    from caseshelf.services.registry import RegistryService


@dataclass
class BundlePlan:
    """What a bundle holds, every item already validated."""

    id: str
    version: str
    datasets: list[dict[str, Any]] = field(default_factory=list)  # registration bodies
    recipes: list[dict[str, Any]] = field(default_factory=list)  # recipes, snake_case
    skipped: dict[str, int] = field(default_factory=dict)  # other section -> item count
    warnings: list[str] = field(default_factory=list)


def _item_name(item: Any, index: int) -> str:
    if isinstance(item, dict) and isinstance(item.get("id"), str):
        return f"{item['id']}@{item.get('version', '?')}"
    return f"at index {index}"


def read_bundle(doc: Any, where: str = "bundle") -> BundlePlan:
    """Validate a bundle: each dataset as `register` validates a dataset file, each recipe as
    `recipes register` validates a recipe. 400 listing every invalid item otherwise."""
    if not isinstance(doc, dict):
        raise BadRequest(f"{where}: a bundle is a JSON object", field="bundle")
    unknown = sorted(set(doc) - BUNDLE_KEYS)
    if unknown:
        raise BadRequest(f"{where}: unknown bundle keys {unknown}", field=unknown[0])
    for key in ("id", "version"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise BadRequest(f"{where}: the bundle's {key} is required", field=key)
    plan = BundlePlan(doc["id"], doc["version"])
    errors: list[str] = []
    for section in (DATASETS, RECIPES, *OTHER_SECTIONS):
        items = doc.get(section, [])
        if not isinstance(items, list):
            raise BadRequest(f"{where}: {section} must be a list", field=section)
        if section in OTHER_SECTIONS:
            if items:
                plan.skipped[section] = len(items)
            continue
        for index, item in enumerate(items):
            at = f"{where}: {section}[{index}] ({_item_name(item, index)})"
            try:
                if section == DATASETS:
                    if not isinstance(item, dict):
                        raise BadRequest("a dataset is a JSON object")
                    raw, codes = dataset_from_document(item, Path(f"{section}[{index}].json"))
                    parse_dataset(raw)  # validated as if registered alone
                    plan.datasets.append(raw)
                    plan.warnings.extend(notice_message(code, at) for code in codes)
                else:
                    plan.recipes.append(recipe_plain(parse_recipe(item)))
            except BadRequest as exc:
                errors.append(f"{at}: {exc.detail}")
    if errors:
        more = f" (and {len(errors) - 1} more invalid item(s))" if len(errors) > 1 else ""
        raise BadRequest(errors[0] + more, field="bundle", errors=errors)
    if not plan.datasets and not plan.recipes:
        raise BadRequest(f"{where}: the bundle holds no dataset and no recipe", field="bundle")
    return plan


@dataclass(frozen=True)
class BundleItem:
    kind: str  # dataset | recipe
    id: str
    version: str
    status: str  # registered | unchanged | conflict
    content_digest: str | None = None
    message: str | None = None


def apply_bundle(
    plan: BundlePlan,
    register: Callable[[dict[str, Any]], dict[str, Any]],
    register_recipe: Callable[[dict[str, Any]], dict[str, Any]],
) -> list[BundleItem]:
    """Register every dataset, then every recipe, of a validated bundle through the given
    registration calls (the same ones `register` and `recipes register` make); the outcome of
    each. A conflict is reported and the others go on; any other error stops the import."""
    out: list[BundleItem] = []
    steps = [("dataset", b, register) for b in plan.datasets] + [
        ("recipe", r, register_recipe) for r in plan.recipes
    ]
    for kind, body, call in steps:
        name, version = str(body.get("id", "")), str(body.get("version", ""))
        try:
            got = call(body)
        except CaseshelfError as exc:
            if not isinstance(exc, Conflict):
                raise
            out.append(BundleItem(kind, name, version, "conflict", message=exc.detail))
            continue
        status = "registered" if got.get("created") else "unchanged"
        out.append(
            BundleItem(
                kind,
                str(got.get("id", name)),
                str(got.get("version", version)),
                status,
                got.get("content_digest"),
            )
        )
    return out


def import_bundle(
    registry: RegistryService, recipes: RecipeService, identity: Identity, doc: Any
) -> tuple[BundlePlan, list[BundleItem]]:
    """`POST /bundles`: validate the whole bundle (`read_bundle`), then register its datasets
    and recipes as the caller, through the registry's and the recipe service's own `register`."""
    plan = read_bundle(doc)

    def register(body: dict[str, Any]) -> dict[str, Any]:
        res = registry.register(identity, parse_dataset(body))
        return _registered(res.record, res.created)

    def register_recipe(body: dict[str, Any]) -> dict[str, Any]:
        res = recipes.register(identity, body)
        return _registered(res.record, res.created)

    return plan, apply_bundle(plan, register, register_recipe)


def _registered(record: Any, created: bool) -> dict[str, Any]:
    return {
        "id": record.name,
        "version": record.version,
        "content_digest": record.content_digest,
        "created": created,
    }
