"""A presigned URL fetched by the client (`caseshelf.client.urlget`), against a real HTTP server
on loopback: the body a piece at a time, an error answer as its typed error, a redirect never
followed, and a body cut short an error, never a short download that looks whole."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import caseshelf
from caseshelf.client.urlget import get_url
from caseshelf.domain.errors import Forbidden, Upstream
from tests.helpers import self_signed_cert

pytestmark = pytest.mark.integration

BODY = bytes(range(256)) * 4096  # 1 MiB


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/whole":
            self._send(200, BODY, len(BODY))
        elif self.path == "/expired":
            self._send(403, b"<Error><Code>AccessDenied</Code></Error>", None)
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/whole")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/cut":
            self._send(200, BODY[:1000], len(BODY))  # says 1 MiB, sends 1,000 bytes, closes
            self.close_connection = True

    def _send(self, status: int, body: bytes, length: int | None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_body_comes_whole_a_piece_at_a_time(server: str) -> None:
    with get_url(f"{server}/whole", 100_000, timeout=30) as (length, pieces):
        got = list(pieces)
    assert length == len(BODY)
    assert b"".join(got) == BODY
    assert max(map(len, got)) <= 100_000 and len(got) == 11


def test_an_error_answer_is_its_typed_error_and_a_redirect_is_not_followed(server: str) -> None:
    denied = "HTTP 403 Forbidden: <Error><Code>AccessDenied"
    with pytest.raises(Forbidden, match=denied), get_url(f"{server}/expired", 1 << 20, timeout=30):
        pass
    moved = pytest.raises(caseshelf.CaseshelfError, match="HTTP 302")
    with moved, get_url(f"{server}/moved", 1 << 20, timeout=30):
        pass


def test_a_body_cut_short_is_an_error_and_leaves_no_file(server: str, tmp_path: Path) -> None:
    cut = pytest.raises(Upstream, match="closed after 1,000 of 1,048,576 bytes")
    with cut, get_url(f"{server}/cut", 1 << 20, timeout=30) as (_, pieces):
        b"".join(pieces)
    # Through the client's download path: nothing written that looks whole
    out = tmp_path / "out"
    out.mkdir()
    target = out / "doc.json"
    with caseshelf.connect(home=tmp_path / "home") as cs:
        with pytest.raises(Upstream, match="closed after"):
            cs._fetch(f"{server}/cut", target, None)
        assert list(out.iterdir()) == []
        cs._fetch(f"{server}/whole", target, None)
    assert target.read_bytes() == BODY
    assert [p.name for p in out.iterdir()] == ["doc.json"]


def test_a_server_that_is_not_there_is_upstream(tmp_path: Path) -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), _Handler) as gone:
        port = gone.server_address[1]
    refused = pytest.raises(Upstream, match=f"cannot fetch 127.0.0.1:{port}")
    with refused, get_url(f"http://127.0.0.1:{port}/whole", 1 << 20, timeout=30):
        pass


def test_https_verifies_the_certificate_as_httpx_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed_cert(tmp_path, "127.0.0.1")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{srv.server_address[1]}/whole"
    try:
        # A certificate nobody vouches for is refused (certifi's store, as httpx's)
        for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
            monkeypatch.delenv(name, raising=False)
        refused = pytest.raises(Upstream, match="CERTIFICATE_VERIFY_FAILED")
        with refused, get_url(url, 1 << 20, timeout=30):
            pass
        # SSL_CERT_FILE names the store to trust, as it does for httpx
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        with get_url(url, 1 << 20, timeout=30) as (length, pieces):
            assert (length, b"".join(pieces)) == (len(BODY), BODY)
    finally:
        srv.shutdown()
        srv.server_close()
