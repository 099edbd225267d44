"""Row sources: jsonl, csv and parquet, by URL (local path, `s3://`, `https://`) or inline text.

Every source is streamed: rows are yielded one at a time as `(row index, row)` and nothing is
loaded whole unless the format needs it (parquet reads one row group at a time). `.gz`, `.bz2`
and `.zst` are decompressed transparently. Remote URLs go through smart_open; local files are
opened directly (the same decompressors, without smart_open's import cost on the CLI's hot path).

Errors name the source and the line: a malformed JSON line, a CSV row with the wrong number of
cells, a truncated or corrupt compressed stream.

jsonl is read 128 KiB at a time (`READ_CHUNK`) and split into lines in one go. The work on a
large local file's rows can run in a forked worker process (`SourceReader.offload`,
`in_worker`): it reads, maps, canonicalises and hashes while the caller stores, and its errors
come back as they are.
A large plain jsonl file is shared in blocks by both processes (`split_jsonl`).
"""

from __future__ import annotations

import bz2
import codecs
import csv
import gzip
import io
import ipaddress
import mmap
import os
import pickle
import socket
import sys
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import islice
from pathlib import Path
from typing import IO, Any, Generic, NamedTuple, TypeVar
from urllib.parse import urlsplit

import orjson

from caseshelf.domain.errors import BadRequest, CaseshelfError, Forbidden, NotFound, TooLarge
from caseshelf.domain.recipe import (
    FILE_FIELD,
    ROW_FIELD,
    CsvSource,
    FileSource,
    JsonlSource,
    JsonSource,
    ParquetSource,
    display_url,
    source_urls,
)
from caseshelf.domain.strictjson import loads as strict_loads
from caseshelf.domain.strictjson import parsed_exactly
from caseshelf.extras import require
from caseshelf.services import archives

Rows = Iterator[tuple[int, dict[str, Any]]]
Opener = Callable[[str], IO[bytes]]
T = TypeVar("T")
Work = Callable[[Iterator[tuple[int, dict[str, Any]]]], Iterator[Any]]
Offload = Callable[[Work], Iterator[Any]]

_DECODE_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, OSError, ValueError)
# Bytes read at a time from a jsonl stream. Every read is split, parsed and checked
# (`parsed_exactly`) in several passes over its bytes: a read that stays in a core's cache makes
# each pass cheaper. Reading, parsing and mapping 400,000 GSM8K-shaped rows took 5.2-5.5 us of CPU
# a row at 32-128 KiB against 6.5-6.9 us at 1 MiB (best of 5, alternating, load average 2-4).
READ_CHUNK = 128 << 10
# The longest jsonl line read (a row is one case: 4 MiB at most, and a mapped row is smaller).
MAX_LINE_BYTES = 64 * 1024 * 1024
# A compressed source streams, so its total is generous; the ratio bound stops a bomb early.
SOURCE_LIMITS = archives.Limits(max_entries=0, max_total_bytes=64 * 1024**3)
# A local file at least this large has its rows mapped in a worker process (`in_worker`).
WORKER_MIN_BYTES = 4 << 20
# A worker's record batches come over shared memory (`Handover`), at most this many (of up to
# 4 MiB of records each) ahead of the importing process while that one is busy elsewhere: a
# slot for each, large enough for a batch's records (up to `mapping.BATCH_BYTES`, and the case
# that took it over, of at most the registry's 4 MiB) and its pickled columns; a larger one goes
# through the pipe. Only the pages written are memory (a slot holds ~0.6 MB of GSM8K-sized rows).
HANDOVER_SLOTS = 16
HANDOVER_SLOT_BYTES = 9 << 20
# A large plain jsonl file is cut at line ends into blocks of about this many bytes; the
# importing process and the worker each take the next block neither has taken (`split_jsonl`).
SPLIT_BLOCK_BYTES = 2 << 20


display_name = display_url


@dataclass(frozen=True)
class UrlPolicy:
    """Which source URLs an import may read. The CLI may read local files and any URL; the API
    may not read the server's disk, may read `s3://` only under the caller's own prefix of the
    registry's bucket, and may not reach private, loopback or link-local addresses."""

    allow_local: bool = True
    s3_prefixes: tuple[str, ...] | None = None  # None: any s3 URL
    allow_private_hosts: bool = True

    def check(self, url: str) -> str:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] in (":\\", ":/")):
            if not self.allow_local:
                raise Forbidden(
                    f"source {url!r}: local paths are not readable through the API; upload the "
                    "file (POST /uploads) or give an s3:// or https:// URL",
                    field="source.url",
                )
            return url
        if scheme == "s3":
            if self.s3_prefixes is not None and not any(
                url.startswith(p) for p in self.s3_prefixes
            ):
                raise Forbidden(
                    f"source {display_name(url)}: only objects under your own prefix of the "
                    "registry's bucket are readable",
                    field="source.url",
                )
            return url
        if scheme in ("http", "https"):
            if not self.allow_private_hosts:
                _check_public_host(parts.hostname or "", url)
            return url
        raise BadRequest(
            f"source {display_name(url)}: unsupported scheme {scheme!r} (local path, s3://, "
            "https://)",
            field="source.url",
        )


