"""JSON Schemas of the wire documents users write by hand, generated from the pydantic models
(the models are the source of truth; `docs/schemas/` holds the generated copies, and a test fails
when they drift). `python -m caseshelf.domain.schemas --write docs/schemas` regenerates them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from caseshelf.domain.models import DatasetVersionInput
from caseshelf.domain.recipe import recipe_json_schema


def dataset_json_schema() -> dict[str, Any]:
    schema = DatasetVersionInput.model_json_schema(mode="validation")
    schema["$id"] = "https://caseshelf.dev/schemas/dataset.schema.json"
    return schema


SCHEMAS = {
    "recipe.schema.json": recipe_json_schema,
    "dataset.schema.json": dataset_json_schema,
}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", metavar="DIR", help="write every schema into DIR")
    args = parser.parse_args(argv)
    for name, make in SCHEMAS.items():
        text = render(make())
        if args.write:
            out = Path(args.write)
            out.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text, encoding="utf-8")
        else:
            print(f"// {name}\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
