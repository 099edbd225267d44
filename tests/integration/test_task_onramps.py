"""Terminal-Bench and Harbor tasks -> cases, and the safe readers of task trees."""

from __future__ import annotations

import base64
import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.tasks import TaskSource, harbor_case, size_to_mb, terminal_bench_case
from caseshelf.services.registry import parse_dataset
from caseshelf.services.tasks import (
    Limits,
    Tree,
    build_task_dataset,
    import_task_tree,
    read_archive_bytes,
    read_path,
    split_tasks,
)

pytestmark = pytest.mark.integration


def body_of(entry: dict) -> bytes:
    return entry["text"].encode() if "text" in entry else base64.b64decode(entry["base64"])


def tb_task(name="t1", compose_image=None, tests=True, **task_yaml) -> TaskSource:
    doc = {"instruction": "do it", "parser_name": "pytest", "max_agent_timeout_sec": 90.5}
    doc.update(task_yaml)
    import yaml

    files = {
        "task.yaml": yaml.safe_dump(doc).encode(),
        "run-tests.sh": b"#!/bin/bash\npytest\n",
        "Dockerfile": b"FROM python\n",
    }
    if compose_image is not None:
        files["docker-compose.yaml"] = (
            f"services:\n  client:\n    image: {compose_image}\n".encode()
        )
    if tests:
        files["tests/test_outputs.py"] = b"def test(): pass\n"
    return TaskSource(name, files)


# -- Terminal-Bench rules ---------------------------------------------------------------------


def test_literal_compose_image_wins_over_the_template():
    case = terminal_bench_case(tb_task(compose_image="ghcr.io/x/y:1"), image_template="r/{id}")
    assert case["image"] == "ghcr.io/x/y:1"


def test_variable_compose_image_falls_back_to_the_template():
    task = tb_task(compose_image="${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}")
    assert terminal_bench_case(task, image_template="r/tb:{id}", id_prefix="p-")["image"] == (
        "r/tb:p-t1"
    )


def test_no_image_is_an_error_naming_the_task():
    with pytest.raises(BadRequest, match=r"task 't1'.*no prebuilt image") as err:
        terminal_bench_case(tb_task(compose_image="${X}"))
    assert err.value.fields["case_id"] == "t1"


def test_task_without_tests_is_an_error_naming_it():
    with pytest.raises(BadRequest, match=r"task 't1'.*incomplete"):
        terminal_bench_case(tb_task(tests=False), image_template="x")


def test_grader_timeout_tags_and_metadata():
    case = terminal_bench_case(
        tb_task(
            difficulty="easy",
            category="games",
            tags=["a", "easy"],
            max_test_timeout_sec=30.0,
            author_name="me",
            expert_time_estimate_min=5,
        ),
        image_template="img",
    )
    assert case["graders"] == [
        {
            "id": "tests-pass",
            "config": {
                "cmd": "bash /tests/run-tests.sh",
                "parser_name": "pytest",
                "timeout_sec": 30,
            },
        }
    ]
    assert case["timeout_sec"] == 91
    assert case["tags"] == ["easy", "a", "games"]
    assert case["metadata"]["author_name"] == "me"
    assert case["metadata"]["expert_time_estimate_min"] == 5


# -- Harbor rules -----------------------------------------------------------------------------


def harbor_task(toml: str, *, steps=()) -> TaskSource:
    files = {"task.toml": toml.encode(), "environment/Dockerfile": b"FROM x\n"}
    if steps:
        for s in steps:
            files[f"steps/{s}/instruction.md"] = f"do {s}".encode()
            files[f"steps/{s}/tests/test.sh"] = b"echo 1\n"
    else:
        files["instruction.md"] = b"do it\n"
        files["tests/test.sh"] = b"echo 1\n"
    return TaskSource("h1", files)