def _check_public_host(host: str, url: str) -> None:
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        raise BadRequest(f"source {display_name(url)}: cannot resolve {host!r}") from None
    for info in infos:
        addr = ipaddress.ip_address(info[4][0])
        if addr.is_private or addr.is_loopback or addr.is_link_local or addr.is_reserved:
            raise Forbidden(
                f"source {display_name(url)}: {host} is not a public address",
                field="source.url",
            )


def _is_local(url: str) -> bool:
    scheme = urlsplit(url).scheme.lower()
    return scheme in ("", "file") or len(scheme) == 1


def _plain(name: str) -> bool:
    """A file name without a compression suffix (`_decompressor` passes it through)."""
    return not name.lower().split("?", 1)[0].endswith((".gz", ".bz2", ".zst"))


def _decompressor(name: str, raw: IO[bytes]) -> IO[bytes]:
    """The decompressed stream of a `.gz`, `.bz2` or `.zst` source, through a bounded view:
    a bomb (far more bytes out than in) is refused after a few MB, never inflated whole."""
    lower = name.lower().split("?", 1)[0]
    if lower.endswith(".gz"):
        return archives.bounded(raw, f"source {name}", SOURCE_LIMITS, _gunzip_stream)
    if lower.endswith(".bz2"):
        return archives.bounded(raw, f"source {name}", SOURCE_LIMITS, _bunzip_stream)
    if lower.endswith(".zst"):
        return archives.bounded(raw, f"source {name}", SOURCE_LIMITS, _unzstd_stream)
    return raw


def _gunzip_stream(raw: IO[bytes]) -> IO[bytes]:
    return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]


def _bunzip_stream(raw: IO[bytes]) -> IO[bytes]:
    return bz2.BZ2File(raw, mode="rb")


def _unzstd_stream(raw: IO[bytes]) -> IO[bytes]:
    zstandard = require("zstandard", "a .zst source")

    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw))


def open_local(url: str) -> IO[bytes]:
    path = Path(url.removeprefix("file://")).expanduser()
    try:
        raw = path.open("rb")
    except FileNotFoundError:
        raise NotFound(f"source {url}: no such file", field="source.url") from None
    except IsADirectoryError:
        raise BadRequest(f"source {url}: is a directory", field="source.url") from None
    return _decompressor(path.name, raw)


def smart_opener(transport_params: dict[str, Any] | None = None) -> Opener:
    """Remote URLs through smart_open (`s3://` with the registry's client, `https://`)."""

    def open_remote(url: str) -> IO[bytes]:
        if url.startswith("s3://"):
            require("boto3", f"the source {display_name(url)}")
        require("smart_open", f"the source {display_name(url)}")
        import smart_open

        try:
            return smart_open.open(
                url,
                "rb",
                transport_params=transport_params or {},
                compression="infer_from_extension",
            )
        except FileNotFoundError:
            raise NotFound(f"source {display_name(url)}: not found", field="source.url") from None
        except OSError as exc:
            raise NotFound(
                f"source {display_name(url)}: cannot be opened ({type(exc).__name__})",
                field="source.url",
            ) from None

    return open_remote


@dataclass
class SourceReader:
    """Opens sources by URL: local files directly, others with `remote`."""

    remote: Opener
    policy: UrlPolicy = UrlPolicy()

    def open(self, url: str) -> IO[bytes]:
        self.policy.check(url)
        return open_local(url) if _is_local(url) else self.remote(url)

    def rows(self, source: FileSource, *, name: str | None = None) -> Rows:
        """Rows of a file source, by URL or inline text (a json source: also a local directory
        of `.json` files, one record each)."""
        text = getattr(source, "text", None)
        if text is not None:
            return rows_from_bytes(source, text.encode("utf-8"), name="inline text")
        if source.url is None:
            raise BadRequest(
                f"the {source.kind} source has no url or text: give the file to import",
                field="source.url",
            )
        url = source.url
        if isinstance(url, str) and isinstance(source, JsonSource) and _is_local(url):
            self.policy.check(url)
            directory = Path(url.removeprefix("file://")).expanduser()
            if directory.is_dir():
                return json_dir_rows(directory, name or display_name(url))
        files = self.files(source)
        if files is None:
            assert isinstance(url, str)
            return _rows_from_stream(source, lambda: self.open(url), name or display_name(url))
        return self._many(source, files)

    def files(self, source: FileSource) -> list[str] | None:
        """The files of a source of several (a list, a local directory or glob), in the order
        they are read; None for a source of one file."""
        url = source.url
        if isinstance(url, str) and _is_local(url):
            self.policy.check(url)  # before the path is looked at: no probing a server's disk
        if url is None or (isinstance(url, str) and not _many_local(url)):
            return None
        out: list[str] = []
        for one in source_urls(url):
            if _is_local(one):
                self.policy.check(one)
            if _many_local(one):
                out.extend(local_files(one, source.kind))
            else:
                out.append(one)
        return out

    def _many(self, source: FileSource, files: list[str]) -> Rows:
        """The rows of every file in turn, numbered across them; each row also holds the
        file's name without extensions (`_file`) and its number in that file (`_row`)."""
        index = 0
        for url in files:
            label = file_label(url)
            one = source.model_copy(update={"url": url})
            name = display_name(url)
            for row_no, row in _rows_from_stream(one, partial(self.open, url), name):
                for key, value in ((FILE_FIELD, label), (ROW_FIELD, row_no)):
                    if key in row:
                        raise BadRequest(
                            f"source {name}: row {row_no} has its own {key!r} field",
                            source=name,
                            row=row_no,
                        )
                    row[key] = value
                yield index, row
                index += 1

    def offload(self, source: FileSource, *, limit: int | None = None) -> Offload | None:
        """A way to run work over this source's rows (at most `limit`) in a second process,
        when that pays: a large local jsonl or csv file, and a spare core to run it on. None
        otherwise. Without a limit, a plain (uncompressed) jsonl file is shared: this process
        and the worker each work on blocks of it (`split_jsonl`)."""
        url = source.url if getattr(source, "text", None) is None else None
        if (
            url is None
            or not isinstance(url, str)
            or isinstance(source, ParquetSource | JsonSource)
            or not (_is_local(url) and self.policy.allow_local)
            or _many_local(url)
            or not worker_available()
        ):
            return None
        path = Path(url.removeprefix("file://")).expanduser()
        try:
            size = path.stat().st_size
        except OSError:
            return None  # reading it will name the problem
        if size < WORKER_MIN_BYTES:
            return None
        name = display_name(url)
        if isinstance(source, JsonlSource) and limit is None and _plain(path.name):
            return partial(split_jsonl, path, name, size)

        def whole(work: Work) -> Iterator[Any]:
            rows = self.rows(source, name=name)
            return in_worker(work(rows if limit is None else islice(rows, limit)))

        return whole


