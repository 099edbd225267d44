"""The optional dependencies: a feature that needs one imports it through `require`, so that a
missing one is an error naming the feature and the exact `pip install` line, never a bare
ImportError.

The base install (`pip install caseshelf`) is the client, the CLI, the embedded store and
`caseshelf serve`; pyproject.toml's extras add the rest.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from caseshelf.domain.errors import CaseshelfError

# The top-level module an extra provides -> the extra that installs it.
EXTRA_OF: dict[str, str] = {
    "boto3": "aws",
    "botocore": "aws",
    "smart_open": "http",
    "pyarrow": "parquet",
    "pandas": "pandas",
    "datasets": "hf",
    "zstandard": "zstd",
    "inspect_ai": "inspect",
    "pathspec": "harbor",
}


class MissingExtra(CaseshelfError):
    """A feature whose optional dependency is not installed here."""

    title = "Optional Dependency Not Installed"


def install_line(extra: str) -> str:
    return f"pip install 'caseshelf[{extra}]'"


def require(module: str, feature: str) -> ModuleType:
    """`module` imported, or `MissingExtra` naming `feature` and the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.partition(".")[0]
        extra = EXTRA_OF.get(top, "all")
        raise MissingExtra(
            f"{feature} needs {top}, which is not installed: {install_line(extra)}",
            extra=extra,
            module=top,
        ) from None


__all__ = ["EXTRA_OF", "MissingExtra", "install_line", "require"]
