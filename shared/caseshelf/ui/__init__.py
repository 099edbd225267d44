"""The web UI's files and how the local server answers them.

The UI is plain static files (HTML, ES modules, CSS) shipped as package data in `static/`: no
build step and nothing fetched from the internet at run time. It calls the same HTTP API as any
client. The local server (`caseshelf serve`) asks `answer()` first for every GET; a `None`
means "not the UI's": the request goes on to the API routes.

Which GETs are the UI's:
- `/`, `/static/<file>`, `/config.json` and `/swagger` always;
- any other path a browser navigates to (the request's `Accept` names `text/html` before any
  JSON type), except the API's own documents, downloads and a version's files. The UI's pages
  live at the paths of what they show (`/datasets/gsm8k/diff?base=1.1.0&candidate=1.2.0`), so a
  page pasted into a review opens the page, while `fetch()` from the page (which asks for JSON)
  and every API client (`*/*` or JSON) reach the API at the same path.

Every UI answer carries a strict Content-Security-Policy (scripts and styles from this origin
only: no inline script, no eval) and the usual hardening headers. Static files are looked up in
a table built from the package directory, never by joining the request path onto a directory,
so no path can leave it (CWE-22).
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

import orjson

STATIC_PREFIX = "/static/"
CONFIG_PATH = "/config.json"
SWAGGER_PATH = "/swagger"
SWAGGER_ASSETS = "aws_lambda_powertools.event_handler.openapi.swagger_ui"

# The UI's pages: scripts, styles, images and connections from this origin only.
CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
# Swagger UI sets inline styles on its own elements; its scripts still come from here only.
SWAGGER_CSP = CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")

HARDENING = (
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
)
_NOT_PAGES = ("/openapi.json", "/_uploads/", "/_downloads/")
# A version's file (`…/files/sha256:<hex>`) opened in a tab is the file, never a page.
_FILE_PATH = re.compile(r"/versions/[^/]+/files/[^/]+$")
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".txt": "text/plain; charset=utf-8",
}


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def content_type(name: str) -> str:
    dot = name.rfind(".")
    ext = name[dot:].lower() if dot >= 0 else ""
    return _TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def _walk(root: Traversable, prefix: str = "") -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for entry in root.iterdir():
        name = prefix + entry.name
        if entry.is_dir():
            found.update(_walk(entry, name + "/"))
        elif entry.is_file() and not entry.name.startswith("."):
            found[name] = entry.read_bytes()
    return found


@cache
def static_files() -> dict[str, bytes]:
    """Every file of the UI by its path under `static/` (read once per process)."""
    return _walk(resources.files(__name__) / "static")


@cache
def _swagger_assets() -> dict[str, bytes]:
    root = resources.files(SWAGGER_ASSETS)
    return {
        name: (root / name).read_bytes()
        for name in ("swagger-ui-bundle.min.js", "swagger-ui.min.css")
    }


def local_config() -> bytes:
    """What the page reads at `/config.json` on the local server: the API is this origin and
    no sign-in is needed (the server acts as its `--tenant`/`--principal`)."""
    return orjson.dumps({"api": "", "auth": None, "openapi": "/openapi.json"})


def _ok(body: bytes, ctype: str, *, csp: str = CSP, cache: str = "no-cache") -> Answer:
    headers = [
        ("Content-Type", ctype),
        ("Cache-Control", cache),
        ("Content-Security-Policy", csp),
        *HARDENING,
    ]
    return Answer(200, headers, body)


def _not_found(path: str) -> Answer:
    body = orjson.dumps(
        {
            "type": "urn:caseshelf:problem:not-found",
            "title": "Not Found",
            "status": 404,
            "detail": f"no UI file {path}",
        }
    )
    return Answer(404, [("Content-Type", "application/problem+json"), *HARDENING], body)


def wants_page(accept: str | None) -> bool:
    """A browser's navigation: `text/html` is named before any JSON type (a `fetch()` or an
    API client names JSON or `*/*` only)."""
    if not accept:
        return False
    for part in accept.lower().split(","):
        kind = part.split(";", 1)[0].strip()
        if kind in {"text/html", "application/xhtml+xml"}:
            return True
        if kind.endswith("json") or kind == "*/*":
            return False
    return False


def is_ui_request(method: str, path: str, accept: str | None) -> bool:
    if method not in {"GET", "HEAD"}:
        return False
    if path in {"/", CONFIG_PATH, SWAGGER_PATH} or path.startswith(STATIC_PREFIX):
        return True
    if path.startswith(_NOT_PAGES) or path.endswith("/download") or _FILE_PATH.search(path):
        return False
    return wants_page(accept)


def answer(method: str, path: str, accept: str | None) -> Answer | None:
    """The UI's answer to a request, or None when the request is the API's."""
    if not is_ui_request(method, path, accept):
        return None
    if path == CONFIG_PATH:
        return _ok(local_config(), "application/json")
    if path == SWAGGER_PATH:
        return _ok(static_files()["swagger.html"], _TYPES[".html"], csp=SWAGGER_CSP)
    if path.startswith(STATIC_PREFIX):
        name = path[len(STATIC_PREFIX) :]
        if name.startswith("swagger-ui/"):
            asset = _swagger_assets().get(name[len("swagger-ui/") :])
            if asset is None:
                return _not_found(path)
            return _ok(asset, content_type(name), csp=SWAGGER_CSP)
        body = static_files().get(name)
        if body is None or name == "index.html":
            return _not_found(path)
        return _ok(body, content_type(name))
    # Every page is the one document; the script reads the path and draws the page. The same
    # path answers JSON to an API client: caches must tell the two apart.
    page = _ok(static_files()["index.html"], _TYPES[".html"], cache="no-store")
    page.headers.append(("Vary", "Accept"))
    return page


__all__ = [
    "CSP",
    "Answer",
    "answer",
    "content_type",
    "is_ui_request",
    "static_files",
    "wants_page",
]
