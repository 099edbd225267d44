"""Every ```python block of docs/python.md runs, top to bottom in one namespace, in a fresh
project directory: the page's embedded store is that directory's `.caseshelf/` (as `caseshelf
init` makes it, found by `caseshelf.connect()` from there), the local server of its
HTTP example serves the same store (its URL put where the page says `http://127.0.0.1:8000`),
and the S3 bucket of the export example is a moto server's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.helpers import dev_server

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGE_URL = "http://127.0.0.1:8000"


def blocks() -> list[str]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_page_has_a_snippet_per_operation() -> None:
    code = "\n".join(blocks())
    for op in (
        "connect(",
        ".register(",
        ".register_file(",
        ".validate(",
        ".get(",
        ".cases(",
        ".to_pandas(",
        ".to_hf(",
        "caseshelf.inspect.dataset(",
        ".diff_markdown(",
        ".subset(",
        ".diff(",
        ".download(",
        ".export(",
        ".pull(",
        ".import_(",
        ".preview(",
        ".tag(",
        ".delete(",
        ".revive(",
        ".datasets(",
        ".versions(",
        ".register_recipe(",
        ".pin(",
        ".check(",
        ".update(",
        ".sync(",
        ".load(",
    ):
        assert op in code, f"docs/python.md shows no {op}"


def test_every_snippet_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    aws_env: None,
    moto_server: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("pandas")
    pytest.importorskip("datasets")
    # Given a fresh project directory with its store, a bucket, and the local server on it
    (tmp_path / ".caseshelf").mkdir()
    monkeypatch.chdir(tmp_path)
    for var in ("CASESHELF_HOME", "CASESHELF_API", "CASESHELF_TOKEN", "CASESHELF_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket="evals")
    namespace: dict[str, Any] = {"__name__": "docs_python"}
    with dev_server(tmp_path / ".caseshelf", tenant="local", principal="local") as srv:
        # When every block runs in order
        for i, code in enumerate(blocks()):
            code = code.replace(PAGE_URL, srv.url)
            try:
                exec(compile(code, f"docs/python.md block {i}", "exec"), namespace)
            except Exception as exc:  # name the block that broke
                pytest.fail(f"docs/python.md block {i} failed: {exc!r}\n{code}")
    out = capsys.readouterr().out
    # Then what the page prints is what it says it shows
    assert "1.0.0 sha256:" in out
    assert "add What is 2 + 2?" in out
    assert "no version 9.9.9" in out or "9.9.9" in out
    assert "1 id" in out  # the DataFrame's row and column
    assert "1 inputs.user b" in out  # a case the API refused, named by row and column
    assert "succeeded uploaded sha256:" in out  # a dataset upload on the embedded store
    assert "100 True" in out  # a dataset file registered as it is
    assert namespace["d"].summary.added == 1
    assert namespace["same"].content_digest == namespace["v"].content_digest
    assert (tmp_path / "exported" / "manifest.json").is_file()
    assert (tmp_path / "test_data" / "manifest.json").is_file()
