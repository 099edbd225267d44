"""Row sources: jsonl, csv and parquet, by URL (local path, `s3://`, `https://`) or inline text.

Every source is streamed: rows are yielded one at a time as `(row index, row)` and nothing is
loaded whole unless the format needs it (parquet reads one row group at a time). `.gz`, `.bz2`
and `.zst` are decompressed transparently. Remote URLs go through smart_open; local files are
opened directly (the same decompressors, without smart_open's import cost on the CLI's hot path).

Errors name the source and the line: a malformed JSON line, a CSV row with the wrong number of
cells, a truncated or corrupt compressed stream.

jsonl is read 128 KiB at a time (`READ_CHUNK`) and split into lines in one go. With
`num_proc` above 1, the work on a plain local jsonl file's rows is shared with forked worker
processes, a block of the file at a time (`SourceReader.offload`, `split_jsonl`).
"""

from __future__ import annotations

import bz2
import codecs
import csv
import gzip
import io
import ipaddress
import socket
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any, NamedTuple, TypeVar
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
# Bytes read at a time from a jsonl stream: each read is split, parsed and checked in several
# passes, cheaper while it stays in a core's cache (~20% less CPU a row than reads of 1 MiB).
READ_CHUNK = 128 << 10
# The longest jsonl line read (a row is one case: 4 MiB at most, and a mapped row is smaller).
MAX_LINE_BYTES = 64 * 1024 * 1024
# A compressed source streams, so its total is generous; the ratio bound stops a bomb early.
SOURCE_LIMITS = archives.Limits(max_entries=0, max_total_bytes=64 * 1024**3)
# A plain jsonl file read by several processes is cut at line ends into blocks of about this
# many bytes, dealt out to them in turn (`split_jsonl`).
SPLIT_BLOCK_BYTES = 4 << 20


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
        import smart_open  # lazy: optional [http] extra, ~230 ms, on the first remote read

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

    def offload(
        self, source: FileSource, *, limit: int | None = None, num_proc: int = 1
    ) -> Offload | None:
        """A way to run work over this source's rows in `num_proc` processes (`split_jsonl`):
        a plain (uncompressed) local jsonl file of two blocks or more, read whole (no `limit`).
        None otherwise, and always with `num_proc` 1: the work runs in this process."""
        url = source.url if getattr(source, "text", None) is None else None
        if (
            num_proc < 2
            or limit is not None
            or url is None
            or not isinstance(url, str)
            or not isinstance(source, JsonlSource)
            or not (_is_local(url) and self.policy.allow_local)
            or _many_local(url)
        ):
            return None
        path = Path(url.removeprefix("file://")).expanduser()
        if not _plain(path.name) or not path.is_file():
            return None  # reading it will name a problem
        starts = block_starts(path, path.stat().st_size, SPLIT_BLOCK_BYTES)
        if len(starts) < 3:  # one block: nothing to share
            return None
        return partial(split_jsonl, path, display_name(url), starts, min(num_proc, len(starts) - 1))


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
    import pyarrow as pa  # lazy: optional [parquet] extra, ~150 ms, parquet sources only
    import pyarrow.parquet as pq  # lazy: as pyarrow

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


# -- opt-in: a plain jsonl file's rows in several processes --------------------------------------


class WorkerFailed(RuntimeError):
    """A worker process stopped before it sent its blocks, or failed in an unexpected way."""


def split_jsonl(path: Path, name: str, starts: list[int], deal: int, work: Work) -> Iterator[Any]:
    """`work` over the rows of a plain jsonl file, in `deal` processes: this one and `deal - 1`
    forked workers. The file is cut at line ends at `starts` (`block_starts`) and the blocks
    are dealt out in turn, block `b` to process `b % deal`. A worker works on its blocks in
    order, each held whole until this process takes it, so each worker is one block ahead
    while this process works on its own; the items come in file order.

    Case ids and errors are those of a single pass: a worker counts the lines and rows of the
    blocks before each of its own (`count_rows`), and an error is raised after the items of
    the blocks before it, so the first bad row in file order is the one named. When a worker
    cannot be started (no fork, no pipe, no process to spare), the whole file is worked on
    here, with the same result. Workers are stopped and reaped however this ends."""
    workers: list[Worker] = []
    try:
        for me in range(1, deal):
            worker = Worker.start(_work_blocks, (path, name, starts, deal, me, work))
            if worker is None:
                break
            workers.append(worker)
        if len(workers) < deal - 1:
            for worker in workers:
                worker.close()
            yield from work(_jsonl_part(path, name, 0))
            return
        at = Tally()  # where the next block starts
        for number in range(len(starts) - 1):
            owner = number % deal
            if owner:
                at = yield from workers[owner - 1].block(number, at)
            else:
                yield from work(_jsonl_part(path, name, starts[number], starts[number + 1], at))
    finally:
        for worker in workers:
            worker.close()


def _held(items: Iterator[T]) -> tuple[list[T], CaseshelfError | None]:
    """`items` collected, up to the error that ended them, if any."""
    got: list[T] = []
    try:
        for item in items:
            got.append(item)
    except CaseshelfError as exc:
        return got, exc
    return got, None


