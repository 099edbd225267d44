"""The client's recipes: register, validate, list, read, tombstone and revive."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from caseshelf.client.base import PAGE_MAX
from caseshelf.client.refs import parse_ref
from caseshelf.client.versioned import VersionedMixin

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.dto import PageOut
    from caseshelf.api.import_dto import (
        RecipeOut,
        RecipeRegisterOut,
        RecipeSummaryOut,
        RecipeValidateOut,
        RecipeVersionOut,
    )


class RecipesMixin(VersionedMixin):
    """Recipes."""

    def register_recipe(self, recipe: Mapping[str, Any] | BaseModel) -> RecipeRegisterOut:
        from caseshelf.api.import_dto import RecipeRegisterOut  # lazy: pydantic, ~0.2 s

        return self._as(RecipeRegisterOut, self.call("POST", "recipes", body=recipe))

    def validate_recipe(self, recipe: Mapping[str, Any] | BaseModel) -> RecipeValidateOut:
        from caseshelf.api.import_dto import RecipeValidateOut  # lazy: pydantic, ~0.2 s

        return self._as(RecipeValidateOut, self.call("POST", "recipes", "validate", body=recipe))

    def list_recipes(
        self, *, shared: bool = False, cursor: str | None = None, limit: int = 50
    ) -> PageOut[RecipeSummaryOut]:
        from caseshelf.api.import_dto import RecipeSummaryOut  # lazy: pydantic, ~0.2 s

        return self._listed("recipes", RecipeSummaryOut, shared, cursor, limit)

    def recipe(self, ref: str) -> RecipeOut:
        """A recipe (`ID` for its latest version, `ID@VERSION`)."""
        from caseshelf.api.import_dto import RecipeOut  # lazy: pydantic, ~0.2 s

        name, r = parse_ref(ref)
        segments = ("recipes", name) if r == "latest" else ("recipes", name, "versions", r)
        return self._as(RecipeOut, self.call("GET", *segments))

    def recipe_versions(
        self, name: str, *, include_deleted: bool = False
    ) -> PageOut[RecipeVersionOut]:
        from caseshelf.api.import_dto import RecipeVersionOut  # lazy: pydantic, ~0.2 s

        return self._versions_page(
            "recipes", RecipeVersionOut, name, include_deleted, None, PAGE_MAX
        )

    def delete_recipe(self, ref: str) -> RecipeVersionOut:
        from caseshelf.api.import_dto import RecipeVersionOut  # lazy: pydantic, ~0.2 s

        return self._tombstone("recipes", RecipeVersionOut, ref)

    def revive_recipe(self, ref: str) -> RecipeVersionOut:
        from caseshelf.api.import_dto import RecipeVersionOut  # lazy: pydantic, ~0.2 s

        return self._revive("recipes", RecipeVersionOut, ref)
