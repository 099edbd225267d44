"""Cross-origin reads of the API (CORS) for a web UI served from another origin.

The UI deployed with the stack is on the API's own origin (CloudFront sends `/<Stage>/*` to
the API), and the local server serves both: neither needs CORS. A UI hosted elsewhere is named
in the `cors_origins` setting (`CASESHELF_CORS_ORIGINS`, the template's `UiOrigin`); an answer
then carries `Access-Control-Allow-Origin` for a request from that origin only (Powertools'
`CORSConfig` builds the headers), with `Vary: Origin` so a cache never hands one origin's
answer to another. Credentials are never allowed: the token is sent in `Authorization`, which
the page adds itself, never a cookie.

Preflights (`OPTIONS`) are answered by API Gateway (the `Cors` of the template's `Api`) and by
the local server before any function runs, with `preflight_headers`.

Importing this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# `https://host[:port]` (or `http://` for a UI on a developer's machine): an origin, no path.
CORS_ORIGIN_PATTERN = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$"
ALLOW_HEADERS = ("Authorization", "Content-Type")
EXPOSE_HEADERS = ("X-Next-Cursor", "Content-Disposition")
ALLOW_METHODS = ("DELETE", "GET", "OPTIONS", "POST", "PUT")
MAX_AGE = 600


def request_origin(event: Mapping[str, Any]) -> str | None:
    headers = event.get("headers") or {}
    return next((str(v) for k, v in headers.items() if k.lower() == "origin"), None)


def cors_headers(origin: str | None, allowed: Sequence[str]) -> dict[str, str]:
    """The CORS headers of an answer to a request from `origin`: none unless it is allowed."""
    if not origin or not allowed or origin not in allowed:
        return {}
    # Powertools' event handler (~70 ms) stays off the import of `caseshelf.bootstrap`, which
    # imports this module: `caseshelf info`, `verify`, `gc` and `connect()` load it alone.
    from aws_lambda_powertools.event_handler import api_gateway  # lazy: ~70 ms, as said above

    config = api_gateway.CORSConfig(
        allow_origin=allowed[0],
        extra_origins=list(allowed[1:]),
        allow_headers=list(ALLOW_HEADERS),
        expose_headers=list(EXPOSE_HEADERS),
    )
    return {**config.to_dict(origin), "Vary": "Origin"}


def preflight_headers(origin: str | None, allowed: Sequence[str]) -> dict[str, str]:
    """The answer to a preflight from `origin`: the methods and headers a page may use, and how
    long the browser may keep that; none unless the origin is allowed."""
    headers = cors_headers(origin, allowed)
    if headers:
        headers["Access-Control-Allow-Methods"] = ",".join(ALLOW_METHODS)
        headers["Access-Control-Allow-Headers"] = ",".join(ALLOW_HEADERS)
        headers["Access-Control-Max-Age"] = str(MAX_AGE)
    return headers


def with_cors(result: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
    """A proxy result with the CORS headers added (its own `Vary` kept)."""
    if not headers:
        return result
    multi: dict[str, Any] = dict(result.get("multiValueHeaders") or {})
    single: dict[str, Any] = dict(result.get("headers") or {})
    for name, value in headers.items():
        if name == "Vary":
            vary = _existing(multi, single, name)
            value = ", ".join(dict.fromkeys([*vary, value]))
        _drop(multi, name)
        _drop(single, name)
        multi[name] = [value]
    out = dict(result)
    out["multiValueHeaders"] = multi
    if single:
        out["headers"] = single
    else:
        out.pop("headers", None)
    return out


def _existing(multi: Mapping[str, Any], single: Mapping[str, Any], name: str) -> list[str]:
    found: list[str] = []
    for source in (multi, single):
        for k, v in source.items():
            if k.lower() == name.lower():
                values: Iterable[Any] = v if isinstance(v, list) else [v]
                found.extend(p.strip() for x in values for p in str(x).split(",") if p.strip())
    return found


def _drop(headers: dict[str, Any], name: str) -> None:
    for k in [k for k in headers if k.lower() == name.lower()]:
        del headers[k]
