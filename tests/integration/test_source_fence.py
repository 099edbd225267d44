"""The source fence's decisions, without any network (the resolver is injected)."""

from __future__ import annotations

import pytest

from caseshelf.adapters.fence import SourceFence, fenced_session, host_allowed, public_addresses
from caseshelf.domain.errors import BadRequest, Forbidden

pytestmark = pytest.mark.integration

HOSTS = ("huggingface.co", "*.hf.co", "data.example.org")


def fence(**kw: object) -> SourceFence:
    approve = lambda host, url: "93.184.216.34"  # noqa: E731 - every name public, for the rules
    defaults: dict[str, object] = {
        "own_prefix": "s3://reg/t/acme/",
        "buckets": ("shared-sources",),
        "hosts": HOSTS,
        "resolve": approve,
    }
    return SourceFence(**{**defaults, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        "https://huggingface.co/datasets/x/y/resolve/main/a.jsonl",
        "https://cas-bridge.xethub.hf.co/x",
        "https://DATA.example.org./rows.csv",
        "s3://reg/t/acme/sources/rows.jsonl",
        "s3://shared-sources/any/where.jsonl",
    ],
)
def test_allowed_sources(url: str) -> None:
    assert fence().check(url) == url


@pytest.mark.parametrize(
    ("url", "error", "words"),
    [
        ("/etc/passwd", Forbidden, "local paths"),
        ("file:///etc/passwd", Forbidden, "local paths"),
        ("C:/Windows/win.ini", Forbidden, "local paths"),
        ("http://huggingface.co/x.jsonl", Forbidden, "only https://"),
        ("ftp://huggingface.co/x.jsonl", Forbidden, "only https://"),
        ("https://evil.example/x.jsonl", Forbidden, "CASESHELF_SOURCE_HOSTS"),
        ("https://hf.co.evil.example/x.jsonl", Forbidden, "CASESHELF_SOURCE_HOSTS"),
        ("https://user:pw@huggingface.co/x.jsonl", Forbidden, "credentials"),
        ("s3://reg/t/globex/packs/p.pack", Forbidden, "CASESHELF_SOURCE_BUCKETS"),
        ("s3://reg/t/acme/../globex/packs/p.pack", BadRequest, "safe path"),
        ("s3://reg/t/acme//x", BadRequest, "safe path"),
        ("s3://other-bucket/x.jsonl", Forbidden, "CASESHELF_SOURCE_BUCKETS"),
    ],
)
def test_refused_sources(url: str, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        fence().check(url)


@pytest.mark.parametrize("url", ["https://huggingface.co:abc/x", "https://[::1/x", "s3://"])
def test_malformed_urls_are_400(url: str) -> None:
    with pytest.raises(BadRequest):
        fence().check(url)


def test_without_a_tenant_area_only_listed_buckets_are_read() -> None:
    local = fence(own_prefix=None)
    with pytest.raises(Forbidden, match="no tenant area"):
        local.check("s3://reg/t/acme/x.jsonl")
    assert local.check("s3://shared-sources/x.jsonl")


def test_host_patterns() -> None:
    assert host_allowed("a.b.hf.co", ["*.hf.co"])
    assert not host_allowed("hf.co", ["*.hf.co"])
    assert not host_allowed("xhf.co", ["*.hf.co"])
    assert host_allowed("HuggingFace.co.", ["huggingface.co"])


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "10.1.2.3", "169.254.169.254", "::1", "[::ffff:127.0.0.1]"]
)
def test_private_loopback_and_link_local_addresses_are_refused(host: str) -> None:
    with pytest.raises(Forbidden, match="not a public address"):
        public_addresses(host.strip("[]"), "https://example/x")


