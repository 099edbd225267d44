"""The embedded store's upload tokens, the upload request model, and archived case-directory
trees kept inside themselves."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from caseshelf.adapters.localfs import LocalBlobStore, UploadTokens
from caseshelf.domain.errors import BadRequest, Forbidden
from caseshelf.services.jobs import BenchmarkUpload, TasksUpload, parse_upload
from caseshelf.services.tasks import Tree, case_dirs_from_tree

pytestmark = pytest.mark.integration

KEY = "t/acme/uploads/0123456789abcdef0123456789abcdef/rows.jsonl"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_names_its_key_until_it_expires() -> None:
    clock = Clock()
    tokens = UploadTokens(b"k" * 32, clock=clock)
    token = tokens.sign(KEY, 60)
    assert tokens.verify(token) == KEY
    clock.now += 61
    with pytest.raises(Forbidden, match="expired"):
        tokens.verify(token)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # signature altered
        lambda t: "e30" + t[t.index(".") :],  # payload swapped for {}
        lambda t: t.split(".")[0],  # no signature
        lambda t: "",
    ],
)
def test_an_altered_token_is_forbidden(mangle: Callable[[str], str]) -> None:
    tokens = UploadTokens(b"k" * 32)
    with pytest.raises(Forbidden):
        tokens.verify(mangle(tokens.sign(KEY, 60)))


def test_a_token_of_another_secret_is_forbidden() -> None:
    token = UploadTokens(b"a" * 32).sign(KEY, 60)
    with pytest.raises(Forbidden, match="signature"):
        UploadTokens(b"b" * 32).verify(token)


def test_only_tenant_keys_are_signed() -> None:
    tokens = UploadTokens()
    for key in ("uploads/x", "t/../etc/passwd", "t/acme"):
        with pytest.raises(BadRequest):
            tokens.sign(key, 60)


def test_the_store_answers_upload_urls_only_when_published(tmp_path: Path) -> None:
    assert LocalBlobStore(tmp_path / "a").presign_put(KEY) is None
    store = LocalBlobStore(tmp_path / "b", public_url="http://127.0.0.1:8000/")
    url = store.presign_put(KEY)
    assert url is not None and url.startswith("http://127.0.0.1:8000/_uploads/")
    token = url.rsplit("/", 1)[1]
    # The body is written whole, with S3's ETag (the MD5)
    key, etag = store.receive_upload(token, io.BytesIO(b"hello world"), 11)
    assert (key, store.get(KEY), etag) == (KEY, b"hello world", "5eb63bbbe01eeed093cb22bb8f5acdc3")
    # A body shorter than announced writes nothing
    with pytest.raises(BadRequest, match="ended after 3 of 10"):
        store.receive_upload(token, io.BytesIO(b"abc"), 10)
    assert store.get(KEY) == b"hello world"


def test_an_upload_request_is_a_benchmark_unless_it_says_tasks() -> None:
    plain = parse_upload({"filename": "rows.jsonl", "recipe": "gsm8k"}).root
    assert isinstance(plain, BenchmarkUpload) and plain.kind == "benchmark"
    tasks = parse_upload({"kind": "tasks", "filename": "t.zip", "format": "harbor"}).root
    assert isinstance(tasks, TasksUpload) and tasks.skip_invalid is False
    with pytest.raises(BadRequest, match="kind is 'benchmark'"):
        parse_upload({"kind": "rows", "filename": "x"})
    with pytest.raises(BadRequest, match="unknown key 'recipe'"):
        parse_upload({"kind": "tasks", "filename": "t.zip", "format": "harbor", "recipe": "r"})


def _tree(eval_yaml: str) -> Tree:
    return Tree(
        "demo",
        {
            "demo/eval.yaml": eval_yaml.encode(),
            "demo/cases/c1/input.yaml": b"prompt: hello\n",
        },
    )


def test_an_archived_case_tree_is_read_inside_itself(tmp_path: Path) -> None:
    body, warnings = case_dirs_from_tree(_tree("name: demo\ndataset:\n  path: cases\n"))
    assert body["id"] == "demo" and body["cases"][0]["inputs"]["user"] == "hello"
    assert warnings == []
    outside = f"name: demo\ndataset:\n  path: cases\nrunner:\n  plugin_dirs: [{tmp_path}]\n"
    with pytest.raises(BadRequest, match="plugin_dirs"):
        case_dirs_from_tree(_tree(outside))
    with pytest.raises(BadRequest, match=r"no eval\.yaml"):
        case_dirs_from_tree(Tree("x", {"a/b/eval.yaml": b"{}"}))
