"""The layer as its build makes it (shared/Makefile, run on the dependencies installed here):
every module ships byte-compiled, and the whole stays within 80% of what Lambda allows a function
and its layers unzipped."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lambda_emulation import LAYER_LIMIT, LAYER_MAKEFILE, tree_bytes
from tests.moto_infra import ROOT

BUDGET = LAYER_LIMIT * 8 // 10  # 209,715,200 bytes


def _sources(root: Path) -> list[Path]:
    return [
        Path(d) / name
        for d, _dirs, files in os.walk(root)
        for name in files
        if name.endswith(".py")
    ]


def test_every_module_of_the_layer_is_byte_compiled(layer: Path) -> None:
    """/opt is read-only at run time: a module without its .pyc is compiled again on every cold
    start. The package's own are unchecked-hash .pyc (valid whatever the zip's time stamps)."""
    python = layer / "python"
    missing = [
        str(src.relative_to(python))
        for src in _sources(python)
        if not Path(importlib.util.cache_from_source(str(src))).is_file()
    ]
    assert missing == [], f"{len(missing)} modules without a .pyc, e.g. {missing[:10]}"
    pyc = Path(importlib.util.cache_from_source(str(python / "caseshelf" / "bootstrap.py")))
    flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
    assert flags == 0b01  # hash-based, unchecked (PEP 552)


def test_the_layer_has_the_package_and_its_runtime_dependencies(layer: Path) -> None:
    python = layer / "python"
    code = (
        "import caseshelf.bootstrap, boto3, pydantic, orjson, smart_open, yaml, pyarrow.parquet,"
        " pyarrow.json, pyarrow.compute, zstandard, aws_lambda_powertools"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(python)}
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = [{str(python)!r}]; {code}"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # what the build leaves out of pyarrow is what nothing loads
    assert not (python / "pyarrow" / "tests").exists()
    assert not list((python / "pyarrow").glob("libarrow_flight.so*"))


def test_the_layer_stays_within_80_percent_of_lambdas_limit(
    layer: Path, record_property: pytest.RecordProperty
) -> None:
    """Measured on the layer `build_layer` made (for this machine's platform and Python; `make
    lambda-check` builds and measures the arm64 / Python 3.12 one the template deploys)."""
    size = tree_bytes(layer)
    record_property("layer_bytes", size)
    print(f"layer: {size:,} bytes, {size / LAYER_LIMIT:.1%} of {LAYER_LIMIT:,}")
    assert size <= BUDGET, (
        f"the layer is {size:,} bytes, {size / LAYER_LIMIT:.1%} of Lambda's {LAYER_LIMIT:,}-byte "
        f"limit (budget {BUDGET:,}): `make lambda-check` lists its largest parts"
    )


def test_the_makefile_refuses_to_build_without_a_target_directory() -> None:
    done = subprocess.run(
        ["make", "-f", str(LAYER_MAKEFILE), "layer-package"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "ARTIFACTS_DIR"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0 and "ARTIFACTS_DIR is not set" in done.stderr
