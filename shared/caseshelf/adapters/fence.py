"""The source fence: which sources a request over HTTP may make the server read.

A server must not become a way into what only it can reach. Over the API (the deployed
functions and `caseshelf serve` alike) a source is one of:

- an upload (`POST /uploads`) or inline text: nothing for the server to fetch;
- `hf://owner/name`: read from the Hugging Face endpoint the deployment configures;
- `https://` on a host the deployment allows (`CASESHELF_SOURCE_HOSTS`: exact names or
  `*.suffix`), resolving to public addresses only, on every redirect hop too. The name is
  resolved once per request, and the connection goes to the address that was checked (the
  name kept for SNI, the certificate and `Host`), so a DNS answer that changes between the
  check and the connection (DNS rebinding) reaches nothing. An IPv6 address that carries an
  IPv4 one (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is judged by
  the IPv4 address too;
- `s3://` inside the caller's own tenant area of the registry's bucket (`t/<tenant>/`), or
  anywhere in a bucket the deployment lists (`CASESHELF_SOURCE_BUCKETS`).

Never a local path (the server's disk: its password file, another tenant's packs by path),
never loopback, private or link-local addresses (the server itself, the instance metadata
service), never plain `http://`. Remote reads have connect and read timeouts, so a source
that stalls ends as a 502 instead of holding a worker. The CLI on the embedded store is not
behind this fence: it reads the files of the user who runs it.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

from caseshelf.adapters.sources import UrlPolicy
from caseshelf.domain.errors import BadRequest, CaseshelfError, Forbidden, NotFound, Upstream
from caseshelf.domain.recipe import display_url

FIELD = "source.url"
MAX_REDIRECTS = 5


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    """Whether `host` is one of `patterns`: an exact name, or `*.suffix` for any name under
    the suffix (not the suffix itself). Case-insensitive; a trailing dot is ignored."""
    host = host.lower().rstrip(".")
    for pattern in patterns:
        p = pattern.lower().rstrip(".")
        if p.startswith("*."):
            if host.endswith(p[1:]) and len(host) > len(p) - 1:
                return True
        elif host == p:
            return True
    return False


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, where its form says it does: IPv4-mapped
    (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`, and the
    local-use `64:ff9b:1::/48`, its last 32 bits) or 6to4 (`2002:aabb:ccdd::`)."""
    if not isinstance(addr, ipaddress.IPv6Address):
        return None
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr in _NAT64 or addr in _NAT64_LOCAL or (addr in _IPV4_COMPATIBLE and int(addr) > 1):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def public_addresses(host: str, url: str) -> str:
    """Resolve `host` once and answer the address to connect to; refuse a host that is, or
    resolves to, anything but public unicast addresses (an IPv6 address carrying an IPv4 one is
    judged by both)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        raise BadRequest(
            f"source {display_url(url)}: cannot resolve {host!r}", field=FIELD
        ) from None
    found: list[str] = []
    for info in infos:
        raw = str(info[4][0]).split("%", 1)[0]
        addr = ipaddress.ip_address(raw)
        inner = embedded_ipv4(addr)
        for judged in (addr, inner) if inner is not None else (addr,):
            if not judged.is_global or judged.is_multicast:
                shown = f"{addr}, which carries {inner}" if inner is not None else str(addr)
                raise Forbidden(
                    f"source {display_url(url)}: {host} is not a public address ({shown})",
                    field=FIELD,
                )
        found.append(raw)
    if not found:
        raise BadRequest(f"source {display_url(url)}: cannot resolve {host!r}", field=FIELD)
    return found[0]


def _safe_key(key: str) -> bool:
    """A key with no empty, `.` or `..` segment and no backslash (a trailing `/` is a prefix)."""
    segments = key.split("/")
    return (
        bool(key)
        and "\\" not in key
        and all(s not in ("", ".", "..") for s in segments[:-1])
        and segments[-1] not in (".", "..")
    )


@dataclass(frozen=True)
class SourceFence(UrlPolicy):
    """The `UrlPolicy` of a request over HTTP (see the module docstring).

    `own_prefix` is the caller's area, `s3://<registry bucket>/t/<tenant>/` (None on the
    embedded store, whose objects are files); `buckets` the buckets readable as a whole;
    `hosts` the https host patterns."""

    allow_local: bool = False
    allow_private_hosts: bool = False
    own_prefix: str | None = None
    buckets: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    resolve: Callable[[str, str], str] = field(default=public_addresses, compare=False)

    def check(self, url: str) -> str:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError:
            raise BadRequest(f"source {url!r} is not a valid URL", field=FIELD) from None
        scheme = parts.scheme.lower()
        if scheme == "s3":
            return self._check_s3(url, parts.netloc, parts.path.lstrip("/"))
        if scheme == "https":
            self.check_host(url)
            return url
        if scheme in ("", "file") or len(scheme) == 1:
            raise Forbidden(
                f"source {url!r}: local paths are not readable over the API; upload the file "
                "(POST /uploads) or give an https:// or s3:// URL it may read",
                field=FIELD,
            )
        raise Forbidden(
            f"source {display_url(url)}: only https://, s3:// and hf:// sources are read "
            "over the API",
            field=FIELD,
        )

    def check_host(self, url: str) -> str:
        """Refuse an https URL whose host is not allowed or not public (every redirect hop
        is checked with this too); answer the address it resolved to, the one to connect to."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme.lower() != "https":
            raise Forbidden(f"source {display_url(url)}: only https:// is read", field=FIELD)
        if parts.username or parts.password:
            raise Forbidden(f"source {display_url(url)}: no credentials in the URL", field=FIELD)
        if not host_allowed(host, self.hosts):
            allowed = ", ".join(self.hosts) or "none"
            raise Forbidden(
                f"source {display_url(url)}: host {host!r} is not one this deployment reads "
                f"from (CASESHELF_SOURCE_HOSTS: {allowed})",
                field=FIELD,
            )
        return self.resolve(host, url)

    def _check_s3(self, url: str, bucket: str, key: str) -> str:
        if not bucket:
            raise BadRequest(f"source {url!r}: an s3:// URL names a bucket", field=FIELD)
        if not _safe_key(key) and key:
            raise BadRequest(f"source {display_url(url)}: the key is not a safe path", field=FIELD)
        if bucket in self.buckets:
            return url
        if self.own_prefix is not None and url.startswith(self.own_prefix) and _safe_key(key):
            return url
        where = "your own tenant's area" if self.own_prefix else "no tenant area on this server"
        raise Forbidden(
            f"source {display_url(url)}: outside {where} and not in a bucket this deployment "
            f"lists (CASESHELF_SOURCE_BUCKETS: {', '.join(self.buckets) or 'none'})",
            field=FIELD,
        )


