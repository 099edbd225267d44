"""A whole version downloaded as one dataset document, and presigned URLs fetched a piece at a
time."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from caseshelf.client.base import Progress
from caseshelf.client.jobs import JobsMixin
from caseshelf.client.refs import parse_ref
from caseshelf.client.transport import Answer, Http, InProcess, Request, job_error
from caseshelf.domain.errors import Upstream

DOWNLOAD_CHUNK = 1 << 20  # what a streamed download holds at a time
DEFAULT_TIMEOUT = 120.0  # seconds a download's read may wait (`Http`'s default)


@dataclass(frozen=True)
class Downloaded:
    """A whole version as one dataset document: its file name, and its bytes or where they
    were written."""

    filename: str
    body: bytes | None = None
    path: Path | None = None
    size: int = 0


def _is_stream(to: object) -> bool:
    return callable(getattr(to, "write", None))


def _take(
    pieces: Iterator[bytes], target: Path | BinaryIO | None, progress: Progress | None
) -> bytes:
    """`pieces` written to `target` as they come, one held at a time (a file path: through a
    temporary file renamed into place once whole), answering b""; with no target, joined.
    `progress(n)` is told each piece's size."""

    def counted() -> Iterator[bytes]:
        for piece in pieces:
            if progress is not None:
                progress(len(piece))
            yield piece

    if target is None:
        return b"".join(counted())
    if isinstance(target, Path):
        _write_whole(target, counted())
    else:
        for piece in counted():
            target.write(piece)
    return b""


def _target(to: str | Path | None, filename: str) -> Path | None:
    if to is None:
        return None
    p = Path(to)
    return p / filename if p.is_dir() else p


def _write_whole(target: Path, pieces: Iterable[bytes]) -> None:
    """Write `pieces` to `target` through a temporary file beside it, renamed into place only
    once complete: a failed download leaves no partial file that looks whole."""

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path())
    try:
        with os.fdopen(fd, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
        Path(tmp).replace(target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def safe_filename(name: object, default: str) -> str:
    """A file name from the server, usable in the current directory, or `default`."""
    if (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and not name.startswith(".")
        and not any(c in name for c in "/\\\0")
    ):
        return name
    return default


def _disposition_name(value: str | None, default: str) -> str:
    if not value:
        return default
    from email.message import Message  # lazy: ~8 ms, a tenth of the client

    msg = Message()
    msg["content-disposition"] = value
    return safe_filename(msg.get_param("filename", header="content-disposition"), default)


class DownloadsMixin(JobsMixin):
    """Downloads: a version's document (rendered by a job), and presigned URLs fetched."""

    def download(
        self,
        ref: str,
        *,
        to: str | Path | BinaryIO | None = None,
        include_deleted: bool = False,
        progress: Progress | None = None,
        total: Progress | None = None,
        wait: float = 3600.0,
    ) -> Downloaded:
        """The whole version as one dataset document that `register` takes as it is. With
        `to` (a file path, or a directory for the server's file name) it is written there,
        streamed from the presigned URL when the API gives one (the embedded store gives one
        of its own), a piece at a time, and `path` says where; `to` may also be a binary
        stream (`sys.stdout.buffer`), written as the pieces come. Else `body` holds it.
        `progress(n)` is called with bytes as they arrive, `total(n)` with the size once it is
        known.

        The API renders a document once, as a job (202): this follows the job to its end
        (`follow_job`; `wait` bounds the wait in seconds), raises the error of the part that
        failed, or asks again for the document it rendered."""
        name, r = parse_ref(ref)
        query = {"include_deleted": include_deleted}
        request = Request("GET", ("datasets", name, "versions", r, "download"), query)
        answer = self.transport.send(request)
        if answer.status == 202:
            answer = self._rendered(answer, request, wait)
        default = f"{name}-{r.replace(':', '-')}.json"
        # The document itself comes as an attachment; a presigned URL as a small JSON answer.
        disposition = answer.header("content-disposition")
        doc: Any = answer.json() if disposition is None else None
        if isinstance(doc, dict) and isinstance(doc.get("url"), str) and "cases" not in doc:
            filename = safe_filename(doc.get("filename"), default)
            if _is_stream(to):
                counted: list[int] = []

                def seen(n: int) -> None:
                    counted.append(n)
                    if progress is not None:
                        progress(n)

                self._fetch(doc["url"], to, seen, total)  # type: ignore[arg-type]
                return Downloaded(filename, size=sum(counted))
            target = _target(to, filename)  # type: ignore[arg-type]
            if target is None:
                body = self._fetch(doc["url"], None, progress, total)
                return Downloaded(filename, body=body, size=len(body))
            self._fetch(doc["url"], target, progress, total)
            return Downloaded(filename, path=target, size=target.stat().st_size)
        filename = _disposition_name(disposition, default)
        if total is not None:
            total(len(answer.body))
        if progress is not None:
            progress(len(answer.body))
        if _is_stream(to):
            to.write(answer.body)  # type: ignore[union-attr]
            return Downloaded(filename, size=len(answer.body))
        target = _target(to, filename)  # type: ignore[arg-type]
        if target is None:
            return Downloaded(filename, body=answer.body, size=len(answer.body))
        _write_whole(target, [answer.body])
        return Downloaded(filename, path=target, size=len(answer.body))

    def _rendered(self, started: Answer, request: Request, wait: float) -> Answer:
        """The download route's answer once the job its 202 answered has rendered the
        document."""
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s

        job = self.follow_job(self._as(JobOut, started.json()).id, wait=wait)
        if job.state == "failed":
            raise job_error(job.id, job.error)
        answer = self.transport.send(request)
        if answer.status == 202:
            raise Upstream(
                f"job {job.id} rendered the document, but it was gone when asked for; ask again",
                job_id=job.id,
            )
        return answer

    def _fetch(
        self,
        url: str,
        target: Path | BinaryIO | None,
        progress: Progress | None,
        total: Progress | None = None,
    ) -> bytes:
        """GET `url` (presigned: no credentials of ours go with it; or one of the in-process
        store's own) a piece at a time, into `target` (a file, written whole or not at all; a
        binary stream) or, with none, answered whole."""
        transport = self.transport
        if isinstance(transport, InProcess) and transport.serves(url):
            fh, size = transport.open_url(url)
            with fh:
                if total is not None:
                    total(size)
                return _take(iter(lambda: fh.read(DOWNLOAD_CHUNK), b""), target, progress)
        from caseshelf.client.urlget import get_url  # lazy: urllib.request, a download's own

        timeout = transport.read_timeout if isinstance(transport, Http) else DEFAULT_TIMEOUT
        with get_url(url, DOWNLOAD_CHUNK, timeout=timeout) as (length, pieces):
            if total is not None and length is not None:
                total(length)
            return _take(pieces, target, progress)