def test_harbor_resources_network_and_grader():
    toml = """
[task]
keywords = ["k1"]
authors = [{name = "A"}]
[verifier]
timeout_sec = 30.0
[agent]
timeout_sec = 45.0
[environment]
docker_image = "ghcr.io/h:1"
cpus = 1.5
memory = "2G"
storage = "512M"
gpus = 0
allow_internet = false
"""
    case = harbor_case(harbor_task(toml), image_template="ignored:{id}")
    assert case["image"] == "ghcr.io/h:1"
    assert case["resources"] == {"cpu_millicores": 1500, "memory_mb": 2048, "storage_mb": 512}
    assert case["network"] == {"mode": "none"}
    assert case["timeout_sec"] == 45
    assert case["graders"] == [
        {"id": "reward-file", "config": {"cmd": "bash /tests/test.sh", "timeout_sec": 30}}
    ]
    assert case["tags"] == ["k1"]
    assert case["metadata"]["authors"] == [{"name": "A"}]


def test_harbor_gpus_are_kept_when_asked_for():
    toml = '[environment]\ndocker_image = "i"\ngpus = 2\nmemory_mb = 512\n'
    assert harbor_case(harbor_task(toml))["resources"] == {"memory_mb": 512, "gpus": 2}


def test_harbor_without_image_or_template_names_the_task():
    with pytest.raises(BadRequest, match=r"task 'h1'.*docker_image"):
        harbor_case(harbor_task("[environment]\ncpus = 1\n"))


def test_harbor_multi_step_is_carried_in_order():
    toml = """
[[steps]]
name = "one"
min_reward = 1.0
[steps.agent]
timeout_sec = 10.0
[[steps]]
name = "two"
[steps.agent]
timeout_sec = 20.0
"""
    case = harbor_case(harbor_task(toml, steps=("one", "two")), image_template="i")
    assert case["inputs"]["user"] == ["do one", "do two"]
    assert [s["name"] for s in case["graders"][0]["config"]["steps"]] == ["one", "two"]
    assert case["timeout_sec"] == 30


def test_harbor_step_without_instruction_is_refused():
    task = harbor_task('[[steps]]\nname = "one"\n', steps=())
    with pytest.raises(BadRequest, match=r"step 'one' has no steps/one/instruction.md"):
        harbor_case(task, image_template="i")


@pytest.mark.parametrize(("raw", "mb"), [(2048, 2048), ("2G", 2048), ("512M", 512), ("1Gi", 1024)])
def test_sizes(raw, mb):
    assert size_to_mb(raw, "t", "memory") == mb


# -- archives and trees -----------------------------------------------------------------------


def tar_bytes(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            elif kind == "sym":
                info.type = tarfile.SYMTYPE
                info.linkname = payload
                tar.addfile(info)
            elif kind == "hard":
                info.type = tarfile.LNKTYPE
                info.linkname = payload
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("/etc/passwd", "file", b"x")], "is absolute"),
        ([("a/../../x", "file", b"x")], r"traverses"),
        ([("a/link", "sym", "../../etc/passwd")], "outside the tree"),
        ([("a/link", "sym", "/etc/passwd")], "outside the tree"),
        ([("a/hard", "hard", "../x")], "traverses"),
        ([("a/fifo", "fifo", None)], "not a regular file"),
    ],
)
def test_unsafe_tar_entries_are_refused(entries, message):
    with pytest.raises(BadRequest, match=message):
        read_archive_bytes(tar_bytes(entries), "x.tar.gz")


def test_in_tree_links_are_materialized():
    tree = read_archive_bytes(
        tar_bytes([("t/a.txt", "file", b"A"), ("t/b.txt", "sym", "a.txt")]), "x.tar.gz"
    )
    assert tree.files == {"t/a.txt": b"A", "t/b.txt": b"A"}


def test_tar_limits():
    data = tar_bytes([(f"f{i}", "file", b"x" * 10) for i in range(5)])
    with pytest.raises(TooLarge, match="entries"):
        read_archive_bytes(data, "x.tgz", Limits(max_entries=3))
    with pytest.raises(TooLarge, match="bytes uncompressed"):
        read_archive_bytes(data, "x.tgz", Limits(max_total_bytes=30))


