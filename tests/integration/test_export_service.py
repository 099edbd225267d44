"""Export of a registered version on the embedded backend (local directory and store prefix),
content addressing, atomicity, and the pod-side pull with its safety rules (in-memory store)."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest, Conflict, NotFound, Upstream
from caseshelf.domain.identity import Identity
from caseshelf.domain.paths import case_dir_name
from caseshelf.domain.subset import SubsetRequest
from caseshelf.ports import ObjectInfo
from caseshelf.services.exports import ExportRequest, parse_s3_url
from caseshelf.services.pull import pull
from caseshelf.services.registry import parse_dataset

pytestmark = pytest.mark.integration

ME = Identity("local", "alice")
IDS = ["HumanEval/0", "../x", ".hidden", "données/π", "plain-1"]


class MemoryStore:
    """A BlobStore in a dict, with a hook to fail or count writes."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts = 0
        self.fail_after: int | None = None
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        with self._lock:
            if self.fail_after is not None and self.puts >= self.fail_after:
                raise OSError(f"injected failure writing {key}")
            self.puts += 1
            self.objects[key] = data

    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> None:
        self.put(key, path.read_bytes(), content_type=content_type)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key in self.objects:
            return False
        self.put(key, data)
        return True

    def get(self, key: str) -> bytes:
        if key not in self.objects:
            raise NotFound(f"no object {key}")
        return self.objects[key]

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        return self.get(key)[offset : offset + length]

    def exists(self, key: str) -> bool:
        return key in self.objects

    def head(self, key: str) -> ObjectInfo | None:
        return ObjectInfo(key, len(self.objects[key]), 0.0) if key in self.objects else None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for key in sorted(self.objects):
            if key.startswith(prefix):
                yield ObjectInfo(key, len(self.objects[key]), 0.0)

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    def presign_get(
        self, key: str, *, expires: int = 900, filename: str | None = None
    ) -> str | None:
        return f"memory://{key}"

    def presign_put(self, key: str, *, expires: int = 900) -> str | None:
        return None


def _dataset() -> dict:
    cases = []
    for i, cid in enumerate(IDS):
        cases.append(
            {
                "id": cid,
                "inputs": {"user": f"question {i}", "hitl": ["ok"] if i == 0 else []},
                "expectations": {"ground_truth": str(i), "details": {"n": i}},
                "tags": ["even" if i % 2 == 0 else "odd"],
                "files": {"data/notes.txt": {"text": f"notes {i}\n"}},
            }
        )
    return {
        "id": "demo",
        "version": "1.0.0",
        "cases": cases,
        "shared_files": [{"dest": "skill/SKILL.md", "text": "# shared skill\n"}],
    }


@pytest.fixture
def svc(tmp_path: Path):
    services = build(load_settings({}, home=str(tmp_path / "home")))
    services.registry.register(ME, parse_dataset(_dataset()))
    return services


def _read_tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- local directory --------------------------------------------------------------------------


def test_export_to_a_local_directory_writes_every_case_and_a_matching_manifest(svc, tmp_path):
    # When the version is exported to a directory
    out = tmp_path / "out"
    res = svc.exports.export_version(ME, "demo", "1.0.0", to=str(out))
    # Then every case has its directory with its files, and the manifest's digests match
    tree = _read_tree(out)
    assert res.case_count == 5 and not res.reused
    manifest = orjson.loads(tree.pop("manifest.json"))
    assert manifest["dataset"]["id"] == "demo" and manifest["dataset"]["version"] == "1.0.0"
    assert list(manifest["cases"]) == IDS
    for cid, entry in manifest["cases"].items():
        assert entry["dir"] == case_dir_name(cid)
        for rel, meta in entry["files"].items():
            assert _sha(tree[f"{entry['dir']}/{rel}"]) == meta["digest"]
    assert len(tree) == res.file_count
    d0 = case_dir_name("HumanEval/0")
    assert yaml.safe_load(tree[f"{d0}/input.yaml"]) == {
        "user": "question 0",
        "prompt": "question 0",
    }
    assert yaml.safe_load(tree[f"{d0}/answers.yaml"]) == {"answers": ["ok"]}
    assert tree[f"{d0}/reference.md"] == b"0"
    assert tree[f"{d0}/data/notes.txt"] == b"notes 0\n"
    assert tree[f"{d0}/skill/SKILL.md"] == b"# shared skill\n"
    assert f"{case_dir_name('plain-1')}/answers.yaml" not in tree
    # And the awkward ids stayed inside the export
    assert not (tmp_path / "x").exists()
    assert all(not name.startswith(".") for name in {k.split("/")[0] for k in tree})
    # And nothing is left of the temporary directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "out"]


