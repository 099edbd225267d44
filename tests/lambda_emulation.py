"""A Lambda execution environment on this machine: the `lambda` test tier and `make lambda-check`
run the functions of `infra/template.yaml` in it.

What a function gets here is what Lambda gives it:

- the real runtime interface client (`awslambdaric`, in /var/runtime) polling a Runtime API
  (`RuntimeApi`, HTTP on loopback) for its events and posting its answers there; the API refuses
  an answer over Lambda's response limit (6,291,556 bytes) as Lambda's does, and the invoke side
  refuses an event over the request limit (6,291,456 bytes) before any function sees it;
- a bubblewrap sandbox: a read-only root of the machine's /usr, /lib and /etc; the function's
  CodeUri directory at /var/task and the layer at /opt (read-only, laid out as `sam build` lays
  them out); /tmp a tmpfs of the function's EphemeralStorage (512 MiB by default); no /dev/shm;
  its own PID and IPC namespaces; the network namespace shared, so the moto server on loopback
  is the function's AWS;
- a memory cgroup at the template's MemorySize and a CPU quota of MemorySize/1769 of a CPU (the
  share Lambda gives: one vCPU at 1,769 MB); where no cgroup can be made, an address-space
  rlimit at MemorySize stands in (`Limits.mode` says which);
- the reserved environment variables (`_HANDLER`, `AWS_LAMBDA_FUNCTION_NAME`,
  `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`, `AWS_LAMBDA_RUNTIME_API`, `LAMBDA_TASK_ROOT`, `AWS_REGION`,
  ...), the template's own variables with their references resolved, HOME unset;
- the template's Timeout for each invocation (the environment is killed past it, as Lambda
  kills it) and API Gateway REST's answers for what the function does not answer itself (502,
  504).

The interpreter is this machine's (the tests' Python), mounted at /var/lang; the layer is built
from the distributions installed in the tests' virtualenv (`build_layer`), the way the layer's
`sam build` step (shared/Makefile) builds it from wheels.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.moto_infra import ROOT, TEMPLATE, load_template
from tests.serving import server_thread

# -- Lambda's limits -------------------------------------------------------------------------

REQUEST_LIMIT = 6_291_456  # a synchronous Invoke's event
RESPONSE_LIMIT = 6_291_556  # what the Runtime API takes as an invocation's answer
MB_PER_VCPU = 1769  # Lambda gives one vCPU's worth of CPU time at 1,769 MB
DEFAULT_TMP_MB = 512
INIT_TIMEOUT_S = 10.0  # Lambda's limit on an on-demand function's init phase
LAYER_LIMIT = 262_144_000  # a function and its layers, unzipped
API_TIMEOUT_S = 29.0  # API Gateway REST's integration timeout
REGION = "us-east-1"
ACCOUNT = "123456789012"

RUNTIME_DISTRIBUTION = "awslambdaric"
LAYER_REQUIREMENTS = ROOT / "shared" / "requirements.txt"
LAYER_MAKEFILE = ROOT / "shared" / "Makefile"
BWRAP = shutil.which("bwrap")


# -- the template's functions ------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionSpec:
    """A serverless function of the template with its Globals applied."""

    logical_id: str
    code_dir: Path
    handler: str
    memory_mb: int
    timeout_s: int
    tmp_mb: int
    variables: Mapping[str, Any]
    events: Mapping[str, Any]

    @property
    def cpu_share(self) -> float:
        return self.memory_mb / MB_PER_VCPU


def function_specs(template: Path = TEMPLATE) -> dict[str, FunctionSpec]:
    """Every `AWS::Serverless::Function` of the template, by logical id."""
    doc = load_template(template)
    glob = (doc.get("Globals") or {}).get("Function") or {}
    out: dict[str, FunctionSpec] = {}
    for name, res in doc["Resources"].items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        props = {**glob, **res.get("Properties", {})}
        variables = {
            **((glob.get("Environment") or {}).get("Variables") or {}),
            **((res["Properties"].get("Environment") or {}).get("Variables") or {}),
        }
        out[name] = FunctionSpec(
            logical_id=name,
            code_dir=(template.parent / props["CodeUri"]).resolve(),
            handler=props["Handler"],
            memory_mb=int(props.get("MemorySize", 128)),
            timeout_s=int(props.get("Timeout", 3)),
            tmp_mb=int((props.get("EphemeralStorage") or {}).get("Size", DEFAULT_TMP_MB)),
            variables=variables,
            events=props.get("Events") or {},
        )
    return out


def resolve_variables(spec: FunctionSpec, refs: Mapping[str, str]) -> dict[str, str]:
    """The function's environment variables with `Ref`s resolved: a resource from `refs` (the
    moto bucket and table), a parameter from its default. A variable whose value cannot be
    resolved here is an error, not a silent omission."""
    params = load_template().get("Parameters") or {}
    out: dict[str, str] = {}
    for key, value in spec.variables.items():
        if isinstance(value, dict) and len(value) == 1 and set(value) <= {"GetAtt", "Fn::GetAtt"}:
            # `!GetAtt Name.Attr` (or its long form): given in `refs` as "Name.Attr"
            att = next(iter(value.values()))
            ref = att if isinstance(att, str) else ".".join(att)
            if ref not in refs:
                raise LookupError(f"{spec.logical_id}: {key} refers to {ref}, not given")
            value = refs[ref]
        if isinstance(value, dict) and set(value) == {"Ref"}:
            ref = value["Ref"]
            if ref in refs:
                value = refs[ref]
            elif ref in params:
                value = str(params[ref].get("Default", ""))
            else:
                raise LookupError(f"{spec.logical_id}: {key} refers to {ref}, not given")
        if not isinstance(value, str | int | float | bool):
            raise LookupError(f"{spec.logical_id}: {key} is {value!r}, not resolvable here")
        out[key] = str(value)
    return out


# -- the layer ---------------------------------------------------------------------------------


def _closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions `requirements` pull in (extras and markers honoured)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [(req, frozenset(req.extras)) for req in requirements]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        dist = metadata.distribution(req.name)
        new = name not in seen
        seen[name] = dist
        for raw in dist.requires or []:
            sub = Requirement(raw)
            wanted = sub.marker is None or any(
                sub.marker.evaluate({"extra": extra}) for extra in (extras or {""})
            )
            if wanted and (new or sub.marker is not None):
                sub_name = canonicalize_name(sub.name)
                if sub_name not in seen or sub.extras:
                    todo.append((sub, frozenset(sub.extras)))
    return sorted(seen.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def requirement_closure(path: Path = LAYER_REQUIREMENTS) -> list[metadata.Distribution]:
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return _closure([Requirement(ln) for ln in lines if ln])


def _top_levels(dist: metadata.Distribution) -> set[str]:
    """The entries a distribution puts at the top of site-packages (packages, modules, its
    .dist-info), from its RECORD; scripts outside site-packages are left out."""
    tops: set[str] = set()
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if parts and parts[0] != ".." and not parts[0].endswith(".pth"):
            tops.add(parts[0])
    return tops


def _link(src: str, dst: str) -> None:
    """Hard-link where the file system allows it (a layer is read-only, so sharing the inode
    with the virtualenv's copy is safe), else copy."""
    try:
        os.link(src, dst)
    except FileExistsError:
        pass
    except OSError:
        shutil.copy2(src, dst)


def install_distributions(dists: list[metadata.Distribution], target: Path) -> None:
    """What `pip install --target` puts in `target` for these distributions, from their
    installed copies (byte-compiled files included: pip compiled them at install)."""
    target.mkdir(parents=True, exist_ok=True)
    for dist in dists:
        base = Path(str(dist.locate_file("")))
        for top in sorted(_top_levels(dist)):
            src = base / top
            if src.is_dir():
                shutil.copytree(src, target / top, copy_function=_link, dirs_exist_ok=True)
            elif src.is_file():
                _link(str(src), str(target / top))


def _layer_key(dists: list[metadata.Distribution]) -> str:
    digest = hashlib.sha256(sys.version.encode())
    for dist in dists:
        digest.update(f"{dist.metadata['Name']}=={dist.version};".encode())
    digest.update(LAYER_MAKEFILE.read_bytes())
    package = ROOT / "shared" / "caseshelf"
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_layer(dest: Path, *, python: str = sys.executable) -> Path:
    """The layer's directory (`dest/python/...`), built as `sam build` builds it: the
    dependencies of shared/requirements.txt, then shared/Makefile's `layer-package` step (the
    package copied in, everything byte-compiled). Returns `dest`."""
    if dest.exists():
        shutil.rmtree(dest)
    install_distributions(requirement_closure(), dest / "python")
    subprocess.run(
        ["make", "--no-print-directory", "-f", str(LAYER_MAKEFILE), "layer-package"],
        env={**os.environ, "ARTIFACTS_DIR": str(dest), "PYTHON": python},
        check=True,
        capture_output=True,
    )
    return dest


def cached_layer(cache: Path = ROOT / "build" / "lambda-emulation") -> Path:
    """`build_layer` into `cache`, keyed by what goes in it (the installed distributions, the
    package's sources, the Makefile): rebuilt only when one of them changed. Safe to call from
    several processes at once (each builds aside and the first to finish wins)."""
    key = _layer_key(requirement_closure())
    final = cache / f"layer-{key}"
    if (final / "python").is_dir():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    aside = build_layer(cache / f".building-{key}-{os.getpid()}")
    try:
        aside.rename(final)
    except OSError:  # another process finished first
        shutil.rmtree(aside, ignore_errors=True)
    for old in cache.glob("layer-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def runtime_dir(cache: Path = ROOT / "build" / "lambda-emulation") -> Path:
    """/var/runtime: the runtime interface client and what it needs (Lambda's own copy of
    boto3 there is left out: the layer brings the one the functions use)."""
    dists = _closure([Requirement(RUNTIME_DISTRIBUTION)])
    key = hashlib.sha256(
        "".join(f"{d.metadata['Name']}=={d.version};" for d in dists).encode()
    ).hexdigest()[:16]
    final = cache / f"runtime-{key}"
    if not final.is_dir():
        aside = cache / f".runtime-{key}-{os.getpid()}"
        install_distributions(dists, aside)
        try:
            aside.rename(final)
        except OSError:
            shutil.rmtree(aside, ignore_errors=True)
    return final


def tree_bytes(root: Path) -> int:
    """The unzipped size of a directory: every regular file's bytes, as Lambda counts them."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                total += os.stat(p).st_size
    return total


# -- the Runtime API ---------------------------------------------------------------------------


@dataclass
class Invocation:
    request_id: str
    payload: bytes
    timeout_s: float
    done: threading.Event = field(default_factory=threading.Event)
    started: float | None = None  # monotonic, when the runtime took the event
    finished: float | None = None
    kind: str = ""  # ok, function-error, too-large, timeout, crashed
    answer: bytes = b""
    error: dict[str, Any] = field(default_factory=dict)

    def settle(self, kind: str, answer: bytes = b"", error: dict[str, Any] | None = None) -> None:
        if self.done.is_set():
            return
        self.finished = time.monotonic()
        self.kind, self.answer, self.error = kind, answer, error or {}
        self.done.set()


_NEXT = "/2018-06-01/runtime/invocation/next"
_INVOCATION = re.compile(r"^/2018-06-01/runtime/invocation/([^/]+)/(response|error)$")
_INIT_ERROR = "/2018-06-01/runtime/init/error"
_STOP = object()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A runtime killed mid-request (a timeout, an OOM kill) is not the server's error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class RuntimeApi:
    """Lambda's Runtime API for one execution environment (2018-06-01), on loopback: `next`
    hands out one queued invocation at a time; `response` takes an answer up to
    `RESPONSE_LIMIT` bytes and answers 413 over it, as Lambda does; `error` and `init/error`
    record what the runtime reports."""

    def __init__(self, function_arn: str) -> None:
        self.function_arn = function_arn
        self.queue: queue.Queue[Any] = queue.Queue()
        self.current: dict[str, Invocation] = {}
        self.init_error: dict[str, Any] | None = None
        self.first_poll: float | None = None
        self.polled = threading.Event()
        self.dead = False
        self.server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._thread = server_thread(self.server)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host!s}:{port}"

    def close(self) -> None:
        self.queue.put(_STOP)
        self.server.shutdown()
        self.server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != _NEXT:
                    self._answer(HTTPStatus.NOT_FOUND, {"errorMessage": "no such route"})
                    return
                api._next(self)

            def do_POST(self) -> None:
                api._post(self)

            def _answer(self, status: int, body: Any, headers: Mapping[str, str] = {}) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _next(self, h: Any) -> None:
        if self.first_poll is None:
            self.first_poll = time.monotonic()
        self.polled.set()
        item = self.queue.get()
        if item is _STOP:
            self.queue.put(_STOP)
            h.close_connection = True
            return
        inv: Invocation = item
        inv.started = time.monotonic()
        self.current[inv.request_id] = inv
        deadline = int((time.time() + inv.timeout_s) * 1000)
        h.send_response(HTTPStatus.OK)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(inv.payload)))
        h.send_header("Lambda-Runtime-Aws-Request-Id", inv.request_id)
        h.send_header("Lambda-Runtime-Deadline-Ms", str(deadline))
        h.send_header("Lambda-Runtime-Invoked-Function-Arn", self.function_arn)
        h.send_header("Lambda-Runtime-Trace-Id", _trace_id())
        h.end_headers()
        h.wfile.write(inv.payload)

    def _post(self, h: Any) -> None:
        body = _read_body(h, RESPONSE_LIMIT)
        if h.path == _INIT_ERROR:
            self.init_error = _json_or_text(body)
            h._answer(HTTPStatus.ACCEPTED, {"status": "OK"})
            return
        m = _INVOCATION.match(h.path)
        inv = self.current.get(m.group(1)) if m else None
        if m is None or inv is None:
            h._answer(HTTPStatus.BAD_REQUEST, {"errorMessage": "unknown request id"})
            return
        if m.group(2) == "error":
            inv.settle("function-error", error=_json_or_text(body or b"{}"))
            h._answer(HTTPStatus.ACCEPTED, {"status": "OK"})
        elif body is None:
            message = f"Exceeded maximum allowed payload size ({RESPONSE_LIMIT} bytes)."
            inv.settle(
                "too-large",
                error={
                    "errorType": "Function.ResponseSizeTooLarge",
                    "errorMessage": "Response payload size exceeded maximum allowed payload "
                    f"size ({RESPONSE_LIMIT} bytes).",
                    "size": h.body_size,
                },
            )
            h._answer(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                {"errorMessage": message, "errorType": "RequestEntityTooLarge"},
            )
        else:
            inv.settle("ok", answer=body)
            h._answer(HTTPStatus.ACCEPTED, {"status": "OK"})


def _trace_id() -> str:
    root = f"1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]}"
    return f"Root={root};Parent={uuid.uuid4().hex[:16]};Sampled=0"


def _json_or_text(body: bytes | None) -> dict[str, Any]:
    try:
        data = json.loads(body or b"")
    except ValueError:
        return {"errorMessage": (body or b"").decode("utf-8", "replace")[:4000]}
    return data if isinstance(data, dict) else {"errorMessage": str(data)[:4000]}


def _read_body(h: Any, limit: int) -> bytes | None:
    """The request's body (Content-Length or chunked); None when it is over `limit` bytes (the
    rest is read and dropped, so the connection stays usable). `h.body_size` is its size."""
    chunks: list[bytes] = []
    size = 0

    def take(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size <= limit:
            chunks.append(data)

    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        while True:
            n = int(h.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if n == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                break
            take(h.rfile.read(n))
            h.rfile.readline()
    else:
        left = int(h.headers.get("Content-Length") or 0)
        while left > 0:
            data = h.rfile.read(min(left, 1 << 20))
            if not data:
                break
            left -= len(data)
            take(data)
    h.body_size = size
    return b"".join(chunks) if size <= limit else None


# -- memory and CPU ----------------------------------------------------------------------------


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller (or the v2 path, for "")."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass
class Limits:
    """The memory and CPU limits of one execution environment: cgroup v2, cgroup v1, or (where
    neither can be made) an address-space rlimit at MemorySize and no CPU limit. `enter` is the
    list of files the sandbox's first process writes its pid to."""

    mode: str
    memory_bytes: int
    cpu_share: float
    dirs: list[Path] = field(default_factory=list)

    @property
    def enter(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def peak_bytes(self) -> int | None:
        for d, name in (
            (self.dirs[:1], "memory.peak"),
            (self.dirs[:1], "memory.max_usage_in_bytes"),
        ):
            for base in d:
                f = base / name
                if f.is_file():
                    return int(f.read_text().split()[0])
        return None

    def rss_peak_bytes(self) -> int | None:
        """The largest peak resident set (VmHWM) of the processes in the memory cgroup now: the
        runtime's own, without the page cache the cgroup's peak also counts."""
        peaks = []
        for base in self.dirs[:1]:
            with contextlib.suppress(OSError):
                for pid in (base / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        status = Path(f"/proc/{pid}/status").read_text()
                        for line in status.splitlines():
                            if line.startswith("VmHWM:"):
                                peaks.append(int(line.split()[1]) * 1024)
        return max(peaks) if peaks else None

    def oom_kills(self) -> int:
        for base in self.dirs[:1]:
            for name in ("memory.events", "memory.oom_control"):
                f = base / name
                if f.is_file():
                    for line in f.read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
        return 0

    def remove(self) -> None:
        """Kill what is left in the cgroups, then remove them (a process killed a moment ago
        may still be leaving: rmdir is refused until it is gone)."""
        for d in self.dirs:
            for _ in range(200):
                with contextlib.suppress(OSError, ValueError):
                    for pid in (d / "cgroup.procs").read_text().split():
                        os.kill(int(pid), 9)
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def _cgroup_v2(name: str, memory: int, cpu: float) -> Limits | None:
    root = Path("/sys/fs/cgroup")
    own = _own_cgroup("")
    controllers = root / "cgroup.controllers"
    if own is None or not controllers.is_file():
        return None
    if not {"memory", "cpu"} <= set(controllers.read_text().split()):
        return None
    parent = root / own.lstrip("/")
    try:
        _write(parent / "cgroup.subtree_control", "+memory +cpu")
        d = parent / name
        d.mkdir()
        _write(d / "memory.max", str(memory))
        if (d / "memory.swap.max").is_file():
            _write(d / "memory.swap.max", "0")
        _write(d / "cpu.max", f"{int(100_000 * cpu)} 100000")
    except OSError:
        return None
    return Limits("cgroup-v2", memory, cpu, [d])


def _cgroup_v1(name: str, memory: int, cpu: float) -> Limits | None:
    made: list[Path] = []
    try:
        for controller in ("memory", "cpu"):
            own = _own_cgroup(controller)
            base = Path("/sys/fs/cgroup") / controller
            if own is None or not (base / "cgroup.procs").is_file():
                raise OSError(f"no cgroup v1 {controller} controller")
            d = base / own.lstrip("/") / name
            d.mkdir()
            made.append(d)
        mem, cpu_dir = made
        _write(mem / "memory.limit_in_bytes", str(memory))
        if (mem / "memory.memsw.limit_in_bytes").is_file():
            _write(mem / "memory.memsw.limit_in_bytes", str(memory))  # no swap
        _write(cpu_dir / "cpu.cfs_period_us", "100000")
        _write(cpu_dir / "cpu.cfs_quota_us", str(int(100_000 * cpu)))
    except OSError:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        return None
    return Limits("cgroup-v1", memory, cpu, made)


def make_limits(memory_mb: int) -> Limits:
    """A fresh cgroup at `memory_mb` with its CPU share, or the rlimit stand-in."""
    name = f"caseshelf-lambda-{uuid.uuid4().hex[:12]}"
    memory, cpu = memory_mb * 1024 * 1024, memory_mb / MB_PER_VCPU
    return (
        _cgroup_v2(name, memory, cpu)
        or _cgroup_v1(name, memory, cpu)
        or Limits("rlimit", memory, cpu)
    )


# -- /tmp --------------------------------------------------------------------------------------


_QUIET: dict[str, Any] = {"capture_output": True, "check": True}
_EXT4_SPARE = 32 * 1024 * 1024  # room for the file system's own metadata


def _reserve(image: Path, blocks: int) -> None:
    """Keep `blocks` of the image's free blocks for a uid the sandbox does not map to."""
    subprocess.run(
        ["tune2fs", "-r", str(blocks), "-u", "65534", "-g", "65534", str(image)], **_QUIET
    )


def _mount_ext4(image: Path, mount: Path, size: int) -> None:
    """An ext4 file system on a loop device at `mount` whose free space for the sandbox's user
    is exactly `size` bytes: made a little larger, the rest reserved."""
    with image.open("wb") as fh:
        fh.truncate(size + _EXT4_SPARE)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image)], **_QUIET)
    head = subprocess.run(["dumpe2fs", "-h", str(image)], text=True, **_QUIET).stdout
    fields = dict(line.split(":", 1) for line in head.splitlines() if ":" in line)
    block, reserved = (
        int(fields["Block size"]),
        int(fields["Free blocks"]) - size // int(fields["Block size"]),
    )
    _reserve(image, reserved)
    mount.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], **_QUIET)
    mount.chmod(0o1777)
    (mount / "lost+found").rmdir()
    # the kernel keeps some blocks of its own (s_resv_clusters): the reserve makes up the rest
    st = os.statvfs(mount)
    extra = (st.f_bavail * st.f_frsize - size) // block
    if extra != 0:
        subprocess.run(["umount", str(mount)], **_QUIET)
        _reserve(image, reserved + extra)
        subprocess.run(["mount", "-o", "loop", str(image), str(mount)], **_QUIET)


