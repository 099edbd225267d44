"""Datasets as code: the lock file of an eval repository and what is done with it, over the
client (so in process and over HTTP alike).

- `pin` resolves a ref (optionally a subset of it) and writes its pin into `caseshelf.lock`;
  `unpin` takes one out; `update` resolves pins again and writes what moved.
- `check` asks the registry about every pin in one request (`POST /refs/resolve`): a pinned
  version that is gone, tombstoned, or held under its label with other content is a problem;
  with `strict`, so is a ref that has moved since it was locked (who moved it, when, and the
  diff's counts).
- `sync` puts every pinned version into the verified local cache (`caseshelf.client.cache`);
  `load` gives a pin's cases, from the cache when it holds them (no registry needed), else
  fetched, verified and cached.

The lock is found next to the nearest `caseshelf.lock`, `pyproject.toml` or `.git` walking up
from the working directory (else in it); `CASESHELF_LOCK` names it outright. A lock that does
not parse stops every command before anything is written.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict

from caseshelf.client.cache import Cache
from caseshelf.client.refs import DATASET_ID_PATTERN, parse_ref
from caseshelf.domain.cached import (
    Verified,
    VersionContent,
    document_content,
    fetched_content,
    verify_records,
)
from caseshelf.domain.errors import BadRequest, CaseshelfError, Corrupt, NotFound
from caseshelf.domain.lockfile import (
    EMBEDDED,
    LOCK_NAME,
    Lock,
    Pin,
    SubsetPin,
    parse_lock,
    pin_lines,
    render_lock,
)
from caseshelf.domain.words import DATASET_ID_RULE

if TYPE_CHECKING:
    from caseshelf.api.dto import DiffOut, SubsetOut, VersionOut
    from caseshelf.api.refs_dto import RefResolvedOut
    from caseshelf.client.downloads import Downloaded
    from caseshelf.client.transport import Transport
    from caseshelf.domain.subset import Selection

LOCK_ENV = "CASESHELF_LOCK"
_PROJECT_MARKERS = (LOCK_NAME, "pyproject.toml", ".git")


class Client(Protocol):
    """What the lock file asks of the registry: `caseshelf.Client` is one."""

    transport: Transport

    def get(self, ref: str, *, include_deleted: bool = False) -> VersionOut: ...

    def subset(self, ref: str, body: Mapping[str, Any] | BaseModel | None = None) -> SubsetOut: ...

    def resolve_refs(self, refs: Iterable[str | Mapping[str, Any]]) -> list[RefResolvedOut]: ...

    def diff(
        self, base: str, candidate: str, *, summary: bool = False, include_deleted: bool = False
    ) -> DiffOut: ...

    def download(self, ref: str) -> Downloaded: ...


# -- the lock file on disk --------------------------------------------------------------------


def find_lock(start: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Where the lock is, or would be written: `CASESHELF_LOCK`, else `caseshelf.lock` in the
    nearest directory up from `start` (the working directory) that holds a lock, a
    `pyproject.toml` or a `.git`, else in `start`."""
    environ = os.environ if env is None else env
    if environ.get(LOCK_ENV):
        return Path(environ[LOCK_ENV])
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in _PROJECT_MARKERS):
            return folder / LOCK_NAME
    return here / LOCK_NAME


