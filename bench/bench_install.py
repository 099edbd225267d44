"""`pip install caseshelf` (the base install, from a locally built wheel) into a fresh virtualenv,
divided by `pip install httpx pydantic` into another, both from the same local wheel directory
(every dependency downloaded into it first, so neither waits on the network). Target: <= 2.

Then `caseshelf ls` on an empty store from that installed package, divided by
`python -c "import sqlite3, json"` in the same interpreter. Target: <= 2.

The kinds run alternately, median of `--runs` each.

Usage: python bench/bench_install.py [--runs N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO_ROOT, emit, median, ratio

NAME = "install"
TARGET_INSTALL = 2.0
TARGET_LS = 2.0


def build_wheel(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO_ROOT)],
        check=True,
    )
    return next(out.glob("caseshelf-*.whl"))


def fill_wheelhouse(wheel: Path, house: Path) -> None:
    """Every wheel both installs need, downloaded once into `house`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(house), str(wheel)],
        check=True,
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(house), "httpx", "pydantic"],
        check=True,
    )


def timed_install(house: Path, where: Path, *packages: str) -> float:
    """Seconds to make a virtualenv at `where` and install `packages` from `house` into it."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(where / "bin" / "python"),
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(house),
            *packages,
        ],
        check=True,
    )
    return time.perf_counter() - start


def timed(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        root = Path(tmp)
        house = root / "wheels"
        wheel = build_wheel(house)
        fill_wheelhouse(wheel, house)
        ours: list[float] = []
        floor: list[float] = []
        for i in range(args.runs):
            ours.append(timed_install(house, root / f"ours{i}", wheel.name.split("-")[0]))
            floor.append(timed_install(house, root / f"floor{i}", "httpx", "pydantic"))
        venv = root / "ours0"
        store = root / "store"
        env = {"CASESHELF_HOME": str(store), "PATH": str(venv / "bin")}
        ls: list[float] = []
        base: list[float] = []
        for _ in range(max(5, args.runs)):
            ls.append(timed([str(venv / "bin" / "caseshelf"), "ls"], root, env))
            base.append(timed([str(venv / "bin" / "python"), "-c", "import sqlite3, json"], root))
    install_ratio = ratio(median(ours), median(floor))
    ls_ratio = ratio(median(ls), median(base))
    print(f"install: caseshelf {median(ours):.2f} s, httpx+pydantic {median(floor):.2f} s")
    print(
        f"ls: {median(ls) * 1000:.0f} ms, python -c 'import sqlite3, json' "
        f"{median(base) * 1000:.0f} ms"
    )
    emit(
        {
            "bench": NAME,
            "install_s": round(median(ours), 2),
            "floor_s": round(median(floor), 2),
            "install_ratio": install_ratio,
            "ls_ratio": ls_ratio,
            "pass": install_ratio <= TARGET_INSTALL and ls_ratio <= TARGET_LS,
        }
    )


if __name__ == "__main__":
    main()
