"""Large local files: rows read in chunks, and mapped and hashed in a forked worker process
while the caller stores them (a plain jsonl file is shared in blocks: the caller and the worker
each take the next free block). The worker must give the same version, and the same errors
naming the line or row, as the single-process path."""

import gzip
import json
import os
import sys
import threading
import time

import orjson
import pytest

from caseshelf.adapters import sources
from caseshelf.adapters.sources import (
    SourceReader,
    Worker,
    WorkerFailed,
    in_worker,
    smart_opener,
)
from caseshelf.bootstrap import build, load_settings
from caseshelf.domain.errors import BadRequest, NotFound, TooLarge
from caseshelf.domain.identity import Identity
from caseshelf.domain.recipe import CsvSource, JsonlSource
from caseshelf.services.imports import parse_import

pytestmark = pytest.mark.unit

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
needs_fork = pytest.mark.skipif(
    not sources.worker_available(), reason="the worker needs fork and a second core (Linux)"
)


@pytest.fixture
def svc(tmp_path):
    return build(load_settings({}, home=str(tmp_path / "home")))


def rows_file(path, n, *, bad_line=None):
    lines = [
        json.dumps({"q": f"question {i}", "a": f"work\n#### {i}", "level": ["easy", "hard"][i % 2]})
        for i in range(n)
    ]
    if bad_line is not None:
        lines[bad_line - 1] = '{"q": oops}'
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run(svc, url, kind="jsonl", **extra):
    source = {"url": url, "kind": kind}
    return svc.imports.run(ME, parse_import({"recipe": RECIPE, "source": source, **extra}))


def count_workers(monkeypatch):
    """The workers started from now on, counted."""
    calls = []

    class Counted(Worker):
        def __init__(self, items):
            calls.append(1)
            super().__init__(items)

    monkeypatch.setattr(sources, "Worker", Counted)
    return calls


@pytest.fixture
def worker_calls(monkeypatch):
    """Every file goes through the worker, and the workers started are counted."""
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 0)
    return count_workers(monkeypatch)


@needs_fork
def test_an_import_through_the_worker_registers_the_same_version(svc, tmp_path, monkeypatch):
    # Given a file imported once in this process
    url = rows_file(tmp_path / "rows.jsonl", 2500)
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 1 << 40)
    alone = run(svc, url, dataset="alone")
    # When the same file is imported through the worker
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 0)
    calls = count_workers(monkeypatch)
    worked = run(svc, url, dataset="worked")
    # Then the worker ran, and both versions hold the same cases
    assert calls == [1]
    assert worked.result.record.content_digest == alone.result.record.content_digest
    assert worked.result.record.case_count == 2500 and worked.rows_read == 2500
    first = svc.registry.list_cases(ME, "worked", "latest", limit=2).items
    assert first[0]["id"] == "mini-0" and first[1]["tags"] == ["hard"]
    assert first[1]["expectations"] == {
        "ground_truth": "1",
        "details": {"solution": "work\n#### 1"},
    }


@needs_fork
@pytest.mark.parametrize("name", ["rows.csv", "rows.jsonl.gz"])
def test_csv_and_compressed_files_through_the_worker_match_the_single_process_path(
    svc, tmp_path, monkeypatch, name
):
    # Given the same rows as a CSV file or a gzipped jsonl file
    rows = [{"q": f"q{i}", "a": f"w #### {i}", "level": "easy"} for i in range(1500)]
    path = tmp_path / name
    if name.endswith(".csv"):
        path.write_text("q,a,level\n" + "".join(f"{r['q']},{r['a']},{r['level']}\n" for r in rows))
    else:
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    # When it is imported in this process and through the worker
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 1 << 40)
    kind = "csv" if name.endswith(".csv") else "jsonl"
    alone = run(svc, str(path), kind, dataset="alone")
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 0)
    calls = count_workers(monkeypatch)
    worked = run(svc, str(path), kind, dataset="worked")
    # Then the worker ran, and both hold the same cases
    assert calls == [1]
    assert worked.result.record.content_digest == alone.result.record.content_digest
    assert worked.result.record.case_count == 1500