@pytest.mark.parametrize(
    ("host", "inner"),
    [
        ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64 (well-known prefix)
        ("64:ff9b::a00:1", "10.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
        ("64:ff9b:1::7f00:1", "127.0.0.1"),  # NAT64 (local-use prefix)
        ("2002:7f00:1::", "127.0.0.1"),  # 6to4
        ("2002:c0a8:101::1", "192.168.1.1"),
        ("::127.0.0.1", "127.0.0.1"),  # IPv4-compatible
        ("::10.1.2.3", "10.1.2.3"),
        ("::ffff:169.254.169.254", "169.254.169.254"),  # IPv4-mapped
    ],
)
def test_ipv6_forms_that_carry_a_private_ipv4_address_are_refused(host: str, inner: str) -> None:
    with pytest.raises(Forbidden, match=f"not a public address \\(.*{inner}\\)"):
        public_addresses(host, "https://example/x")


@pytest.mark.parametrize(
    "host", ["93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1", "2606:4700::1111"]
)
def test_public_addresses_answer_the_address_to_connect_to(host: str) -> None:
    assert public_addresses(host, "https://example/x") == host


def test_the_fence_answers_the_address_it_checked() -> None:
    seen: list[str] = []

    def resolve(host: str, url: str) -> str:
        seen.append(host)
        return "93.184.216.34"

    assert fence(resolve=resolve).check_host("https://huggingface.co/x") == "93.184.216.34"
    assert seen == ["huggingface.co"]


def test_the_real_resolver_refuses_an_allowed_name_that_resolves_to_loopback() -> None:
    with pytest.raises(Forbidden, match="not a public address"):
        SourceFence(hosts=("localhost",)).check("https://localhost:8000/rows.jsonl")


def test_every_request_of_the_fenced_session_passes_the_fence() -> None:
    # A redirect hop is a request of the session too: the adapter refuses it before connecting
    session = fenced_session(fence())
    with pytest.raises(Forbidden, match="CASESHELF_SOURCE_HOSTS"):
        session.get("https://metadata.evil.example/latest", timeout=1)
    with pytest.raises(Forbidden, match="only https://"):
        session.get("http://169.254.169.254/latest/meta-data/", timeout=1)


def test_remote_reads_have_connect_and_read_timeouts_and_stalls_are_502(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gzip
    import io

    import requests
    import smart_open

    from caseshelf.adapters.fence import Timeouts, fenced_opener
    from caseshelf.domain.errors import Upstream

    seen: dict[str, object] = {}

    class Stalling(io.RawIOBase):
        """A response body that gives some bytes, then times out."""

        def __init__(self) -> None:
            self.chunks = [gzip.compress(b'{"q": 1}\n' * 1000)[:200]]

        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            if self.chunks:
                return self.chunks.pop()
            raise requests.exceptions.ReadTimeout("read timed out")

    def fake_open(url: str, mode: str, *, transport_params: dict, compression: str) -> object:
        seen.update(transport_params, compression=compression)
        return Stalling()

    monkeypatch.setattr(smart_open, "open", fake_open)
    opener = fenced_opener(fence(), Timeouts(connect=3, read=7), lambda: None)
    stream = opener("https://huggingface.co/rows.jsonl.gz")
    # The session is the fenced one, with both timeouts; decompression sits above the guard
    assert seen["timeout"] == (3, 7) and seen["compression"] == "disable"
    assert seen["session"].max_redirects == 5  # type: ignore[attr-defined]
    with pytest.raises(Upstream, match="cannot be read"):
        stream.read()


def test_a_refused_url_is_refused_before_anything_is_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import smart_open

    from caseshelf.adapters.sources import SourceReader
    from caseshelf.domain.recipe import JsonlSource

    monkeypatch.setattr(smart_open, "open", lambda *a, **k: pytest.fail("opened"))
    f = fence()
    reader = SourceReader(lambda url: pytest.fail("opened"), f)
    with pytest.raises(Forbidden):
        list(reader.rows(JsonlSource(kind="jsonl", url="/etc/passwd")))
    assert reader.offload(JsonlSource(kind="jsonl", url="/etc/passwd")) is None