@dataclass
class TmpVolume:
    """The environment's /tmp: an ext4 file system of the function's EphemeralStorage on a loop
    device, as Lambda's is a disk of that size (its pages are page cache, not the function's
    memory). Where no loop device can be mounted (not root), `path` is None and the sandbox
    gets a tmpfs of that size instead, whose pages count toward the memory cgroup (`mode`
    says which)."""

    size: int
    mode: str
    path: Path | None = None

    @classmethod
    def make(cls, scratch: Path, size: int) -> TmpVolume:
        image = scratch / f"tmp-{uuid.uuid4().hex[:8]}.img"
        mount = image.with_suffix("")
        try:
            _mount_ext4(image, mount, size)
        except (OSError, subprocess.CalledProcessError):
            if mount.is_mount():
                subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)
            image.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                mount.rmdir()
            return cls(size, "tmpfs")
        return cls(size, "ext4", mount)

    def remove(self) -> None:
        if self.path is None:
            return
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            self.path.rmdir()
        self.path.with_suffix(".img").unlink(missing_ok=True)
        self.path = None


# -- the sandbox -------------------------------------------------------------------------------

_SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc")
_DEVICES = ("null", "zero", "random", "urandom", "full")
SANDBOX_UID, SANDBOX_GID = 993, 990  # Lambda's sbx_user1051


