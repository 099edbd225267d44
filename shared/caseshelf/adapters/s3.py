"""BlobStore on an S3 bucket (or anything that speaks its API, e.g. moto via `AWS_ENDPOINT_URL`).

Encryption is the bucket's default (see `infra/template.yaml`); no key is ever passed here.
`ClientError` codes are translated into domain errors in this module and nowhere else.

Objects written under a tenant's transient areas (`t/<tenant>/uploads/...`,
`t/<tenant>/exports/...`) carry the tag `caseshelf-area=<area>`: S3 lifecycle prefixes are literal,
so a prefix rule cannot reach them below `t/<tenant>/`, and the bucket's expiry rules filter on
this tag instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError

from caseshelf.adapters.aws import TRANSPORT_ERRORS, error_code, is_transient, unavailable
from caseshelf.domain.downloads import attachment
from caseshelf.domain.errors import NotFound, TooLarge, Upstream
from caseshelf.ports import ObjectInfo

AREA_TAG = "caseshelf-area"
TRANSIENT_AREAS = ("uploads", "exports")
_AREA = re.compile(r"^t/[^/]+/(uploads|exports)/")

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_ALREADY_THERE = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})
# Answers that no retry mends: the deployment's bucket or permissions are wrong.
_MISCONFIGURED = frozenset({"RequestTimeTooSkewed", "NoSuchBucket", "AccessDenied"})
# Above this size, ask HEAD first: a refused conditional PUT still uploads every byte.
_HEAD_FIRST_BYTES = 1024 * 1024
# How many times one GET whose body was cut mid-stream is taken up again where it stopped.
BODY_RESUMES = 8


def area_of(key: str) -> str | None:
    """The transient area (`uploads` or `exports`) a key lies in, or None."""
    m = _AREA.match(key)
    return m.group(1) if m else None


_code = error_code
# What a call may raise that `_translate` turns into a domain error.
_FAILURES: tuple[type[Exception], ...] = (ClientError, *TRANSPORT_ERRORS)


def _translate(exc: Exception, key: str) -> Exception:
    if is_transient(exc):
        return unavailable(exc, f"object {key}", key=key)
    if not isinstance(exc, ClientError):
        return exc
    code = _code(exc)
    if code in _MISSING:
        return NotFound(f"no object {key}", key=key)
    if code == "EntityTooLarge":
        return TooLarge(f"object {key} is larger than the store accepts", key=key)
    if code in _MISCONFIGURED:
        return Upstream(f"object store refused {key} ({code})", key=key, fault=code)
    return exc


class S3BlobStore:
    def __init__(self, client: Any, bucket: str, *, list_page: int = 1000) -> None:
        """`list_page`: the keys `list` asks S3 for at a time (S3 answers 1,000 at most)."""
        self.client = client
        self.bucket = bucket
        self.list_page = list_page

    def _write_args(self, key: str, content_type: str | None) -> dict[str, Any]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        area = area_of(key)
        if area:
            args["Tagging"] = urlencode({AREA_TAG: area})
        if content_type:
            args["ContentType"] = content_type
        return args

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if len(data) > _HEAD_FIRST_BYTES and self.head(key) is not None:
            return False
        try:
            self.client.put_object(Body=data, IfNoneMatch="*", **self._write_args(key, None))
        except _FAILURES as exc:
            if isinstance(exc, ClientError) and _code(exc) in _ALREADY_THERE:
                return False
            raise _translate(exc, key) from exc
        return True

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> None:
        try:
            self.client.put_object(Body=data, **self._write_args(key, content_type))
        except _FAILURES as exc:
            raise _translate(exc, key) from exc

    def _upload(self, key: str, fileobj: Any, content_type: str | None) -> None:
        args = self._write_args(key, content_type)
        extra = {k: v for k, v in args.items() if k not in ("Bucket", "Key")}
        try:
            self.client.upload_fileobj(fileobj, self.bucket, key, ExtraArgs=extra or None)
        except ClientError as exc:
            raise _translate(exc, key) from exc
        except S3UploadFailedError as exc:
            cause = exc.__context__
            if isinstance(cause, ClientError):
                raise _translate(cause, key) from exc
            raise Upstream(f"upload of {key} failed: {exc}", key=key) from exc

    def put_file(self, key: str, path: Path, *, content_type: str | None = None) -> None:
        """A multipart upload above boto3's threshold, so the file is never read whole."""
        args = self._write_args(key, content_type)
        extra = {k: v for k, v in args.items() if k not in ("Bucket", "Key")}
        try:
            self.client.upload_file(str(path), self.bucket, key, ExtraArgs=extra or None)
        except _FAILURES as exc:
            raise _translate(exc, key) from exc
        except S3UploadFailedError as exc:
            cause = exc.__context__
            if isinstance(cause, _FAILURES):
                raise _translate(cause, key) from exc
            raise Upstream(f"upload of {key} failed: {exc}", key=key) from exc

    def open_writer(self, key: str, *, content_type: str | None = None) -> MultipartWriter:
        return MultipartWriter(self, key, content_type)

    def get(self, key: str) -> bytes:
        try:
            return self._read(key, 0, None)
        except _FAILURES as exc:
            raise _translate(exc, key) from exc

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"bad range {offset}+{length} for {key}")
        if length == 0:
            if self.head(key) is None:
                raise NotFound(f"no object {key}", key=key)
            return b""
        try:
            return self._read(key, offset, offset + length - 1)
        except _FAILURES as exc:
            if isinstance(exc, ClientError) and _code(exc) == "InvalidRange":
                return b""  # offset at or past the end, as a file read gives
            raise _translate(exc, key) from exc

    def _read(self, key: str, start: int, end: int | None) -> bytes:
        """Bytes `start` to `end` (inclusive; None: to the end) of `key`. botocore retries a
        request, but not the reading of a body it has handed over: a body cut mid-stream is
        read on from where it stopped (`Range: bytes=N-`), from the same object (`If-Match`
        its ETag), up to `BODY_RESUMES` times. A short body is never answered as the object:
        botocore checks each body against its `Content-Length`, and the callers check what
        they read against its digest (`caseshelf.services.storage`, `pull`)."""
        parts: list[bytes] = []
        got, cuts = 0, 0
        etag: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
            if start + got or end is not None:
                args["Range"] = f"bytes={start + got}-{'' if end is None else end}"
            if etag:
                args["IfMatch"] = etag
            try:
                resp = self.client.get_object(**args)
            except ClientError as exc:
                if not (etag and _code(exc) in _ALREADY_THERE) or cuts >= BODY_RESUMES:
                    raise
                # replaced since the first part was read (an export written again): start over
                parts, got, etag, cuts = [], 0, None, cuts + 1
                continue
            etag = etag or resp.get("ETag")
            body = resp["Body"]
            try:
                while chunk := body.read(max(int(resp.get("ContentLength") or 0), 1 << 16)):
                    parts.append(chunk)
                    got += len(chunk)
                return parts[0] if len(parts) == 1 else b"".join(parts)
            except TRANSPORT_ERRORS:
                cuts += 1
                if cuts > BODY_RESUMES:
                    raise
            finally:
                body.close()

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=key)
        except _FAILURES as exc:
            if isinstance(exc, ClientError) and _code(exc) in _MISSING:
                return None
            raise _translate(exc, key) from exc
        return ObjectInfo(key, int(resp["ContentLength"]), resp["LastModified"].timestamp())

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            pages = paginator.paginate(
                Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": self.list_page}
            )
            for page in pages:
                for obj in page.get("Contents", ()):
                    yield ObjectInfo(obj["Key"], int(obj["Size"]), obj["LastModified"].timestamp())
        except _FAILURES as exc:
            raise _translate(exc, prefix) from exc

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except _FAILURES as exc:
            err = _translate(exc, key)
            if not isinstance(err, NotFound):
                raise err from exc

    def presign_get(
        self, key: str, *, expires: int = 900, filename: str | None = None
    ) -> str | None:
        params = {"Bucket": self.bucket, "Key": key}
        if filename:  # signed into the URL: S3 answers the GET with this header
            params["ResponseContentDisposition"] = attachment(filename)
        url: str = self.client.generate_presigned_url(
            "get_object", Params=params, ExpiresIn=expires
        )
        return url

    def presign_put(self, key: str, *, expires: int = 900) -> str | None:
        # No tag is signed into the URL: S3 would then demand the header from every uploader.
        url: str = self.client.generate_presigned_url(
            "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires
        )
        return url


