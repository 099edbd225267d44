"""A directory export killed or failed part way is gone on with by the next export of the same
version into the same destination: the files the first run wrote are verified and kept (same
inode, same mtime), only the rest are written, and nothing looks complete before the end. Real
files and SQLite (the embedded store); the export is stopped by its progress hook after a given
number of cases, as an interrupt stops it."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from types import GeneratorType
from typing import Any

import orjson
import pytest

from caseshelf.bootstrap import Services, build, load_settings
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.export import MANIFEST_NAME
from caseshelf.domain.identity import Identity
from caseshelf.services import export_stream
from caseshelf.services.exports import ExportRequest
from caseshelf.services.registry import parse_dataset
from caseshelf.services.staging import SOURCE, STAGING_PREFIX

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")
CASES = 20
WINDOW = 4  # cases per window: the kill comes several windows in


class Killed(BaseException):
    """The process going away in the middle of an export (as an interrupt does)."""


class StopAfter:
    """An export's progress that raises `error` once `cases` cases have been handed over."""

    def __init__(self, cases: int, error: BaseException | None = None) -> None:
        self.cases, self.error, self.seen = cases, error or Killed("killed"), 0

    def start(self, cases: int, files: int, nbytes: int) -> None:
        pass

    def advance(self, files: int, nbytes: int, cases: int = 0) -> None:
        self.seen += cases
        if self.seen >= self.cases:
            raise self.error