def _python_prefix() -> Path:
    return Path(sys.base_prefix).resolve()


def sandbox_python() -> str:
    """The interpreter's path inside the sandbox (the machine's, mounted at /var/lang)."""
    return f"/var/lang/bin/python{sys.version_info.major}.{sys.version_info.minor}"


def site_packages_in_layer() -> str:
    return f"/opt/python/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


def bwrap_args(
    *, code_dir: Path, layer: Path, runtime: Path, empty: Path, tmp: Path | None, tmp_bytes: int
) -> list[str]:
    """bubblewrap's arguments for a Lambda-like file system and namespaces."""
    args = [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        "169.254.0.1",
        "--die-with-parent",
        "--new-session",
    ]
    for d in _SYSTEM_DIRS:
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += ["--ro-bind", d, d]
    prefix = _python_prefix()
    site = Path(sysconfig.get_paths(vars={"base": "/var/lang", "platbase": "/var/lang"})["purelib"])
    args += ["--ro-bind", str(prefix), str(prefix)]  # its shared library's own path
    args += ["--ro-bind", str(prefix), "/var/lang"]
    args += ["--ro-bind", str(empty), str(site)]  # the interpreter's own packages: none
    args += ["--ro-bind", str(runtime), "/var/runtime"]
    args += ["--ro-bind", str(code_dir), "/var/task"]
    args += ["--ro-bind", str(layer), "/opt"]
    args += ["--proc", "/proc", "--tmpfs", "/dev"]
    for dev in _DEVICES:
        args += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
    for n, name in enumerate(("stdin", "stdout", "stderr")):
        args += ["--symlink", f"/proc/self/fd/{n}", f"/dev/{name}"]
    args += ["--symlink", "/proc/self/fd", "/dev/fd", "--remount-ro", "/dev"]
    if tmp is not None:
        args += ["--bind", str(tmp), "/tmp"]
    else:
        args += ["--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    args += ["--remount-ro", "/", "--chdir", "/var/task"]
    args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
    return args


def lambda_environment(
    spec: FunctionSpec, *, api: str, variables: Mapping[str, str], endpoint_url: str
) -> dict[str, str]:
    """The environment Lambda gives a python3.x function: its reserved variables, then the
    template's (resolved); AWS is the moto server at `endpoint_url` (dummy credentials)."""
    name = f"caseshelf-{spec.logical_id}"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    reserved = {
        "_HANDLER": spec.handler,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{version}",
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": f"2026/12/05/[$LATEST]{uuid.uuid4().hex}",
        "AWS_LAMBDA_RUNTIME_API": api,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
        "_AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1",
        "_AWS_XRAY_DAEMON_PORT": "2000",
        "LAMBDA_TASK_ROOT": "/var/task",
        "LAMBDA_RUNTIME_DIR": "/var/runtime",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "PATH": "/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin",
        "LD_LIBRARY_PATH": "/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:"
        "/var/task:/var/task/lib:/opt/lib",
        # Lambda's python runtime puts the function, then the layer, then the runtime on the
        # path (/var/task first: awslambdaric adds it).
        "PYTHONPATH": f"{site_packages_in_layer()}:/opt/python:/var/runtime",
    }
    return {**reserved, **variables, "AWS_ENDPOINT_URL": endpoint_url}


# -- an execution environment ------------------------------------------------------------------


@dataclass
class Outcome:
    """One invocation as the invoker sees it. `kind`: ok, function-error, too-large (the answer
    was over the response limit), refused (the event was over the request limit; the function
    never ran), timeout, crashed (the runtime died: `oom` says whether the cgroup killed it),
    init-error."""

    kind: str
    answer: bytes = b""
    error: dict[str, Any] = field(default_factory=dict)
    cold: bool = False
    init_ms: float | None = None
    duration_ms: float | None = None
    peak_bytes: int | None = None
    oom: bool = False
    log: str = ""
    rss_peak_bytes: int | None = None  # the runtime process's VmHWM (no page cache)

    def json(self) -> Any:
        return json.loads(self.answer)


class ExecutionEnvironment:
    """One function's execution environment: started cold on the first invocation, kept warm
    for the next ones, started afresh after it died (a crash, an OOM kill, a timeout), as
    Lambda does."""

    def __init__(
        self,
        spec: FunctionSpec,
        *,
        layer: Path,
        runtime: Path,
        variables: Mapping[str, str],
        endpoint_url: str,
        scratch: Path,
    ) -> None:
        if BWRAP is None:
            raise RuntimeError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        self.spec = spec
        self.layer, self.runtime = layer, runtime
        self.variables, self.endpoint_url = dict(variables), endpoint_url
        self.scratch = scratch
        self.arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:caseshelf-{spec.logical_id}"
        self.api: RuntimeApi | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.limits: Limits | None = None
        self.tmp: TmpVolume | None = None
        self.spawned = 0.0
        self.log_path = scratch / f"{spec.logical_id}.log"
        self.log_start = 0
        self.cold_starts = 0

    # lifecycle

    def _command(self) -> list[str]:
        empty = self.scratch / "empty"
        empty.mkdir(parents=True, exist_ok=True)
        assert self.limits is not None
        sandbox = [
            str(BWRAP),
            *bwrap_args(
                code_dir=self.spec.code_dir,
                layer=self.layer,
                runtime=self.runtime,
                empty=empty,
                tmp=self.tmp.path if self.tmp is not None else None,
                tmp_bytes=self.spec.tmp_mb * 1024 * 1024,
            ),
            sandbox_python(),
            "-m",
            "awslambdaric",
            self.spec.handler,
        ]
        if self.limits.mode == "rlimit":
            return ["prlimit", f"--as={self.limits.memory_bytes}", "--", *sandbox]
        # the sandbox's first process joins the cgroups before it starts anything else
        join = " ".join(f'echo $$ > "{p}" &&' for p in self.limits.enter)
        return ["/bin/sh", "-c", f'{join} exec "$@"', "sh", *sandbox]

    def start(self) -> None:
        self.stop()
        self.api = RuntimeApi(self.arn)
        self.limits = make_limits(self.spec.memory_mb)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.tmp = TmpVolume.make(self.scratch, self.spec.tmp_mb * 1024 * 1024)
        env = lambda_environment(
            self.spec,
            api=self.api.address,
            variables=self.variables,
            endpoint_url=self.endpoint_url,
        )
        self.scratch.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.log_start = log.tell()
        self.spawned = time.monotonic()
        self.proc = subprocess.Popen(
            self._command(), env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        self.cold_starts += 1
        threading.Thread(target=self._watch, args=(self.proc, self.api), daemon=True).start()

    def _watch(self, proc: subprocess.Popen[bytes], api: RuntimeApi) -> None:
        """When the runtime exits, whatever it was doing ends with it."""
        proc.wait()
        api.dead = True
        api.polled.set()
        for inv in list(api.current.values()):
            inv.settle("crashed", error={"exitCode": proc.returncode})
        while True:
            try:
                item = api.queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Invocation):
                item.settle("orphaned")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.api is not None:
            self.api.close()
        if self.limits is not None:
            self.limits.remove()
        if self.tmp is not None:
            self.tmp.remove()
        self.proc = self.api = self.limits = self.tmp = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # invoking

    def invoke(self, event: Any) -> Outcome:
        """A synchronous Invoke of `event` (a JSON-able value, or its bytes)."""
        payload = event if isinstance(event, bytes) else json.dumps(event).encode()
        if len(payload) > REQUEST_LIMIT:
            return Outcome(
                "refused",
                error={
                    "errorType": "RequestEntityTooLargeException",
                    "errorMessage": f"{len(payload)} byte payload is too large for the Invoke "
                    f"API (max {REQUEST_LIMIT} bytes)",
                },
            )
        while True:
            cold = not self.alive()
            init_ms: float | None = None
            if cold:
                self.start()
                init_ms = self._await_init()
                if init_ms is None:
                    return self._dead("init-error", cold=True)
            assert self.api is not None
            # a cold invocation's log has the init phase's too
            mark = self.log_start if cold else self.log_path.stat().st_size
            inv = Invocation(str(uuid.uuid4()), payload, float(self.spec.timeout_s))
            self.api.queue.put(inv)
            if self.api.dead:  # it died while this was queued (see _watch)
                inv.settle("orphaned")
            # (the runtime takes a queued event at once: the Timeout runs from then)
            if not inv.done.wait(self.spec.timeout_s + 1):
                inv.settle(
                    "timeout",
                    error={"errorMessage": f"Task timed out after {self.spec.timeout_s} seconds"},
                )
            if inv.kind != "orphaned":  # an environment that died idle: Lambda uses a new one
                return self._outcome(inv, cold, init_ms, mark)

    def _await_init(self) -> float | None:
        """The init phase's duration: the sandbox started to the runtime's first poll, or None
        when the runtime died (or reported an init error) first."""
        assert self.api is not None
        self.api.polled.wait(INIT_TIMEOUT_S * 3)
        if self.api.first_poll is None:
            return None
        return (self.api.first_poll - self.spawned) * 1000

    def _dead(self, kind: str, *, cold: bool) -> Outcome:
        assert self.api is not None and self.limits is not None
        error = self.api.init_error or {}
        oom = self.limits.oom_kills() > 0
        out = Outcome(kind, error=error, cold=cold, oom=oom, log=self._log_since(self.log_start))
        self.stop()
        return out

    def _outcome(self, inv: Invocation, cold: bool, init_ms: float | None, mark: int) -> Outcome:
        limits = self.limits
        peak = limits.peak_bytes() if limits is not None else None
        rss = limits.rss_peak_bytes() if limits is not None else None
        oom = bool(limits and limits.oom_kills())
        duration = (inv.finished - inv.started) * 1000 if inv.started and inv.finished else None
        out = Outcome(
            inv.kind,
            inv.answer,
            inv.error,
            cold=cold,
            init_ms=init_ms,
            duration_ms=duration,
            peak_bytes=peak,
            oom=oom,
            log=self._log_since(mark),
            rss_peak_bytes=rss,
        )
        if inv.kind in ("crashed", "timeout") or not self.alive():
            self.stop()
        return out

    def _log_since(self, mark: int) -> str:
        with self.log_path.open("rb") as fh:
            fh.seek(mark)
            return fh.read().decode("utf-8", "replace")


# -- API Gateway and the event sources ----------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who calls, as the Cognito authorizer's claims say."""

    tenant: str = "acme"
    sub: str = "7d9f5c2e-1111-4a8b-9c3d-0123456789ab"
    username: str = "alice"
    roles: str = ""

    def claims(self) -> dict[str, str]:
        return {
            "sub": self.sub,
            "cognito:username": self.username,
            "custom:tenant": self.tenant,
            "custom:roles": self.roles,
            "email": f"{self.username}@example.com",
            "token_use": "id",
        }


def api_event(
    method: str,
    resource: str,
    path_params: Mapping[str, str] | None = None,
    *,
    query: Mapping[str, str] | None = None,
    body: Any = None,
    raw_body: str | None = None,
    caller: Caller = Caller(),
    stage: str = "prod",
) -> dict[str, Any]:
    """An API Gateway REST proxy event for `method resource` (the template's path with
    `{params}`), with the Cognito authorizer's claims, built by the project's own gateway
    (`caseshelf.gateway.build_event`) and then given the claims a user-pool authorizer sends."""
    from urllib.parse import quote, urlencode

    from caseshelf.gateway import build_event

    params = dict(path_params or {})
    path = resource
    for k, v in params.items():
        path = path.replace("{" + k + "}", quote(v, safe=":@"))
    text = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    headers = [
        ("Host", "abc123.execute-api.us-east-1.amazonaws.com"),
        ("Accept", "application/json"),
    ]
    if text is not None:
        headers.append(("Content-Type", "application/json"))
    ev = build_event(
        method=method,
        path=path,
        resource=resource,
        path_params=params,
        query=urlencode(query or {}),
        headers=headers,
        body=(text or "").encode(),
        tenant=caller.tenant,
        principal=caller.sub,
        roles=caller.roles,
        request_id=str(uuid.uuid4()),
    )
    ev["requestContext"].update(stage=stage, path=f"/{stage}{path}", apiId="abc123")
    ev["requestContext"]["authorizer"] = {"claims": caller.claims()}
    return ev


def eventbridge_object_created(bucket: str, key: str, etag: str, size: int) -> dict[str, Any]:
    """EventBridge's `Object Created` event for one object (the template's importer rule)."""
    from caseshelf.gateway import object_created_event

    ev = object_created_event(key, etag, size)
    ev["account"] = ACCOUNT
    ev["resources"] = [f"arn:aws:s3:::{bucket}"]
    ev["detail"]["bucket"]["name"] = bucket
    return ev


def s3_notification(bucket: str, key: str, etag: str, size: int) -> dict[str, Any]:
    """An S3 bucket notification (`Records[].s3`) for one created object."""
    from urllib.parse import quote_plus

    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": REGION,
                "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
                    "object": {
                        "key": quote_plus(key, safe="/"),
                        "size": size,
                        "eTag": etag,
                        "sequencer": f"{time.time_ns():020X}",
                    },
                },
            }
        ]
    }