def shown(path: Path) -> str:
    """`path` as messages name it: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class LockFile:
    """A lock file as read: its path, the lock, and its text (for line numbers)."""

    path: Path
    lock: Lock
    text: str

    @classmethod
    def read(cls, path: Path) -> LockFile:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path, Lock(), "")
        except UnicodeDecodeError as exc:
            raise BadRequest(
                f"{shown(path)}: not UTF-8 text ({exc.reason} at byte {exc.start}); restore it "
                "with git; nothing was rewritten",
                file=str(path),
            ) from None
        return cls(path, parse_lock(text, shown(path)), text)

    def line(self, name: str) -> int | None:
        return pin_lines(self.text).get(name)

    def where(self, name: str) -> str:
        line = self.line(name)
        return f"{shown(self.path)}:{line}" if line else shown(self.path)

    def pin(self, name: str) -> Pin:
        pin = self.lock.pins.get(name)
        if pin is None:
            have = ", ".join(self.lock.pins) or "none"
            raise NotFound(
                f"{shown(self.path)} has no pin {name!r} (pins: {have}); pin it with "
                f"`caseshelf pin {name}@<ref>`",
                pin=name,
                file=str(self.path),
            )
        return pin

    def write(self, lock: Lock) -> bool:
        """Write `lock` in place of this file (whole, through a temporary file renamed over
        it); False when it is what the file holds already."""
        text = render_lock(lock)
        if text == self.text:
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
            Path(tmp).replace(self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return True


def registry_of(client: Client) -> str:
    """The registry a client reaches, as a pin records it: the API's URL, or `embedded`."""
    base = getattr(client.transport, "base_url", None)
    if isinstance(base, str):
        return base
    settings = getattr(client.transport, "settings", None)
    bucket = getattr(settings, "bucket", None)
    if getattr(settings, "backend", "local") == "aws" and bucket:
        return f"s3://{bucket}"
    return EMBEDDED


def _located(exc: CaseshelfError, where: str, name: str) -> CaseshelfError:
    """The same error, its message naming the lock file, line and pin."""
    return type(exc)(f"{where}: pin {name}: {exc.detail}", **{**exc.fields, "pin": name})


# -- answers (the JSON of each command) --------------------------------------------------------


class _Out(BaseModel):
    # Built on first use: a command answers with one of these.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class PinnedOut(_Out):
    lock: str
    name: str
    pin: Pin
    previous: Pin | None = None
    changed: bool


class UnpinnedOut(_Out):
    lock: str
    name: str
    pin: Pin


class PinChangeOut(_Out):
    name: str
    before: Pin
    after: Pin
    changed: bool


class UpdateOut(_Out):
    lock: str
    written: bool
    pins: list[PinChangeOut]


class MoveOut(_Out):
    ref: str
    from_version: str
    to_version: str | None
    by: str | None
    at: str | None


class DiffCountsOut(_Out):
    changed: int
    added: int
    removed: int


PinState = Literal["ok", "gone", "tombstoned", "mismatch", "moved"]


class PinCheckOut(_Out):
    name: str
    line: int | None
    ref: str
    version: str
    digest: str
    status: PinState
    problem: str | None = None
    now_version: str | None = None
    now_digest: str | None = None
    moved: MoveOut | None = None
    diff: DiffCountsOut | None = None


class CheckOut(_Out):
    lock: str
    registry: str
    strict: bool
    ok: bool
    pins: list[PinCheckOut]
    problems: list[str]


class SyncedOut(_Out):
    name: str
    version: str
    digest: str
    cases: int
    source: Literal["cache", "registry"]


class SyncOut(_Out):
    lock: str
    cache: str
    pins: list[SyncedOut]


# -- the pure part of check: what each answer means for its pin --------------------------------


def _short(digest: str) -> str:
    return digest[:11] + "…"


def _when(at: str | None) -> str:
    return (at or "")[:16].replace("T", " ")


def judge(
    name: str, pin: Pin, answer: RefResolvedOut, line: int | None, where: str | None = None
) -> PinCheckOut:
    """The state of one pin from the registry's answer about it (`POST /refs/resolve`):
    `gone`, `tombstoned` or `mismatch` when the pinned version is not there as locked; `moved`
    when the ref now resolves elsewhere (a problem only under `--strict`); else `ok`."""
    base = {"name": name, "line": line, "ref": pin.ref, "version": pin.version}
    base["digest"] = pin.digest
    now = answer.version
    if now is not None:
        base |= {"now_version": now.version, "now_digest": now.content_digest}
    pinned = answer.pinned
    label = f"{pin.version} ({_short(pin.digest)})"
    if pinned is None:
        why = answer.pinned_problem.detail if answer.pinned_problem else "not found"
        return PinCheckOut(
            **base,
            status="gone",
            problem=f"{name}: {label} is gone from the registry ({why}); `caseshelf update "
            f"{name}` pins what {pin.ref} is now",
        )
    expected = pin.subset.total if pin.subset is not None else pin.cases
    if pinned.content_digest != pin.digest or pinned.case_count != expected:
        at = f"{where}: " if where else ""
        return PinCheckOut(
            **base,
            status="mismatch",
            problem=f"{at}{name}: the lock pins {pin.version} as {_short(pin.digest)} "
            f"({expected:,} cases), but the registry serves {pinned.version} as "
            f"{_short(pinned.content_digest)} ({pinned.case_count:,} cases); the lock was "
            f"written against other content: `caseshelf update {name}` pins what the registry "
            "holds",
        )
    if pinned.deleted_at is not None:
        return PinCheckOut(
            **base,
            status="tombstoned",
            problem=f"{name}: {label} is deleted (by {pinned.deleted_by}, "
            f"{_when(pinned.deleted_at)}); revive it (`caseshelf revive "
            f"{pin.dataset}@{pinned.version}`) or `caseshelf update {name}`",
        )
    if now is not None and now.content_digest == pin.digest:
        return PinCheckOut(**base, status="ok")
    return PinCheckOut(**base, status="moved", moved=_move(pin, answer))


