"""The embedded store's presigned GETs: download tokens, what they grant, and the request log
that never shows a token."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from caseshelf.adapters.localfs import LocalBlobStore, UploadTokens
from caseshelf.devserver import redact_tokens
from caseshelf.domain.errors import Forbidden, NotFound

pytestmark = pytest.mark.integration

KEY = "t/acme/exports/downloads/0123abcd.json"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_store_answers_download_urls_only_when_published(tmp_path: Path) -> None:
    # Given a store no server publishes, and one a server at a known address publishes
    bare = LocalBlobStore(tmp_path / "a")
    bare.put(KEY, b"{}")
    store = LocalBlobStore(tmp_path / "b", public_url="http://127.0.0.1:8000/")
    store.put(KEY, b'{"id": "demo"}')
    # Then the first has no URL (its callers read the object) and the second one on the server
    assert bare.presign_get(KEY) is None
    url = store.presign_get(KEY)
    assert url is not None and url.startswith("http://127.0.0.1:8000/_downloads/")
    # And the token opens that object, with its size
    key, fh, size = store.open_download(url.rsplit("/", 1)[1])
    with fh:
        assert (key, fh.read(), size) == (KEY, b'{"id": "demo"}', 14)


def test_a_download_token_expires() -> None:
    clock = Clock()
    tokens = UploadTokens(b"k" * 32, clock=clock)
    token = tokens.sign(KEY, 60, method="GET")
    assert tokens.verify(token, method="GET") == KEY
    clock.now += 61
    with pytest.raises(Forbidden, match="download URL has expired"):
        tokens.verify(token, method="GET")


def test_a_token_grants_its_own_method_only(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "s", public_url="http://127.0.0.1:8000")
    store.put(KEY, b"kept")
    get_token = store.tokens.sign(KEY, 60, method="GET")
    put_token = store.tokens.sign(KEY, 60)
    # A download token never writes
    with pytest.raises(Forbidden, match="not an upload URL"):
        store.receive_upload(get_token, io.BytesIO(b"overwritten"), 11)
    assert store.get(KEY) == b"kept"
    # And an upload token never reads
    with pytest.raises(Forbidden, match="not a download URL"):
        store.open_download(put_token)


def test_a_token_of_another_secret_or_altered_is_forbidden(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "s", public_url="http://127.0.0.1:8000")
    store.put(KEY, b"x")
    foreign = UploadTokens(b"z" * 32).sign(KEY, 60, method="GET")
    with pytest.raises(Forbidden, match="signature"):
        store.open_download(foreign)
    token = store.tokens.sign(KEY, 60, method="GET")
    with pytest.raises(Forbidden):
        store.open_download(token[:-1] + ("A" if token[-1] != "A" else "B"))


def test_a_valid_token_for_a_missing_object_is_not_found(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "s", public_url="http://127.0.0.1:8000")
    with pytest.raises(NotFound):
        store.open_download(store.tokens.sign(KEY, 60, method="GET"))


def test_the_request_log_shows_no_token() -> None:
    line = '"GET /_downloads/eyJ0Ijoi.c2lnbmF0dXJl HTTP/1.1" 200 -'
    assert redact_tokens(line) == '"GET /_downloads/<token> HTTP/1.1" 200 -'
    put = '"PUT /_uploads/eyJ0Ijoi.c2ln?x=1 HTTP/1.1"'
    assert redact_tokens(put) == '"PUT /_uploads/<token>?x=1 HTTP/1.1"'
    assert redact_tokens('"GET /datasets/demo HTTP/1.1"') == '"GET /datasets/demo HTTP/1.1"'