def test_asking_again_reuses_the_export_without_writing(svc, tmp_path):
    out = tmp_path / "out"
    first = svc.exports.export_version(ME, "demo", "latest", to=str(out))
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    again = svc.exports.export_version(ME, "demo", "1.0.0", to=str(out))
    assert again.reused and again.export_id == first.export_id
    assert again.case_count == 5 and again.file_count == first.file_count
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_another_export_into_a_used_directory_is_refused(svc, tmp_path):
    out = tmp_path / "out"
    svc.exports.export_version(ME, "demo", "1.0.0", to=str(out))
    other = ExportRequest(subset=SubsetRequest(tags=["odd"]))
    with pytest.raises(Conflict, match="another export"):
        svc.exports.export_version(ME, "demo", "1.0.0", other, to=str(out))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(Conflict, match="not empty"):
        svc.exports.export_version(ME, "demo", "1.0.0", to=str(tmp_path / "busy"))


def test_subset_export_is_stamped_and_has_its_own_id(svc, tmp_path):
    whole = svc.exports.export_version(ME, "demo", "1.0.0", to=str(tmp_path / "a"))
    req = ExportRequest(subset=SubsetRequest(tags=["even"], limit=2))
    part = svc.exports.export_version(ME, "demo", "1.0.0", req, to=str(tmp_path / "b"))
    assert part.export_id != whole.export_id and part.case_count == 2
    manifest = orjson.loads((tmp_path / "b" / "manifest.json").read_bytes())
    assert manifest["subset"]["total"] == 5 and manifest["subset"]["selected"] == 2
    assert manifest["subset"]["tags"] == ["even"] and manifest["subset"]["limit"] == 2
    assert list(manifest["cases"]) == ["HumanEval/0", ".hidden"]


def test_request_shared_files_are_added_and_reserved_ones_refused(svc, tmp_path):
    req = ExportRequest(shared_files=[{"dest": "extra/tool.md", "text": "tool\n"}])
    svc.exports.export_version(ME, "demo", "1.0.0", req, to=str(tmp_path / "o"))
    assert (tmp_path / "o" / "plain-1" / "extra" / "tool.md").read_text() == "tool\n"
    with pytest.raises(ValueError, match="reserved"):
        ExportRequest(shared_files=[{"dest": "input.yaml", "text": "x"}])


@pytest.mark.parametrize("fmt", ["case-dirs", "harbor", "inspect", "jsonl", "parquet"])
def test_a_failed_local_export_leaves_nothing_that_looks_complete(svc, tmp_path, monkeypatch, fmt):
    out = tmp_path / "out"
    from caseshelf.domain.export import ManifestWriter

    def boom(self, *args):
        raise OSError("disk full")

    # The manifest is the last thing an export writes, whatever its format
    monkeypatch.setattr(ManifestWriter, "finish", boom)
    with pytest.raises(OSError, match="disk full"):
        svc.exports.export_version(ME, "demo", "1.0.0", ExportRequest(format=fmt), to=str(out))
    monkeypatch.undo()
    # Only the hidden staging directory is left, kept for the next run to resume
    _only_staging_left(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "out"]
    again = svc.exports.export_version(ME, "demo", "1.0.0", ExportRequest(format=fmt), to=str(out))
    assert (out / "manifest.json").is_file() and again.reused is False
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def _only_staging_left(out):
    [left] = list(out.iterdir())
    assert left.name.startswith(".caseshelf-staging-") and left.is_dir()
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("fmt", ["case-dirs", "harbor", "inspect", "jsonl", "parquet"])
def test_a_failed_store_export_of_any_format_leaves_no_manifest(svc, fmt):
    store = MemoryStore()
    store.fail_after = 3
    svc.exports.store_for_bucket = lambda bucket: store
    with pytest.raises(OSError, match="injected"):
        svc.exports.export_version(ME, "demo", "1.0.0", ExportRequest(format=fmt), to="s3://p/x")
    assert store.objects == {}