def _move(pin: Pin, answer: RefResolvedOut) -> MoveOut:
    """Who moved the ref from the locked version to where it is now, and when."""
    now = answer.version
    ref = pin.ref_part
    m = answer.moved
    if now is None:  # the ref resolves to nothing now (a tag removed, every version deleted)
        return MoveOut(
            ref=ref,
            from_version=pin.version,
            to_version=None,
            by=m.by if m is not None else None,
            at=m.at if m is not None else None,
        )
    if m is not None and m.to_version == now.version:
        return MoveOut(ref=ref, from_version=pin.version, to_version=now.version, by=m.by, at=m.at)
    # `latest` (or a tag only version rows carry): the version it is now was registered
    return MoveOut(
        ref=ref,
        from_version=pin.version,
        to_version=now.version,
        by=now.created_by,
        at=now.created_at,
    )


def moved_line(c: PinCheckOut) -> str:
    """`gsm8k: stable moved 1.1.0 -> 1.2.0 (by alice, 2026-12-07 10:02); 12 changed, …`"""
    m = c.moved
    assert m is not None
    to = m.to_version if m.to_version is not None else "(nothing: it no longer resolves)"
    who = f" (by {m.by}, {_when(m.at)})" if m.by else ""
    line = f"{c.name}: {m.ref} moved {m.from_version} -> {to}{who}"
    if c.diff is not None:
        d = c.diff
        line += f"; {d.changed:,} changed, {d.added:,} added, {d.removed:,} removed"
    return line


# -- the commands ---------------------------------------------------------------------------


