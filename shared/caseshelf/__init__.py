"""caseshelf: a registry for evaluation datasets.

    import caseshelf
    cs = caseshelf.connect()          # the embedded store, or connect(url, token=...) for an API

`connect`, `Client` and the typed errors come from `caseshelf.client`, imported on first use so
that importing a submodule (the CLI, a Lambda handler) pays nothing for them.
"""

from __future__ import annotations

import importlib

# `typing.TYPE_CHECKING` without importing typing (the CLI's start-up path imports this).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.2.0"

__all__ = [
    "ApiError",
    "BackendUnavailable",
    "BadRequest",
    "CaseshelfError",
    "Client",
    "Conflict",
    "Downloaded",
    "Forbidden",
    "NotFound",
    "TooLarge",
    "Upstream",
    "__version__",
    "connect",
]
# What `import caseshelf` reaches lazily from `caseshelf.client` (loaded on first use).
_CLIENT_NAMES = frozenset(__all__) - {"__version__"}

if TYPE_CHECKING:
    from caseshelf.client import (
        ApiError,
        BackendUnavailable,
        BadRequest,
        CaseshelfError,
        Client,
        Conflict,
        Downloaded,
        Forbidden,
        NotFound,
        TooLarge,
        Upstream,
        connect,
    )


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from caseshelf import client  # lazy: ~60 ms that `import caseshelf` alone skips

        return getattr(client, name)
    if name == "inspect":  # `caseshelf.inspect.dataset(...)` after `import caseshelf`
        return importlib.import_module("caseshelf.inspect")
    raise AttributeError(f"module 'caseshelf' has no attribute {name!r}")