def scheduled_event(rule: str) -> dict[str, Any]:
    from caseshelf.gateway import scheduled_event as make

    return make(rule)


@dataclass(frozen=True)
class ApiAnswer:
    """What the API's caller gets: the function's proxy answer, or API Gateway's own 502/504
    when the function gave none it could use."""

    status: int
    body: bytes
    headers: Mapping[str, str]
    outcome: Outcome

    def json(self) -> Any:
        return json.loads(self.body)


def api_answer(outcome: Outcome) -> ApiAnswer:
    if outcome.kind == "ok":
        from caseshelf.gateway import read_result

        try:
            proxy = read_result(json.loads(outcome.answer))
        except (ValueError, TypeError, AttributeError):
            return ApiAnswer(502, b'{"message": "Internal server error"}', {}, outcome)
        return ApiAnswer(proxy.status, proxy.body, dict(proxy.headers), outcome)
    if outcome.kind == "timeout":
        return ApiAnswer(504, b'{"message": "Endpoint request timed out"}', {}, outcome)
    return ApiAnswer(502, b'{"message": "Internal server error"}', {}, outcome)


# -- the whole emulation -----------------------------------------------------------------------


def queues_on(endpoint_url: str) -> dict[str, str]:
    """The template's SQS queues made on the moto server: `{Name: url, "Name.Arn": arn}`."""
    import boto3

    from tests.moto_infra import create_queues

    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    refs: dict[str, str] = {}
    for name, (url, arn) in create_queues(sqs, uuid.uuid4().hex[:8]).items():
        refs[name], refs[f"{name}.Arn"] = url, arn
    return refs