@pytest.mark.parametrize("fmt", ["case-dirs", "harbor", "jsonl", "inspect"])
def test_the_streamed_export_equals_the_planned_one(svc, tmp_path, monkeypatch, fmt):
    # The export is written a window of cases at a time; the pure plan has it all at once: the
    # same files and the same manifest, byte for byte, in a directory and in a store
    import caseshelf.services.export_stream as stream
    from caseshelf.domain.export_plan import plan_export

    monkeypatch.setattr(stream, "CASE_WINDOW", 2)  # several windows for five cases
    monkeypatch.setattr(stream, "ROW_WINDOW", 2)
    store = MemoryStore()
    svc.exports.store_for_bucket = lambda bucket: store
    res = svc.exports.export_version(
        ME, "demo", "1.0.0", ExportRequest(format=fmt), to=str(tmp_path / "d")
    )
    svc.exports.export_version(ME, "demo", "1.0.0", ExportRequest(format=fmt), to="s3://p/x")
    pull(store, "x/", tmp_path / "pulled")
    tree = _read_tree(tmp_path / "d")
    assert tree == _read_tree(tmp_path / "pulled")
    rec = svc.registry.get_version(ME, "demo", "1.0.0")
    manifest = orjson.loads(tree["manifest.json"])
    plan = plan_export(
        dataset=manifest["dataset"],
        content_digest=rec.content_digest,
        cases=[c for _, c in svc.registry.case_records(rec, list(range(5)))],
        shared_files=[
            stream.SharedEntry(s["dest"], s["digest"], s["size"]) for s in manifest["shared_files"]
        ],
        fmt=fmt,
    )
    assert tree.pop("manifest.json") == plan.manifest_bytes()
    planned = {f.path: f for f in plan.files()}
    assert tree.keys() == planned.keys() and res.file_count == len(planned)
    for path, data in tree.items():
        assert _sha(data) == planned[path].digest, path


