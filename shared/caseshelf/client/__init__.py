"""The Python client: `caseshelf.connect()` on the embedded store or any API.

    import caseshelf
    cs = caseshelf.connect()                       # the embedded store (caseshelf.storehome)
    cs = caseshelf.connect("https://.../prod", token="...")   # an API (CASESHELF_API/TOKEN)
    v = cs.get("gsm8k@stable")
    for case in cs.cases("gsm8k@1.2.0"): ...

Both ways go through the same function handlers (in process, through the API Gateway event the
local server builds; or over HTTP), so they answer the same wire models and raise the same
typed errors (`NotFound`, `Conflict`, `BadRequest`, ...). See docs/python.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from caseshelf.client.core import Client, Downloaded
from caseshelf.client.refs import parse_ref, parse_version
from caseshelf.client.transport import ApiError, Http, InProcess, Request, Transport
from caseshelf.domain.errors import (
    BackendUnavailable,
    BadRequest,
    CaseshelfError,
    Conflict,
    Forbidden,
    NotFound,
    TooLarge,
    Upstream,
)


def connect(
    url: str | None = None,
    *,
    token: str | None = None,
    home: str | Path | None = None,
    tenant: str | None = None,
    principal: str | None = None,
    roles: list[str] | tuple[str, ...] | None = None,
    timeout: float = 120.0,
    retries: int = 4,
    env: dict[str, str] | None = None,
    num_proc: int | None = None,
) -> Client:
    """A client on the registry.

    With `url` (or `CASESHELF_API`): that API over HTTP, with `token` (or `CASESHELF_TOKEN`) as
    the bearer token. Without: the embedded store in `home`, else the one the CLI finds
    (`caseshelf.storehome`: `CASESHELF_HOME`, else the nearest `.caseshelf/` at or above the
    working directory, else the user's data directory), served in this process
    (`CASESHELF_BACKEND=aws` and its settings for the AWS one). Connecting creates nothing: the
    store is created by its first write. `tenant`, `principal` and `roles` are the identity on
    the embedded store; over HTTP they become the dev headers that only the local server
    reads. `num_proc` (default `CASESHELF_NUM_PROC`, else 1) is how many processes an import on
    the embedded store may read, map and hash a plain local jsonl file with; always 1 on the
    AWS backend and in a Lambda function."""
    environ = os.environ if env is None else env
    url = url or environ.get("CASESHELF_API") or None
    role_tuple = None if roles is None else tuple(roles)
    if url:
        if num_proc is not None:
            raise BadRequest(
                "num_proc is for the embedded store: an API imports with its own "
                "CASESHELF_NUM_PROC; drop num_proc",
                field="num_proc",
            )
        http = Http(
            url,
            token=token or environ.get("CASESHELF_TOKEN") or None,
            tenant=tenant,
            principal=principal,
            roles=role_tuple,
            timeout=timeout,
            retries=retries,
        )
        return Client(http)
    from caseshelf.bootstrap import load_settings  # lazy: ~250 ms an HTTP client never needs

    settings = load_settings(
        environ,
        home=home,
        tenant=tenant,
        principal=principal,
        roles=role_tuple,
        num_proc=num_proc,
    )
    return Client(InProcess(settings))


__all__ = [
    "ApiError",
    "BackendUnavailable",
    "BadRequest",
    "CaseshelfError",
    "Client",
    "Conflict",
    "Downloaded",
    "Forbidden",
    "Http",
    "InProcess",
    "NotFound",
    "Request",
    "TooLarge",
    "Transport",
    "Upstream",
    "connect",
    "parse_ref",
    "parse_version",
]