# The file names a directory of a source's kind is read for (compressed ones too).
KIND_SUFFIXES = {
    "jsonl": (".jsonl", ".ndjson"),
    "csv": (".csv",),
    "parquet": (".parquet",),
    "json": (".json",),
}
_GLOB_CHARS = frozenset("*?[")


def _many_local(url: str) -> bool:
    """A local URL that names several files: a directory or a glob."""
    if not _is_local(url):
        return False
    path = url.removeprefix("file://")
    return bool(_GLOB_CHARS & set(path)) or Path(path).expanduser().is_dir()


def file_label(url: str) -> str:
    """A file's name without its extensions (`abstract_algebra_test.csv.gz` ->
    `abstract_algebra_test`): the `_file` of its rows."""
    name = Path(urlsplit(url).path if not _is_local(url) else url).name
    return name.split(".", 1)[0] or name


def _uncompressed_name(name: str) -> str:
    lower = name.lower()
    for ext in (".gz", ".bz2", ".zst"):
        lower = lower.removesuffix(ext)
    return lower


def local_files(url: str, kind: str) -> list[str]:
    """The regular files a local directory (those of the source's `kind`, in sub-directories
    too, hidden ones left out) or a glob (`**` reaches sub-directories) names, sorted by path.
    Symlinks are left out (nothing outside what was named is read)."""
    path = Path(url.removeprefix("file://")).expanduser()
    if path.is_dir():
        ends = KIND_SUFFIXES.get(kind, ())
        found = [
            p
            for p in path.rglob("*")
            if not any(part.startswith(".") for part in p.relative_to(path).parts)
            and _uncompressed_name(p.name).endswith(ends)
        ]
        what = f"no {'/'.join(ends)} file in this directory"
    else:
        parts = path.parts
        at = next(i for i, part in enumerate(parts) if _GLOB_CHARS & set(part))
        found = list(Path(*parts[:at]).glob("/".join(parts[at:])))
        what = "no file matches this pattern"
    files = sorted(str(p) for p in found if p.is_file() and not p.is_symlink())
    if not files:
        raise NotFound(f"source {url}: {what}", field="source.url")
    return files


def rows_from_bytes(source: FileSource, data: bytes, *, name: str) -> Rows:
    """Rows of a source whose (possibly compressed) bytes are at hand."""
    return _rows_from_stream(source, lambda: _decompressor(name, io.BytesIO(data)), name)


@contextmanager
def _reading(name: str) -> Iterator[None]:
    try:
        yield
    except (BadRequest, NotFound, Forbidden):
        raise
    except _DECODE_ERRORS as exc:
        raise BadRequest(
            f"source {name}: the stream is truncated or corrupt ({type(exc).__name__}: {exc})",
            source=name,
        ) from None


def _rows_from_stream(
    source: FileSource,
    open_stream: Callable[[], IO[bytes]],
    name: str,
) -> Rows:
    if isinstance(source, JsonlSource):
        return _jsonl(open_stream, name)
    if isinstance(source, JsonSource):
        return _json(source.records_path, open_stream, name)
    if isinstance(source, CsvSource):
        return _csv(source, open_stream, name)
    return _parquet(open_stream, name)