# S3's smallest part but the last is 5 MiB; a part of 8 MiB keeps a 1 TB object within the
# 10,000 parts a multipart upload may have (80 GB at 8 MiB: far beyond any export).
PART_BYTES = 8 << 20
MIN_PART_BYTES = 5 << 20
MAX_COPY_BYTES = 5 << 30  # the largest part an UploadPartCopy may copy


class MultipartWriter:
    """An object streamed to S3: `PART_BYTES` are held at a time and sent as one part of a
    multipart upload, started with the first full part (an object that never fills one is a
    single PUT at `commit`). Nothing is visible until `commit` completes the upload; `abort`
    (or an error) aborts it, and the bucket's `abort-multipart` lifecycle rule removes what a
    killed process left."""

    def __init__(self, store: S3BlobStore, key: str, content_type: str | None) -> None:
        self.store = store
        self.key = key
        self.content_type = content_type
        self.buffer = bytearray()
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []
        self.size = 0

    def write(self, data: bytes) -> int:
        self.buffer += data
        self.size += len(data)
        while len(self.buffer) >= PART_BYTES:
            self._send(bytes(self.buffer[:PART_BYTES]))
            del self.buffer[:PART_BYTES]
        return len(data)

    def _upload_id(self) -> str:
        if self.upload_id is None:
            args = self.store._write_args(self.key, self.content_type)
            self.upload_id = self.store.client.create_multipart_upload(**args)["UploadId"]
        return self.upload_id

    def _send(self, piece: bytes) -> None:
        client, bucket = self.store.client, self.store.bucket
        try:
            upload_id, number = self._upload_id(), len(self.parts) + 1
            resp = client.upload_part(
                Bucket=bucket, Key=self.key, UploadId=upload_id, PartNumber=number, Body=piece
            )
        except ClientError as exc:
            self.abort()
            raise _translate(exc, self.key) from exc
        self.parts.append({"ETag": resp["ETag"], "PartNumber": number})

    def copy(self, key: str, size: int) -> None:
        """Append the object `key` (`size` bytes): what is held and the first bytes of `key`
        are sent as a part of at least `MIN_PART_BYTES`; the rest, when it is a part's worth,
        is copied by S3 (`UploadPartCopy`, in ranges of at most `MAX_COPY_BYTES`) without
        passing through this process; a rest smaller than a part is read and held."""
        pos = 0
        if self.buffer:
            pos = min(size, max(0, MIN_PART_BYTES - len(self.buffer)))
            if pos:
                self.write(self.store.get_range(key, 0, pos))
        if size - pos < MIN_PART_BYTES:
            if size > pos:
                self.write(self.store.get_range(key, pos, size - pos))
            return
        if self.buffer:
            self._send(bytes(self.buffer))
            self.buffer.clear()
        while pos < size:
            end = min(size, pos + MAX_COPY_BYTES)
            if 0 < size - end < MIN_PART_BYTES:
                end = size - MIN_PART_BYTES  # leave the last range a part's worth too
            self._copy_range(key, pos, end)
            pos = end

    def _copy_range(self, key: str, start: int, end: int) -> None:
        client, bucket = self.store.client, self.store.bucket
        try:
            upload_id, number = self._upload_id(), len(self.parts) + 1
            resp = client.upload_part_copy(
                Bucket=bucket,
                Key=self.key,
                UploadId=upload_id,
                PartNumber=number,
                CopySource={"Bucket": bucket, "Key": key},
                CopySourceRange=f"bytes={start}-{end - 1}",
            )
        except ClientError as exc:
            self.abort()
            raise _translate(exc, key) from exc
        self.parts.append({"ETag": resp["CopyPartResult"]["ETag"], "PartNumber": number})
        self.size += end - start

    def commit(self) -> int:
        if self.upload_id is None:
            self.store.put(self.key, bytes(self.buffer), content_type=self.content_type)
            self.buffer.clear()
            return self.size
        if self.buffer:
            self._send(bytes(self.buffer))
            self.buffer.clear()
        try:
            self.store.client.complete_multipart_upload(
                Bucket=self.store.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                MultipartUpload={"Parts": self.parts},
            )
        except ClientError as exc:
            self.abort()
            raise _translate(exc, self.key) from exc
        self.upload_id = None
        return self.size

    def abort(self) -> None:
        self.buffer.clear()
        if self.upload_id is None:
            return
        upload_id, self.upload_id = self.upload_id, None
        try:
            self.store.client.abort_multipart_upload(
                Bucket=self.store.bucket, Key=self.key, UploadId=upload_id
            )
        except ClientError:  # the lifecycle rule removes it after two days
            return
