"""What a download is saved as (`caseshelf.domain.downloads`): `<dataset>-<version>.<ext>`, in a
Content-Disposition header that cannot be broken out of."""

from __future__ import annotations

import pytest

from caseshelf.domain.downloads import attachment, download_name

pytestmark = pytest.mark.unit


def test_a_download_is_named_for_its_version() -> None:
    assert download_name("gsm8k", "1.1.0", "json") == "gsm8k-1.1.0.json"
    assert attachment("gsm8k-1.1.0.json") == 'attachment; filename="gsm8k-1.1.0.json"'


def test_a_name_never_breaks_the_header_or_names_a_path() -> None:
    # A quote, a backslash, a line break or a path separator never reach the quoted name
    got = attachment('a"b\\c\r\nd/../e.json')
    quoted = got.split('filename="', 1)[1].split('"', 1)[0]
    assert quoted == "a_b_c__d_.._e.json"
    assert "\r" not in got and "\n" not in got
    # A name beyond ASCII keeps its exact form as filename* (RFC 6266), an ASCII one beside it
    assert attachment("données.json") == (
        "attachment; filename=\"donn_es.json\"; filename*=UTF-8''donn%C3%A9es.json"
    )