def test_a_streamed_parquet_export_has_a_row_group_per_window(svc, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import caseshelf.services.export_stream as stream
    from caseshelf.domain.export_formats import case_from_row, parquet_schema

    monkeypatch.setattr(stream, "ROW_WINDOW", 2)
    svc.exports.export_version(
        ME, "demo", "1.0.0", ExportRequest(format="parquet"), to=str(tmp_path / "d")
    )
    got = pq.ParquetFile(tmp_path / "d" / "cases.parquet")
    assert got.metadata.num_row_groups == 3 and got.metadata.num_rows == 5
    assert got.schema_arrow == parquet_schema()
    rec = svc.registry.get_version(ME, "demo", "1.0.0")
    cases = [c for _, c in svc.registry.case_records(rec, list(range(5)))]
    assert [case_from_row(r) for r in got.read().to_pylist()] == cases


# --- store prefix -----------------------------------------------------------------------------


def test_export_to_the_registry_store_uses_the_tenant_exports_prefix(svc):
    res = svc.exports.export_version(ME, "demo", "1.0.0")
    assert res.prefix == f"t/local/exports/{res.export_id}/"
    assert res.manifest_key == res.prefix + "manifest.json"
    assert svc.store.exists(res.manifest_key)
    assert not svc.store.exists(res.prefix + "bundle.tar.gz")  # only when asked, never inside
    assert res.bundle_key is None
    assert res.test_data_ref is None  # the embedded store has no bucket
    assert res.test_data_ref_problem and "not in an S3 bucket" in res.test_data_ref_problem
    again = svc.exports.export_version(ME, "demo", "1.0.0")
    assert again.reused and again.export_id == res.export_id
    # Asked again with the bundle: the same export, the bundle written beside the prefix
    bundled = svc.exports.export_version(ME, "demo", "1.0.0", ExportRequest(bundle=True))
    assert bundled.export_id == res.export_id
    assert bundled.bundle_key == res.prefix[:-1] + ".bundle.tar.gz"
    assert svc.store.exists(bundled.bundle_key)


def test_store_export_writes_the_manifest_last_and_reuses_without_writing(svc):
    store = MemoryStore()
    svc.exports.store_for_bucket = lambda bucket: store
    request = ExportRequest(bundle=True, secret_ref="eval-s3")
    res = svc.exports.export_version(ME, "demo", "1.0.0", request, to="s3://pods/evals/demo")
    assert res.prefix == "s3://pods/evals/demo/"
    assert res.test_data_ref == {
        "s3": {"bucket": "pods", "key": "evals/demo/", "secret_ref": "eval-s3"}
    }
    assert res.test_data_ref_problem is None
    assert res.bundle_url == "memory://evals/demo.bundle.tar.gz"
    assert list(store.objects)[-1] == "evals/demo/manifest.json"
    assert list(store.objects)[-2] == "evals/demo.bundle.tar.gz"
    puts = store.puts
    again = svc.exports.export_version(ME, "demo", "1.0.0", request, to="s3://pods/evals/demo")
    assert again.reused and store.puts == puts


@pytest.mark.parametrize("fmt", ["harbor", "inspect"])
def test_a_case_the_format_cannot_carry_is_refused_before_any_object_is_put(
    tmp_path, monkeypatch, fmt
):
    import caseshelf.services.export_stream as stream

    monkeypatch.setattr(stream, "CASE_WINDOW", 2)  # the good cases come windows before it
    monkeypatch.setattr(stream, "ROW_WINDOW", 2)
    # Given a version whose last case has no instruction text
    services = build(load_settings({}, home=str(tmp_path / "home")))
    cases = [
        {"id": f"ok-{i}", "inputs": {"user": "Say hi."}, "expectations": {"ground_truth": "hi"}}
        for i in range(5)
    ]
    cases.append(
        {"id": "no-text", "inputs": {"user": {"ref": "p.md"}}, "files": {"p.md": {"text": "x"}}}
    )
    services.registry.register(ME, parse_dataset({"id": "m", "version": "1.0.0", "cases": cases}))
    store = MemoryStore()
    services.exports.store_for_bucket = lambda bucket: store
    # When it is exported to a bucket in a format that needs the text
    with pytest.raises(BadRequest) as info:
        services.exports.export_version(
            ME, "m", "1.0.0", ExportRequest(format=fmt), to="s3://pods/evals/m"
        )
    # Then the error names the case and the field, and not one object was put
    assert info.value.fields["case_id"] == "no-text"
    assert info.value.fields["field"] == "inputs.user"
    assert store.puts == 0 and store.objects == {}


def test_a_failed_store_export_leaves_no_manifest(svc):
    store = MemoryStore()
    store.fail_after = 7
    svc.exports.store_for_bucket = lambda bucket: store
    with pytest.raises(OSError, match="injected"):
        svc.exports.export_version(ME, "demo", "1.0.0", to="s3://pods/p")
    assert "p/manifest.json" not in store.objects
    assert store.objects == {}  # what was written is removed again


def test_bundle_holds_every_file_and_the_manifest(svc):
    store = MemoryStore()
    svc.exports.store_for_bucket = lambda bucket: store
    request = ExportRequest(bundle=True)
    res = svc.exports.export_version(ME, "demo", "1.0.0", request, to="s3://pods/p")
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(store.objects["p.bundle.tar.gz"]))) as t:
        names = {m.name for m in t if m.isreg()}
        assert all(not m.issym() and not m.islnk() for m in t)
    assert names == {k[2:] for k in store.objects if k != "p.bundle.tar.gz"}
    assert len(names) == res.file_count + 1


@pytest.mark.parametrize(
    ("url", "err"),
    [("s3://", "no bucket"), ("s3://b/../x", "parent"), ("http://b/x", "s3://")],
)
def test_bad_s3_targets_are_refused(url, err):
    with pytest.raises(BadRequest, match=err):
        parse_s3_url(url)


# --- pull -------------------------------------------------------------------------------------


