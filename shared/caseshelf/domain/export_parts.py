"""How an export fans out: the case ranges ("parts") one worker invocation each writes, and the
arithmetic that keeps every invocation inside its function's limits.

An export job is a start (the API's invocation: resolve, plan, enqueue), one part per range of
cases (the worker function, one SQS message each), and a finish (the invocation whose part
completes the job: the row file, the bundle, then `manifest.json` last). The figures:

- a PUT costs ~2 ms of client CPU at the 0.58 vCPU of a 1,024 MB function (`PUT_SECONDS`,
  measured in the Lambda emulation); the worker has twice that memory and so more CPU, which
  this plan does not count on;
- a part is planned to take at most `PART_SHARE` of the worker's `Timeout` (900 s):
  `cases_per_part = PART_SHARE * Timeout / (files_per_case * PUT_SECONDS + ROW_CASE_SECONDS)`,
  and never more than `MAX_PART_CASES` (parts run side by side: smaller parts, more of them at
  once, a retry redoes less). A case directory of 5 generated files, 1 companion file and no
  shared file: 6 * 2 ms + 1 ms = 13 ms a case, 5,000 cases = 65 s, 7% of the Timeout;
- a part reads its cases a window at a time (`CASE_WINDOW` / `ROW_WINDOW` of
  `caseshelf.services.export_stream`) and streams what it writes (multipart, `PART_BYTES` held
  per stream): its memory is a window, not its range, and it uses no /tmp at all;
- the finish streams the manifest (from the parts' entries) and the row file (from the parts'
  pieces) at `STREAM_BYTES_PER_SECOND`, a rate S3 from Lambda exceeds several times; the bundle
  is the parts' gzip members, concatenated by S3 itself (`UploadPartCopy`, counted at
  `COPY_BYTES_PER_SECOND`), of which at most `MEMBER_READ_BYTES` a member pass through.

`check_bounds` is the plan's own account of one part and of the finish, which
`tests/unit/test_export_parts.py` holds within 80% of the worker's Timeout and memory at
1,000,000 cases.
"""

from __future__ import annotations

from dataclasses import dataclass

PUT_SECONDS = 0.002
ROW_CASE_SECONDS = 0.001  # planning, encoding and compressing one case's row or files
WORKER_TIMEOUT_SECONDS = 900  # ExportWorkerFunction's Timeout in infra/template.yaml
WORKER_MEMORY_MB = 2048  # its MemorySize
PART_SHARE = 0.25
MAX_PART_CASES = 5000
MAX_PARTS = 2000  # the job item lists the parts done: it stays a few kilobytes
STREAM_BYTES_PER_SECOND = 40_000_000
STREAM_BUFFER_BYTES = 8 << 20  # held per multipart stream (caseshelf.adapters.s3.PART_BYTES)
# A bundle member is appended by S3 itself (UploadPartCopy) but for up to 10 MiB read to fill
# the part before it (`caseshelf.adapters.s3.MultipartWriter.copy`); S3 copies within a bucket
# at several hundred MB/s.
MEMBER_READ_BYTES = 10 << 20
COPY_BYTES_PER_SECOND = 100_000_000
MANIFEST_BYTES_PER_FILE = 120  # `"path":{"digest":"sha256:<64 hex>","size":N}` and its share
MANIFEST_BYTES_PER_CASE = 64
# Files every case of a format gets besides its own companion files and the shared files.
GENERATED_FILES = {"case-dirs": 5, "harbor": 8, "inspect": 0, "jsonl": 0, "parquet": 0}
CASE_FORMATS = ("case-dirs", "harbor")
IN_MEMORY_FACTOR = 4  # a parsed case and its planned files against its canonical bytes


