"""Row sources by `https://` URL through smart_open, against a local HTTP server on loopback."""

from __future__ import annotations

import bz2
import gzip
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from caseshelf.adapters.sources import SourceReader, smart_opener
from caseshelf.domain.errors import NotFound
from caseshelf.domain.recipe import CsvSource, JsonlSource
from tests.serving import server_thread

pytestmark = pytest.mark.e2e

JSONL = b"".join(b'{"q": "q%d", "a": "#### %d"}\n' % (i, i) for i in range(300))
FILES = {
    "/rows.jsonl.gz": gzip.compress(JSONL),
    "/rows.jsonl.bz2": bz2.compress(JSONL),
    "/mmlu.csv": b'"What is 1+1?",1,2,3,4,B\n',
}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            body = FILES.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = server_thread(httpd)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("name", ["/rows.jsonl.gz", "/rows.jsonl.bz2"])
def test_a_compressed_jsonl_is_read_by_url(server: str, name: str) -> None:
    rows = list(SourceReader(smart_opener()).rows(JsonlSource(kind="jsonl", url=server + name)))
    assert len(rows) == 300
    assert rows[299] == (299, {"q": "q299", "a": "#### 299"})


def test_a_headerless_csv_is_read_by_url(server: str) -> None:
    src = CsvSource(kind="csv", header=False, columns=["q", "A", "B", "C", "D", "answer"])
    src = src.model_copy(update={"url": server + "/mmlu.csv"})
    rows = list(SourceReader(smart_opener()).rows(src))
    assert rows == [
        (0, {"q": "What is 1+1?", "A": "1", "B": "2", "C": "3", "D": "4", "answer": "B"})
    ]


def test_a_missing_url_is_not_found_naming_it(server: str) -> None:
    with pytest.raises(NotFound, match=r"nothing\.jsonl"):
        list(
            SourceReader(smart_opener()).rows(
                JsonlSource(kind="jsonl", url=server + "/nothing.jsonl")
            )
        )