@pytest.fixture
def exported(svc):
    store = MemoryStore()
    svc.exports.store_for_bucket = lambda bucket: store
    request = ExportRequest(bundle=True)
    res = svc.exports.export_version(ME, "demo", "1.0.0", request, to="s3://pods/exp")
    return store, res


@pytest.mark.parametrize("bundle", [False, True])
def test_pull_gives_back_the_export_verified(exported, svc, tmp_path, bundle):
    store, res = exported
    local = tmp_path / "local"
    svc.exports.export_version(ME, "demo", "1.0.0", to=str(local))
    got = pull(store, "exp", tmp_path / "test_data", bundle=bundle, concurrency=4)
    assert got.case_count == 5 and got.file_count == res.file_count
    assert _read_tree(tmp_path / "test_data") == _read_tree(local)
    assert pull(store, "exp/", tmp_path / "test_data").reused


@pytest.mark.parametrize("evil", ["exp/../evil.txt", "exp//etc/passwd", "exp/a/../../evil"])
def test_pull_stops_on_a_key_that_would_land_outside(exported, tmp_path, evil):
    store, _ = exported
    store.objects[evil] = b"pwned"
    dest = tmp_path / "test_data"
    with pytest.raises(BadRequest, match="refusing key") as info:
        pull(store, "exp/", dest)
    assert evil in str(info.value)
    assert not dest.exists() and not (tmp_path / "evil.txt").exists()


def test_pull_refuses_a_key_not_in_the_manifest(exported, tmp_path):
    store, _ = exported
    store.objects["exp/plain-1/extra.sh"] = b"#!/bin/sh"
    with pytest.raises(BadRequest, match="not in the export's manifest"):
        pull(store, "exp/", tmp_path / "d")


def test_folder_markers_are_skipped_and_a_foreign_root_key_is_refused(exported, tmp_path):
    store, _ = exported
    store.objects["exp/"] = b""  # a folder marker
    store.objects["exp/plain-1/"] = b""
    pull(store, "exp/", tmp_path / "d")
    # A key that is no file of the export, at the root too, would land in every pod: refused
    store.objects["exp/README.txt"] = b"hello"
    with pytest.raises(BadRequest, match=r"README\.txt"):
        pull(store, "exp/", tmp_path / "e")


@pytest.mark.parametrize("bundle", [False, True])
def test_digest_mismatch_is_an_error_and_leaves_no_partial_directory(exported, tmp_path, bundle):
    store, _ = exported
    key = "exp/plain-1/reference.md"
    store.objects[key] = b"tampered"
    if bundle:
        raw = gzip.decompress(store.objects["exp.bundle.tar.gz"])
        buf = io.BytesIO()
        with (
            tarfile.open(fileobj=io.BytesIO(raw)) as src,
            tarfile.open(fileobj=buf, mode="w") as dst,
        ):
            for m in src:
                f = src.extractfile(m) if m.isreg() else None
                data = f.read() if f else b""
                if m.name == "plain-1/reference.md":
                    data = b"tampered"
                    m.size = len(data)
                dst.addfile(m, io.BytesIO(data) if f else None)
        store.objects["exp.bundle.tar.gz"] = gzip.compress(buf.getvalue())
    dest = tmp_path / "test_data"
    with pytest.raises(Upstream, match="digest mismatch"):
        pull(store, "exp/", dest, bundle=bundle)
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["home"]