def _lines(fh: IO[bytes], end: int | None = None) -> Iterator[list[bytes]]:
    """The lines of a binary stream (without their `\\n`), a chunk's worth at a time: one large
    read and one split per chunk instead of a buffered readline per line. With `end`, the
    stream is read up to that many bytes. A line longer than a chunk is kept as its pieces and
    joined once it ends, so a long line costs one copy, not one per chunk it spans."""
    tail: list[bytes] = []  # the pieces of the line the last chunks cut
    held = 0  # their bytes
    left = end
    while True:
        chunk = fh.read(READ_CHUNK if left is None else min(READ_CHUNK, left))
        if not chunk:
            break
        if left is not None:
            left -= len(chunk)
        lines = chunk.split(b"\n")
        if len(lines) == 1:  # no line ends in this chunk: the line goes on
            tail.append(chunk)
            held += len(chunk)
            _check_line(held)
            continue
        if held:  # the line the last chunks cut
            lines[0] = b"".join([*tail, lines[0]])
        last = lines.pop()
        tail, held = [last], len(last)
        _check_line(held)
        yield lines
    if held:
        yield [b"".join(tail)]


def _check_line(held: int) -> None:
    """Refuse a line that has not ended within `MAX_LINE_BYTES` (a row that never ends is not
    held)."""
    if held > MAX_LINE_BYTES:
        raise TooLarge(
            f"a line of the source is longer than {MAX_LINE_BYTES} bytes", field="source"
        )


@dataclass
class Tally:
    """Where a reader of a jsonl stream is: the lines and the rows (lines that are not blank)
    before it."""

    lines: int = 0
    rows: int = 0


def _jsonl(
    open_stream: Callable[[], IO[bytes]],
    name: str,
    start: int = 0,
    end: int | None = None,
    at: Tally | None = None,
) -> Rows:
    """The rows of a jsonl stream; with `start` and `end` (each 0, the end, or just past a line
    end), those between these bytes, numbered as in the whole stream: `at` says how many lines
    and rows lie before `start`, and is moved on as the rows are read (so once they are all
    read, it says where `end` is). One generator for it all: every row passes through it, so a
    second one in between would cost a resume per row."""
    loads = orjson.loads
    at = at if at is not None else Tally()
    with _reading(name), open_stream() as fh:
        if start:
            fh.seek(start)
        line_no, index = at.lines, at.rows
        for lines in _lines(fh, None if end is None else end - start):
            first = line_no + 1
            rows: list[Any] = []
            for line in lines:
                line_no += 1
                try:
                    rows.append(loads(line))
                except orjson.JSONDecodeError as exc:
                    if not line.strip():
                        rows.append(None)  # a blank line
                        continue
                    raise _malformed(name, line_no, exc) from None
                if type(rows[-1]) is not dict:
                    raise _not_an_object(name, line_no)
            if not parsed_exactly(lines, rows):  # a repeated key, or an integer beyond 64 bits
                rows = [
                    strict_loads(line, where=f"source {name}: line {n}")
                    if row is not None
                    else None
                    for n, (line, row) in enumerate(zip(lines, rows, strict=True), start=first)
                ]
            for row in rows:
                if row is not None:
                    yield index, row
                    index += 1
        at.lines, at.rows = line_no, index


def _json(records_path: str | None, open_stream: Callable[[], IO[bytes]], name: str) -> Rows:
    """The records of one JSON document: an array of objects, or the array found under
    `records_path` (dotted keys) of an object. Read whole: JSON has no record boundaries. A
    file that is not one JSON value but JSON Lines (one object a line) is read as JSON Lines,
    with its errors naming the line."""
    with _reading(name), open_stream() as fh:
        data = fh.read()
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if records_path is None and exc.lineno > 1:
            # Not one JSON value but maybe one per line: many `.json` files are JSON Lines
            # (the Hugging Face `json` builder reads both), so read it as that.
            yield from _jsonl(lambda: io.BytesIO(data), name)
            return
        raise BadRequest(
            f"source {name}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            source=name,
            line=exc.lineno,
        ) from None
    if not parsed_exactly([data], [doc]):  # a repeated key, or an integer beyond 64 bits
        doc = strict_loads(data, where=f"source {name}")
    records = json_records(doc, records_path, name)
    for index, record in enumerate(records):
        if type(record) is not dict:
            raise BadRequest(
                f"source {name}: record {index} is not a JSON object", source=name, row=index
            )
        yield index, record


def json_records(doc: Any, records_path: str | None, name: str) -> list[Any]:
    """The record array of a parsed JSON document (see `_json`); errors say what is there."""
    if records_path:
        cur = doc
        walked: list[str] = []
        for key in records_path.split("."):
            walked.append(key)
            if not isinstance(cur, dict) or key not in cur:
                keys = sorted(cur)[:10] if isinstance(cur, dict) else []
                raise BadRequest(
                    f"source {name}: no key {'.'.join(walked)!r} for records_path "
                    f"{records_path!r}" + (f" (keys there: {keys})" if keys else ""),
                    source=name,
                    field="source.records_path",
                )
            cur = cur[key]
        doc = cur
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict) and not records_path:
        arrays = sorted(k for k, v in doc.items() if isinstance(v, list))
        raise BadRequest(
            f"source {name}: the document is an object, not an array of records; give "
            f"source.records_path" + (f" (keys holding arrays: {arrays})" if arrays else ""),
            source=name,
            field="source.records_path",
        )
    where = f"under {records_path!r}" if records_path else "at the top"
    raise BadRequest(
        f"source {name}: {where} is {type(doc).__name__}, not an array of records",
        source=name,
        field="source.records_path",
    )