@needs_fork
def test_a_malformed_line_in_the_worker_names_its_line_and_registers_nothing(
    svc, tmp_path, worker_calls
):
    url = rows_file(tmp_path / "rows.jsonl", 3000, bad_line=2718)
    with pytest.raises(BadRequest, match="line 2718: malformed JSON") as exc:
        run(svc, url)
    assert exc.value.fields["line"] == 2718 and worker_calls == [1]
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "mini", "latest")


@needs_fork
@pytest.mark.parametrize("block", [1, 97, 4096, 30_000])
def test_a_split_file_gives_the_rows_and_ids_of_a_single_pass(svc, tmp_path, monkeypatch, block):
    # Given a jsonl file with blank, whitespace-only and CRLF lines spread through it, ids made
    # from the row index, cut into blocks of several sizes shared by this process and the worker
    lines = []
    for i in range(1200):
        lines.append(json.dumps({"q": f"q{i}", "a": f"w #### {i}", "level": "easy"}))
        if i % 97 == 0:
            lines.append("")
        if i % 131 == 0:
            lines.append(" \t\r")
    path = tmp_path / "rows.jsonl"
    path.write_bytes(("\r\n".join(lines[:600]) + "\n" + "\n".join(lines[600:])).encode())
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 1 << 40)
    alone = run(svc, str(path), dataset="alone")
    # When it is imported split between this process and a worker
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "SPLIT_BLOCK_BYTES", block)
    calls = count_workers(monkeypatch)
    worked = run(svc, str(path), dataset="worked")
    # Then one worker ran, and the version is the same case for case
    assert calls == [1]
    assert worked.result.record.content_digest == alone.result.record.content_digest
    assert worked.rows_read == 1200
    cases = svc.registry.list_cases(ME, "worked", "latest", limit=1000).items
    assert [c["id"] for c in cases] == [f"mini-{i}" for i in range(1000)]
    assert cases[-1]["inputs"]["user"] == "q999"


@needs_fork
@pytest.mark.parametrize("bad_line", [3, 2990])
def test_a_split_file_names_a_bad_line_on_either_side_of_the_cut(
    svc, tmp_path, worker_calls, bad_line
):
    # Given a malformed line early (this process's share) or late (the worker's share)
    url = rows_file(tmp_path / "rows.jsonl", 3000, bad_line=bad_line)
    # Then the error names the line as a single pass would, and nothing is registered
    with pytest.raises(BadRequest, match=f"line {bad_line}: malformed JSON") as exc:
        run(svc, url)
    assert exc.value.fields["line"] == bad_line and worker_calls == [1]
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "mini", "latest")


def alternating(monkeypatch):
    """Blocks of 64 bytes, taken in turn: even ones by this process, odd ones by the worker
    (the claims as both processes see them, the worker being forked after the patch)."""
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 0)
    monkeypatch.setattr(sources, "SPLIT_BLOCK_BYTES", 64)
    taken = []

    def mine(block, who):
        return (block % 2 == 0) == (who == sources.BlockClaims.HERE)

    def take(self, block, who):
        if mine(block, who):
            taken.append((block, who))
            return True
        return False

    def take_first(self, start, who):
        for block in range(start, len(self._owners)):
            if mine(block, who):
                taken.append((block, who))
                return block
        return None

    monkeypatch.setattr(sources.BlockClaims, "take", take)
    monkeypatch.setattr(sources.BlockClaims, "take_first", take_first)
    return taken


@needs_fork
@pytest.mark.parametrize("blank_every", [0, 7, 450])
def test_blocks_taken_in_turn_give_the_version_of_a_single_pass(
    svc, tmp_path, monkeypatch, blank_every
):
    # Given a file (with or without blank lines: a block's start is then guessed wrong by the
    # process that counted the lines before it), imported in this process alone
    lines = []
    for i in range(600):
        lines.append(json.dumps({"q": f"q{i}", "a": f"w #### {i}", "level": "easy"}))
        if blank_every and i % blank_every == 1:
            lines.append("  ")
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 1 << 40)
    alone = run(svc, str(path), dataset="alone")
    # When its blocks are shared in turn between this process and the worker
    taken = alternating(monkeypatch)
    worked = run(svc, str(path), dataset="worked")
    # Then this process worked on some blocks (the worker on the others: it ran forked, so its
    # takes are not seen here), and the version is the same
    assert taken and all(block % 2 == 0 for block, _ in taken)
    assert worked.result.record.content_digest == alone.result.record.content_digest
    assert worked.rows_read == 600