def _dataset(version: str) -> dict[str, Any]:
    return {
        "id": "demo",
        "version": version,
        "cases": [
            {
                "id": f"c{i:02d}",
                "inputs": {"user": f"question {i} of {version}"},
                "expectations": {"ground_truth": str(i)},
                "metadata": {"file_modes": {"run.sh": "0755"}},
                "files": {
                    "data/notes.txt": {"text": f"notes {i} {version}\n"},
                    "run.sh": {"text": f"echo {i}\n"},
                },
            }
            for i in range(CASES)
        ],
    }


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Services:
    monkeypatch.setattr(export_stream, "CASE_WINDOW", WINDOW)
    monkeypatch.setattr(export_stream, "ROW_WINDOW", WINDOW)
    services = build(load_settings({}, home=str(tmp_path / "home")))
    for version in ("1.0.0", "2.0.0"):
        services.registry.register(ME, parse_dataset(_dataset(version)))
    return services


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _stats(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def _export(svc: Services, dest: Path, fmt: str = "case-dirs", **kw: Any) -> Any:
    return svc.exports.export_version(
        ME, "demo", kw.pop("version", "1.0.0"), ExportRequest(format=fmt), to=str(dest), **kw
    )


def _killed(svc: Services, dest: Path, fmt: str, after: int, version: str = "1.0.0") -> Path:
    """An export into `dest` killed once `after` cases were handed over: its staging directory,
    which is all the destination holds (nothing there looks complete)."""
    with pytest.raises(Killed):
        _export(svc, dest, fmt, progress=StopAfter(after), version=version)
    [staging] = list(dest.iterdir())
    assert staging.name.startswith(STAGING_PREFIX) and not (dest / MANIFEST_NAME).exists()
    return staging


def _case_dirs(manifest: Path, first: int) -> list[str]:
    cases = orjson.loads(manifest.read_bytes())["cases"]
    return [entry["dir"] for entry in list(cases.values())[:first]]


@pytest.mark.parametrize("fmt", ["case-dirs", "harbor", "jsonl"])
def test_an_export_killed_part_way_keeps_what_it_wrote_on_the_next_run(
    svc: Services, tmp_path: Path, fmt: str
) -> None:
    # Given the export whole, for reference, and the same export killed after 10 of 20 cases
    ref = tmp_path / "ref"
    _export(svc, ref, fmt)
    dest = tmp_path / "test_data"
    staging = _killed(svc, dest, fmt, after=10)
    # Then every file it handed over is written whole, as the complete export has it
    ref_tree = _tree(ref)
    scratch = {MANIFEST_NAME, SOURCE, ".manifest-cases", ".manifest-entries", "dataset.toml"}
    staged = {k: v for k, v in _tree(staging).items() if k not in scratch}
    staged.pop("cases.jsonl", None)  # the row file is written again whole
    assert staged and all(ref_tree[k] == v for k, v in staged.items())
    if fmt != "jsonl":  # a case directory each: exactly the first ten cases' files
        first = tuple(f"{d}/" for d in _case_dirs(ref / MANIFEST_NAME, 10))
        assert sorted(staged) == sorted(k for k in ref_tree if k.startswith(first))
    before = {k: v for k, v in _stats(staging).items() if k in staged}
    # When the same export runs again into the same destination
    result = _export(svc, dest, fmt)
    # Then it completes, equal to the reference, nothing hidden left
    assert result.reused is False and (dest / MANIFEST_NAME).is_file()
    assert _tree(dest) == ref_tree
    assert [p.name for p in dest.iterdir() if p.name.startswith(".")] == []
    # And the files the killed run wrote are those very files, not written again
    after = _stats(dest)
    assert {k: after[k] for k in before} == before
    assert os.stat(dest / next(iter(before))).st_nlink == 1


def test_a_file_cut_short_or_missing_is_written_again(svc: Services, tmp_path: Path) -> None:
    # Given a killed export one of whose files was cut short and another lost
    ref = tmp_path / "ref"
    _export(svc, ref)
    dest = tmp_path / "test_data"
    staging = _killed(svc, dest, "case-dirs", after=8)
    dirs = _case_dirs(ref / MANIFEST_NAME, 8)
    cut = staging / dirs[0] / "data" / "notes.txt"
    cut.write_bytes(cut.read_bytes()[:3])
    lost = staging / dirs[1] / "run.sh"
    lost.unlink()
    mode = staging / dirs[2] / "run.sh"
    mode.chmod(0o644)  # its mode not yet set
    kept = staging / dirs[3] / "data" / "notes.txt"
    kept_stat = (kept.stat().st_ino, kept.stat().st_mtime_ns)
    # When the export runs again
    _export(svc, dest)
    # Then each is written again and the export is whole; an intact one is kept
    assert _tree(dest) == _tree(ref)
    assert (dest / dirs[2] / "run.sh").stat().st_mode & 0o777 == 0o755
    moved = dest / dirs[3] / "data" / "notes.txt"
    assert (moved.stat().st_ino, moved.stat().st_mtime_ns) == kept_stat


def test_a_staging_directory_holding_a_symlink_is_not_resumed(
    svc: Services, tmp_path: Path
) -> None:
    # Given a killed export whose staging directory now holds a symlink to a file outside
    ref = tmp_path / "ref"
    _export(svc, ref)
    dest = tmp_path / "test_data"
    staging = _killed(svc, dest, "case-dirs", after=8)
    outside = tmp_path / "outside.txt"
    outside.write_text("not the export's\n")
    first = _case_dirs(ref / MANIFEST_NAME, 10)[9]
    (staging / first).mkdir(parents=True)
    (staging / first / "run.sh").symlink_to(outside)
    # When the export runs again
    _export(svc, dest)
    # Then the leftover is removed, not written through: the export is whole, the file intact
    assert _tree(dest) == _tree(ref)
    assert outside.read_text() == "not the export's\n"
    assert not staging.exists()


def _suspended_planners() -> set[int]:
    """The export planning generators alive and not finished (each holds a reader thread)."""
    code = export_stream._planned_cases.__code__
    # `type(...) is`, not `isinstance`: the heap holds weak proxies, and `isinstance` on one
    # whose object has died raises.
    return {
        id(g)
        for g in gc.get_objects()
        if type(g) is GeneratorType and g.gi_code is code and g.gi_frame is not None
    }


@pytest.mark.parametrize("fmt", ["case-dirs", "harbor"])
def test_a_killed_export_closes_its_reader_at_once(svc: Services, tmp_path: Path, fmt: str) -> None:
    # Given an export killed part way, its exception still held (as a caller's handler holds it)
    before = _suspended_planners()
    with pytest.raises(Killed) as killed:
        _export(svc, tmp_path / "test_data", fmt, progress=StopAfter(8))
    # Then its planning generator is closed now, not left for the garbage collector to close
    # wherever it runs (closing it joins its reader thread)
    assert killed.value.__traceback__ is not None
    assert _suspended_planners() - before == set()


def test_another_exports_leftover_is_removed_not_mixed_in(svc: Services, tmp_path: Path) -> None:
    # Given an export of 2.0.0 killed in a destination, and the same killed again (resumed)
    dest = tmp_path / "test_data"
    staging = _killed(svc, dest, "case-dirs", after=8, version="2.0.0")
    assert _killed(svc, dest, "case-dirs", after=12, version="2.0.0") == staging
    # When 1.0.0 is exported there instead
    _export(svc, dest, version="1.0.0")
    # Then 1.0.0 is written whole and nothing of 2.0.0 is left in it
    ref = tmp_path / "ref"
    _export(svc, ref, version="1.0.0")
    assert _tree(dest) == _tree(ref)
    assert not staging.exists()


def test_an_export_found_wrong_leaves_nothing(svc: Services, tmp_path: Path) -> None:
    # Given an export that fails on a case part way (not an interrupt: a refusal)
    dest = tmp_path / "test_data"
    with pytest.raises(BadRequest):
        _export(svc, dest, progress=StopAfter(8, BadRequest("case c07 refused")))
    # Then nothing of it is left: the destination it made is gone
    assert not dest.exists()
