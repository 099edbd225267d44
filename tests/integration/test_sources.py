"""File sources: jsonl, csv (with and without header), parquet, compression, bad input."""

import bz2
import gzip

import pytest
import zstandard

from caseshelf.adapters.sources import SourceReader, UrlPolicy, rows_from_bytes, smart_opener
from caseshelf.domain.errors import BadRequest, Forbidden
from caseshelf.domain.recipe import CsvSource, JsonlSource, ParquetSource

pytestmark = pytest.mark.integration

JSONL = b'{"q": "a"}\n\n{"q": "b"}\n'


@pytest.fixture
def reader() -> SourceReader:
    return SourceReader(smart_opener())


@pytest.mark.parametrize(
    ("suffix", "pack"),
    [
        ("", bytes),
        (".gz", gzip.compress),
        (".bz2", bz2.compress),
        (".zst", zstandard.ZstdCompressor().compress),
    ],
)
def test_jsonl_is_read_through_any_compression(tmp_path, reader, suffix, pack):
    path = tmp_path / f"rows.jsonl{suffix}"
    path.write_bytes(pack(JSONL))
    rows = list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))
    assert rows == [(0, {"q": "a"}), (1, {"q": "b"})]


def test_a_malformed_line_names_its_line_number(reader):
    text = '{"q": "a"}\n{"q": "b"}\n{"q": oops}\n'
    with pytest.raises(BadRequest, match="line 3: malformed JSON") as exc:
        list(reader.rows(JsonlSource(kind="jsonl", text=text)))
    assert exc.value.fields["line"] == 3


@pytest.mark.parametrize("n", [-(2**63) - 1, -(2**63), 2**64 - 1, 2**64])
def test_a_jsonl_integer_at_the_edge_of_64_bits_is_read_as_written(reader, n):
    # orjson reads integers outside -2**63 .. 2**64 - 1 as floats near them
    text = '{"q": "a"}\n{"q": "b", "n": ' + str(n) + "}\n"
    rows = list(reader.rows(JsonlSource(kind="jsonl", text=text)))
    assert rows[1] == (1, {"q": "b", "n": n}) and type(rows[1][1]["n"]) is int


def test_a_truncated_gzip_names_the_source(tmp_path, reader):
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(JSONL * 500)[:-40])
    with pytest.raises(BadRequest, match=r"cut\.jsonl\.gz.*truncated or corrupt"):
        list(reader.rows(JsonlSource(kind="jsonl", url=str(path))))


def test_csv_with_header_without_header_and_another_delimiter(reader):
    with_header = CsvSource(kind="csv", text="q,a\nx,1\n")
    headerless = CsvSource(kind="csv", header=False, columns=["q", "a"], text='"0,1",B\n')
    semicolons = CsvSource(kind="csv", delimiter=";", text="q;a\nx;1")
    assert list(reader.rows(with_header)) == [(0, {"q": "x", "a": "1"})]
    assert list(reader.rows(headerless)) == [(0, {"q": "0,1", "a": "B"})]
    assert list(reader.rows(semicolons)) == [(0, {"q": "x", "a": "1"})]


def test_a_csv_row_with_a_missing_cell_names_its_line(reader):
    src = CsvSource(kind="csv", text="q,a\nx,1\ny\n")
    with pytest.raises(BadRequest, match="line 3: 1 cells, expected 2"):
        list(reader.rows(src))


def test_parquet_rows(tmp_path, reader):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{"q": "a", "n": 1}, {"q": "b", "n": 2}]), path)
    rows = list(reader.rows(ParquetSource(kind="parquet", url=str(path))))
    assert rows == [(0, {"q": "a", "n": 1}), (1, {"q": "b", "n": 2})]
    with pytest.raises(BadRequest, match="not a parquet file"):
        list(rows_from_bytes(ParquetSource(kind="parquet"), b"nope", name="x.parquet"))


def test_a_source_without_url_or_text_is_400(reader):
    with pytest.raises(BadRequest, match="no url or text"):
        reader.rows(JsonlSource(kind="jsonl"))


def test_the_api_policy_refuses_local_paths_other_prefixes_and_private_hosts():
    policy = UrlPolicy(
        allow_local=False, s3_prefixes=("s3://bucket/t/acme/",), allow_private_hosts=False
    )
    with pytest.raises(Forbidden, match="local paths"):
        policy.check("/etc/passwd")
    with pytest.raises(Forbidden, match="own prefix"):
        policy.check("s3://bucket/t/other/uploads/x.jsonl")
    with pytest.raises(Forbidden, match="not a public address"):
        policy.check("http://127.0.0.1:9/x.jsonl")
    assert policy.check("s3://bucket/t/acme/uploads/x.jsonl")
    with pytest.raises(BadRequest, match="unsupported scheme"):
        policy.check("ftp://example.com/x")