@needs_fork
@pytest.mark.parametrize("bad_line", [1, 2, 3, 700, 1499, 1500])
def test_blocks_taken_in_turn_name_a_bad_line_as_a_single_pass(
    svc, tmp_path, monkeypatch, bad_line
):
    # Given a malformed line in a block of either process (blocks hold about 1 line here)
    url = rows_file(tmp_path / "rows.jsonl", 1500, bad_line=bad_line)
    alternating(monkeypatch)
    # Then the error names that line, and nothing is registered
    with pytest.raises(BadRequest, match=f"line {bad_line}: malformed JSON") as exc:
        run(svc, url)
    assert exc.value.fields["line"] == bad_line
    with pytest.raises(NotFound):
        svc.registry.get_version(ME, "mini", "latest")


@needs_fork
def test_the_first_bad_line_wins_whichever_process_reads_it(svc, tmp_path, monkeypatch):
    # Given two malformed lines, in blocks of different processes
    path = tmp_path / "rows.jsonl"
    rows_file(path, 1200)
    lines = path.read_text().splitlines()
    lines[500] = lines[901] = '{"q": oops}'
    path.write_text("\n".join(lines) + "\n")
    alternating(monkeypatch)
    with pytest.raises(BadRequest, match="line 501: malformed JSON"):
        run(svc, str(path))


@needs_fork
def test_this_process_takes_blocks_while_the_worker_is_still_on_the_next_one(
    svc, tmp_path, monkeypatch
):
    # Given a file of 40 blocks, and a worker that is slow on every block it reads
    url = rows_file(tmp_path / "rows.jsonl", 2000)
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 1 << 40)
    alone = run(svc, url, dataset="alone")
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 0)
    monkeypatch.setattr(
        sources, "SPLIT_BLOCK_BYTES", (tmp_path / "rows.jsonl").stat().st_size // 40
    )
    parent = os.getpid()
    read_part = sources._jsonl_part

    def slow_in_the_worker(*args, **kw):
        if os.getpid() != parent:
            time.sleep(0.05)
        return read_part(*args, **kw)

    monkeypatch.setattr(sources, "_jsonl_part", slow_in_the_worker)
    path = tmp_path / "rows.jsonl"
    blocks = len(sources.block_starts(path, path.stat().st_size, sources.SPLIT_BLOCK_BYTES)) - 1
    in_turn, ahead = [], []  # the blocks this process took: the next one, or one further on
    take, take_first = sources.BlockClaims.take, sources.BlockClaims.take_first

    def counted_take(self, block, who):
        mine = take(self, block, who)
        if mine and who == sources.BlockClaims.HERE:
            in_turn.append(block)
        return mine

    def counted_take_first(self, start, who):
        block = take_first(self, start, who)
        if block is not None and who == sources.BlockClaims.HERE:
            ahead.append(block)
        return block

    monkeypatch.setattr(sources.BlockClaims, "take", counted_take)
    monkeypatch.setattr(sources.BlockClaims, "take_first", counted_take_first)
    # When it is imported split between this process and the worker
    worked = run(svc, url, dataset="worked")
    # Then, once the worker had started (on a busy machine it may start late, leaving the first
    # blocks to this process), this process took blocks further on whenever the worker was
    # still busy: a quarter of those left at least (the worker's first item of a block comes
    # as it starts, so that is no sign it is done: taken as one, this process took none), and
    # the version is the one of a single pass
    theirs = sorted(set(range(blocks)) - set(in_turn) - set(ahead))
    assert theirs, "the worker took no block"
    later = [block for block in ahead if block > theirs[0]]
    assert len(later) >= max(1, (blocks - theirs[0]) // 4), (theirs, in_turn, ahead)
    assert worked.result.record.content_digest == alone.result.record.content_digest


@pytest.mark.parametrize(
    ("data", "blank"),
    [
        (b'{"a": 1}\n{"a": 2}\n', 0),
        (b'{"a": 1}\n{"a": 2}', 0),
        (b'\n\n{"a": 1}\r\n\r\n  \n\t{"a": 2}\n \x0b\n', 5),
        (b"", 0),
        (b"  \n", 1),
    ],
)
def test_a_counted_block_has_the_lines_a_reader_finds_and_takes_each_for_a_row(
    tmp_path, data, blank
):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"x": 0}\n' + data)
    at = sources.Tally(1, 1)
    sources.count_lines(path, 9, 9 + len(data), at)
    read = sources.Tally(1, 1)
    rows = list(sources._jsonl_part(path, "rows", 9, None, read))
    assert at.lines == read.lines and read.rows == 1 + len(rows)
    assert at.rows == read.rows + blank


