"""The Python client, `caseshelf.connect()`: in process on the embedded store and over real HTTP
to the local server, the same answers and the same typed errors from both."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import caseshelf
from caseshelf.client import Client, Http, InProcess
from caseshelf.client.transport import Request
from caseshelf.domain.answers import ANSWER_BUDGET_BYTES, EVENT_BODY_LIMIT, escaped_size
from tests.helpers import dev_server

pytestmark = pytest.mark.integration

CASES = [
    {"id": f"c{i}", "inputs": {"user": f"what is {i} + {i}?"}, "tags": ["even" if i % 2 else "odd"]}
    for i in range(7)
]
CASES[3]["expectations"] = {"ground_truth": "6"}


def test_connect_reads_the_environment(tmp_path: Path) -> None:
    # Given only environment variables
    env = {"CASESHELF_HOME": str(tmp_path / "h"), "CASESHELF_TENANT": "t1"}
    # When connecting with no arguments, then it is the embedded store of that home and tenant
    embedded = caseshelf.connect(env=env)
    assert isinstance(embedded.transport, InProcess)
    assert embedded.transport.settings.home == tmp_path / "h"
    assert embedded.transport.settings.tenant == "t1"
    # And with CASESHELF_API it is HTTP, the token from CASESHELF_TOKEN (never shown)
    api = {"CASESHELF_API": "http://127.0.0.1:9/prod", "CASESHELF_TOKEN": "tok-123"}
    over_http = caseshelf.connect(env=api)
    assert isinstance(over_http.transport, Http)
    assert over_http.transport.base_url == "http://127.0.0.1:9/prod"
    assert "tok-123" not in repr(over_http)
    # An explicit URL wins over the environment
    explicit = caseshelf.connect("http://127.0.0.1:8/x", env=api)
    assert isinstance(explicit.transport, Http) and explicit.transport.base_url.endswith(":8/x")


def test_every_read_and_change_of_a_version(cs: Client) -> None:
    # Given a registered version and a second one with a change
    first = cs.register("smoke", cases=CASES, version="1.0.0", description="smoke test")
    assert first.created and first.case_count == 7
    changed = [dict(c) for c in CASES[:6]] + [{"id": "new", "inputs": {"user": "hello"}}]
    changed[0] = {**changed[0], "inputs": {"user": "what is 0 + 0, really?"}}
    second = cs.register("smoke", cases=changed, bump="minor")
    assert second.version == "1.1.0"
    # When it is read back, then every answer is the API's wire model
    v = cs.get("smoke@1.0.0")
    assert (v.id, v.content_digest, v.case_count, v.description) == (
        "smoke",
        first.content_digest,
        7,
        "smoke test",
    )
    assert cs.get("smoke").version == "1.1.0"
    assert [d.id for d in cs.datasets()] == ["smoke"]
    assert cs.dataset("smoke").version_count == 2
    assert [x.version for x in cs.versions("smoke")] == ["1.1.0", "1.0.0"]
    assert list(cs.cases("smoke@1.0.0", raw=True)) == CASES
    # Paged lazily: two at a time gives the same cases
    assert list(cs.cases("smoke@1.0.0", page_size=2, raw=True)) == CASES
    # By default the case model, as every other read gives its model
    typed = list(cs.cases("smoke@1.0.0", page_size=3))
    assert typed[3].expectations.ground_truth == "6" and typed[0].inputs.user == "what is 0 + 0?"
    assert [c.model_dump(mode="json", exclude_defaults=True) for c in typed] == CASES
    assert list(cs.case_models("smoke@1.0.0")) == typed
    assert cs.case("smoke@1.0.0", 3) == typed[3]
    assert cs.case("smoke@1.0.0", 3, raw=True) == CASES[3]
    page = cs.list_cases("smoke@1.0.0", limit=3)
    assert [c["id"] for c in page.items] == ["c0", "c1", "c2"] and page.next_cursor
    # Diff, subset, tags, tombstones
    d = cs.diff("smoke@1.0.0", "1.1.0")
    assert (d.summary.added, d.summary.removed, d.summary.changed) == (1, 1, 1)
    s = cs.subset("smoke@1.0.0", tags=["even"], limit=2, with_cases=True)
    assert s.case_ids == ["c1", "c3"] and s.stamp is not None and s.stamp.selected == 2
    assert s.cases is not None and s.cases[1]["expectations"] == {"ground_truth": "6"}
    moved = cs.tag("smoke@1.0.0", ["stable"])
    assert moved.version is not None and moved.version.version_tags == ["stable"]
    assert cs.get("smoke@stable").version == "1.0.0"
    assert cs.delete("smoke@1.1.0").deleted_at is not None
    assert cs.get("smoke").version == "1.0.0"
    assert cs.revive("smoke@1.1.0").deleted_at is None
    # A derived version from a subset
    derived = cs.subset("smoke@1.0.0", ids=["c0", "c5"], register_as="smoke-mini@1.0.0")
    assert derived.registered is not None and derived.registered.case_count == 2


def test_a_recipe_is_listed_tombstoned_and_revived_as_a_dataset_is(cs: Client) -> None:
    # Given two versions of a recipe
    recipe = {
        "id": "mini-recipe",
        "category": "qa",
        "source": {"kind": "jsonl"},
        "mapping": {"task_field": "q", "answer_field": "a"},
    }
    cs.register_recipe({**recipe, "version": "1.0.0"})
    cs.register_recipe({**recipe, "version": "1.1.0"})
    # When it is listed, then its id and both versions show, newest first
    assert "mini-recipe" in [r.id for r in cs.list_recipes().items]
    assert [v.version for v in cs.recipe_versions("mini-recipe").items] == ["1.1.0", "1.0.0"]
    # When the newest is tombstoned, then it is hidden unless asked for, and revived it is back
    assert cs.delete_recipe("mini-recipe@1.1.0").deleted_at is not None
    assert [v.version for v in cs.recipe_versions("mini-recipe").items] == ["1.0.0"]
    shown = cs.recipe_versions("mini-recipe", include_deleted=True).items
    assert [v.version for v in shown] == ["1.1.0", "1.0.0"]
    assert cs.revive_recipe("mini-recipe@1.1.0").deleted_at is None
    assert cs.recipe("mini-recipe").version == "1.1.0"
    # And the dataset twins answer the same way
    cs.register("twin", cases=CASES, version="1.0.0")
    assert [d.id for d in cs.list_datasets().items] == ["twin"]
    assert [v.version for v in cs.list_versions("twin").items] == ["1.0.0"]


def test_diff_pages_lazily_and_joins_them(cs: Client) -> None:
    # Given v2 with every case of v1 changed and 3 more (7 changed, 3 added)
    cs.register("paged", cases=CASES, version="1.0.0")
    v2 = [{**c, "metadata": {"n": i}} for i, c in enumerate(CASES)]
    v2 += [{"id": f"n{i}", "inputs": {"user": "new"}} for i in range(3)]
    cs.register("paged", cases=v2, version="2.0.0")
    # When paged 4 entries at a time
    pages = cs.diff_pages("paged@1.0.0", "2.0.0", limit=4)
    first = next(pages)
    # Then each page is asked for when the previous one is consumed, with the whole summary
    assert len(first.changed or ()) == 4 and first.next_cursor
    rest = list(pages)
    assert len(rest) == 2 and rest[-1].next_cursor is None
    assert all(p.summary == first.summary for p in rest)
    entries = list(cs.diff_entries("paged@1.0.0", "2.0.0", limit=3))
    assert [k for k, _ in entries] == ["changed"] * 7 + ["added"] * 3
    assert [e.id for _, e in entries] == [c["id"] for c in CASES] + ["n0", "n1", "n2"]
    # And `diff` joins the pages into one answer, as it always was
    whole = cs.diff("paged@1.0.0", "2.0.0")
    assert [c.id for c in whole.changed or ()] == [c["id"] for c in CASES]
    assert len(whole.added or ()) == 3 and whole.next_cursor is None
    assert cs.diff("paged@1.0.0", "2.0.0", summary=True).changed is None


def test_the_same_answers_in_process_and_over_http(local: Client, remote: Client) -> None:
    # Given the same content registered through both
    for c in (local, remote):
        c.register("same", cases=CASES, version="1.0.0")
    # Then the digests, the cases and a diff agree field for field
    a, b = local.get("same@1.0.0"), remote.get("same@1.0.0")
    assert a.content_digest == b.content_digest and a.bytes == b.bytes
    assert list(local.cases("same")) == list(remote.cases("same"))
    assert (
        local.subset("same", sample=3, seed=7).case_ids
        == remote.subset("same", sample=3, seed=7).case_ids
    )
    # And their errors are the same typed errors with the same fields
    errors = []
    for c in (local, remote):
        with pytest.raises(caseshelf.NotFound) as nf:
            c.get("same@9.9.9")
        with pytest.raises(caseshelf.Conflict) as conflict:
            c.register("same", cases=CASES[:2], version="1.0.0")
        with pytest.raises(caseshelf.BadRequest) as bad:
            c.register("same", cases=[{"id": "x", "inputs": {"user": 5}}], version="2.0.0")
        errors.append((nf.value.fields, conflict.value.fields, bad.value.fields, bad.value.detail))
    assert errors[0] == errors[1]
    conflict_fields = errors[0][1]
    assert len(conflict_fields["digests"]) == 2
    assert conflict_fields["digests"][0] == a.content_digest
    assert errors[0][2]["case_id"] == "x" and errors[0][2]["field"].startswith("inputs.user")


class _NoCursorHeader(httpx.HTTPTransport):
    """An API that names the next page in the body only (no `X-Next-Cursor` header)."""

    def __init__(self) -> None:
        super().__init__()
        self.cursors: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = super().handle_request(request)
        if request.url.path.endswith("/cases"):
            self.cursors.append(request.url.params.get("cursor"))
            if "X-Next-Cursor" in answer.headers:
                del answer.headers["X-Next-Cursor"]
        return answer


def test_cases_over_http_come_page_by_page_with_or_without_the_cursor_header(
    tmp_path: Path,
) -> None:
    # Given 25 cases served over HTTP
    many = [{"id": f"m{i:02}", "inputs": {"user": f"q{i}"}} for i in range(25)]
    with dev_server(tmp_path / "srv") as srv:
        with caseshelf.connect(srv.url) as cs:
            cs.register("paged", cases=many, version="1.0.0")
            # When they are read 10 at a time, each next page fetched while one is read
            # Then they come whole and in order
            assert list(cs.cases("paged", page_size=10, raw=True)) == many
            # And a reader that stops early gets what it read
            first = cs.cases("paged", page_size=10, raw=True)
            assert [next(first)["id"] for _ in range(12)] == [c["id"] for c in many[:12]]
            first.close()
        # When the API sends no cursor header, they still come whole and in order, each page
        # asked for with the cursor the one before names
        transport = _NoCursorHeader()
        with Client(Http(srv.url, tenant="acme", principal="alice", transport=transport)) as cs:
            assert list(cs.cases("paged", page_size=10, raw=True)) == many
        assert len(transport.cursors) == 3 and transport.cursors[0] is None
        assert len(set(transport.cursors)) == 3


def test_a_dataframe_registers_and_comes_back(local: Client, home: Path) -> None:
    pd = pytest.importorskip("pandas")
    # Given a version registered from a list
    local.register("frame", cases=CASES, version="1.0.0")
    # When read as a DataFrame, then its columns are flat
    df = local.to_pandas("frame@1.0.0")
    assert list(df["id"]) == [c["id"] for c in CASES]
    assert df.loc[3, "expectations.ground_truth"] == "6"
    assert df.loc[0, "inputs.user"] == "what is 0 + 0?"
    assert isinstance(df, pd.DataFrame)
    # And registering that DataFrame gives the very same content
    again = local.register("frame-copy", cases=df, version="1.0.0")
    assert again.content_digest == local.get("frame@1.0.0").content_digest


def test_bad_tables_name_the_row_and_column_and_register_nothing(local: Client) -> None:
    pd = pytest.importorskip("pandas")
    # A DataFrame without an id column
    with pytest.raises(caseshelf.BadRequest, match="no 'id' column") as no_id:
        local.register("bad", cases=pd.DataFrame({"inputs.user": ["a"]}), version="1.0.0")
    assert no_id.value.fields["column"] == "id"
    # NaN where the case id (a string) is required
    nan_id = pd.DataFrame({"id": ["a", math.nan, "c"], "inputs.user": ["x", "y", "z"]})
    with pytest.raises(caseshelf.BadRequest, match="row 1") as nan:
        local.register("bad", cases=nan_id, version="1.0.0")
    assert (nan.value.fields["row"], nan.value.fields["column"]) == (1, "id")
    # An infinite number is no JSON value: row and column named
    inf = pd.DataFrame({"id": ["a", "b"], "metadata": [{"w": 1.0}, {"w": math.inf}]})
    with pytest.raises(caseshelf.BadRequest, match="row 1") as bad_inf:
        local.register("bad", cases=inf, version="1.0.0")
    assert bad_inf.value.fields["column"] == "metadata"
    assert bad_inf.value.fields["case_id"] == "b"
    # A cell the case model refuses (a number where the user input is text): the server's
    # error, with the row and the column it came from
    wrong = pd.DataFrame({"id": ["a", "b"], "inputs.user": ["x", 5]})
    with pytest.raises(caseshelf.BadRequest, match=r"row 1, column 'inputs\.user'") as cell:
        local.register("bad", cases=wrong, version="1.0.0")
    assert (cell.value.fields["row"], cell.value.fields["column"]) == (1, "inputs.user")
    assert cell.value.fields["case_id"] == "b"
    # A non-tabular object
    with pytest.raises(caseshelf.BadRequest, match="cases must be") as odd:
        local.register("bad", cases=42, version="1.0.0")
    assert odd.value.fields["field"] == "cases"
    with pytest.raises(caseshelf.BadRequest, match="row 1"):
        local.register("bad", cases=[{"id": "a"}, "b"], version="1.0.0")
    # Unknown refs are typed errors too
    with pytest.raises(caseshelf.BadRequest):
        local.get("not a ref")
    with pytest.raises(caseshelf.NotFound):
        list(local.cases("missing@1.0.0"))
    # And nothing was registered
    assert list(local.datasets()) == []


def test_register_takes_a_file(local: Client, tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in CASES))
    out = local.register("from-file", cases=path, bump="minor")
    assert (out.version, out.case_count) == ("1.0.0", 7)
    assert list(local.cases("from-file", raw=True)) == CASES


def test_to_hf_gives_a_dataset(local: Client) -> None:
    pytest.importorskip("datasets")
    local.register("hf", cases=CASES, version="1.0.0")
    ds = local.to_hf("hf@1.0.0")
    assert ds.num_rows == 7
    assert ds[3]["id"] == "c3" and ds[3]["expectations.ground_truth"] == "6"
    assert ds[0]["expectations.ground_truth"] is None


def test_subset_cases_are_whole_in_process_and_over_http(tmp_path: Path) -> None:
    # Given a store whose HTTP body limit is smaller than the version's cases
    big = [{"id": f"b{i}", "inputs": {"user": "x" * 200}} for i in range(40)]
    home = tmp_path / "capped"
    with caseshelf.connect(home=home, env={"CASESHELF_MAX_BODY_BYTES": "4000"}) as cs:
        # Then in process a subset with its cases, and the registration itself, are not capped
        cs.register("big", cases=big, version="1.0.0")
        assert len(cs.subset("big", with_cases=True).cases or []) == 40
    with dev_server(home, tenant="local", principal="local", max_body_bytes=4000) as srv:
        remote = caseshelf.connect(srv.url)
        # And over HTTP the same: an answer's cases come a page at a time, joined by the client
        assert len(remote.subset("big", with_cases=True).cases or []) == 40
        assert len(remote.subset("big").case_ids) == 40


def test_a_registration_over_the_body_limit_goes_through_an_upload(tmp_path: Path) -> None:
    # Given the local server with a small request limit, and a version larger than it
    big = [{"id": f"b{i}", "inputs": {"user": "x" * 200}} for i in range(40)]
    with caseshelf.connect(home=tmp_path / "direct") as direct:
        expected = direct.register("big", cases=big, version="1.0.0")
    with dev_server(tmp_path / "srv", max_body_bytes=4000) as srv:
        remote = caseshelf.connect(srv.url)
        # When registered over HTTP (the client does not know the limit: the 413 names it)
        sizes: list[int] = []
        sent: list[int] = []
        out = remote.register(
            "big", cases=big, version="1.0.0", total=sizes.append, progress=sent.append
        )
        # Then it went through POST /uploads, with byte progress, and registered the same content
        assert (out.created, out.case_count) == (True, 40)
        assert out.content_digest == expected.content_digest
        assert len(sizes) == 1 and sum(sent) == sizes[0] > 4000
        assert remote.transport.max_body_bytes == 4000  # type: ignore[attr-defined]
        # And again: the same answer as POST /datasets gives (unchanged, 200)
        assert remote.register("big", cases=big, version="1.0.0").created is False
        # And validate checks such a document through a dry-run upload, storing nothing
        checked = remote.validate("fresh", cases=big, version="1.0.0")
        assert (checked.valid, checked.would_conflict) == (True, False)
        assert checked.content_digest == expected.content_digest
        with pytest.raises(caseshelf.NotFound):
            remote.get("fresh@1.0.0")
        assert remote.validate("big", cases=big[:35], version="1.0.0").would_conflict is True
        # And its errors are the route's typed errors, with the same fields
        with pytest.raises(caseshelf.Conflict) as conflict:
            remote.register("big", cases=big[:30], version="1.0.0")
        assert conflict.value.fields["digests"][0] == expected.content_digest
        bad = [dict(c) for c in big]
        bad[7] = {**bad[7], "tags": "oops"}
        with (
            caseshelf.connect(home=tmp_path / "direct") as direct,
            pytest.raises(caseshelf.BadRequest) as in_process,
        ):
            direct.register("bad", cases=bad, version="1.0.0")
        with pytest.raises(caseshelf.BadRequest) as uploaded:
            remote.register("bad", cases=bad, version="1.0.0")
        assert uploaded.value.detail == in_process.value.detail
        assert uploaded.value.fields["case_id"] == in_process.value.fields["case_id"] == "b7"
        assert uploaded.value.fields["field"] == in_process.value.fields["field"] == "tags"
        with pytest.raises(caseshelf.NotFound):
            remote.get("bad@1.0.0")
    # And a case over the case limit is the route's 413 as it is: no upload makes it fit
    with dev_server(tmp_path / "srv2", max_case_bytes=1000) as srv:
        remote = caseshelf.connect(srv.url)
        with pytest.raises(caseshelf.TooLarge) as one_case:
            remote.register(
                "huge", cases=[{"id": "h", "inputs": {"user": "y" * 2000}}], version="1"
            )
        assert one_case.value.fields.get("case_id") == "h"
        assert remote.transport.max_body_bytes == EVENT_BODY_LIMIT  # type: ignore[attr-defined]


def test_download_and_export_to_a_directory(cs: Client, tmp_path: Path) -> None:
    cs.register("dl", cases=CASES, version="1.0.0")
    totals: list[int] = []
    seen: list[int] = []
    got = cs.download("dl@1.0.0", to=tmp_path, progress=seen.append, total=totals.append)
    assert got.path == tmp_path / "dl-1.0.0.json"
    assert totals == [got.size] and sum(seen) == got.size
    doc = orjson.loads(got.path.read_bytes())
    assert [c["id"] for c in doc["cases"]] == [c["id"] for c in CASES]
    # The downloaded document registers as it is, with the same digest
    assert cs.register(doc).created is False
    out = cs.export("dl@1.0.0", to=tmp_path / "out", subset={"tags": ["even"]})
    assert out.case_count == 3
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_an_embedded_download_streams_from_the_stored_document(
    local: Client, tmp_path: Path
) -> None:
    # Given a version of a few MiB on the embedded store
    big = [{"id": f"s{i}", "inputs": {"user": f"{i} " + "y" * 3000}} for i in range(1200)]
    local.register("stream", cases=big, version="1.0.0")
    # When it is downloaded to a file, and to a stream
    pieces: list[int] = []
    totals: list[int] = []
    got = local.download("stream@1.0.0", to=tmp_path, progress=pieces.append, total=totals.append)
    # Then the route answered a URL of the store's own, and the file came a piece at a time
    assert got.path == tmp_path / "stream-1.0.0.json" and got.body is None
    assert totals == [got.size] and sum(pieces) == got.size > 3 * (1 << 20)
    assert len(pieces) > 3 and max(pieces) <= 1 << 20
    sink = io.BytesIO()
    streamed = local.download("stream@1.0.0", to=sink)
    assert streamed.size == got.size and sink.getvalue() == got.path.read_bytes()
    # And without a target the body is the same document, which registers as it is
    whole = local.download("stream@1.0.0")
    assert whole.body == got.path.read_bytes()
    assert local.register(orjson.loads(whole.body)).created is False


def test_an_upload_works_in_process_too(local: Client, tmp_path: Path) -> None:
    # Given a dataset document on disk
    path = tmp_path / "doc.json"
    path.write_bytes(orjson.dumps({"id": "up", "version": "1.0.0", "cases": CASES}))
    # When it goes through POST /uploads on the embedded store
    job = local.upload(path, {"kind": "dataset"})
    # Then the store took the PUT and the importer's worker registered it, in this process
    assert job.state == "succeeded" and job.result is not None
    assert local.get("up@1.0.0").content_digest == job.result["content_digest"]


def test_export_passes_every_body_field_through(local: Client) -> None:
    local.register("ex", cases=CASES, version="1.0.0")
    # A field the export route does not know is the route's answer, not the client's
    with pytest.raises(caseshelf.BadRequest, match="no_such_option"):
        local.export("ex@1.0.0", no_such_option=True)


def _mock(answers: list[httpx.Response], seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    return httpx.MockTransport(handle)


def test_http_retries_idempotent_calls_only() -> None:
    page = {"items": [], "next_cursor": None}
    seen: list[httpx.Request] = []
    answers = [
        httpx.Response(503),
        httpx.Response(429, headers={"Retry-After": "0"}),
        httpx.Response(200, json=page),
    ]
    http = Http("http://api.test", token="tok", backoff=0.001, transport=_mock(answers, seen))
    # A GET is sent again after a 503 and a 429, with the bearer token each time
    assert http.send(Request("GET", ("datasets",))).json() == page
    assert len(seen) == 3
    assert all(r.headers["authorization"] == "Bearer tok" for r in seen)
    # A POST is not: it may have been applied
    seen.clear()
    problem = {"type": "x", "title": "Bad Gateway", "status": 502, "detail": "down"}
    http = Http(
        "http://api.test",
        backoff=0.001,
        transport=_mock([httpx.Response(502, json=problem)], seen),
    )
    with pytest.raises(caseshelf.Upstream, match="down"):
        http.send(Request("POST", ("datasets",), body={"id": "x"}))
    assert len(seen) == 1


def test_connection_errors_are_retried_then_named() -> None:
    calls: list[Any] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    http = Http("http://api.test", retries=2, backoff=0.001, transport=httpx.MockTransport(refuse))
    with pytest.raises(caseshelf.Upstream, match=r"cannot reach the API at http://api\.test"):
        http.send(Request("POST", ("datasets",), body={}))
    assert len(calls) == 3


def test_in_process_on_the_aws_backend(aws_env: None, moto_server: str, tmp_path: Path) -> None:
    from tests.conftest import aws_backend

    # Given a bucket and a table made like the deployed ones, on a moto server
    backend = aws_backend("client", moto_server)
    env = {
        "CASESHELF_BACKEND": "aws",
        "CASESHELF_BUCKET": backend.settings.bucket or "",
        "CASESHELF_TABLE": backend.settings.table or "",
        "AWS_ENDPOINT_URL": moto_server,
    }
    with caseshelf.connect(env=env) as cs:
        # When a version is registered and read back through the handlers in process
        cs.register("aws", cases=CASES, version="1.0.0")
        assert list(cs.cases("aws@1.0.0", page_size=3, raw=True)) == CASES
        # Then a download comes from S3's presigned URL, streamed into the file
        got = cs.download("aws@1.0.0", to=tmp_path)
        assert got.path is not None and got.path.name == "aws-1.0.0.json"
        doc = orjson.loads(got.path.read_bytes())
        assert [c["id"] for c in doc["cases"]] == [c["id"] for c in CASES]


# Every route of the template and the client method that calls it.
ROUTE_METHODS = {
    "POST /datasets": "register",
    "POST /datasets/validate": "validate",
    "GET /datasets": "list_datasets",
    "GET /datasets/{id}": "dataset",
    "GET /datasets/{id}/versions": "list_versions",
    "GET /datasets/{id}/versions/{ref}": "get",
    "GET /datasets/{id}/versions/{ref}/cases": "list_cases",
    "GET /datasets/{id}/versions/{ref}/cases/{position}": "case",
    "GET /datasets/{id}/versions/{ref}/download": "download",
    "PUT /datasets/{id}/versions/{ref}/tags": "set_tags",
    "GET /datasets/{id}/tags": "tags",
    "POST /datasets/{id}/tags": "tag",
    "DELETE /datasets/{id}/tags/{tag}": "untag",
    "DELETE /datasets/{id}/versions/{ref}": "delete",
    "POST /datasets/{id}/versions/{ref}/revive": "revive",
    "GET /datasets/{id}/versions/{ref}/files/{digest}": "file",
    "GET /datasets/{id}/versions/{ref}/stats": "stats",
    "GET /me": "me",
    "POST /refs/resolve": "resolve_refs",
    "POST /datasets/terminal-bench": "import_tasks",
    "POST /datasets/harbor": "import_tasks",
    "POST /datasets/{id}/versions/{ref}/subset": "subset",
    "GET /datasets/{id}/diff": "diff",
    "POST /datasets/{id}/versions/{ref}/exports": "export",
    "GET /benchmarks": "benchmarks",
    "POST /benchmarks/preview": "preview",
    "POST /benchmarks/import": "import_",
    "POST /benchmarks/publish": "publish_catalog",
    "GET /benchmarks/hf/search": "hf_search",
    "GET /benchmarks/hf/splits": "hf_splits",
    "GET /benchmarks/hf/files": "hf_files",
    "POST /recipes": "register_recipe",
    "POST /recipes/validate": "validate_recipe",
    "POST /bundles": "import_bundle",
    "GET /recipes": "list_recipes",
    "GET /recipes/{id}": "recipe",
    "GET /recipes/{id}/versions": "recipe_versions",
    "GET /recipes/{id}/versions/{ref}": "recipe",
    "DELETE /recipes/{id}/versions/{ref}": "delete_recipe",
    "POST /recipes/{id}/versions/{ref}/revive": "revive_recipe",
    "POST /uploads": "create_upload",
    "GET /jobs/{id}": "job",
}


def test_every_route_of_the_api_is_a_client_method() -> None:
    from caseshelf.gateway import routes_of

    routes = {f"{r.method} {r.path}" for r in routes_of()}
    # A route added to the template needs its method here (and on the client)
    assert routes == set(ROUTE_METHODS)
    for name in ROUTE_METHODS.values():
        assert callable(getattr(Client, name, None)), name


@pytest.mark.parametrize("side", ["under", "over"])
def test_the_client_uploads_a_body_over_the_event_limit_once_escaped(
    tmp_path: Path, side: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a document of one quote-heavy case: its text is half the limit, but each `\"`
    # of it takes 4 bytes in the Lambda event
    n = EVENT_BODY_LIMIT // 4 + (200 if side == "over" else -200)
    doc = {"id": "q", "version": "1.0.0", "cases": [{"id": "c", "inputs": {"user": '"' * n}}]}
    data = orjson.dumps(doc)
    assert len(data) < EVENT_BODY_LIMIT
    assert (escaped_size(data) > EVENT_BODY_LIMIT) is (side == "over")
    uploads: list[int] = []
    real = Client._register_uploaded

    def spy(self: Client, data: bytes, *args: Any) -> Any:
        uploads.append(len(data))
        return real(self, data, *args)

    monkeypatch.setattr(Client, "_register_uploaded", spy)
    with dev_server(tmp_path / "srv") as srv:
        remote = caseshelf.connect(srv.url)
        # When it is registered over HTTP (the server's limit is the client's own)
        out = remote.register(doc)
        # Then over the limit it went through an upload by itself, under it as the body
        assert out.created
        assert uploads == ([len(data)] if side == "over" else [])
        assert remote.case("q@1.0.0", 0, raw=True) == doc["cases"][0]


def test_a_case_too_large_for_a_page_comes_whole_through_the_client(cs: Client) -> None:
    # Given a version whose middle case alone is over an answer's budget once escaped
    huge = {"id": "huge", "inputs": {"user": "é" * 1_500_000}}
    cases = [{"id": "a", "inputs": {"user": "x"}}, huge, {"id": "z", "inputs": {"user": "y"}}]
    assert escaped_size(orjson.dumps(huge)) > ANSWER_BUDGET_BYTES
    cs.register("h", cases=cases, version="1")
    # When its cases are read, and the one case by its position
    got = list(cs.cases("h@1", raw=True))
    # Then the stub a page holds is replaced by the case itself
    assert got == cases
    assert cs.case("h@1", 1, raw=True) == huge
    assert [c.id for c in cs.cases("h@1")] == ["a", "huge", "z"]


def test_diff_fields_and_a_path_filter_through_the_client(cs: Client) -> None:
    # Given v2 with every other case's answer changed (c3 had one; c1 and c5 get one)
    cs.register("fields", cases=CASES, version="1.0.0")
    v2 = [
        {**c, "expectations": {"ground_truth": "changed"}} if i % 2 else c
        for i, c in enumerate(CASES)
    ]
    cs.register("fields", cases=v2, version="2.0.0")
    # When the summary is asked with its field counts, and the diff filtered by that field
    summary = cs.diff("fields@1.0.0", "2.0.0", summary=True, fields=True)
    only = cs.diff("fields@1.0.0", "2.0.0", path="/expectations")
    # Then each field is counted over every changed case, and the filter takes what is under it
    assert summary.fields is not None
    assert [(f.path, f.cases) for f in summary.fields.paths] == [
        ("/expectations", 2),
        ("/expectations/ground_truth", 1),
    ]
    assert [c.id for c in only.changed or ()] == ["c1", "c3", "c5"]
    assert only.path_matches == 3 and only.path == "/expectations"


def test_a_rows_export_hands_back_its_one_file_and_a_tree_its_bundle(remote: Client) -> None:
    # Given a version without files, exported as jsonl and as case directories with a bundle
    remote.register("handed", cases=CASES, version="1.0.0")
    rows = remote.export("handed@1.0.0", format="jsonl")
    tree = remote.export("handed@1.0.0", format="case-dirs", bundle=True)
    # Then the jsonl export is one file, linked alone and streamed from the server
    assert rows.file_url is not None and rows.bundle_url is None
    got = httpx.get(rows.file_url)
    assert got.status_code == 200
    assert got.headers["Content-Disposition"] == 'attachment; filename="handed-1.0.0.jsonl"'
    assert [orjson.loads(line)["id"] for line in got.content.splitlines()] == [
        c["id"] for c in CASES
    ]
    # And the tree is a bundle (no single file)
    assert tree.file_url is None and tree.bundle_url is not None
    bundle = httpx.get(tree.bundle_url)
    assert bundle.content[:2] == b"\x1f\x8b"  # gzip
    assert bundle.headers["Content-Disposition"] == (
        'attachment; filename="handed-1.0.0.case-dirs.tar.gz"'
    )
