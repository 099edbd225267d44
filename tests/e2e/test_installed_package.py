"""caseshelf as a user gets it: the wheel and the sdist built from this tree, checked as a package
index would, installed into a fresh virtualenv in a temporary directory with no checkout in
reach, and the README's tour and docs/python.md run there.

The base install comes first, alone: the tour (register, ls, cases, diff, subset, export,
`caseshelf serve` with the UI answering) needs nothing more, and a feature of an extra says
which `pip install` line brings it. Then the extras docs/python.md uses are added and every one of
its snippets runs against the installed package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import boto3
import httpx
import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DOC = REPO / "docs" / "python.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGE_URL = "http://127.0.0.1:8000"
# The base install is the client, the CLI, the embedded store and the local server: none of these.
# inspect_ai as the consumers' tests pin it (pyproject.toml's `consumers` extra)
INSPECT_PIN = "inspect-ai==0.3.285"
PACKAGED = {"shared", "pyproject.toml", "README.md", "LICENSE"}
HEAVY = ("boto3", "botocore", "pyarrow", "pandas", "datasets", "numpy", "zstandard")


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{argv}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc  # type: ignore[no-any-return]


def _pip_install(venv: Path, *requirements: str) -> None:
    """Install into the virtualenv with this environment's pip run on the virtualenv's own
    interpreter (`pip --python`): the virtualenv needs no pip of its own, and the bundled one
    (Python's ensurepip) resolves the extras' requirements several times slower."""
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    # Nothing of this checkout on the path: pip would count a caseshelf it finds as installed.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    _run([*pip, "install", "-q", "--no-compile", *requirements], env=env)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and the sdist, built as a release would build them, in a copy of the tree
    that holds only what git tracks (no virtualenvs, no stores)."""
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src") / "caseshelf"
    files = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO)
    for rel in filter(None, files.stdout.split("\0")):
        if (REPO / rel).is_file() and rel.split("/")[0] in PACKAGED:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)])
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the base install of the wheel, away from the checkout."""
    where = tmp_path_factory.mktemp("venv") / "v"
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    _pip_install(where, str(next(dist.glob("caseshelf-*.whl"))))
    return where


@pytest.fixture
def user(tmp_path: Path, venv: Path) -> Iterator[dict[str, str]]:
    """The environment of a user of the installed package: its own HOME and data directories,
    the virtualenv first on PATH, and nothing of this checkout or this process's caseshelf
    settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CASESHELF_", "PYTHON"))}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_DATA_HOME=str(tmp_path / "home" / ".local" / "share"),
        XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"),
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",  # `caseshelf serve` prints its URL before it blocks
        CASESHELF_HOME=str(tmp_path / "store"),
    )
    (tmp_path / "home").mkdir()
    yield env