def test_blocks_start_just_past_a_line_end(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"aaaa\nbb\ncccccccc\nd\n")
    assert sources.block_starts(path, 21, 3) == [0, 5, 17, 21]
    assert sources.block_starts(path, 21, 100) == [0, 21]


def test_a_file_of_one_line_is_not_split(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"q": "a"}\n')
    assert sources._line_end_after(path, 0, 11) is None
    path.write_bytes(b'{"q": "a"}\n{"q": "b"}')
    assert sources._line_end_after(path, 0, 21) == 11
    assert sources._line_end_after(path, 12, 21) is None


@needs_fork
def test_colliding_ids_in_the_worker_name_both_rows(svc, tmp_path, worker_calls):
    path = tmp_path / "rows.jsonl"
    rows = [{"id": f"r{i}", "q": "x", "a": "#### 1", "level": "easy"} for i in range(1500)]
    rows[1400]["id"] = "r7"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = {**RECIPE, "mapping": {**RECIPE["mapping"], "id_field": "id"}}
    with pytest.raises(BadRequest, match="rows 7 and 1400") as exc:
        svc.imports.run(ME, parse_import({"recipe": recipe, "source": {"url": str(path)}}))
    assert exc.value.fields == {"case_ids": ["r7"], "rows": [7, 1400]}


@needs_fork
def test_a_row_over_the_size_limit_in_the_worker_is_413_naming_the_row(tmp_path, worker_calls):
    svc = build(load_settings({}, home=str(tmp_path / "home"), max_case_bytes=2000))
    path = tmp_path / "rows.jsonl"
    rows = [{"q": "x", "a": "#### 1", "level": "easy"} for _ in range(1200)]
    rows[1100]["q"] = "y" * 3000
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TooLarge, match="row 1100") as exc:
        run(svc, str(path))
    assert exc.value.fields["row"] == 1100


@needs_fork
def test_a_limit_through_the_worker_takes_the_first_rows(svc, tmp_path, worker_calls):
    # (a limit keeps the file whole: the worker maps the first rows, up to the limit)
    url = rows_file(tmp_path / "rows.jsonl", 2000)
    done = run(svc, url, limit=1234)
    assert done.result.record.case_count == 1234 and done.produced_by["rows_read"] == 1234
    assert worker_calls == [1]


@needs_fork
def test_the_worker_streams_items_in_order_and_reports_failures():
    assert list(in_worker(iter(range(5000)))) == list(range(5000))

    def broken():
        yield 1
        raise RuntimeError("boom")

    got = in_worker(broken())
    assert next(got) == 1
    with pytest.raises(WorkerFailed, match="RuntimeError: boom"):
        next(got)


@needs_fork
def test_record_batches_come_over_shared_memory_in_order_whatever_their_size(monkeypatch):
    from caseshelf.domain.mapping import RecordBatch

    # Given two slots of 256 bytes, fewer than the batches, each room for a small batch's
    # records and its pickled columns (~150 bytes), and a batch larger than a slot
    monkeypatch.setattr(sources, "HANDOVER_SLOTS", 2)
    monkeypatch.setattr(sources, "HANDOVER_SLOT_BYTES", 256)
    taken = []
    real_take = sources.Handover.take

    def take(self, slot):
        taken.append(slot)
        return real_take(self, slot)

    monkeypatch.setattr(sources.Handover, "take", take)

    def batch(n: int, size: int) -> RecordBatch:
        data = bytes([65 + n % 26]) * size + b"\n"
        return RecordBatch([f"c{n}"], [size], data, None, [f"{n:064x}"])

    sent = [batch(n, 300 if n == 5 else 10 + n) for n in range(12)]
    # When a worker sends them, with another item between them
    items = [*sent[:6], "between", *sent[6:]]
    got = list(in_worker(iter(items)))
    # Then every item comes back whole and in order, every batch but the large one (which
    # goes down the pipe) through a slot, the slots used in turn
    assert got == items
    assert [slot.number for slot in taken] == [n % 2 for n in range(11)]


