"""Import 2,000 Terminal-Bench task directories from a local tree and from a .tar.gz.

The tasks are the real ones in ../shared/data/terminal-bench (the complete ones), replicated
with distinct ids. Baseline: `tar -xzf` of the same archive, timed in the same run. Target:
each import's wall time / tar's wall time <= 4. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SHARED_DATA, emit, median

DATA = SHARED_DATA / "terminal-bench"
TARGET = 4.0


def replicate(dest: Path, n: int) -> int:
    """n task directories copied round-robin from the real complete tasks; returns bytes."""
    sources = sorted(p.parent for p in DATA.rglob("task.yaml") if (p.parent / "tests").is_dir())
    total = 0
    for i in range(n):
        src = sources[i % len(sources)]
        target = dest / f"{src.name}-{i:05d}"
        shutil.copytree(src, target)
        total += sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    for p in dest.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return total


def import_once(path: Path, home: Path) -> float:
    from caseshelf.bootstrap import build, load_settings
    from caseshelf.domain.identity import Identity
    from caseshelf.services.tasks import import_task_tree, read_path

    svc = build(load_settings({}, home=str(home)))
    start = time.perf_counter()
    tree = read_path(path)
    result, skipped = import_task_tree(
        svc.registry,
        Identity("local", "bench"),
        tree,
        "terminal-bench",
        image_template="registry.example/tb:{id}",
        dataset="tb-bench",
        version="1.0.0",
    )
    wall = time.perf_counter() - start
    assert result.created and not skipped
    return wall


def main(n: int, runs: int) -> int:
    if not DATA.is_dir():
        print(f"benchmark data not found at {DATA}; skipped")
        emit({"bench": "tasks", "skipped": True, "pass": False})
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tree = work / "tasks"
        tree.mkdir()
        size = replicate(tree, n)
        archive = work / "tasks.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(tree, arcname="tasks")
        files = sum(1 for f in tree.rglob("*") if f.is_file())
        print(
            f"{n} tasks, {files} files, {size / 1e6:.1f} MB; "
            f"archive {archive.stat().st_size / 1e6:.1f} MB"
        )

        tar_s, dir_s, arc_s = [], [], []
        for run in range(runs):
            out = work / f"x{run}"
            out.mkdir()
            t0 = time.perf_counter()
            subprocess.run(["tar", "-xzf", str(archive), "-C", str(out)], check=True)
            tar_s.append(time.perf_counter() - t0)
            shutil.rmtree(out)
            dir_s.append(import_once(tree, work / f"home-d{run}"))
            arc_s.append(import_once(archive, work / f"home-a{run}"))
            shutil.rmtree(work / f"home-d{run}")
            shutil.rmtree(work / f"home-a{run}")
        tar_m, dir_m, arc_m = (median(v) for v in (tar_s, dir_s, arc_s))
        result = {
            "bench": "tasks",
            "tasks": n,
            "files": files,
            "bytes": size,
            "tar_xzf_s": round(tar_m, 3),
            "dir_import_s": round(dir_m, 3),
            "tar_gz_import_s": round(arc_m, 3),
            "dir_ratio": round(dir_m / tar_m, 2),
            "tar_gz_ratio": round(arc_m / tar_m, 2),
            "target_ratio": TARGET,
        }
        print(
            f"tar -xzf {tar_m:.3f} s; import from dir {dir_m:.3f} s (x{result['dir_ratio']}), "
            f"from .tar.gz {arc_m:.3f} s (x{result['tar_gz_ratio']})"
        )
        result["pass"] = result["dir_ratio"] <= TARGET and result["tar_gz_ratio"] <= TARGET
        emit(result)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sys.exit(main(args.tasks, args.runs))