def test_pull_of_a_prefix_without_manifest_is_not_found(tmp_path):
    store = MemoryStore()
    store.objects["half/plain-1/input.yaml"] = b"{}\n"
    with pytest.raises(NotFound, match="incomplete"):
        pull(store, "half/", tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_pull_into_an_existing_empty_directory(exported, tmp_path):
    store, res = exported
    dest = tmp_path / "test_data"
    dest.mkdir()
    pull(store, "exp/", dest)
    assert (dest / "manifest.json").is_file()
    assert len([p for p in dest.rglob("*") if p.is_file()]) == res.file_count + 1


def test_bundle_with_a_symlink_member_is_refused(exported, tmp_path):
    store, _ = exported
    raw = gzip.decompress(store.objects["exp.bundle.tar.gz"])
    buf = io.BytesIO(raw)
    buf.seek(0, 2)
    with tarfile.open(fileobj=io.BytesIO(raw)) as t:
        members = [(m, t.extractfile(m).read() if m.isreg() else None) for m in t]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        link = tarfile.TarInfo("plain-1/link")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        t.addfile(link)
        for m, data in members:
            t.addfile(m, io.BytesIO(data) if data is not None else None)
    store.objects["exp.bundle.tar.gz"] = gzip.compress(out.getvalue())
    with pytest.raises(BadRequest, match="not a regular file"):
        pull(store, "exp/", tmp_path / "d", bundle=True)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("bundle", [False, True])
def test_cases_named_like_the_manifest_or_the_bundle_export_and_pull(svc, tmp_path, bundle):
    # Given cases whose ids are the names of the export's root files
    body = {
        "id": "roots",
        "version": "1.0.0",
        "cases": [{"id": n, "inputs": {"user": n}} for n in ("manifest.json", "bundle.tar.gz")],
    }
    svc.registry.register(ME, parse_dataset(body))
    # When exported to a directory and to a bucket, then pulled
    out = tmp_path / "out"
    svc.exports.export_version(ME, "roots", "1.0.0", to=str(out))
    store = MemoryStore()
    svc.exports.store_for_bucket = lambda bucket: store
    svc.exports.export_version(
        ME, "roots", "1.0.0", ExportRequest(bundle=True), to="s3://pods/roots"
    )
    got = pull(store, "roots/", tmp_path / "pulled", bundle=bundle)
    # Then the manifest and the bundle stay files, and each case has its own directory
    assert (out / "manifest.json").is_file() and not (out / "bundle.tar.gz").exists()
    assert store.objects["roots.bundle.tar.gz"][:2] == b"\x1f\x8b"
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert {c["dir"] for c in manifest["cases"].values()} == {
        "~manifest%2Ejson",
        "~bundle%2Etar%2Egz",
    }
    assert (out / "~manifest%2Ejson" / "input.yaml").is_file()
    assert got.case_count == 2
    assert _read_tree(tmp_path / "pulled") == _read_tree(out)


@pytest.mark.parametrize(
    "dest",
    [
        *("input.yaml", "answers.yaml", ".claude/settings.json", "hooks/pre.sh", "batch.yaml"),
        *("tool_handlers.yaml", "input.json", "", ".", "/", "/etc/x", "../up.md", "a/../../up.md"),
    ],
)
def test_registering_a_shared_file_on_a_reserved_or_unsafe_dest_is_refused(svc, dest):
    # Given a version whose shared file would land on a reserved name or outside the case
    body = {
        "id": "bad-dest",
        "version": "1.0.0",
        "cases": [{"id": "c1", "inputs": {"user": "q"}}],
        "shared_files": [{"dest": dest, "text": "x"}],
    }
    # When registered, Then it is a 400 naming the dest, and nothing is registered
    with pytest.raises(BadRequest) as info:
        svc.registry.register(ME, parse_dataset(body))
    assert "shared_files" in str(info.value.detail) and "dest" in str(info.value.detail)
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "bad-dest", "1.0.0")


@pytest.mark.parametrize("fmt", ["harbor", "inspect", "jsonl", "parquet"])
@pytest.mark.parametrize("bundle", [False, True])
def test_every_format_pulls_back_as_it_was_written(svc, tmp_path, fmt, bundle):
    # Given the version exported in a format to a bucket and to a directory
    store = MemoryStore()
    svc.exports.store_for_bucket = lambda bucket: store
    request = ExportRequest(format=fmt, bundle=bundle)
    res = svc.exports.export_version(ME, "demo", "1.0.0", request, to="s3://pods/f")
    svc.exports.export_version(ME, "demo", "1.0.0", request, to=str(tmp_path / "local"))
    assert res.format == fmt and res.case_count == len(IDS)
    # When a pod pulls it (per file, or the one bundle beside the prefix)
    got = pull(store, "f/", tmp_path / "pulled", bundle=bundle)
    # Then it has every file, verified, as the directory export wrote them
    assert got.file_count == res.file_count
    assert _read_tree(tmp_path / "pulled") == _read_tree(tmp_path / "local")


