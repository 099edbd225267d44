"""The source fence connects to the address it checked, through the real connect path (requests,
urllib3, sockets on loopback): a name whose DNS answer changes between the check and the
connection (DNS rebinding) never reaches the loopback listener it turned into, and a pinned
connection still speaks to the server by its name (SNI, certificate, `Host`)."""

from __future__ import annotations

import http.server
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters.fence import SourceFence, fenced_session
from tests.helpers import self_signed_cert
from tests.serving import server_thread

pytestmark = pytest.mark.integration

NAME = "rebind.example"
PUBLIC = "93.184.216.34"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback TCP listener nobody accepts on: a connection that reaches it waits in its
    backlog, where the test finds it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock
    sock.close()


def reached(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_a_dns_answer_that_turns_to_loopback_after_the_check_reaches_nothing(
    listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a resolver that answers a public address first and loopback afterwards
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != NAME:
            return real(host, port, *args, **kwargs)
        asked.append(host)
        address = PUBLIC if len(asked) == 1 else "127.0.0.1"
        return real(address, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    session = fenced_session(SourceFence(hosts=(NAME,)))
    port = listener.getsockname()[1]
    # When a source on that name is read (the public address is unreachable here)
    with pytest.raises(Exception):  # noqa: B017 - whichever way the connection fails
        session.get(f"https://{NAME}:{port}/rows.jsonl", timeout=(2, 2))
    # Then the name was resolved once, and the loopback listener was never reached
    assert asked == [NAME]
    assert not reached(listener)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path, dict[str, Any]]]:
    """An HTTPS server on loopback with a certificate for `data.example` only; it records the
    SNI name and the `Host` header it was sent."""
    cert_path, key_path = self_signed_cert(tmp_path, "data.example")
    seen: dict[str, Any] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen["host"] = self.headers.get("Host")
            body = b'{"q": 1}\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_path, key_path)

    def sni(sock: Any, name: str | None, _ctx: Any) -> None:
        seen["sni"] = name

    ctx.sni_callback = sni
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = server_thread(server)
    thread.start()
    yield server.server_address[1], cert_path, seen
    server.shutdown()
    server.server_close()


def test_a_pinned_connection_keeps_the_name_for_sni_the_certificate_and_host(
    tls_server: tuple[int, Path, dict[str, Any]],
) -> None:
    # Given a fence whose resolver answers the server's address for its name
    port, cert, seen = tls_server
    fence = SourceFence(hosts=("data.example",), resolve=lambda host, url: "127.0.0.1")
    # When a source on that name is read
    got = fenced_session(fence).get(f"https://data.example:{port}/rows.jsonl", verify=str(cert))
    # Then it reached the checked address and spoke to it by name: the certificate for
    # data.example verified, and the server saw the name in SNI and in Host
    assert got.status_code == 200 and got.content == b'{"q": 1}\n'
    assert seen == {"sni": "data.example", "host": f"data.example:{port}"}