class Pins:
    """The lock file at `lock` (default: `find_lock()`) and the registry `client` reaches."""

    def __init__(
        self, client: Client, lock: str | Path | None = None, cache: Cache | None = None
    ) -> None:
        self.client = client
        self.path = Path(lock) if lock is not None else find_lock()
        self.cache = cache if cache is not None else Cache.from_env()

    def read(self) -> LockFile:
        return LockFile.read(self.path)

    def existing(self) -> LockFile:
        """The lock, which must be there: checking or syncing no lock is a mistake to name, not
        a pass (a CI job in the wrong directory would pass every time)."""
        if not self.path.is_file():
            raise NotFound(
                f"no lock file at {shown(self.path)}: pin a dataset there with `caseshelf pin "
                "ID@REF`, run from the eval repository, or name the lock with --lock "
                f"({LOCK_ENV})",
                file=str(self.path),
            )
        return self.read()

    def pin(
        self, ref: str, *, name: str | None = None, selection: Selection | None = None
    ) -> PinnedOut:
        """Resolve `ref` (with `selection`, that subset of it) and pin it as `name` (default
        the dataset id), replacing a pin of that name."""
        lockfile = self.read()
        dataset, r = parse_ref(ref)
        name = name or dataset
        _check_name(name)
        pin = self._resolve(f"{dataset}@{r}", selection)
        previous = lockfile.lock.pins.get(name)
        lockfile.write(lockfile.lock.with_pin(name, pin))
        return PinnedOut(
            lock=shown(self.path), name=name, pin=pin, previous=previous, changed=previous != pin
        )

    def _resolve(self, ref: str, selection: Selection | None) -> Pin:
        registry = registry_of(self.client)
        if selection is None or selection.empty:
            v = self.client.get(ref)
            return Pin(
                ref=ref,
                version=v.version,
                digest=v.content_digest,
                cases=v.case_count,
                registry=registry,
            )
        record = selection.as_record()
        out = self.client.subset(ref, record)
        stamp = out.stamp
        assert stamp is not None  # a selection that narrows is always stamped
        return Pin(
            ref=ref,
            version=stamp.version,
            digest=stamp.content_digest,
            cases=stamp.selected,
            registry=registry,
            subset=SubsetPin(**record, total=stamp.total, selected=stamp.selected),
        )

    def unpin(self, name: str) -> UnpinnedOut:
        lockfile = self.read()
        pin = lockfile.pin(name)
        lockfile.write(lockfile.lock.without(name))
        return UnpinnedOut(lock=shown(self.path), name=name, pin=pin)

    def update(self, names: Sequence[str] = ()) -> UpdateOut:
        """Resolve the named pins (every pin when none is named) again and write the lock once,
        when every one of them resolved; what changed."""
        lockfile = self.existing()
        chosen = list(dict.fromkeys(names)) or list(lockfile.lock.pins)
        olds = {n: lockfile.pin(n) for n in chosen}
        news: dict[str, Pin] = {}
        for n, old in olds.items():
            try:
                news[n] = self._resolve(old.ref, old.subset.selection() if old.subset else None)
            except CaseshelfError as exc:
                raise _located(exc, lockfile.where(n), n) from None
        lock = lockfile.lock
        for n, new in news.items():
            lock = lock.with_pin(n, new)
        written = lockfile.write(lock)
        changes = [
            PinChangeOut(name=n, before=olds[n], after=news[n], changed=olds[n] != news[n])
            for n in chosen
        ]
        return UpdateOut(lock=shown(self.path), written=written, pins=changes)

    def check(self, *, strict: bool = False) -> CheckOut:
        """Every pin against the registry in one request; with `strict`, a moved ref is a
        problem too (with the diff's counts from the locked version to where it is now)."""
        lockfile = self.existing()
        pins = lockfile.lock.pins
        queries = [{"ref": p.ref, "version": p.version, "digest": p.digest} for p in pins.values()]
        answers = self.client.resolve_refs(queries) if queries else []
        results = []
        for (name, pin), answer in zip(pins.items(), answers, strict=True):
            result = judge(name, pin, answer, lockfile.line(name), lockfile.where(name))
            if result.status == "moved":
                if strict and result.now_digest is not None:
                    result.diff = self._counts(pin, result.now_digest)
                result.problem = moved_line(result)
            results.append(result)
        problems = [
            r.problem for r in results if r.problem is not None and (r.status != "moved" or strict)
        ]
        return CheckOut(
            lock=shown(self.path),
            registry=registry_of(self.client),
            strict=strict,
            ok=not problems,
            pins=results,
            problems=problems,
        )

    def _counts(self, pin: Pin, now_digest: str) -> DiffCountsOut:
        d = self.client.diff(
            pin.pinned_ref, f"{pin.dataset}@{now_digest}", summary=True, include_deleted=True
        )
        return DiffCountsOut(
            changed=d.summary.changed, added=d.summary.added, removed=d.summary.removed
        )

    def sync(self) -> SyncOut:
        """Every pinned version into the local cache, verified (fetched only when the cache
        does not hold it already). A cache that cannot be written is an error here."""
        lockfile = self.existing()
        out = []
        done: dict[str, Literal["cache", "registry"]] = {}
        for name, pin in lockfile.lock.pins.items():
            where = lockfile.where(name)
            if pin.digest not in done:
                got = self.cache.get(pin.digest)
                source: Literal["cache", "registry"] = "cache"
                if got is None:
                    content = self._fetch_content(name, pin, where)
                    self.cache.put(pin.digest, content, strict=True)
                    source = "registry"
                    if pin.subset is not None:  # its selection is checked on the cases
                        got = verify_records(content.records, **content.meta())
                done[pin.digest] = source
                if got is not None:
                    _select(name, pin, got, where)
            out.append(
                SyncedOut(
                    name=name,
                    version=pin.version,
                    digest=pin.digest,
                    cases=pin.cases,
                    source=done[pin.digest],
                )
            )
        return SyncOut(lock=shown(self.path), cache=str(self.cache.root), pins=out)

    def load(self, name: str) -> list[dict[str, Any]]:
        """The cases of pin `name`: from the cache when it holds the version (verified, no
        registry asked), else fetched, verified and cached; a subset pin's selection of them."""
        lockfile = self.existing()
        pin = lockfile.pin(name)
        where = lockfile.where(name)
        got = self.cache.get(pin.digest)
        if got is None:
            content, got = self._fetch(name, pin, where)
            self.cache.put(pin.digest, content)
        return _select(name, pin, got, where)

    def _fetch(self, name: str, pin: Pin, where: str) -> tuple[VersionContent, Verified]:
        """The pinned version from the registry (its download document), verified against
        the pin's digest."""
        return self._parsed(name, pin, where, self._download(name, pin, where))

    def _fetch_content(self, name: str, pin: Pin, where: str) -> VersionContent:
        """`_fetch` without the cases: the records cut out of the document's bytes where their
        digest is the pin's (`document_content`), else parsed."""
        body = self._download(name, pin, where)
        cut = document_content(body)
        if cut is not None and cut[1] == pin.digest:
            return cut[0]
        return self._parsed(name, pin, where, body)[0]

    def _download(self, name: str, pin: Pin, where: str) -> bytes:
        try:
            body = self.client.download(pin.pinned_ref).body
        except CaseshelfError as exc:
            raise _located(exc, where, name) from None
        assert body is not None
        return body

    def _parsed(
        self, name: str, pin: Pin, where: str, body: bytes
    ) -> tuple[VersionContent, Verified]:
        content, got = fetched_content(orjson.loads(body))
        if got.content_digest != pin.digest:
            raise Corrupt(
                f"{where}: pin {name}: the registry serves {pin.pinned_ref} as content that "
                f"hashes to {got.content_digest}, not the pinned digest; nothing was cached",
                pin=name,
                digests=[pin.digest, got.content_digest],
            )
        return content, got