STEM_FIELD = "_stem"


def json_dir_rows(directory: Path, name: str) -> Rows:
    """One record per `*.json` file of a local directory (not its sub-directories), in file
    name order; each row also holds the file's stem as `_stem`. Only regular files are read
    (a symlink is an error, so nothing outside the directory is read)."""
    files = sorted(p for p in directory.iterdir() if p.name.endswith(".json"))
    if not files:
        raise BadRequest(f"source {name}: no .json file in this directory", source=name)
    for index, path in enumerate(files):
        where = f"source {name}: {path.name}"
        if path.is_symlink() or not path.is_file():
            raise BadRequest(f"{where}: not a regular file", source=name, path=path.name)
        raw = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(
                f"{where}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                source=name,
                path=path.name,
            ) from None
        if not parsed_exactly([raw], [record]):  # a repeated key, or an integer beyond 64 bits
            record = strict_loads(raw, where=where)
        if type(record) is not dict:
            raise BadRequest(f"{where}: a record must be a JSON object", source=name, row=index)
        if STEM_FIELD in record:
            raise BadRequest(
                f"{where}: the record has its own {STEM_FIELD!r} field", source=name, row=index
            )
        record[STEM_FIELD] = path.name[: -len(".json")]
        yield index, record


def _malformed(name: str, line_no: int, exc: Exception) -> BadRequest:
    return BadRequest(
        f"source {name}: line {line_no}: malformed JSON ({exc})", source=name, line=line_no
    )


def _not_an_object(name: str, line_no: int) -> BadRequest:
    return BadRequest(
        f"source {name}: line {line_no}: a row must be a JSON object", source=name, line=line_no
    )


def _csv(source: CsvSource, open_stream: Callable[[], IO[bytes]], name: str) -> Rows:
    with _reading(name), open_stream() as raw:
        text = codecs.getreader("utf-8-sig")(raw, "strict")
        reader = csv.reader(text, delimiter=source.delimiter, strict=True)
        columns = list(source.columns) if source.columns else None
        if source.header:
            try:
                header = next(reader)
            except StopIteration:
                return
            if columns is None:
                columns = header
        assert columns is not None
        width = len(columns)
        index = 0
        try:
            for cells in reader:
                if not cells:
                    continue
                if len(cells) != width:
                    raise BadRequest(
                        f"source {name}: line {reader.line_num}: {len(cells)} cells, expected "
                        f"{width} ({', '.join(columns)})",
                        source=name,
                        line=reader.line_num,
                    )
                yield index, dict(zip(columns, cells, strict=True))
                index += 1
        except csv.Error as exc:
            raise BadRequest(
                f"source {name}: line {reader.line_num}: {exc}", source=name, line=reader.line_num
            ) from None
        except UnicodeDecodeError as exc:
            raise BadRequest(f"source {name}: not UTF-8 text ({exc.reason})", source=name) from None


def _parquet(open_stream: Callable[[], IO[bytes]], name: str) -> Rows:
    require("pyarrow", f"the parquet source {name}")
    import pyarrow as pa
    import pyarrow.parquet as pq

    with _reading(name), open_stream() as fh:
        if not fh.seekable():
            fh = io.BytesIO(fh.read())
        try:
            pf = pq.ParquetFile(fh)
        except (pa.ArrowInvalid, pa.ArrowException) as exc:
            raise BadRequest(f"source {name}: not a parquet file ({exc})", source=name) from None
        index = 0
        for batch in pf.iter_batches(batch_size=2048):
            for row in batch.to_pylist():
                yield index, row
                index += 1


def parquet_rows(data: bytes, *, name: str) -> Rows:
    return _parquet(lambda: io.BytesIO(data), name)


def rows_of_file(data: bytes, filename: str) -> Rows:
    """Rows of a downloaded file, by its extension (`.jsonl`, `.csv`, `.parquet`, compressed
    variants too)."""
    base = filename.lower()
    for ext in (".gz", ".bz2", ".zst"):
        base = base.removesuffix(ext)
    source: FileSource
    if base.endswith((".jsonl", ".ndjson")):
        source = JsonlSource(kind="jsonl")
    elif base.endswith(".json"):
        source = JsonSource(kind="json")
    elif base.endswith(".csv"):
        source = CsvSource(kind="csv")
    elif base.endswith(".parquet"):
        return parquet_rows(data, name=filename)
    else:
        raise BadRequest(
            f"{filename}: unknown file type (jsonl, csv or parquet, optionally compressed)",
            field="source.file",
        )
    return rows_from_bytes(source, data, name=filename)


# -- a second process for the rows of a large local file -----------------------------------------


def worker_available() -> bool:
    """A forked worker helps only on Linux (fork is cheap and safe for the pure work it does) with
    a second core to run on."""
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except OSError:
        return False


class WorkerFailed(RuntimeError):
    """The worker process stopped without finishing or raised an unexpected error."""


