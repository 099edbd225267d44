"""Imports with `num_proc` above 1: a plain local jsonl file's rows shared with forked worker
processes, a block at a time. The version, and the errors naming a line or row, must be those of
an import in one process; workers are reaped however the import ends; and where no worker can
be started the import runs in this process with the same result. Nothing here depends on which
process gets to a block first: the blocks are dealt out in a fixed order."""

from __future__ import annotations

import errno
import json
import multiprocessing.connection
import multiprocessing.shared_memory
import multiprocessing.synchronize
import os
from pathlib import Path
from typing import Any

import pytest

from caseshelf.adapters import sources
from caseshelf.bootstrap import Services, build, load_settings
from caseshelf.domain.errors import BadRequest, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.services.imports import ImportResult, parse_import

pytestmark = pytest.mark.integration

ME = Identity("acme", "alice")
RECIPE = {
    "id": "mini",
    "version": "1.0.0",
    "category": "qa",
    "source": {"kind": "jsonl"},
    "mapping": {
        "task_field": "q",
        "answer_field": "a|after:####|strip",
        "tag_fields": ["level"],
        "details_fields": {"solution": "{a}"},
    },
}
BLOCK = 512  # bytes: a few rows a block, so every file here has many blocks


def services(tmp_path: Path, num_proc: int, **settings: Any) -> Services:
    home = tmp_path / f"home-{num_proc}"
    return build(load_settings({}, home=str(home), num_proc=num_proc, **settings))


def rows_file(path: Path, n: int, *, bad_lines: tuple[int, ...] = ()) -> Path:
    """`n` rows, one a line; each of `bad_lines` (1-based) malformed."""
    lines = [
        json.dumps({"q": f"question {i}", "a": f"work\n#### {i}", "level": ["easy", "hard"][i % 2]})
        for i in range(n)
    ]
    for bad in bad_lines:
        lines[bad - 1] = '{"q": oops}'
    path.write_text("\n".join(lines) + "\n")
    return path