def _row_cases(n: int) -> list[dict]:
    return [
        {
            "id": f"row-{i:03d}",
            "inputs": {"user": f'How many "ducks" in pond {i}?'},
            "expectations": {"ground_truth": str(i)},
            "metadata": {"row": i},
            "tags": ["gsm8k"],
        }
        for i in range(n)
    ]


def test_a_parquet_export_of_row_cases_is_built_by_arrow_and_reads_back_as_the_cases(
    svc, tmp_path, monkeypatch
):
    # Given row-benchmark cases (no files, no environment), read in several windows
    import pyarrow.parquet as pq

    import caseshelf.domain.export_parquet as export_parquet
    import caseshelf.services.export_stream as stream
    from caseshelf.domain.export_formats import case_from_row, parquet_schema

    svc.registry.register(
        ME, parse_dataset({"id": "rows", "version": "1.0.0", "cases": _row_cases(7)})
    )
    monkeypatch.setattr(stream, "ROW_WINDOW", 3)
    built = []
    real = export_parquet.arrow_rows
    monkeypatch.setattr(
        export_parquet, "arrow_rows", lambda *a: built.append(real(*a)) or built[-1]
    )
    # When it is exported as parquet, whole and as a subset
    svc.exports.export_version(
        ME, "rows", "1.0.0", ExportRequest(format="parquet"), to=str(tmp_path / "all")
    )
    subset = SubsetRequest(ids=["row-005", "row-001", "row-006"])
    svc.exports.export_version(
        ME, "rows", "1.0.0", ExportRequest(format="parquet", subset=subset), to=str(tmp_path / "s")
    )
    # Then Arrow built every window, and the rows are the cases, in order, typed as documented
    assert len(built) == 3 + 1 and all(t is not None for t in built)
    rec = svc.registry.get_version(ME, "rows", "1.0.0")
    for name, positions in (("all", list(range(7))), ("s", [1, 5, 6])):
        got = pq.ParquetFile(tmp_path / name / "cases.parquet")
        assert got.schema_arrow == parquet_schema()
        cases = [c for _, c in svc.registry.case_records(rec, positions)]
        assert [case_from_row(r) for r in got.read().to_pylist()] == cases


def test_a_flipped_byte_in_a_pack_stops_a_parquet_export_naming_the_case(svc, tmp_path):
    from caseshelf.domain.errors import Corrupt

    svc.registry.register(
        ME, parse_dataset({"id": "rows", "version": "1.0.0", "cases": _row_cases(7)})
    )
    packs = [i.key for i in svc.store.list(f"t/{ME.tenant}/packs/")]
    pack = next(k for k in packs if b"pond 4?" in svc.store.get(k))
    data = bytearray(svc.store.get(pack))
    data[data.index(b"pond 4?") + 5] ^= 0x01
    svc.store.put(pack, bytes(data))
    with pytest.raises(Corrupt, match=rf"case 'row-004'.*{pack}"):
        svc.exports.export_version(
            ME, "rows", "1.0.0", ExportRequest(format="parquet"), to=str(tmp_path / "d")
        )
    assert not (tmp_path / "d").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".d")] == []


def test_a_parquet_window_that_fails_to_build_fails_the_export_leaving_nothing(
    svc, tmp_path, monkeypatch
):
    # The rows of a window are built on a thread of their own: its failure is the export's
    import caseshelf.domain.export_parquet as export_parquet
    import caseshelf.services.export_stream as stream

    svc.registry.register(
        ME, parse_dataset({"id": "rows", "version": "1.0.0", "cases": _row_cases(7)})
    )
    monkeypatch.setattr(stream, "ROW_WINDOW", 3)
    calls = []

    def fail_second(*args):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError("no room for the rows")
        return None  # the first window goes case by case

    monkeypatch.setattr(export_parquet, "arrow_rows", fail_second)
    out = tmp_path / "out"
    with pytest.raises(MemoryError, match="no room"):
        svc.exports.export_version(
            ME, "rows", "1.0.0", ExportRequest(format="parquet"), to=str(out)
        )
    _only_staging_left(out)  # nothing that looks complete; kept for the next run