def in_worker(items: Iterator[T]) -> Iterator[T]:
    """`items`, produced in a forked child process while the caller consumes them in order.

    The child starts on the first `next()`, runs the unstarted iterator it inherited (reading the
    file, mapping and canonicalising rows: pure work), and streams each item back down a pipe,
    record batches over shared memory (`Worker`). A `CaseshelfError` it raises is raised here
    with the same type, detail and fields, after the items before it; any other failure is a
    `WorkerFailed`. Closing the generator early (the consumer failed) kills the child. When no
    process can be forked, the items are produced here."""
    worker = Worker(items)
    try:
        yield from worker.results()
    finally:
        worker.close()


def split_jsonl(path: Path, name: str, size: int, work: Work) -> Iterator[Any]:
    """`work` over the rows of a plain jsonl file, in two processes. The file is cut at line
    ends into blocks of about `SPLIT_BLOCK_BYTES` (`block_starts`); this process and a worker
    each take the first block neither has taken yet (`BlockClaims`), so each does as much as
    its share of the machine lets it, and both hash what they map. Items come in file order:
    this process passes on the worker's blocks as the worker sends them (at most
    `HANDOVER_SLOTS` batches ahead). When the next block is the worker's and the worker is
    still on it, this process works on the first free block after it instead of waiting,
    holding its items until the worker's blocks before it are passed on; when the worker has
    finished it, or its batches fill half the slots, it passes them on first, so that the
    worker does not wait for a free slot while this process works. (Deciding on whether any
    item had come took this process off nearly every block: the worker's first item of a
    block, its `BlockMark`, comes as it starts. 1,000,000 GSM8K-shaped rows: this process
    took 5-9 of 276 blocks and waited 6-7 s for the worker.)

    Ids and errors are those of one pass. To start a block, a process needs the lines and rows
    before it, so it counts the line ends of the blocks the other process takes, taking every
    line for a row (`count_lines`): counting blank lines too would cost about as much as
    parsing. The guess is checked against the true figures once they are known: this process
    works on its block again when it was wrong, and drops a worker that was, doing the rest
    itself. A blank line costs a block mapped twice, or the rest of the file in one process
    (blank lines at the end cost nothing: no block starts after them); a file without any pays
    nothing for the check."""
    starts = block_starts(path, size, SPLIT_BLOCK_BYTES)
    if len(starts) < 3:  # one block: nothing to share
        yield from in_worker(work(_jsonl_part(path, name, 0)))
        return
    blocks = len(starts) - 1
    claims = BlockClaims(blocks)
    worker = Worker(_worker_blocks(path, name, starts, claims, work))

    def part(block: int, at: Tally) -> Rows:
        return _jsonl_part(path, name, starts[block], starts[block + 1], at)

    try:
        theirs = worker.results()
        at = Tally()  # where block `done` starts
        done = 0  # the blocks passed on so far
        alone = False  # the worker was dropped
        while done < blocks:
            if alone or claims.take(done, BlockClaims.HERE):  # the next block is this one's
                yield from work(part(done, at))
                done += 1
                continue
            # The worker has the next block. While it is still on it, work on the first free
            # block after it rather than wait; once it is done, or its batches fill half the
            # slots (the worker would soon wait for one), pass them on.
            ready = claims.finished(done) or worker.waiting() >= HANDOVER_SLOTS // 2
            mine = None if ready else claims.take_first(done + 1, BlockClaims.HERE)
            if mine is not None:
                guess = Tally(at.lines, at.rows)
                for block in range(done, mine):
                    count_lines(path, starts[block], starts[block + 1], guess)
                ahead = Tally(guess.lines, guess.rows)
                held, failed = _held(work(part(mine, ahead)))
            for block in range(done, done + 1 if mine is None else mine):
                passed = yield from _pass_on(theirs, block, at)
                if passed is None:  # the worker's guess was wrong: this process goes on alone
                    worker.close()
                    alone = True
                    break
                at, done = passed, block + 1
            if alone or mine is None:
                continue
            if at != guess:  # this process's guess was wrong: its block again, from here
                yield from work(part(mine, at))
            else:
                yield from held
                if failed is not None:
                    raise failed
                at = ahead
            done = mine + 1
    finally:
        worker.close()


def _held(items: Iterator[T]) -> tuple[list[T], CaseshelfError | None]:
    """`items` collected, up to the error that ended them, if any (raised by the caller once
    the items of the blocks before them are passed on)."""
    got: list[T] = []
    try:
        for item in items:
            got.append(item)
    except CaseshelfError as exc:
        return got, exc
    return got, None


def _pass_on(theirs: Iterator[Any], block: int, at: Tally) -> Generator[Any, None, Tally | None]:
    """The worker's items of `block`, which starts `at`; answers where the block ends, or None
    (passing on nothing) when the worker started the block somewhere else."""
    started = next(theirs, None)
    if not isinstance(started, BlockMark) or started.block != block:
        raise WorkerFailed(f"the import worker did not send block {block}")
    if started.at != at:
        return None
    for item in theirs:
        if isinstance(item, BlockMark):
            if item.block != block:
                raise WorkerFailed(f"the import worker sent block {item.block}, not {block}")
            return item.at
        yield item
    raise WorkerFailed(f"the import worker ended within block {block}")


