"""Names that break on other systems: case ids mapped to directory names Windows and macOS hold
apart, companion paths over the length limits or on a device name refused at registration, and
a version registered before the limits exported without them (skipped, with a warning)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain import models
from caseshelf.domain.errors import BadRequest
from caseshelf.domain.export import parse_manifest
from caseshelf.domain.identity import Identity
from caseshelf.domain.paths import (
    PATH_MAX_BYTES,
    SEGMENT_MAX_BYTES,
    accepted_dir_names,
    case_dir_name,
    case_file_problem,
    case_id_from_dir,
    destination_problem,
    is_device_name,
    relative_path_problem,
)
from caseshelf.services.exports import ExportRequest
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")
IDS = [
    "con",
    "CON",
    "nul",
    "com1",
    "COM9",
    "lpt1.txt",
    "prn.",
    "aux.tar.gz",
    "a",
    "a.",
    "a..",
    "A",
    "a ",
    "conout$",
    "console",
    "com10",
]


def _windows_form(name: str) -> str:
    """How Windows (and macOS, for case) takes a name: case folded, trailing dots and spaces
    dropped."""
    return name.rstrip(". ").casefold()


def test_case_dirs_are_no_device_names_and_distinct_where_names_fold() -> None:
    names = {case_id: case_dir_name(case_id) for case_id in IDS}
    for case_id, name in names.items():
        # Every name reads back as its id, and is one Windows can hold as it is
        assert case_id_from_dir(name) == case_id
        assert not is_device_name(name), name
        assert not name.endswith((".", " ")), name
    # And no two ids share a name where names fold (Windows, macOS)
    for (a, na), (b, nb) in itertools.combinations(names.items(), 2):
        assert _windows_form(na) != _windows_form(nb), (a, b)
    assert names["con"] == "~con" and names["a."] == "~a%2E" and names["a"] == "a"
    assert names["lpt1.txt"] == "~lpt1%2Etxt" and names["console"] == "console"
    # An export written before the mapping (`con`) is still read back
    assert "con" in accepted_dir_names("con")


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("docs/" + "x" * (SEGMENT_MAX_BYTES + 1), "segment of 256 bytes"),
        ("/".join(["d" * 99] * 11), f"is {11 * 100 - 1} bytes long"),
        ("src/con", "'con', a Windows device name"),
        ("LPT1.log", "'LPT1.log', a Windows device name"),
        ("notes./a.txt", "ends in '.'"),
        ("a /b", "ends in ' '"),
    ],
)
def test_a_path_no_system_can_hold_is_refused_with_the_limits(path: str, said: str) -> None:
    for problem in (case_file_problem(path), destination_problem(path)):
        assert problem is not None and said in problem
        assert f"{SEGMENT_MAX_BYTES} bytes" in problem and f"{PATH_MAX_BYTES} bytes" in problem
    # (a path at the limits is taken)
    at_limit = "/".join(["d" * 255] * 3 + ["d" * 254, "e"])
    assert len(at_limit) == PATH_MAX_BYTES and case_file_problem(at_limit) is None


def test_registration_refuses_the_path_naming_the_case(tmp_path: Path) -> None:
    services = build(load_settings({}, home=str(tmp_path / "home")))
    long = "deep/" + "n" * 300 + ".txt"
    body = {
        "id": "long",
        "version": "1.0.0",
        "cases": [
            {"id": "ok", "inputs": {"user": "q"}},
            {"id": "case-7", "inputs": {"user": "q"}, "files": {long: {"text": "x"}}},
        ],
    }
    with pytest.raises(BadRequest) as caught:
        services.registry.register(ME, parse_dataset(body))
    detail = caught.value.detail
    assert "case 'case-7'" in detail and long in detail and "255 bytes" in detail
    assert caught.value.fields["case_id"] == "case-7"
    assert services.registry.index.list_versions("local", "dataset", "long") == []


@pytest.mark.parametrize("fmt", ["case-dirs", "jsonl"])
def test_a_version_registered_before_the_limits_exports_without_the_long_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    # Given a version holding a path over the limits (registered before they were checked)
    services = build(load_settings({}, home=str(tmp_path / "home")))
    long = "deep/" + "n" * 300 + ".txt"
    monkeypatch.setattr(models, "case_file_problem", relative_path_problem)
    files = {long: {"text": "too long"}, "ok.txt": {"text": "fine"}}
    body = {"id": "old", "version": "1.0.0", "cases": [{"id": "c1", "files": files}]}
    services.registry.register(ME, parse_dataset(body))
    monkeypatch.undo()
    # When it is exported to a directory
    out = tmp_path / "out"
    got = services.exports.export_version(
        ME, "old", "1.0.0", ExportRequest(format=fmt), to=str(out)
    )
    # Then the export is complete without that file, and a warning names the case and path
    written = parse_manifest((out / "manifest.json").read_bytes()).files
    assert not any(long in rel for rel in written)
    assert any(rel.endswith("ok.txt") for rel in written), written
    assert all((out / rel).is_file() for rel in written)
    assert any("c1" in w and long in w and "255 bytes" in w for w in got.warnings)