class Emulation:
    """The template's functions, each in its own execution environment, over one moto server
    (bucket and table made from the template by the caller)."""

    def __init__(
        self,
        *,
        endpoint_url: str,
        bucket: str,
        table: str,
        scratch: Path,
        layer: Path | None = None,
        specs: Mapping[str, FunctionSpec] | None = None,
    ) -> None:
        self.specs = dict(specs or function_specs())
        self.layer = layer or cached_layer()
        self.runtime = runtime_dir()
        self.refs = {"DataBucket": bucket, "IndexTable": table, **queues_on(endpoint_url)}
        self.endpoint_url, self.scratch = endpoint_url, scratch
        self.envs: dict[str, ExecutionEnvironment] = {}

    def env(self, logical_id: str) -> ExecutionEnvironment:
        if logical_id not in self.envs:
            spec = self.specs[logical_id]
            self.envs[logical_id] = ExecutionEnvironment(
                spec,
                layer=self.layer,
                runtime=self.runtime,
                variables=resolve_variables(spec, self.refs),
                endpoint_url=self.endpoint_url,
                scratch=self.scratch,
            )
        return self.envs[logical_id]

    def invoke(self, logical_id: str, event: Any) -> Outcome:
        return self.env(logical_id).invoke(event)

    def call(self, logical_id: str, event: dict[str, Any]) -> ApiAnswer:
        """An API request through API Gateway to the function: its answer, with the Outcome."""
        return api_answer(self.invoke(logical_id, event))

    def deliver(self, queue: str, logical_id: str) -> list[Outcome]:
        """Each message of the template's queue `queue` received from the moto server and
        handed to the function as its SQS event source would (batch size 1), until the queue
        is empty: deleted when the invocation succeeds, left to come back (after its
        visibility timeout) when it fails. The invocations' outcomes, in order."""
        import boto3

        sqs = boto3.client(
            "sqs",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        url, arn = self.refs[queue], self.refs[f"{queue}.Arn"]
        outcomes: list[Outcome] = []
        while True:
            got = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"]
            ).get("Messages", [])
            if not got:
                return outcomes
            msg = got[0]
            record = {
                "messageId": msg["MessageId"],
                "receiptHandle": msg["ReceiptHandle"],
                "body": msg["Body"],
                "attributes": msg["Attributes"],
                "messageAttributes": {},
                "md5OfBody": msg["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }
            outcome = self.invoke(logical_id, {"Records": [record]})
            outcomes.append(outcome)
            if outcome.kind != "ok":
                return outcomes  # the message comes back after its visibility timeout
            sqs.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])

    def close(self) -> None:
        for env in self.envs.values():
            env.stop()

    def __enter__(self) -> Emulation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def moto_stack(endpoint_url: str) -> Iterator[tuple[str, str]]:
    """A fresh bucket and table on the moto server, made from the template: (bucket, table)."""
    import boto3

    from tests.moto_infra import create_bucket, create_table

    suffix = uuid.uuid4().hex[:12]
    bucket, table = f"caseshelf-{suffix}", f"caseshelf-{suffix}"
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    create_bucket(session.client("s3", endpoint_url=endpoint_url), bucket)
    create_table(session.client("dynamodb", endpoint_url=endpoint_url), table)
    yield bucket, table