class BlockMark(NamedTuple):
    """The worker's first and last item of each block it takes: where the block starts (as it
    guessed) and where it ends."""

    block: int
    at: Tally


def _worker_blocks(
    path: Path, name: str, starts: list[int], claims: BlockClaims, work: Work
) -> Iterator[Any]:  # pragma: no cover - runs in the worker process
    """The worker's side of `split_jsonl`: the items of every block it takes, between two
    `BlockMark`s; the blocks the other process takes are only counted."""
    at = Tally()
    done = 0
    while (mine := claims.take_first(done, BlockClaims.WORKER)) is not None:
        for block in range(done, mine):
            count_lines(path, starts[block], starts[block + 1], at)
        yield BlockMark(mine, Tally(at.lines, at.rows))
        yield from work(_jsonl_part(path, name, starts[mine], starts[mine + 1], at))
        yield BlockMark(mine, Tally(at.lines, at.rows))
        claims.finish(mine)  # (its last item is sent: the generator resumes once it is put)
        done = mine + 1


class BlockClaims:
    """Which process works on each block of a shared file: the first to take it; and which of
    the worker's blocks it has finished. Shared memory, inherited by the forked worker, with a
    lock around each take (a block is finished by the worker alone, once)."""

    HERE, WORKER = 1, 2

    def __init__(self, blocks: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self._owners: Any = context.Array("b", blocks)
        self._finished: Any = context.Array("b", blocks, lock=False)  # by the worker

    def take(self, block: int, who: int) -> bool:
        """Take `block` for `who` unless the other process has: whether `who` has it."""
        with self._owners.get_lock():
            if self._owners[block] == 0:
                self._owners[block] = who
            return bool(self._owners[block] == who)

    def finish(self, block: int) -> None:
        """The worker has sent every item of `block`."""
        self._finished[block] = 1

    def finished(self, block: int) -> bool:
        """Whether the worker has sent every item of `block` (a hint: it may finish just
        after a False)."""
        return bool(self._finished[block])

    def take_first(self, start: int, who: int) -> int | None:
        """Take the first block from `start` on that nobody has taken, for `who`: its number,
        or None when every one is taken."""
        with self._owners.get_lock():
            for block in range(start, len(self._owners)):
                if self._owners[block] == 0:
                    self._owners[block] = who
                    return block
        return None


def block_starts(path: Path, size: int, block_bytes: int) -> list[int]:
    """Offsets that cut a file into blocks of about `block_bytes`, each just past a line end:
    `[0, ..., size]`."""
    starts = [0]
    while (cut := _line_end_after(path, starts[-1] + block_bytes, size)) is not None:
        starts.append(cut)
    starts.append(size)
    return starts


def _line_end_after(path: Path, offset: int, size: int) -> int | None:
    """The offset just past the first line end at or after `offset`, if a line follows it."""
    if offset >= size:
        return None
    with path.open("rb") as fh:
        fh.seek(offset)
        at = offset
        while chunk := fh.read(1 << 16):
            found = chunk.find(b"\n")
            if found >= 0:
                at += found + 1
                return at if at < size else None
            at += len(chunk)
    return None


def count_lines(path: Path, start: int, end: int, at: Tally) -> None:
    """Move `at` past the lines between `start` and `end` of a jsonl file, taking each for a
    row (a guess: a blank line is no row). Line ends are counted in one pass in C."""
    with path.open("rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    at.lines += lines
    at.rows += lines


def _jsonl_part(
    path: Path, name: str, start: int, end: int | None = None, at: Tally | None = None
) -> Rows:
    """The rows of a plain jsonl file between bytes `start` and `end` (`_jsonl`)."""
    return _jsonl(lambda: path.open("rb"), name, start, end, at)


class Worker(Generic[T]):
    """`items` produced in a child process from now on; `results()` are they, in order.

    The child (`multiprocessing`, forked: it inherits the unstarted iterator, pure work such as
    reading a file, mapping and canonicalising rows) sends each item down a pipe from its own
    thread (`_serve`); a record batch comes whole over shared memory (`Handover`, at most
    `HANDOVER_SLOTS` ahead of the caller), only its slot down the pipe. A `CaseshelfError` it
    raises is raised by `results()` with the same type, detail and fields, after the items
    before it; any other failure, or the child's end before its last item, is a
    `WorkerFailed`. `close()` stops a child that has not finished and reaps it. When no
    process can be started, the items are produced here, by `results()`."""

    def __init__(self, items: Iterator[T]) -> None:
        import multiprocessing

        self.items: Iterator[T] | None = None
        self.finished = False
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        self.handover = Handover(context)
        self.process: Any = context.Process(
            target=_serve, args=(items, send, self.handover), daemon=True
        )
        try:
            self.process.start()
        except OSError:  # no process to spare (EAGAIN, ENOMEM): do the work here instead
            self._receive.close()
            self.handover.close()
            self.process = None
            self.items = items
        finally:
            send.close()  # the child's copy alone: the pipe ends when the child does

    def waiting(self) -> int:
        """How many record batches the child has handed over that `results()` has not taken
        yet (a hint: more may come just after); 0 without a child."""
        return self.handover.held() if self.process is not None else 0

    def results(self) -> Iterator[T]:
        if self.items is not None:
            yield from self.items
            return
        while True:
            try:
                kind, payload = self._receive.recv()
            except EOFError:
                raise WorkerFailed("the import worker process stopped unexpectedly") from None
            if kind == "item":
                yield payload
                continue
            if kind == "batch":
                data, columns = self.handover.take(payload)
                yield pickle.loads(columns)._replace(data=data)  # noqa: S301 - our own child's
                continue
            self.finished = True
            if kind == "done":
                return
            if kind == "error":
                error_type, detail, fields = payload
                raise error_type(detail, **fields)
            raise WorkerFailed(f"the import worker process failed: {payload}")

    def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if not self.finished:
            process.kill()
        self._receive.close()
        process.join()
        process.close()
        self.handover.close()


class Slot(NamedTuple):
    number: int
    length: int  # the records' bytes, from the slot's start
    columns: int  # the pickled columns' bytes, after them


class Handover:
    """Shared memory through which a worker hands its record batches over: slots of an
    anonymous shared mapping made before the fork, filled by the worker in turn and emptied by
    the importing process in the same order, a semaphore counting the free ones. A slot holds
    a batch's records and, after them, its other columns (ids, lengths, tags, digests)
    pickled; only the slot's number and lengths go down the pipe.

    Through a `multiprocessing` queue, a batch's records were pickled and written into the pipe
    a pipe's size at a time by the worker's feeder thread, which waits for the GIL between two
    writes while the worker maps rows, so the importing process waited on the pipe. With the
    records here: measured on 1,000,000 GSM8K-shaped rows on a quiet machine (load average
    under 1), alternating with the queue alone, three runs each: 6.6-7.3 s of wall against
    8.3-8.6 s (CPU 10.4-11.9 s against 11.6-12.1 s; peak RSS of the importing process +15 MB,
    the slots written). The columns (~100 KB pickled for 1,000 rows) still went through the
    feeder thread: of the ~150 ms the importing process waited on the worker in an import of
    100,000 rows, ~140 ms came after the worker had put the batch (`_serve`)."""

    def __init__(self, context: Any) -> None:
        self._slots = slots = HANDOVER_SLOTS
        self._slot_bytes = slot_bytes = HANDOVER_SLOT_BYTES
        self._memory = mmap.mmap(-1, slots * slot_bytes)  # shared, anonymous: kept over fork
        self._free = context.Semaphore(slots)
        self._next = 0  # the next slot the worker fills

    def put(self, data: bytes, columns: bytes) -> Slot | None:  # pragma: no cover - worker
        """Copy `data` and then `columns` into the next slot once it is free (None: larger
        than a slot)."""
        if len(data) + len(columns) > self._slot_bytes:
            return None
        self._free.acquire()
        number, self._next = self._next, (self._next + 1) % self._slots
        at = number * self._slot_bytes
        self._memory[at : at + len(data)] = data
        at += len(data)
        self._memory[at : at + len(columns)] = columns
        return Slot(number, len(data), len(columns))

    def take(self, slot: Slot) -> tuple[bytes, bytes]:
        """The records and the columns of `slot`, copied out; the slot is free again."""
        at = slot.number * self._slot_bytes
        data = self._memory[at : at + slot.length]
        at += slot.length
        columns = self._memory[at : at + slot.columns]
        self._free.release()
        return data, columns

    def held(self) -> int:
        """How many slots are filled and not yet taken (a hint: the worker may fill one just
        after)."""
        return self._slots - int(self._free.get_value())

    def close(self) -> None:
        self._memory.close()


def _serve(items: Iterator[Any], out: Any, handover: Handover) -> None:  # pragma: no cover
    """The worker's loop: each item sent down the pipe `out` as it comes, from this thread (a
    record batch over `handover`, its slot sent), then how the items ended.

    Sent here rather than through a `multiprocessing.Queue`, whose feeder thread waits for the
    GIL (up to the 5 ms switch interval, and again for each pipe-sized write) while this thread
    maps rows: what is sent is small (a slot, a block mark), so a send does not wait on the
    importing process unless the pipe is full, and a full pipe waits as a full queue did.
    An import of 100,000 GSM8K-shaped rows, alternating with the queue, six runs each (load
    average 1.1-1.6): the importing process waited on the worker 23-49 ms against 93-155 ms,
    the import (in process) took 0.74-0.80 s against 0.79-1.00 s."""
    # (the work this process runs has imported it already; the importing process needs it not)
    from caseshelf.domain.mapping import RecordBatch

    message: tuple[str, Any]
    try:
        for item in items:
            slot = None
            if isinstance(item, RecordBatch):
                columns = pickle.dumps(item._replace(data=b""), pickle.HIGHEST_PROTOCOL)
                slot = handover.put(item.data, columns)
            out.send(("item", item) if slot is None else ("batch", slot))
        message = ("done", None)
    except CaseshelfError as exc:
        message = ("error", (type(exc), exc.detail, exc.fields))
    except Exception as exc:  # reported to the parent, which raises
        message = ("failed", f"{type(exc).__name__}: {exc}")
    out.send(message)
