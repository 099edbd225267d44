"""What the local server (`caseshelf serve`) refuses before any function runs.

A server on a developer's machine is reachable by every page the browser opens. Three rules
keep those pages out, as Jupyter and Vite keep them out of theirs:

- **Host** (DNS rebinding): the `Host` header must name this server: `localhost` (and
  `*.localhost`), `127.0.0.1`, `[::1]`, the address it is bound to, or a name given with
  `--allow-host`; bound to a wildcard address (`0.0.0.0`, `::`), any IP literal too (an IP is
  not a name anyone can point elsewhere). Any port: the port is no defence (a rebinding page
  picks the port it needs) and a tunnel (`ssh -L 9000:localhost:8000`) changes it. Else 421.
- **Cross-site writes**: a write (POST, PUT, PATCH, DELETE) whose `Origin` is neither this
  server's own (`http(s)://` + its `Host`) nor one of `cors_origins`, or that a browser marks
  `Sec-Fetch-Site: cross-site`/`same-site` without such an origin, is 403; so is a CORS
  preflight from such an origin. A write with a body, or naming a type, must say
  `Content-Type: application/json` (415 otherwise): a form or a `no-cors` fetch can send only
  the three CORS-safelisted types, never JSON, without a preflight. A bodiless write (DELETE,
  revive) may name no type, as the API's document describes it and generated clients send it;
  a browser marks every such write with its `Origin`, which the rule above checks. The one
  write whose body is not JSON, the embedded store's upload `PUT /_uploads/<token>`, takes
  bytes of any type, as S3's presigned PUT it stands in for does: a page can send a PUT to
  another origin only after a preflight, and its URL carries a signed token for one key.
- **Token**: a server bound to anything but loopback needs a bearer token on every API call
  (`Authorization: Bearer <token>`): generated at start and printed once, or given
  (`--token`, `CASESHELF_SERVE_TOKEN`; a given token is required on loopback too). The UI's
  files, `/openapi.json`, `/swagger` and the signed upload and download URLs need none; the dev
  identity headers are honoured only on a request that passed this check.

Nothing here reads or writes process state; `LocalGuard` is built once per server.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from caseshelf.domain.errors import BadRequest

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_TYPE = "application/json"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - naming the wildcard, not binding it
TOKEN_ENV = "CASESHELF_SERVE_TOKEN"  # noqa: S105 - the variable's name, not a token
MIN_TOKEN_CHARS = 16


class Headers(Protocol):
    def get(self, name: str, default: None = None) -> str | None: ...


@dataclass(frozen=True)
class Refusal:
    """An answer given instead of the request's: status, the problem's detail and type."""

    status: int
    detail: str
    problem_type: str
    headers: tuple[tuple[str, str], ...] = ()


def is_loopback(host: str) -> bool:
    """Whether binding to `host` listens on loopback only (`localhost`, 127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(32)


def media_type(content_type: str | None) -> str:
    """`application/json; charset=utf-8` -> `application/json` (lower case); `` when absent."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_name(value: str) -> str | None:
    """The name a `Host` header gives (lower case, brackets and port removed), or None when it
    is not a host[:port]."""
    value = value.strip()
    if not value or any(c in value for c in "/\\?#@ \t"):
        return None
    try:
        parts = urlsplit(f"//{value}")
        _ = parts.port  # a port that is not a number
    except ValueError:
        return None
    return parts.hostname or None


@dataclass(frozen=True)
class LocalGuard:
    """The rules of one local server. `token` None: no token is asked for (loopback only)."""

    bound_host: str
    allow_hosts: frozenset[str] = frozenset()
    token: str | None = None
    cors_origins: tuple[str, ...] = ()
    token_generated: bool = False

    @classmethod
    def for_server(
        cls,
        bound_host: str,
        *,
        allow_hosts: Iterable[str] = (),
        token: str | None = None,
        cors_origins: Sequence[str] = (),
    ) -> LocalGuard:
        """The rules for a server bound to `bound_host`: a token is generated when it is not
        loopback and none is given. A given token shorter than 16 characters, or an allowed
        host that is no host name, is a BadRequest."""
        if token is not None and len(token.strip()) < MIN_TOKEN_CHARS:
            raise BadRequest(
                f"the server token must be at least {MIN_TOKEN_CHARS} characters; "
                "leave --token out to have one generated",
                field="--token",
            )
        names = set()
        for name in allow_hosts:
            parsed = host_name(name)
            if parsed is None:
                raise BadRequest(
                    f"--allow-host {name!r} is not a host name (give a name such as "
                    "devbox.example.com, without scheme or path)",
                    field="--allow-host",
                )
            names.add(parsed)
        generated = token is None and not is_loopback(bound_host)
        return cls(
            bound_host=bound_host.strip("[]").lower(),
            allow_hosts=frozenset(names),
            token=new_token() if generated else (token.strip() if token else None),
            cors_origins=tuple(cors_origins),
            token_generated=generated,
        )

    # -- the rules ------------------------------------------------------------------------------

    def check_host(self, host: str | None) -> Refusal | None:
        """421 unless the `Host` header names this server."""
        name = host_name(host or "")
        if name is not None and self._host_allowed(name):
            return None
        shown = "no Host header" if not host else f"Host {host!r}"
        return Refusal(
            421,
            f"{shown} does not name this server; open it as http://localhost:<port>/ or "
            "http://127.0.0.1:<port>/, or start it with --allow-host NAME to answer NAME too "
            "(a page on any other name may be rebinding that name to this machine)",
            "host-not-allowed",
        )

    def _host_allowed(self, name: str) -> bool:
        if name in LOOPBACK_NAMES or name.endswith(".localhost") or name in self.allow_hosts:
            return True
        if name == self.bound_host:
            return True
        return self.bound_host in WILDCARDS and _is_ip(name)

    def check_origin(
        self, method: str, headers: Headers, *, preflight: bool = False
    ) -> Refusal | None:
        """403 for a write (or a preflight) a page of another origin sent."""
        if not preflight and method not in WRITE_METHODS:
            return None
        origin = headers.get("Origin")
        site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
        if origin is not None and origin in self.cors_origins:
            return None
        if origin is not None and not self._own_origin(origin, headers.get("Host")):
            what = f"a page at {origin}"
        elif site in {"cross-site", "same-site"}:
            what = f"a page of another site (Sec-Fetch-Site: {site})"
        else:
            return None
        kind = "a preflight" if preflight else f"a {method}"
        return Refusal(
            403,
            f"{kind} from {what} is refused: this server takes writes from its own pages and "
            "from non-browser clients only (name another origin in CASESHELF_CORS_ORIGINS to "
            "let its pages in)",
            "cross-site",
        )

    @staticmethod
    def _own_origin(origin: str, host: str | None) -> bool:
        if not host:
            return False
        own = host.strip().lower()
        return origin.strip().lower() in {f"http://{own}", f"https://{own}"}

    def check_content_type(
        self, method: str, content_type: str | None, *, has_body: bool, upload: bool
    ) -> Refusal | None:
        """415 for a write that is not JSON: one with a body, or naming a type, must name
        `application/json`; a bodiless one (DELETE, revive) may name none. An upload
        (`PUT /_uploads/<token>`, bytes) is not checked: PUT is never sent across origins
        without a preflight, which `check_origin` refuses, and its URL is a signed one-key
        capability, as S3's presigned PUT is."""
        if method not in WRITE_METHODS or upload:
            return None
        if media_type(content_type) == JSON_TYPE or (not content_type and not has_body):
            return None
        shown = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        return Refusal(
            415,
            f"a {method} with {shown} is refused: send the body as JSON with "
            "Content-Type: application/json",
            "unsupported-media-type",
            (("Accept-Post", JSON_TYPE),) if method == "POST" else (),
        )

    def check_token(self, authorization: str | None) -> Refusal | None:
        """401 unless the request carries this server's token (when it has one)."""
        if self.token is None:
            return None
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8"), self.token.encode("utf-8")
        ):
            return None
        shown = "no token" if not authorization else "a token that is not this server's"
        return Refusal(
            401,
            f"this server needs its token and the request carries {shown}: send "
            "Authorization: Bearer <token> (the CLI and caseshelf.connect() send CASESHELF_TOKEN); "
            "in a browser open the URL with ?token= that `caseshelf serve` printed at start",
            "token-required",
            (("WWW-Authenticate", 'Bearer realm="caseshelf"'),),
        )

    def start_lines(self, url: str) -> list[str]:
        """What `caseshelf serve` prints about the token at start (the token itself only when
        it was generated: a given one is the caller's to keep)."""
        if self.token is None:
            return []
        if self.token_generated:
            return [
                f"Token (every API call needs it; it is printed this once): {self.token}",
                f"Web UI with the token: {url}/?token={self.token}",
                f"CLI and Python client: CASESHELF_API={url} CASESHELF_TOKEN=<the token>",
            ]
        return [f"Every API call needs the token given with --token or ${TOKEN_ENV}."]