def run(svc: Services, path: Path, recipe: dict[str, Any] = RECIPE, **extra: Any) -> ImportResult:
    body = {"recipe": recipe, "source": {"url": str(path), "kind": "jsonl"}, **extra}
    return svc.imports.run(ME, parse_import(body))


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "SPLIT_BLOCK_BYTES", BLOCK)


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the processes forked from now on."""
    pids: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return pids


def assert_reaped(pids: list[int]) -> None:
    """Every one of `pids` has ended and been reaped: no zombie, nothing left running."""
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def assert_nothing_registered(svc: Services) -> None:
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "mini", "latest")


def mixed_file(path: Path) -> Path:
    """Rows with blank, whitespace-only and CRLF lines spread through them, and no final line
    end: each shifts the line and row numbers of every block after it."""
    lines = []
    for i in range(900):
        lines.append(json.dumps({"q": f"q{i}", "a": f"w #### {i}", "level": "easy"}))
        if i % 97 == 0:
            lines.append("")
        if i % 131 == 0:
            lines.append(" \t\r")
    path.write_bytes(("\r\n".join(lines[:400]) + "\n" + "\n".join(lines[400:])).encode())
    return path


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("num_proc", [2, 3])
@pytest.mark.parametrize("make", [mixed_file, lambda p: rows_file(p, 1500)])
def test_an_import_in_several_processes_registers_the_version_of_one(
    tmp_path: Path, forked: list[int], num_proc: int, make: Any
) -> None:
    # Given a file imported in one process
    path = make(tmp_path / "rows.jsonl")
    alone = run(services(tmp_path, 1), path)
    assert forked == []
    # When it is imported with num_proc workers sharing its blocks
    svc = services(tmp_path, num_proc)
    shared = run(svc, path)
    # Then the workers ran and were reaped, and the version is the same, case for case
    assert len(forked) == num_proc - 1
    assert_reaped(forked)
    assert shared.result.record.content_digest == alone.result.record.content_digest
    assert shared.rows_read == alone.rows_read == shared.result.record.case_count
    cases = svc.registry.list_cases(ME, "mini", "latest", limit=1000).items
    assert [c["id"] for c in cases] == [f"mini-{i}" for i in range(len(cases))]
    assert cases[7]["expectations"]["ground_truth"] == "7"


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("num_proc", [2, 3])
@pytest.mark.parametrize("bad_line", [1, 2, 3, 700, 1499, 1500])
def test_a_malformed_line_in_any_block_is_named_as_one_process_names_it(
    tmp_path: Path, forked: list[int], num_proc: int, bad_line: int
) -> None:
    path = rows_file(tmp_path / "rows.jsonl", 1500, bad_lines=(bad_line,))
    svc = services(tmp_path, num_proc)
    with pytest.raises(BadRequest, match=f"line {bad_line}: malformed JSON") as exc:
        run(svc, path)
    assert exc.value.fields["line"] == bad_line
    assert_nothing_registered(svc)
    assert_reaped(forked)


@pytest.mark.usefixtures("small_blocks")
def test_the_first_bad_line_in_file_order_wins_whichever_process_reads_it(
    tmp_path: Path,
) -> None:
    # Given two malformed lines, in blocks of both processes (blocks hold a few lines)
    for first, second in ((501, 902), (502, 903), (505, 906)):
        path = rows_file(tmp_path / "rows.jsonl", 1200, bad_lines=(first, second))
        with pytest.raises(BadRequest, match=f"line {first}: malformed JSON"):
            run(services(tmp_path, 2), path)


@pytest.mark.usefixtures("small_blocks")
def test_colliding_ids_across_processes_name_both_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [{"id": f"r{i}", "q": "x", "a": "#### 1", "level": "easy"} for i in range(1500)]
    rows[1400]["id"] = "r7"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = {**RECIPE, "mapping": {**RECIPE["mapping"], "id_field": "id"}}
    with pytest.raises(BadRequest, match="rows 7 and 1400") as exc:
        run(services(tmp_path, 2), path, recipe)
    assert exc.value.fields == {"case_ids": ["r7"], "rows": [7, 1400]}


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("big_row", [1100, 1101])
def test_a_row_over_the_size_limit_is_413_naming_the_row(tmp_path: Path, big_row: int) -> None:
    path = tmp_path / "rows.jsonl"
    rows = [{"q": "x", "a": "#### 1", "level": "easy"} for _ in range(1200)]
    rows[big_row]["q"] = "y" * 3000
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    svc = services(tmp_path, 2, max_case_bytes=2000)
    with pytest.raises(TooLarge, match=f"row {big_row}") as exc:
        run(svc, path)
    assert exc.value.fields["row"] == big_row
    assert_nothing_registered(svc)


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("long_row", [300, 301])
def test_a_line_past_the_line_limit_is_refused_as_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: list[int], long_row: int
) -> None:
    # (a line is measured as it spans reads: a read far shorter than the line)
    monkeypatch.setattr(sources, "READ_CHUNK", 256)
    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 4096)
    path = tmp_path / "rows.jsonl"
    rows = [{"q": "x", "a": "#### 1", "level": "easy"} for _ in range(600)]
    rows[long_row]["q"] = "y" * 5000
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    svc = services(tmp_path, 2)
    with pytest.raises(TooLarge, match="longer than 4096 bytes"):
        run(svc, path)
    assert_nothing_registered(svc)
    assert_reaped(forked)


@pytest.mark.usefixtures("small_blocks")
def test_a_limit_reads_the_first_rows_in_this_process(tmp_path: Path, forked: list[int]) -> None:
    path = rows_file(tmp_path / "rows.jsonl", 2000)
    done = run(services(tmp_path, 2), path, limit=1234)
    assert done.result.record.case_count == 1234 and done.produced_by["rows_read"] == 1234
    assert forked == []


@pytest.mark.usefixtures("small_blocks")
def test_a_worker_that_dies_fails_the_import_and_registers_nothing(
    tmp_path: Path, forked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given workers that die before sending anything
    def dies(*args: Any) -> None:
        os._exit(3)

    monkeypatch.setattr(sources, "_work_blocks", dies)
    svc = services(tmp_path, 2)
    with pytest.raises(sources.WorkerFailed, match="stopped unexpectedly"):
        run(svc, rows_file(tmp_path / "rows.jsonl", 1000))
    assert_nothing_registered(svc)
    assert_reaped(forked)


@pytest.mark.usefixtures("small_blocks")
def test_a_failure_here_stops_and_reaps_the_workers(
    tmp_path: Path, forked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given workers that would never finish, and a bad line in this process's first block
    def endless(*args: Any) -> None:
        while True:
            pass

    monkeypatch.setattr(sources, "_work_blocks", endless)
    svc = services(tmp_path, 3)
    with pytest.raises(BadRequest, match="line 2: malformed JSON"):
        run(svc, rows_file(tmp_path / "rows.jsonl", 1000, bad_lines=(2,)))
    # Then the import failed without waiting for them, and they were stopped and reaped
    assert len(forked) == 2
    assert_reaped(forked)
    assert_nothing_registered(svc)


def no_dev_shm(*args: Any, **kwargs: Any) -> None:
    raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/dev/shm")


@pytest.mark.usefixtures("small_blocks")
def test_without_dev_shm_the_workers_still_run(
    tmp_path: Path, forked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a machine where no shared memory or semaphore can be made (a Lambda has no
    # /dev/shm): what needs it raises as it does there
    path = mixed_file(tmp_path / "rows.jsonl")
    alone = run(services(tmp_path, 1), path)
    monkeypatch.setattr(multiprocessing.shared_memory.SharedMemory, "__init__", no_dev_shm)
    monkeypatch.setattr(multiprocessing.synchronize.SemLock, "__init__", no_dev_shm)
    # When the file is imported in two processes
    shared = run(services(tmp_path, 2), path)
    # Then the worker ran (it needs a pipe and a process only), and the version is the same
    assert len(forked) == 1
    assert shared.result.record.content_digest == alone.result.record.content_digest


def no_pipe(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.EMFILE, "Too many open files")


def no_fork() -> int:
    raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("primitive", ["pipe", "fork"])
def test_where_no_worker_can_be_started_the_import_runs_here_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, primitive: str
) -> None:
    path = mixed_file(tmp_path / "rows.jsonl")
    alone = run(services(tmp_path, 1), path)
    if primitive == "pipe":
        monkeypatch.setattr(multiprocessing.connection, "Pipe", no_pipe)
    else:
        monkeypatch.setattr(os, "fork", no_fork)
    svc = services(tmp_path, 3)
    shared = run(svc, path)
    assert shared.result.record.content_digest == alone.result.record.content_digest
    assert shared.rows_read == alone.rows_read
    # And so are its errors
    with pytest.raises(BadRequest, match="line 777: malformed JSON"):
        run(svc, rows_file(tmp_path / "bad.jsonl", 1000, bad_lines=(777,)), dataset="bad")


@pytest.mark.usefixtures("small_blocks")
def test_the_second_of_two_workers_failing_to_start_leaves_none_behind(
    tmp_path: Path, forked: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a machine with a process to spare for one worker but not two
    real_fork = os.fork

    def one_fork() -> int:
        if forked:
            return no_fork()
        return real_fork()

    monkeypatch.setattr(os, "fork", one_fork)
    path = rows_file(tmp_path / "rows.jsonl", 800)
    alone = run(services(tmp_path, 1), path)
    # When an import asks for three processes, it runs here alone with the same result
    shared = run(services(tmp_path, 3), path)
    assert shared.result.record.content_digest == alone.result.record.content_digest
    # (the one worker started was stopped and reaped)
    assert_reaped(forked)


@pytest.mark.usefixtures("small_blocks")
def test_the_client_on_the_embedded_store_takes_num_proc(tmp_path: Path, forked: list[int]) -> None:
    import caseshelf

    path = rows_file(tmp_path / "rows.jsonl", 600)
    with caseshelf.connect(home=tmp_path / "one") as cs:
        one = cs.import_(str(path), recipe=RECIPE)
    assert forked == []
    with caseshelf.connect(home=tmp_path / "two", num_proc=2) as cs:
        two = cs.import_(str(path), recipe=RECIPE)
    assert len(forked) == 1
    assert two.content_digest == one.content_digest
    # Over HTTP the server decides: the client says so rather than ignore it
    with pytest.raises(caseshelf.BadRequest, match="CASESHELF_NUM_PROC"):
        caseshelf.connect("http://127.0.0.1:9", num_proc=2)
