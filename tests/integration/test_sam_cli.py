"""The README's deploy command works on a fresh clone as written: `sam validate --lint` and
`sam build` from the repository root, with no template path and no container (samconfig.toml
names infra/template.yaml). `sam deploy --guided` needs an AWS account, so its half is checked
in samconfig.toml: it deploys the built template with the capabilities the template needs.

The build downloads the layer's dependencies for arm64 / Python 3.12 from PyPI the first time
(about two minutes). As `sam build` does for a user (samconfig.toml: `cached = true`), later
builds reuse the layer while shared/ is unchanged; when it changed, the layer's build
(shared/Makefile) runs again with the wheels from pip's cache: SAM keeps its record of what it
built (`build.toml`, beside the build directory) and the builds (`.aws-sam/cache`,
git-ignored). The test builds into a fresh directory each run and keeps that
record at `.aws-sam/tests-build.toml`, so a second run takes seconds; a clean clone has none and
builds everything. So that a fresh clone's suite does not wait for it, the build starts as soon
as the test is collected (`tests/integration/conftest.py`) and runs while the other tests do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.moto_infra import ROOT, load_template

pytestmark = pytest.mark.integration

# `make test` puts aws-sam-cli in a virtualenv of its own (.venv/sam): it pins click below what
# the Hugging Face libraries of the dev extra need.
SAM = (
    shutil.which("sam", path=str(Path(sys.executable).parent.parent / "sam" / "bin"))
    or shutil.which("sam", path=str(Path(sys.executable).parent))
    or shutil.which("sam")
)
PY312_DIRS = sorted(Path("/root/.pyenv/versions").glob("3.12*/bin"))


def sam_env() -> dict[str, str]:
    """The environment `sam` runs in: no telemetry, and a python3.12 on PATH (the functions'
    runtime: a build without a container uses the local interpreter of that version)."""
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
    # pyenv's interpreters before its shims (a shim of a version not selected fails)
    dirs = [str(Path(sys.executable).parent), *map(str, PY312_DIRS)]
    env["PATH"] = os.pathsep.join([*dirs, env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def sam(request: pytest.FixtureRequest) -> str:
    if SAM is None:
        pytest.skip("the sam binary is missing: `make test` installs it in .venv/sam (aws-sam-cli)")
    if getattr(request.config, "sam_build", None) is None:
        # Not started at collection (an xdist worker): start it now, to run while `sam validate`
        # does; tests/integration/conftest.py stops it and removes what it wrote at the end.
        build = Path(tempfile.mkdtemp(prefix="caseshelf-sam-")) / "build"
        request.config.sam_build = (start_build(build), build)  # type: ignore[attr-defined]
    return SAM


def run(sam: str, *args: str, timeout: float = 570) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sam, *args],
        cwd=ROOT,
        env=sam_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_samconfig_points_every_command_at_the_template() -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))["default"]
    assert config["build"]["parameters"]["template_file"] == "infra/template.yaml"
    assert config["validate"]["parameters"]["template_file"] == "infra/template.yaml"
    # deploy takes the built template (.aws-sam/build), so it names none itself
    deploy = config["deploy"]["parameters"]
    assert "template_file" not in deploy and "template_file" not in config["global"]["parameters"]
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["resolve_s3"] is True


def test_sam_validate_lint_passes(sam: str) -> None:
    done = run(sam, "validate", "--lint")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is a valid SAM Template" in done.stdout + done.stderr


BUILD_LOG = "sam-build.log"
# SAM's record of its last build (it lives beside the build directory, as .aws-sam/build.toml
# does beside .aws-sam/build): which dependencies in .aws-sam/deps a build may reuse.
BUILD_RECORD = ROOT / ".aws-sam" / "tests-build.toml"


def start_build(build: Path) -> subprocess.Popen[bytes] | None:
    """`sam build` into `build` (its output in `build/../sam-build.log`), in the background,
    with the record of the test's last build."""
    if SAM is None:
        return None
    build.parent.mkdir(parents=True, exist_ok=True)
    if BUILD_RECORD.is_file():
        shutil.copyfile(BUILD_RECORD, build.parent / "build.toml")
    log = (build.parent / BUILD_LOG).open("wb")
    cache = ROOT / ".aws-sam" / "cache"
    return subprocess.Popen(
        [SAM, "build", "--build-dir", str(build), "--cache-dir", str(cache)],
        cwd=ROOT,
        env=sam_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_sam_build_builds_every_function_and_the_layer_without_a_container(
    sam: str, request: pytest.FixtureRequest
) -> None:
    if shutil.which("python3.12", path=sam_env()["PATH"]) is None:
        pytest.fail("sam build needs a python3.12 (the functions' runtime) on PATH")
    proc, build = request.config.sam_build  # type: ignore[attr-defined]
    assert proc is not None
    proc.wait(timeout=570)
    output = (build.parent / BUILD_LOG).read_text(encoding="utf-8", errors="replace")
    done = subprocess.CompletedProcess(proc.args, proc.returncode, output, "")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Build Succeeded" in done.stdout + done.stderr
    built = yaml.safe_load((build / "template.yaml").read_text(encoding="utf-8").replace("!", ""))
    functions = [
        n for n, r in built["Resources"].items() if r["Type"] == "AWS::Serverless::Function"
    ]
    # Every function the template declares, each with its entry point
    assert sorted(functions) == sorted(
        n
        for n, r in load_template()["Resources"].items()
        if r["Type"] == "AWS::Serverless::Function"
    )
    for name in functions:
        assert (build / name / "app.py").is_file(), name
    layer = build / "CaseshelfLayer" / "python"
    assert (layer / "caseshelf" / "bootstrap.py").is_file()
    # The layer's dependencies are built for the functions' arm64 / Python 3.12 runtime
    assert list((layer / "pyarrow").glob("*.cpython-312-aarch64-linux-gnu.so"))
    assert list((layer / "pydantic_core").glob("*.cpython-312-aarch64-linux-gnu.so"))
    # ... and byte-compiled for it (/opt is read-only at run time: shared/Makefile)
    for module in ("caseshelf/bootstrap", "boto3/session", "pydantic/main"):
        source = layer / f"{module}.py"
        assert (source.parent / "__pycache__" / f"{source.stem}.cpython-312.pyc").is_file()
    # The record of this build, for the next run (written whole, then moved into place)
    BUILD_RECORD.parent.mkdir(exist_ok=True)
    saving = BUILD_RECORD.with_suffix(f".{os.getpid()}")
    shutil.copyfile(build.parent / "build.toml", saving)
    saving.replace(BUILD_RECORD)