@dataclass(frozen=True)
class PartPlan:
    """The ranges of positions (in the export's selection of cases) each part writes."""

    case_count: int
    cases_per_part: int
    files_per_case: float

    @property
    def part_count(self) -> int:
        return max(1, -(-self.case_count // self.cases_per_part))

    def part(self, number: int) -> tuple[int, int]:
        """[start, stop) of part `number` (0-based)."""
        if not 0 <= number < self.part_count:
            raise ValueError(f"part {number} of {self.part_count}")
        start = number * self.cases_per_part
        return start, min(self.case_count, start + self.cases_per_part)


def files_per_case(fmt: str, case_count: int, file_bodies: int, shared_files: int) -> float:
    """Objects a case costs, on average: a case format writes its generated files, its own
    files and (in its directory) every shared file; a row format writes only case files.
    `file_bodies` counts the version's distinct file bodies (an upper bound of files a case
    has, spread over the cases)."""
    own = file_bodies / case_count if case_count else 0.0
    if fmt in CASE_FORMATS:
        return GENERATED_FILES[fmt] + own + shared_files
    return GENERATED_FILES.get(fmt, 0) + own


def plan_parts(
    fmt: str, case_count: int, *, file_bodies: int = 0, shared_files: int = 0
) -> PartPlan:
    per_case = files_per_case(fmt, case_count, file_bodies, shared_files)
    seconds = per_case * PUT_SECONDS + ROW_CASE_SECONDS
    size = int(PART_SHARE * WORKER_TIMEOUT_SECONDS / seconds)
    size = max(1, min(MAX_PART_CASES, size))
    # A very large export gets larger parts rather than a job item too long to keep.
    size = max(size, -(-case_count // MAX_PARTS))
    return PartPlan(case_count, size, per_case)


@dataclass(frozen=True)
class Bounds:
    """What the plan expects one invocation to need."""

    part_seconds: float
    part_memory_bytes: int
    finish_seconds: float
    finish_memory_bytes: int
    tmp_bytes: int = 0  # nothing is staged on local disk

    def within(self, share: float = 0.8) -> bool:
        memory = share * WORKER_MEMORY_MB * (1 << 20)
        return (
            self.part_seconds <= share * WORKER_TIMEOUT_SECONDS
            and self.finish_seconds <= share * WORKER_TIMEOUT_SECONDS
            and self.part_memory_bytes <= memory
            and self.finish_memory_bytes <= memory
        )


def check_bounds(
    plan: PartPlan, fmt: str, *, case_bytes: int, file_bytes: int, bundle: bool, window: int
) -> Bounds:
    """The plan's estimate of its largest part and of its finish, for cases of `case_bytes`
    (canonical JSON) whose files average `file_bytes`: time by `PUT_SECONDS` and
    `STREAM_BYTES_PER_SECOND`, memory by the window of cases a part holds and the stream
    buffers (a part: its files, its row piece, its bundle member; the finish: the row file, the
    bundle, the manifest)."""
    cases = plan.cases_per_part
    files = plan.files_per_case * cases
    part_seconds = files * PUT_SECONDS + cases * ROW_CASE_SECONDS
    held = min(window, cases)
    part_memory = held * (case_bytes + plan.files_per_case * file_bytes) * IN_MEMORY_FACTOR
    part_memory += 3 * STREAM_BUFFER_BYTES
    total_files = plan.files_per_case * plan.case_count
    manifest = total_files * MANIFEST_BYTES_PER_FILE + plan.case_count * MANIFEST_BYTES_PER_CASE
    streamed = manifest
    copied = 0.0
    if fmt not in CASE_FORMATS:
        streamed += plan.case_count * case_bytes * (2 if bundle else 1)
    if bundle:
        member = plan.files_per_case * cases * (file_bytes + 512)  # tar headers, uncompressed
        streamed += plan.part_count * min(member, MEMBER_READ_BYTES)
        copied = total_files * (file_bytes + 512)
    finish_seconds = streamed / STREAM_BYTES_PER_SECOND + copied / COPY_BYTES_PER_SECOND
    # One part's row piece at a time (a parquet piece is read whole to rewrite its groups).
    finish_memory = 3 * STREAM_BUFFER_BYTES + cases * case_bytes * IN_MEMORY_FACTOR
    return Bounds(part_seconds, int(part_memory), finish_seconds, int(finish_memory))


# A version's download document (`caseshelf.services.download_jobs`) is rendered in parts of
# this many cases: each part's records are read a window at a time and streamed to its piece, so
# a part's memory is a window whatever its range. Cases without file bodies are copied as they
# are stored; a case with files has its bodies read and inlined, which costs more per case.
DOWNLOAD_PART_CASES = 50_000
DOWNLOAD_PART_CASES_WITH_FILES = 2_000


def plan_download(case_count: int, *, file_bodies: int = 0) -> PartPlan:
    """The parts of a download document: ranges of `DOWNLOAD_PART_CASES` cases (fewer when the
    version has file bodies), never more than `MAX_PARTS` of them."""
    size = DOWNLOAD_PART_CASES_WITH_FILES if file_bodies else DOWNLOAD_PART_CASES
    size = max(size, -(-case_count // MAX_PARTS))
    return PartPlan(case_count, size, file_bodies / case_count if case_count else 0.0)


# -- parts whose worker stopped -------------------------------------------------------------
#
# A part being written holds a lease on its job (`part_leases`: the part's number, or `finish`
# for the finish, to the time it runs out), renewed while it runs and cleared when the part is
# recorded. A sweep (every `SWEEP_EVERY_SECONDS`) sends again what no worker holds:

FINISH = "finish"  # the lease key of the finish, which the last part's invocation runs
MAX_SENDS = 3  # sends of one part (the start's and the sweep's) before the job fails: as SQS's
# `maxReceiveCount` of the export queue


def stalled_parts(
    total: int, done: list[int], leases: dict[str, str], updated_at: str, now: str, stale: str
) -> list[str]:
    """The parts of a running job to send again at `now` (times are ISO-8601 UTC strings of one
    form, so they compare as strings): each part not done whose lease ran out; and, when the
    job is idle (no lease holds, and it has not changed since `stale`, one lease ago), every
    part not done (their messages are lost: never sent by a start that died, or held by a
    local server that stopped), or, all parts done, the finish (`FINISH`)."""
    finished = set(done)
    idle = all(until <= now for until in leases.values()) and updated_at <= stale
    if len(finished) >= total:
        return [FINISH] if idle else []
    if idle:
        return [str(n) for n in range(total) if n not in finished]
    expired = {k for k, until in leases.items() if k != FINISH and until <= now}
    return [str(n) for n in range(total) if n not in finished and str(n) in expired]


def exhausted(due: list[str], sends: dict[str, int], max_sends: int = MAX_SENDS) -> str | None:
    """The first of `due` already sent `max_sends` times (the start's send and the sweep's
    `sends`), which is not sent again: its job fails naming it."""
    return next((k for k in due if 1 + sends.get(k, 0) >= max_sends), None)