def test_the_built_artifacts_pass_the_package_index_checks(dist: Path) -> None:
    # When twine checks the wheel and the sdist as an index would
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())])
    # Then the wheel carries the package whole, typed, with its metadata and licence
    wheel = next(dist.glob("caseshelf-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(meta_name).decode())
    assert "caseshelf/py.typed" in names
    assert "caseshelf/functions/registry.py" in names
    assert any(n.startswith("caseshelf/ui/static/") for n in names)
    assert any(n.endswith("LICENSE") for n in names)
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11"
    assert meta.get_all("Project-URL")
    assert meta.get_all("Classifier")
    # And the base requirements pull none of the heavy packages (only extras do)
    base = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert not [r for r in base if r.split(">")[0].split("[")[0].strip().lower() in HEAVY]
    extras = set(meta.get_all("Provides-Extra") or [])
    assert {"aws", "pandas", "hf", "parquet"} <= extras


def test_the_readme_tour_runs_from_the_installed_package(
    tmp_path: Path, user: dict[str, str], venv: Path
) -> None:
    work = tmp_path / "evals"
    shutil.copytree(EXAMPLES, work / "examples")

    def cs(*args: str) -> str:
        return _run(["caseshelf", *args], cwd=work, env=user).stdout

    # The version the command and the package say is the same
    version = _run(
        ["python", "-c", "import caseshelf; print(caseshelf.__version__)"], cwd=work, env=user
    ).stdout.strip()
    assert cs("--version").strip() == f"caseshelf {version}"
    # Register, list, read, diff, subset, export
    assert "registered repo-smoke@1.0.0" in cs("register", "examples/repo-smoke-1.0.0.json")
    assert "registered repo-smoke@1.1.0" in cs("register", "examples/repo-smoke-1.1.0.json")
    assert "registered arith@1.0.0" in cs("register", "examples/arith.yaml")
    listed = json.loads(cs("ls", "--json"))
    assert {d["id"] for d in listed["items"]} == {"arith", "repo-smoke"}
    cases = json.loads(cs("cases", "arith", "--json"))
    assert [c["id"] for c in cases["items"]] == ["add", "multiply", "train"]
    diff = json.loads(cs("diff", "repo-smoke@1.0.0", "1.1.0", "--json"))
    assert diff["summary"]["added"] == 1
    sub = json.loads(cs("subset", "arith", "--tags", "easy", "--json"))
    assert sub["case_ids"] == ["add", "multiply"]
    cs("export", "repo-smoke@1.1.0", "--to", str(work / "out"))
    assert (work / "out" / "manifest.json").is_file()
    # No module of an extra was needed for any of it
    probe = (
        "import sys, caseshelf; cs = caseshelf.connect(); cs.get('arith@1.0.0'); "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    assert _run(["python", "-c", probe], cwd=work, env=user).stdout.strip() == "[]"
    # A feature of an extra names the line that installs it
    failed = subprocess.run(
        ["python", "-c", "import caseshelf; caseshelf.connect().to_pandas('arith')"],
        cwd=work,
        env=user,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode != 0
    assert "pip install 'caseshelf[pandas]'" in failed.stderr


def test_caseshelf_serve_from_the_installed_package_answers_the_api_and_the_ui(
    tmp_path: Path, user: dict[str, str]
) -> None:
    _run(["caseshelf", "register", str(EXAMPLES / "arith.yaml")], cwd=tmp_path, env=user)
    proc = subprocess.Popen(
        ["caseshelf", "serve", "--port", "0"],
        cwd=tmp_path,
        env=user,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = re.search(r"http://\S+", first)
        assert url, first
        base = url.group(0)
        with httpx.Client(base_url=base, timeout=60) as http:
            got = http.get("/datasets/arith/versions/latest")
            assert got.status_code == 200, got.text
            assert got.json()["case_count"] == 3
            page = http.get("/")
            assert page.status_code == 200
            assert "text/html" in page.headers["content-type"]
            assert http.get("/openapi.json").json()["info"]["title"] == "caseshelf"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.fixture
def with_extras(venv: Path, dist: Path) -> Path:
    """The same virtualenv with the extras docs/python.md uses (pandas, Hugging Face, AWS,
    inspect_ai: the release the consumers' tests pin)."""
    wheel = next(dist.glob("caseshelf-*.whl"))
    extras = f"{wheel}[pandas,hf,aws,inspect]"
    _pip_install(venv, extras, INSPECT_PIN)
    return venv


def test_every_python_doc_snippet_runs_on_the_installed_package(
    tmp_path: Path, user: dict[str, str], with_extras: Path, moto_server: str, aws_env: None
) -> None:
    # Given the page's bucket, a local server on the page's store, and the page as a script
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket="evals")
    env = {**user, "AWS_ENDPOINT_URL": moto_server}
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        env[var] = os.environ[var]
    env["AWS_SHARED_CREDENTIALS_FILE"] = "/dev/null"
    env.pop("CASESHELF_HOME")  # the page uses the store connect() finds in its directory
    store = tmp_path / ".caseshelf"
    server = subprocess.Popen(
        ["caseshelf", "serve", "--port", "0"],
        cwd=tmp_path,
        env={**env, "CASESHELF_HOME": str(store)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        base = re.search(r"http://\S+", server.stdout.readline())
        assert base
        blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
        script = tmp_path / "page.py"
        script.write_text(
            "\n".join(b.replace(PAGE_URL, base.group(0)) for b in blocks), encoding="utf-8"
        )
        # When the page runs as a script with the installed package
        proc = subprocess.run(
            [str(with_extras / "bin" / "python"), str(script)],
            cwd=tmp_path,
            env={**env, "CASESHELF_HOME": str(store)},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
    # Then it runs to the end and prints what the page says it shows
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "1.0.0 sha256:" in proc.stdout
    assert "add What is 2 + 2?" in proc.stdout
    assert (tmp_path / "exported" / "manifest.json").is_file()