def _select(name: str, pin: Pin, got: Verified, where: str) -> list[dict[str, Any]]:
    """A pin's cases of a verified version: all of them, or its subset's selection (which must
    select as many cases as it did when pinned)."""
    if pin.subset is None:
        return got.cases
    from caseshelf.domain.subset import select_cases  # lazy: ~9 ms, subset pins only

    cases = got.cases
    chosen = select_cases(
        [c["id"] for c in cases],
        [c.get("tags", ()) for c in cases],
        got.case_digests,
        pin.subset.selection(),
    )
    if len(chosen) != pin.subset.selected:
        raise Corrupt(
            f"{where}: pin {name}: the subset selects {len(chosen):,} cases of "
            f"{pin.pinned_ref}, the lock says {pin.subset.selected:,}; re-pin it with "
            f"`caseshelf update {name}`",
            pin=name,
        )
    return [cases[i] for i in chosen]


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not re.fullmatch(DATASET_ID_PATTERN, name):
        raise BadRequest(
            f"invalid pin name {name!r}: pins are named as datasets are ({DATASET_ID_RULE})",
            field="name",
        )


def selection_of(
    *,
    ids: Iterable[str] | None = None,
    tags: Iterable[str] | None = None,
    limit: int | None = None,
    sample: int | None = None,
    seed: int | str | None = None,
) -> Selection:
    from caseshelf.domain.subset import Selection  # lazy: ~9 ms, subset pins only

    return Selection(
        ids=tuple(ids) if ids else None,
        tags=tuple(tags) if tags else None,
        limit=limit,
        sample=sample,
        seed=seed,
    )


__all__ = [
    "LOCK_ENV",
    "CheckOut",
    "LockFile",
    "PinnedOut",
    "Pins",
    "SyncOut",
    "UnpinnedOut",
    "UpdateOut",
    "find_lock",
    "judge",
    "registry_of",
    "selection_of",
]