def zip_bytes(entries) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, payload, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, payload)
    return buf.getvalue()


def test_zip_bomb_is_refused_before_inflating():
    bomb = zip_bytes([("big.bin", b"\0" * 5_000_000, 0o644)])
    assert len(bomb) < 50_000
    with pytest.raises(TooLarge, match="bytes uncompressed"):
        read_archive_bytes(bomb, "x.zip", Limits(max_total_bytes=1_000_000))


def test_zip_with_a_lying_size_is_refused():
    data = bytearray(zip_bytes([("a.txt", b"A" * 1000, 0o644)]))
    # Shrink the declared size in the central directory (the local header is not used).
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 24 : cd + 28] = (10).to_bytes(4, "little")
    with pytest.raises((TooLarge, BadRequest)):
        read_archive_bytes(bytes(data), "x.zip")


def test_zip_symlink_out_of_tree_is_refused():
    data = zip_bytes([("t/link", b"../../etc/passwd", stat.S_IFLNK | 0o777)])
    with pytest.raises(BadRequest, match="outside the tree"):
        read_archive_bytes(data, "x.zip")


def test_directory_symlink_out_of_tree_is_refused(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "task.yaml").write_text("instruction: x\n")
    (tmp_path / "t" / "esc").symlink_to("/etc")
    with pytest.raises(BadRequest, match="directory symlink"):
        read_path(tmp_path)


def test_file_symlink_out_of_tree_is_refused(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "leak").symlink_to("/etc/hostname")
    with pytest.raises(BadRequest, match="links outside the tree"):
        read_path(tmp_path / "t")


def test_split_tasks_takes_the_outermost_task_dirs():
    tree = Tree(
        "root",
        {
            "a/task.yaml": b"",
            "a/sub/task.yaml": b"",
            "b/c/task.yaml": b"",
            "b/c/x": b"1",
            "README": b"",
        },
    )
    tasks = split_tasks(tree, "task.yaml")
    assert [(t.name, sorted(t.files)) for t in tasks] == [
        ("a", ["sub/task.yaml", "task.yaml"]),
        ("c", ["task.yaml", "x"]),
    ]


# -- real data --------------------------------------------------------------------------------


def test_real_terminal_bench_tasks(shared_data):
    tree = read_path(shared_data / "terminal-bench")
    # Given the real tasks, one of which has no tests
    with pytest.raises(BadRequest) as err:
        build_task_dataset(tree, "terminal-bench", image_template="reg/tb:{id}")
    assert err.value.fields["case_ids"] == ["evoeval/5"]
    assert "task 'evoeval/5'" in err.value.detail and "incomplete" in err.value.detail
    assert "--skip-invalid" in err.value.detail
    # When the invalid one is skipped explicitly
    built = build_task_dataset(
        tree, "terminal-bench", image_template="reg/tb:{id}", skip_invalid=True
    )
    body = parse_dataset({**built.body, "id": "tb"})
    # Then it is reported and stamped, and every other task is a valid case
    assert [s.task for s in built.skipped] == ["evoeval/5"]
    assert built.body["produced_by"]["skipped"][0]["task"] == "evoeval/5"
    assert built.body["produced_by"]["skip_invalid"] is True
    cases = {c.id: c for c in body.cases}
    assert len(cases) == 9
    lcb = cases["livecodebenchpro/lcbpro-1999a"]
    assert lcb.inputs.user.startswith("LiveCodeBench Pro (Mini)")
    assert "problem" in lcb.metadata["descriptions"]
    assert lcb.metadata["author"] == "LiveCodeBench Pro Team"
    assert "testsrun-tests.sh" in lcb.files
    dev = cases["deveval/cpp-area-calculation-implementation"]
    assert dev.metadata["language"] == "cpp" and dev.metadata["env_name"] is None
    assert len(dev.files) == 34
    aider = cases["aider_polyglot/polyglot_python_robot-name"]
    assert "workspace/.oracle/solution.enc" in aider.files
    assert aider.resources is not None and aider.resources.cpu_millicores == 1000
    # Every file comes back byte for byte
    root = shared_data / "terminal-bench"
    for case in built.body["cases"]:
        task_dir = root / case["metadata"]["task"]
        for rel, entry in case["files"].items():
            assert body_of(entry) == (task_dir / rel).read_bytes()