class Block(NamedTuple):
    """What a worker sends for one of its blocks: where the block starts and ends, its items,
    and the error that ended them (its type, detail and fields), if any."""

    number: int
    start: Tally
    end: Tally
    items: list[Any]
    error: tuple[type[CaseshelfError], str, dict[str, Any]] | None


def _work_blocks(
    path: Path, name: str, starts: list[int], deal: int, me: int, work: Work, out: Any
) -> None:  # pragma: no cover - runs in a worker process
    """A worker's side of `split_jsonl`: each block `b` with `b % deal == me` worked on and
    sent down the pipe `out` whole (`Block`); the others only counted."""
    try:
        at = Tally()
        for number in range(len(starts) - 1):
            begin, end = starts[number], starts[number + 1]
            if number % deal != me:
                count_rows(path, begin, end, at)
                continue
            start = Tally(at.lines, at.rows)
            items, failed = _held(work(_jsonl_part(path, name, begin, end, at)))
            error = None if failed is None else (type(failed), failed.detail, failed.fields)
            out.send(("block", Block(number, start, Tally(at.lines, at.rows), items, error)))
            if failed is not None:
                return
    except Exception as exc:  # reported to the importing process, which raises
        out.send(("failed", f"{type(exc).__name__}: {exc}"))


class Worker:
    """A forked child process running `_work_blocks`, and the pipe it sends its blocks down."""

    def __init__(self, process: Any, receive: Any) -> None:
        self.process = process
        self._receive = receive

    @classmethod
    def start(cls, target: Callable[..., None], args: tuple[Any, ...]) -> Worker | None:
        """A child (`multiprocessing`, forked: it inherits `args` unpickled) running
        `target(*args, pipe)`; None when no pipe or process can be made (no fork on this
        platform, too many open files, no process to spare). Only a pipe and a process are
        made: no shared memory or semaphore, which need /dev/shm."""
        import multiprocessing  # lazy: ~3-8 ms an import in one process needs not

        if "fork" not in multiprocessing.get_all_start_methods():
            return None
        context = multiprocessing.get_context("fork")
        try:
            receive, send = context.Pipe(duplex=False)
        except OSError:
            return None
        try:
            process = context.Process(target=target, args=(*args, send), daemon=True)
            process.start()
        except OSError:
            receive.close()
            return None
        finally:
            send.close()  # the child's copy alone: the pipe ends when the child does
        return cls(process, receive)

    def block(self, number: int, at: Tally) -> Generator[Any, None, Tally]:
        """The items of block `number`, which starts `at`; answers where it ends. An error
        the worker met in the block is raised after the items before it, with its type,
        detail and fields."""
        try:
            kind, payload = self._receive.recv()
        except EOFError:
            raise WorkerFailed("an import worker process stopped unexpectedly") from None
        if kind != "block":
            raise WorkerFailed(f"an import worker process failed: {payload}")
        if payload.number != number or payload.start != at:
            raise WorkerFailed(
                f"an import worker sent block {payload.number} from {payload.start}, not "
                f"block {number} from {at} (did the file change while it was read?)"
            )
        yield from payload.items
        if payload.error is not None:
            error_type, detail, fields = payload.error
            raise error_type(detail, **fields)
        return payload.end

    def close(self) -> None:
        """Stop the child if it is still running, and reap it."""
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()
        self._receive.close()
        process.join()
        process.close()


def block_starts(path: Path, size: int, block_bytes: int) -> list[int]:
    """Offsets that cut a file into blocks of about `block_bytes`, each just past a line end:
    `[0, ..., size]`."""
    starts = [0]
    with path.open("rb") as fh:
        while (cut := _line_end_after(fh, starts[-1] + block_bytes, size)) is not None:
            starts.append(cut)
    starts.append(size)
    return starts


def _line_end_after(fh: IO[bytes], offset: int, size: int) -> int | None:
    """The offset just past the first line end at or after `offset`, if a line follows it."""
    if offset >= size:
        return None
    fh.seek(offset)
    at = offset
    while chunk := fh.read(1 << 16):
        found = chunk.find(b"\n")
        if found >= 0:
            at += found + 1
            return at if at < size else None
        at += len(chunk)
    return None


def count_rows(path: Path, start: int, end: int, at: Tally) -> None:
    """Move `at` past the lines and rows between `start` and `end` of a jsonl file as `_jsonl`
    reads them (a line of whitespace alone is no row), without parsing them: the lines are
    read and split as `_jsonl` reads them, and looked at in C."""
    with path.open("rb") as fh:
        fh.seek(start)
        for lines in _lines(fh, end - start):
            blank = lines.count(b"") + sum(map(bytes.isspace, lines))
            at.lines += len(lines)
            at.rows += len(lines) - blank


def _jsonl_part(
    path: Path, name: str, start: int, end: int | None = None, at: Tally | None = None
) -> Rows:
    """The rows of a plain jsonl file between bytes `start` and `end` (`_jsonl`)."""
    return _jsonl(lambda: path.open("rb"), name, start, end, at)
