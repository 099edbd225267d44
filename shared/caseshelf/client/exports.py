"""The client's exports of a version as per-case directories, and pulls of an export from S3."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caseshelf.client.base import _body
from caseshelf.client.downloads import DownloadsMixin
from caseshelf.client.refs import parse_ref
from caseshelf.client.transport import InProcess, Request, job_error
from caseshelf.domain.errors import BadRequest, NotFound, Upstream

if TYPE_CHECKING:
    from pydantic import BaseModel

    from caseshelf.api.dto import ExportOut
    from caseshelf.services.pull import Progress as PullProgress


class ExportsMixin(DownloadsMixin):
    """Exports and pulls."""

    def export(
        self,
        ref: str,
        body: Mapping[str, Any] | BaseModel | None = None,
        *,
        to: str | Path | None = None,
        wait: float = 3600.0,
        **fields: Any,
    ) -> ExportOut:
        """Export a version as per-case directories. `body` is the export request
        (`caseshelf.services.exports.ExportRequest`, or its JSON); keyword `fields` are added
        to it as they are (`subset={...}`, `shared_files=[...]`, `format=...`, and whatever the
        API's export request takes), so the server validates every option.

        The API runs an export as a job (202): this follows it to its end (`follow_job`,
        reporting its progress to the command line's progress, if any) and answers its result,
        or raises the error of the part that failed; `wait` bounds the wait in seconds.

        `to`: where the export goes. Default: the registry's own exports prefix. A local
        directory: unpacked there, verified against its manifest. `s3://bucket/prefix`: written
        there, which only the embedded store can do (an API writes only into its own bucket;
        copy from there with `pull`)."""
        from caseshelf.api.dto import ExportOut  # lazy: pydantic, ~0.2 s
        from caseshelf.api.job_dto import JobOut  # lazy: pydantic, ~0.2 s
        from caseshelf.services.pull import current_progress  # lazy: services, pydantic: ~0.2 s

        name, r = parse_ref(ref)
        request = dict(_body(body) or {})
        request.update({k: _body(v) for k, v in fields.items()})
        target = None if to is None else str(to)
        if target is not None and isinstance(self.transport, InProcess):
            return self._export_in_process(name, r, request, target)
        if target is not None and target.startswith("s3://"):
            raise BadRequest(
                "over HTTP an export goes to the registry's bucket; copy it elsewhere with "
                "pull(), or export from the embedded store",
                field="to",
            )
        if target is not None:
            request["bundle"] = True  # a local directory is unpacked from the bundle
        path = ("datasets", name, "versions", r, "exports")
        answer = self.transport.send(Request("POST", path, {}, request))
        if answer.status == 202:
            job = self._as(JobOut, answer.json())
            job = self.follow_job(job.id, wait=wait, progress=current_progress())
            if job.state == "failed":
                raise job_error(job.id, job.error)
            out = self._as(ExportOut, job.result)
        else:
            out = self._as(ExportOut, answer.json())
        if target is None:
            return out
        from caseshelf.services.pull import install_bundle  # lazy: services, pydantic: ~0.2 s

        if not out.bundle_url:
            raise Upstream("the API answered no bundle URL to download the export from")
        install_bundle(self._fetch(out.bundle_url, None, None), Path(target))
        return out.model_copy(
            update={"prefix": target, "manifest_key": str(Path(target) / "manifest.json")}
        )

    def _export_in_process(
        self, name: str, ref: str, request: dict[str, Any], to: str
    ) -> ExportOut:
        """An export to a destination of the caller's choosing: the API has none (its exports
        go to its own bucket), so in process the export service writes there itself, with the
        request the route would validate."""
        from caseshelf.api import dto  # lazy: pydantic, ~0.2 s
        from caseshelf.domain.envelope import parse_model  # lazy: pydantic, ~0.2 s
        from caseshelf.services.exports import ExportRequest  # lazy: services, pydantic: ~0.2 s

        transport = self.transport
        assert isinstance(transport, InProcess)
        parsed = parse_model(ExportRequest, request)
        svc = transport.services
        try:
            res = svc.exports.export_version(transport.identity, name, ref, parsed, to=to)
        except NotFound as exc:
            raise transport.placed(exc) from None
        return dto.export_out(res)

    def pull(
        self,
        source: str,
        dest: str | Path,
        *,
        bundle: bool = False,
        concurrency: int = 16,
        progress: PullProgress | None = None,
    ) -> dict[str, Any]:
        """Download an export (`s3://bucket/prefix`, as `export` answers it) into `dest`,
        verified against its manifest. Needs S3 access only (the usual AWS settings), not the
        API. `progress` is told the totals, then each file as it lands."""
        from caseshelf.bootstrap import (  # lazy: services, pydantic: ~0.2 s
            load_settings,
            s3_store,
        )
        from caseshelf.services.exports import parse_s3_url  # lazy: services, pydantic: ~0.2 s
        from caseshelf.services.pull import pull  # lazy: services, pydantic: ~0.2 s

        settings = (
            self.transport.settings if isinstance(self.transport, InProcess) else load_settings()
        )
        bucket, prefix = parse_s3_url(source)
        store = s3_store(settings, bucket)
        got = pull(
            store,
            prefix,
            Path(dest),
            concurrency=concurrency,
            bundle=bundle,
            progress=progress,
        )
        return {
            "dest": str(got.dest),
            "export_id": got.export_id,
            "case_count": got.case_count,
            "file_count": got.file_count,
            "bytes": got.bytes,
            "requests": got.requests,
            "reused": got.reused,
            "resumed": got.resumed,
        }