@needs_fork
def test_the_worker_sends_each_item_from_the_thread_that_makes_it():
    # A queue's feeder thread waits for the GIL while the worker maps the next rows, so the
    # importing process waited for items the worker had already made
    def threads_at_each_item():
        for _ in range(3):
            yield threading.active_count()

    assert list(in_worker(threads_at_each_item())) == [1, 1, 1]


@needs_fork
def test_a_worker_that_dies_half_way_is_reported_after_the_items_it_sent():
    def dies():
        yield 1
        yield 2
        os._exit(3)

    got = in_worker(dies())
    assert [next(got), next(got)] == [1, 2]
    with pytest.raises(WorkerFailed, match="stopped unexpectedly"):
        next(got)


@needs_fork
def test_closing_early_stops_and_reaps_the_worker(monkeypatch):
    forked = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)

    def endless():
        while True:
            yield b"x" * 4096

    got = in_worker(endless())
    assert next(got) == b"x" * 4096
    # When the consumer stops early (it failed), the child is killed and reaped: no zombie
    got.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)


def test_without_a_process_to_spare_the_items_are_produced_here(monkeypatch):
    def no_fork():
        raise BlockingIOError("Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    assert list(in_worker(iter(range(10)))) == list(range(10))


def test_batches_close_at_a_row_count_or_a_byte_size():
    from caseshelf.domain.mapping import record_batches
    from caseshelf.domain.recipe import parse_recipe

    recipe = parse_recipe(RECIPE)
    rows = [(i, {"q": "x" * 100, "a": "#### 1", "level": "easy"}) for i in range(10)]
    by_rows = list(record_batches(iter(rows), recipe, max_case_bytes=10_000, batch_rows=4))
    by_bytes = list(record_batches(iter(rows), recipe, max_case_bytes=10_000, batch_bytes=500))
    assert [len(b.ids) for b in by_rows] == [4, 4, 2]  # (the first batch is at most 100)
    assert all(len(b.ids) <= 3 for b in by_bytes) and sum(len(b.ids) for b in by_bytes) == 10
    assert b"".join(b.data for b in by_rows) == b"".join(b.data for b in by_bytes)
    first = by_rows[0]
    assert first.data.split(b"\n")[:-1] and len(first.data) == sum(first.lengths) + 4
    assert first.tags == [["easy"]] * 4


def test_only_large_local_jsonl_or_csv_files_go_to_a_worker(tmp_path, monkeypatch):
    reader = SourceReader(smart_opener())
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"{}\n" * 10)
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 16)
    monkeypatch.setattr(sources, "worker_available", lambda: True)
    assert reader.offload(JsonlSource(kind="jsonl", url=str(big))) is not None
    assert reader.offload(CsvSource(kind="csv", url=str(big))) is not None
    assert reader.offload(JsonlSource(kind="jsonl", text="{}\n" * 10)) is None
    assert reader.offload(JsonlSource(kind="jsonl", url="https://example.org/x.jsonl")) is None
    assert reader.offload(JsonlSource(kind="jsonl", url=str(tmp_path / "missing"))) is None
    monkeypatch.setattr(sources, "WORKER_MIN_BYTES", 1 << 20)
    assert reader.offload(JsonlSource(kind="jsonl", url=str(big))) is None


def test_no_worker_without_fork_and_a_second_core(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not sources.worker_available()


@pytest.mark.parametrize("chunk", [1, 5, 7, 64, 1 << 20])
def test_jsonl_read_in_chunks_keeps_rows_and_line_numbers(tmp_path, monkeypatch, chunk):
    # Given lines that straddle chunk edges, blank lines, CRLF and no final newline
    monkeypatch.setattr(sources, "READ_CHUNK", chunk)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"q": "a"}\r\n\n  \n{"q": "b\\u00e9"}\n{"q": "c"}')
    reader = SourceReader(smart_opener())
    # Then every row comes out once, in order, numbered by row
    got = list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))
    assert got == [(0, {"q": "a"}), (1, {"q": "b\u00e9"}), (2, {"q": "c"})]
    # And a bad line is named by its line number, blank lines counted
    path.write_bytes(b'{"q": "a"}\n\n{"q": "b"}\n[1]\n')
    with pytest.raises(BadRequest, match="line 4: a row must be a JSON object"):
        list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))


