"""`caseshelf diff A B --format markdown`: a pull-request comment, on the embedded store and with
`--api URL` against the local server, rendered by a CommonMark renderer with GitHub's table and
strikethrough extensions (markdown-it-py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tests.helpers import dev_server, run_cli
from tests.unit.test_diff_markdown import rendered

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]
GFM = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _case(i: int, answer: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"c{i}",
        "inputs": {"user": f"A train leaves station {i} at noon. How far has it gone by one?"},
        "expectations": {"ground_truth": answer or str(i)},
        **extra,
    }


@pytest.fixture
def work(tmp_path: Path) -> Path:
    v1 = [_case(i) for i in range(10)]
    v2 = [_case(i, answer=f"{i}0" if i < 3 else None) for i in range(1, 10)] + [_case(11)]
    v2[3] = {**v2[3], "inputs": {"user": v2[3]["inputs"]["user"].replace("noon", "one")}}
    for version, cases in (("1.0.0", v1), ("1.1.0", v2)):
        doc = {"id": "trains", "version": version, "cases": cases}
        (tmp_path / f"{version}.json").write_text(json.dumps(doc))
    return tmp_path


def _check(text: str, ui: str | None) -> None:
    page = rendered(text)
    counts, fields, changed, added, removed = page.tables
    assert counts[1:] == [["changed", "3"], ["added", "1"], ["removed", "1"], ["unchanged", "6"]]
    assert fields[1:] == [["/expectations/ground_truth", "2"], ["/inputs/user", "1"]]
    assert [row[0] for row in changed[1:]] == ["c1", "c2", "c4"]
    assert changed[3][2:] == [
        "A train leaves station 4 at noon. How far has it gone by one?",
        "A train leaves station 4 at one. How far has it gone by one?",
    ]
    html = GFM.render(text)
    assert "<s>noon</s>" in html and "<strong>one</strong>" in html
    assert added[1][0] == "c11" and removed[1][0] == "c0"
    if ui is None:
        assert page.links == []
    else:
        assert page.links[0].startswith(f"{ui}/datasets/trains/diff?base=sha256%3A")
        assert all(link.startswith(f"{ui}/datasets/trains/") for link in page.links)


def test_diff_as_markdown_on_the_embedded_store_and_over_http(work: Path) -> None:
    home = work / "home"
    for version in ("1.0.0", "1.1.0"):
        assert run_cli(home, "register", f"{version}.json", cwd=work).returncode == 0

    got = run_cli(home, "diff", "trains@1.0.0", "1.1.0", "--format", "markdown", cwd=work)
    assert got.returncode == 0, got.stderr
    _check(got.stdout, None)

    # The UI's base URL from the environment, or --ui-url
    env = {"CASESHELF_UI_URL": "https://caseshelf.example/"}
    args = ("diff", "trains@1.0.0", "trains@1.1.0", "--format", "markdown")
    got = run_cli(home, *args, cwd=work, env=env)
    _check(got.stdout, "https://caseshelf.example")
    got = run_cli(home, *args, "--ui-url", "http://127.0.0.1:8000", cwd=work, env=env)
    _check(got.stdout, "http://127.0.0.1:8000")

    # Over HTTP the comment is the same
    with dev_server(home, tenant="local", principal="local") as srv:
        over = run_cli(home, "--api", srv.url, *args, cwd=work)
        assert over.returncode == 0, over.stderr
        assert over.stdout == run_cli(home, *args, cwd=work).stdout

    # The other formats: json is the wire answer, jsonl a line an entry
    got = run_cli(home, "diff", "trains@1.0.0", "1.1.0", "--format", "json", cwd=work)
    assert json.loads(got.stdout)["summary"]["changed"] == 3
    got = run_cli(home, "diff", "trains@1.0.0", "1.1.0", "--format", "jsonl", cwd=work)
    assert [json.loads(line)["kind"] for line in got.stdout.splitlines()][:2] == [
        "diff",
        "changed",
    ]
    # --summary-only reads no case: the counts alone
    got = run_cli(home, *args, "--summary-only", cwd=work)
    assert len(rendered(got.stdout).tables) == 1
    assert re.search(r"\| changed \| 3 \|", got.stdout)