@dataclass(frozen=True)
class Timeouts:
    connect: float = 10.0
    read: float = 60.0


def fenced_opener(
    fence: SourceFence, timeouts: Timeouts, s3_client: Callable[[], Any]
) -> Callable[[str], IO[bytes]]:
    """Open a source the fence allowed: https through a session that checks every redirect
    hop and never waits longer than `timeouts`; s3 with a client built with them."""

    def open_remote(url: str) -> IO[bytes]:
        import smart_open  # lazy: optional [http] extra, ~230 ms, on the first remote read
        from smart_open.compression import compression_wrapper  # lazy: as smart_open

        scheme = urlsplit(url).scheme.lower()
        if scheme == "https":
            params: dict[str, Any] = {
                "session": fenced_session(fence),
                "timeout": (timeouts.connect, timeouts.read),
            }
        else:
            params = {"client": s3_client()}
        try:
            raw = smart_open.open(url, "rb", transport_params=params, compression="disable")
        except CaseshelfError:
            raise
        except FileNotFoundError:
            raise NotFound(f"source {display_url(url)}: not found", field=FIELD) from None
        except Exception as exc:
            raise _upstream(url, exc) from None
        # Decompression sits above the guard: a corrupt stream stays a 400, a stalled or
        # dropped connection is a 502.
        guarded = io.BufferedReader(_Guarded(raw, url), buffer_size=1 << 20)
        name = urlsplit(url).path.rsplit("/", 1)[-1]
        wrapped: IO[bytes] = compression_wrapper(guarded, "rb", filename=name)
        return wrapped

    return open_remote