def test_a_line_longer_than_many_chunks_is_read_whole_and_one_that_never_ends_is_refused(
    tmp_path, monkeypatch
):
    # Given rows far longer than a read, between short ones, and no final newline
    monkeypatch.setattr(sources, "READ_CHUNK", 8)
    long_q = "x" * 500
    path = tmp_path / "rows.jsonl"
    long_row = orjson.dumps({"q": long_q})
    path.write_bytes(b'{"q": "a"}\n' + long_row + b'\n{"q": "b"}\n' + long_row)
    reader = SourceReader(smart_opener())
    # Then each long row comes out whole, numbered in order
    got = list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))
    assert got == [(0, {"q": "a"}), (1, {"q": long_q}), (2, {"q": "b"}), (3, {"q": long_q})]
    # And a line that goes on past the limit is refused while it is read, not held
    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 100)
    with pytest.raises(TooLarge, match="longer than 100 bytes"):
        list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))


@pytest.mark.parametrize("batch_rows", [1, 3, 1000])
def test_the_first_problem_in_row_order_is_the_one_reported(svc, batch_rows):
    # (the mapper checks sizes and the ids of a batch; the registry every id of the import)
    from caseshelf.domain.mapping import record_batches
    from caseshelf.domain.recipe import parse_recipe

    recipe = parse_recipe({**RECIPE, "mapping": {**RECIPE["mapping"], "id_field": "id"}})

    def rows(*specs):
        out = []
        for i, (cid, q) in enumerate(specs):
            row = {"id": cid, "q": q, "a": "#### 1", "level": "easy"}
            if q is None:
                del row["q"]  # a row that does not map
            out.append((i, row))
        return iter(out)

    def first_error(*specs, limit=200):
        batches = record_batches(rows(*specs), recipe, max_case_bytes=limit, batch_rows=batch_rows)
        with pytest.raises((BadRequest, TooLarge)) as exc:
            svc.registry.register_records(
                ME,
                name="mini",
                version=None,
                bump="minor",
                description="",
                tags=[],
                produced_by=None,
                records=batches,
            )
        assert svc.registry.index.list_versions(ME.tenant, "dataset", "mini") == []
        return exc.value.detail

    big = "x" * 300
    # A repeated id before a row that does not map, within a batch or across batches
    assert first_error(("a", "q"), ("b", "q"), ("a", "q"), ("c", None)) == (
        "rows 0 and 2 both map to case id 'a'"
    )
    # A case over the limit before a repeated id, and the other way round
    assert first_error(("a", "q"), ("b", big), ("a", "q")).startswith("row 1: case 'b' is")
    assert first_error(("a", "q"), ("a", "q"), ("b", big)) == "rows 0 and 1 both map to case id 'a'"
    # A row both over the limit and repeating an id is named by its size, wherever the
    # batches end
    assert first_error(("a", "q"), ("a", big), ("b", big)).startswith("row 1: case 'a' is")
    # A row that does not map before any other problem
    assert first_error(("a", None), ("a", big)).startswith("row 0: missing field 'q';")
    # A repeated id right before a case over the limit or a row that does not map, in the
    # same batch as those or not
    assert first_error(("a", "q"), ("b", "q"), ("a", "q"), ("c", big)) == (
        "rows 0 and 2 both map to case id 'a'"
    )
    assert first_error(("a", "q"), ("b", "q"), ("b", "q"), ("c", None)) == (
        "rows 1 and 2 both map to case id 'b'"
    )
    # Nothing wrong: every row comes out, in batches
    got = list(record_batches(rows(("a", "q"), ("b", "q")), recipe, max_case_bytes=200))
    assert [cid for b in got for cid in b.ids] == ["a", "b"]