def test_real_terminal_bench_without_template_names_the_tasks(shared_data):
    with pytest.raises(BadRequest, match="no prebuilt image"):
        build_task_dataset(
            read_path(shared_data / "terminal-bench" / "evoeval" / "24"), "terminal-bench"
        )


def test_real_harbor_tasks_register(shared_data, tmp_path):
    tree = read_path(shared_data / "harbor")
    svc = build(load_settings({}, home=str(tmp_path)))
    result, skipped = import_task_tree(
        svc.registry,
        Identity("local", "alice"),
        tree,
        "harbor",
        image_template="reg/harbor:{id}",
        dataset="cookbook",
        version="1.0.0",
    )
    assert skipped == [] and result.created and result.record.case_count == 6
    page = svc.registry.list_cases(Identity("local", "alice"), "cookbook", "1.0.0")
    by_id = {c["id"]: c for c in page.items}
    assert (
        by_id["multi-step"]["inputs"]["user"][0].startswith("#")
        or by_id["multi-step"]["inputs"]["user"]
    )
    assert len(by_id["multi-step"]["inputs"]["user"]) == 3
    assert by_id["simple-task"]["graders"][0]["config"]["cmd"] == "bash /tests/test.sh"
    assert by_id["simple-task"]["resources"] == {
        "cpu_millicores": 1000,
        "memory_mb": 2048,
        "storage_mb": 10240,
    }
    assert by_id["simple-task"]["metadata"]["catalog"]["name"] == "simple-task"


def test_real_tasks_from_a_tar_gz_match_the_directory(shared_data, tmp_path):
    archive = tmp_path / "harbor.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(shared_data / "harbor", arcname="harbor")
    from_dir = build_task_dataset(read_path(shared_data / "harbor"), "harbor", image_template="i")
    from_tar = build_task_dataset(read_path(archive), "harbor", image_template="i")
    strip = lambda b: [{k: v for k, v in c.items() if k != "metadata"} for c in b.body["cases"]]  # noqa: E731
    assert strip(from_dir) == strip(from_tar)


def test_single_task_directory(shared_data):
    built = build_task_dataset(
        read_path(shared_data / "harbor" / "simple-task"), "harbor", image_template="i:{name}"
    )
    assert [c["id"] for c in built.body["cases"]] == ["simple-task"]
    assert built.body["cases"][0]["image"] == "i:simple-task"
    assert Path(built.body["id"]).name == "simple-task"


def test_harbor_manifests_give_names_versions_and_digests():
    from caseshelf.domain.tasks import harbor_catalog

    per_task, facts = harbor_catalog(
        {"git_url": "https://x/y.git", "recipes": [{"name": "a", "path": "recipes/a"}]},
        '[dataset]\nname = "cook"\nversion = "2.0.0"\n[[tasks]]\nname = "org/a"\n'
        'digest = "sha256:abc"\n',
    )
    assert facts == {"git_url": "https://x/y.git", "name": "cook", "version": "2.0.0"}
    assert per_task["a"] == {"path": "recipes/a", "name": "org/a", "digest": "sha256:abc"}
    tree = Tree(
        "x",
        {
            "dataset.toml": b'[dataset]\nname = "cook"\nversion = "2.0.0"\n',
            "a/task.toml": b'[environment]\ndocker_image = "img"\n',
            "a/instruction.md": b"do\n",
            "a/tests/test.sh": b"echo 1\n",
        },
    )
    built = build_task_dataset(tree, "harbor")
    assert built.body["id"] == "cook" and built.body["version"] == "2.0.0"
