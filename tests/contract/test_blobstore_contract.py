"""The BlobStore contract, one suite for every backend (embedded files, moto, moto server)."""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urlsplit

import pytest

from caseshelf.adapters.localfs import WRITE_PIECE_BYTES as PIECE
from caseshelf.adapters.s3 import S3BlobStore
from caseshelf.domain.errors import NotFound
from tests.conftest import Backend

pytestmark = pytest.mark.contract

KEY = "t/acme/packs/abc"


def http(method: str, url: str, data: bytes | None = None) -> bytes:
    """Fetch a presigned URL the way a client would (moto in-process intercepts `requests`)."""
    if url.startswith("http://127.0.0.1"):
        headers = {"Content-Type": "application/octet-stream"} if data is not None else {}
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return bytes(resp.read())
    import requests

    resp = requests.request(method, url, data=data, timeout=10)
    resp.raise_for_status()
    return resp.content


def test_put_if_absent_writes_once(backend: Backend) -> None:
    # Given an empty store
    store = backend.store
    # When the same key is written twice, the second time with other bytes
    first = store.put_if_absent(KEY, b"one")
    second = store.put_if_absent(KEY, b"two")
    # Then only the first write happened
    assert (first, second) == (True, False)
    assert store.get(KEY) == b"one"


def test_put_if_absent_of_a_large_object_present_is_refused(backend: Backend) -> None:
    # Given a large object (large enough to be checked before uploading)
    body = b"x" * (1024 * 1024 + 1)
    assert backend.store.put_if_absent(KEY, body)
    # When it is written again
    # Then nothing is written and the body is unchanged
    assert backend.store.put_if_absent(KEY, b"y" * (1024 * 1024 + 1)) is False
    assert backend.store.get(KEY) == body


@pytest.mark.parametrize("size", [0, 1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 7])
def test_an_object_reads_back_as_written_whatever_its_size(backend: Backend, size: int) -> None:
    # Given bodies on both sides of the size the embedded store writes a file in pieces of,
    # each byte telling where it is
    body = bytes(i * 7 % 251 for i in range(size))
    # When each is stored by both kinds of write
    assert backend.store.put_if_absent(f"{KEY}-{size}", body)
    backend.store.put(f"t/acme/exports/{size}", body)
    # Then each reads back byte for byte, whole and past a piece's end
    assert backend.store.get(f"{KEY}-{size}") == body
    assert backend.store.get(f"t/acme/exports/{size}") == body
    if size > PIECE:
        assert backend.store.get_range(f"{KEY}-{size}", PIECE - 3, 9) == body[PIECE - 3 : PIECE + 6]


def test_put_replaces(backend: Backend) -> None:
    store = backend.store
    store.put("t/acme/exports/x.json", b"{}", content_type="application/json")
    store.put("t/acme/exports/x.json", b"[1]", content_type="application/json")
    assert store.get("t/acme/exports/x.json") == b"[1]"


def test_missing_object(backend: Backend) -> None:
    # Given a key that was never written
    store = backend.store
    # Then every read says so in its own way
    assert store.exists(KEY) is False
    assert store.head(KEY) is None
    with pytest.raises(NotFound):
        store.get(KEY)
    with pytest.raises(NotFound):
        store.get_range(KEY, 0, 10)
    with pytest.raises(NotFound):
        store.get_range(KEY, 0, 0)
    # And deleting it is not an error
    store.delete(KEY)


def test_head_and_exists(backend: Backend) -> None:
    before = time.time()
    backend.store.put_if_absent(KEY, b"0123456789")
    info = backend.store.head(KEY)
    assert info is not None
    assert (info.key, info.size) == (KEY, 10)
    assert before - 5 <= info.last_modified <= time.time() + 5
    assert backend.store.exists(KEY)


def test_ranged_reads(backend: Backend) -> None:
    # Given an object of 10 bytes
    store = backend.store
    store.put_if_absent(KEY, b"0123456789")
    # Then a range reads those bytes, a range past the end is cut short, past the end is empty
    assert store.get_range(KEY, 0, 3) == b"012"
    assert store.get_range(KEY, 4, 2) == b"45"
    assert store.get_range(KEY, 9, 1) == b"9"
    assert store.get_range(KEY, 7, 100) == b"789"
    assert store.get_range(KEY, 5, 0) == b""
    assert store.get_range(KEY, 10, 5) == b""


def test_delete_then_write_again(backend: Backend) -> None:
    store = backend.store
    store.put_if_absent(KEY, b"one")
    store.delete(KEY)
    assert not store.exists(KEY)
    with pytest.raises(NotFound):
        store.get(KEY)
    # A deleted key can be written again (on a versioned bucket too)
    assert store.put_if_absent(KEY, b"two")
    assert store.get(KEY) == b"two"


def test_list_is_prefix_filtered_and_in_key_order(backend: Backend) -> None:
    store = backend.store
    for key in ("t/acme/x/b", "t/acme/x/a", "t/acme/xy", "t/acme/x/c/d", "t/other/x/a"):
        store.put_if_absent(key, key.encode())
    assert [o.key for o in store.list("t/acme/x/")] == ["t/acme/x/a", "t/acme/x/b", "t/acme/x/c/d"]
    assert [o.key for o in store.list("t/acme/x")] == [
        "t/acme/x/a",
        "t/acme/x/b",
        "t/acme/x/c/d",
        "t/acme/xy",
    ]
    assert [o.size for o in store.list("t/acme/xy")] == [len(b"t/acme/xy")]
    assert list(store.list("t/nobody/")) == []