def _transport_errors() -> tuple[type[BaseException], ...]:
    import botocore.exceptions  # lazy: optional [aws] extra
    import requests  # lazy: optional [http] extra (smart_open[http]), ~65 ms
    import urllib3.exceptions  # lazy: comes with requests, as above

    return (
        requests.RequestException,
        urllib3.exceptions.HTTPError,
        botocore.exceptions.BotoCoreError,
        botocore.exceptions.ClientError,
        TimeoutError,
        ConnectionError,
    )


class _Guarded(io.RawIOBase):
    """A remote stream whose transport failures (timeouts, resets) surface as `Upstream`."""

    def __init__(self, inner: Any, url: str) -> None:
        self.inner, self.url = inner, url
        self.errors = _transport_errors()

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except CaseshelfError:
            raise
        except self.errors as exc:
            raise _upstream(self.url, exc) from None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return bool(self._call(self.inner.seekable))

    def readinto(self, buffer: Any) -> int:
        data = self._call(self.inner.read, len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._call(self.inner.seek, offset, whence))

    def tell(self) -> int:
        return int(self._call(self.inner.tell))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.inner.close()
        super().close()


def _upstream(url: str, exc: BaseException) -> CaseshelfError:
    """A remote read's failure as a domain error: a source that fails is a 502; an `s3://` one
    whose store stayed unavailable through its retries (throttled, a 503) is the registry's own
    storage failing, a 503 (`caseshelf.adapters.aws`)."""
    from caseshelf.adapters.aws import is_transient, unavailable  # lazy: botocore, [aws] extra

    inner: BaseException | None = exc
    while inner is not None:
        if isinstance(inner, CaseshelfError):
            return inner
        if urlsplit(url).scheme.lower() == "s3" and is_transient(inner):
            return unavailable(inner, f"source {display_url(url)}", key=url, field=FIELD)
        inner = inner.__cause__ or inner.__context__
    return Upstream(
        f"source {display_url(url)}: cannot be read ({type(exc).__name__})", field=FIELD
    )


def fenced_session(fence: SourceFence) -> Any:
    """A requests session whose every request, redirects included, passes the fence, and
    connects to the address the fence checked (never resolving the name again)."""
    import requests  # lazy: optional [http] extra (smart_open[http]), ~65 ms
    from requests.adapters import HTTPAdapter  # lazy: as requests

    class FencedAdapter(HTTPAdapter):
        def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            url = str(request.url)
            request.fenced_address = fence.check_host(url)
            # The name goes in `Host` (set anew on every hop: a redirect copies the headers)
            request.headers["Host"] = urlsplit(url).netloc
            return super().send(request, *args, **kwargs)

        def build_connection_pool_key_attributes(
            self, request: Any, verify: Any, cert: Any = None
        ) -> tuple[dict[str, Any], dict[str, Any]]:
            host_params, pool_kwargs = super().build_connection_pool_key_attributes(
                request, verify, cert
            )
            address = getattr(request, "fenced_address", None)
            if address is None:  # never connect to a name the fence has not resolved
                raise Forbidden(f"source {display_url(str(request.url))}: not checked")
            name = host_params["host"]
            host_params["host"] = address
            if host_params["scheme"] == "https":
                pool_kwargs["server_hostname"] = name  # SNI
                pool_kwargs["assert_hostname"] = name  # the certificate names the host
            return host_params, pool_kwargs

    session = requests.Session()
    session.max_redirects = MAX_REDIRECTS
    session.trust_env = False  # no proxy or .netrc from the server's environment
    adapter = FencedAdapter(max_retries=0)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
