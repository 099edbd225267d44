"""A GET of a presigned URL (a download document, an export bundle, a case) through the standard
library: no credentials of ours go with it, redirects are not followed, and the body comes a
piece at a time.

Imported only where a URL is fetched (`caseshelf.client.downloads`): `urllib.request` costs
start-up that a client which never downloads should not pay.
"""

from __future__ import annotations

import http.client
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from caseshelf.client.transport import check_url, problem_error
from caseshelf.domain.errors import Upstream

# No `Accept-Encoding`: the body comes as it is stored, byte for byte.
_HEADERS = {"User-Agent": "caseshelf-client"}


@contextmanager
def get_url(url: str, size: int, *, timeout: float) -> Iterator[tuple[int | None, Iterator[bytes]]]:
    """GET `url` with urllib, not httpx: half the CPU of httpx's streamed reads of a 40 MB
    document, and no import of httpx. Its length (when the answer says one) and its body `size`
    bytes at a time. An answer other than 2xx (a redirect too) raises its typed error
    (`problem_error`); a connection that fails or a body cut short raises `Upstream`. `timeout`
    bounds each wait for the server."""
    where = urllib.parse.urlsplit(check_url(url, "url")).netloc
    request = urllib.request.Request(url, headers=_HEADERS)  # noqa: S310 (check_url: http(s))
    try:
        resp = _opener(url).open(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        with exc:
            raise problem_error(exc.code, exc.read(), str(exc.reason)) from None
    except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
        raise Upstream(f"cannot fetch {where}: {_reason(exc)}") from None
    with resp:
        said = resp.headers.get("content-length")
        length = int(said) if said and said.isdigit() else None
        yield length, _read(resp, size, length, where)


def _opener(url: str) -> urllib.request.OpenerDirector:
    """urllib's usual handlers (the proxy from the environment included) without the one that
    follows redirects: a 3xx is an error answer like a 4xx."""
    opener = urllib.request.OpenerDirector()
    handlers: list[urllib.request.BaseHandler] = [
        urllib.request.ProxyHandler(),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ]
    if url.startswith("https:") or urllib.request.getproxies():  # a proxy may be https too
        handlers.append(urllib.request.HTTPSHandler(context=_tls()))
    for handler in handlers:
        opener.add_handler(handler)
    return opener


def _tls() -> ssl.SSLContext:
    """The certificates httpx trusts, so a URL verifies the same way through either:
    `SSL_CERT_FILE` or `SSL_CERT_DIR` when set, else certifi's (installed with httpx)."""
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    try:
        import certifi  # lazy: only an https URL needs it
    except ImportError:  # pragma: no cover - httpx depends on certifi
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _read(resp: Any, size: int, length: int | None, where: str) -> Iterator[bytes]:
    """The body a piece at a time; one shorter than its `Content-Length` is an error (urllib's
    `read(n)` answers b"" at a connection closed early, as at the end)."""
    got = 0
    while True:
        try:
            piece = resp.read(size)
        except (OSError, http.client.HTTPException) as exc:
            raise Upstream(f"cannot fetch {where}: {_reason(exc)}") from None
        if not piece:
            break
        got += len(piece)
        yield piece
    if length is not None and got != length:
        raise Upstream(
            f"cannot fetch {where}: the connection closed after {got:,} of {length:,} bytes; "
            "ask again"
        )


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc) or type(exc).__name__


__all__ = ["get_url"]