def test_list_pages_through_more_keys_than_a_page_holds(backend: Backend) -> None:
    # Given more keys than one listing page holds (S3's pages asked 100 keys at a time: the
    # same paging as at its 1,000, over a fifth of the puts)
    store = backend.store
    if isinstance(store, S3BlobStore):
        store = S3BlobStore(store.client, store.bucket, list_page=100)
    keys = [f"t/acme/blobs/{i:05d}" for i in range(203)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: store.put_if_absent(k, b"."), keys))
    # When they are listed
    listed = [o.key for o in store.list("t/acme/blobs/")]
    # Then every one comes back, in order
    assert listed == keys


def test_presigned_urls(backend: Backend) -> None:
    store = backend.store
    store.put_if_absent(KEY, b"pack bytes")
    get_url = store.presign_get(KEY, expires=60)
    put_url = store.presign_put("t/acme/uploads/u1", expires=60)
    if backend.name == "embedded":
        # The embedded store has no URLs; callers stream the body instead.
        assert (get_url, put_url) == (None, None)
        return
    assert get_url and put_url
    assert "t/acme/packs/abc" in get_url
    assert http("GET", get_url) == b"pack bytes"
    http("PUT", put_url, b"uploaded")
    assert store.get("t/acme/uploads/u1") == b"uploaded"


def test_a_presigned_get_names_the_download(backend: Backend) -> None:
    # Given a stored object named by its digest
    store = backend.store
    key = "t/acme/exports/downloads/0123abcd.json"
    store.put(key, b"{}")
    # When a GET URL is presigned for it under the name the user should get
    url = store.presign_get(key, expires=60, filename="gsm8k-1.1.0.json")
    if backend.name == "embedded":
        assert url is None  # no URLs (the local server's: tests/e2e/test_dev_downloads.py)
        return
    assert url is not None
    # Then the URL carries the name, signed, and S3 answers the GET with it
    query = parse_qs(urlsplit(url).query)
    wanted = 'attachment; filename="gsm8k-1.1.0.json"'
    assert query["response-content-disposition"] == [wanted]
    assert fetched_headers(url)["Content-Disposition"] == wanted
    # And a name outside plain ASCII is said both ways (RFC 6266)
    other = store.presign_get(key, expires=60, filename="données-1.0.0.json")
    assert other is not None
    got = fetched_headers(other)["Content-Disposition"]
    assert got == (
        "attachment; filename=\"donn_es-1.0.0.json\"; filename*=UTF-8''donn%C3%A9es-1.0.0.json"
    )
    # Without a name, no header is asked for
    bare = store.presign_get(key, expires=60)
    assert bare is not None and "response-content-disposition" not in bare


def fetched_headers(url: str) -> dict[str, str]:
    """The answer's headers of a GET of a presigned URL (over HTTP from the moto server; moto
    in process intercepts `requests`)."""
    if url.startswith("http://127.0.0.1"):
        with urllib.request.urlopen(url, timeout=10) as resp:
            return dict(resp.headers.items())
    import requests

    resp = requests.get(url, timeout=10)
    resp.raise_for_status()
    return dict(resp.headers)


def test_transient_areas_are_tagged_for_lifecycle(backend: Backend) -> None:
    if backend.s3 is None:
        pytest.skip("object tags exist on S3 only")
    # When objects are written into a tenant's exports and uploads areas, and elsewhere
    backend.store.put("t/acme/exports/e1/a.json", b"{}")
    backend.store.put_if_absent("t/acme/uploads/u2", b"{}")
    backend.store.put_if_absent(KEY, b"{}")
    bucket = backend.settings.bucket

    def tags(key: str) -> list[dict[str, str]]:
        return list(backend.s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"])

    # Then the transient ones carry the area tag the bucket's lifecycle rules filter on
    assert tags("t/acme/exports/e1/a.json") == [{"Key": "caseshelf-area", "Value": "exports"}]
    assert tags("t/acme/uploads/u2") == [{"Key": "caseshelf-area", "Value": "uploads"}]
    assert tags(KEY) == []


def test_put_file_stores_the_file_as_put_would_and_tags_it(backend: Backend, tmp_path) -> None:
    # Given a local file larger than one multipart part (boto3 splits above 8 MiB)
    body = bytes(range(256)) * (9 * 4096)
    path = tmp_path / "manifest.json"
    path.write_bytes(body)
    # When it is put from disk into an export area
    backend.store.put_file("t/acme/exports/e2/manifest.json", path, content_type="application/json")
    # Then the object holds its bytes, and carries the area tag the lifecycle rules filter on
    assert backend.store.get("t/acme/exports/e2/manifest.json") == body
    if backend.s3 is not None:
        got = backend.s3.get_object_tagging(
            Bucket=backend.settings.bucket, Key="t/acme/exports/e2/manifest.json"
        )["TagSet"]
        assert got == [{"Key": "caseshelf-area", "Value": "exports"}]


def test_racing_put_if_absent_keeps_one_body(backend: Backend) -> None:
    # When many writers race for one key with different bodies
    bodies = [str(i).encode() * 10 for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda b: backend.store.put_if_absent(KEY, b), bodies))
    # Then exactly one body is there, whole
    assert backend.store.get(KEY) in bodies
