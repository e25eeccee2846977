"""The README and api.md stay true: generated tables are current, and the README's adapter example
works as stated."""

from __future__ import annotations

import re
import sys
import types

import pytest

from conformance import readme
from conformance.cli import main
from conformance.runner.run import run, select_records
from conformance.runner.options import RunOptions


@pytest.mark.parametrize("path", readme.DOCUMENTS, ids=lambda p: p.name)
def test_generated_blocks_are_current(path):
    assert readme.stale_blocks(path.read_text()) == [], "run `rlspec readme --write`"


def test_readme_check_fails_on_a_stale_api_md_and_write_fixes_it(tmp_path, monkeypatch):
    stale = tmp_path / "api.md"
    fresh = readme.API.read_text()
    stale.write_text(fresh.replace("| `gae` | `gamma`, `lam` |", "| `gae` | `gamma` |"))
    monkeypatch.setattr(readme, "DOCUMENTS", (stale,))
    assert main(["readme", "--check"]) == 1
    assert main(["readme", "--write"]) == 0
    assert stale.read_text() == fresh
    assert main(["readme", "--check"]) == 0


def test_the_adapter_example_behaves_as_the_readme_says(monkeypatch):
    text = readme.README.read_text()
    code = re.search(r"<!-- example: adapter -->\n```python\n(.*?)```", text, re.S).group(1)
    module = types.ModuleType("readme_example_adapter")
    exec(compile(code, "README-example", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "readme_example_adapter", module)
    rep = run(["readme_example_adapter:Adapter"], select_records(["logprob.token", "adv.grpo"]), RunOptions(seed=0, n_seeds=4, timeout=120))
    rows = {r.function: r for r in rep.rows}
    assert rows["token_logprobs"].status == "pass", rows["token_logprobs"].message
    assert rows["grpo_advantages"].status == "preset" and rows["grpo_advantages"].matched_preset == "ms_swift, trl"
    assert "eps=0.0001" in rows["grpo_advantages"].message


@pytest.mark.parametrize("path", [readme.README, *sorted(readme.DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(path):
    """Every relative link of the README and docs/ points at a file or folder of the repository."""
    broken = []
    for url in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"^(https?:|mailto:|#)", url):
            continue
        target = (path.parent / url.split("#", 1)[0]).resolve()
        if not target.exists():
            broken.append(url)
    assert broken == []


def test_readme_is_a_five_minute_read():
    """The README stays short (issue [18]: at most ~300 lines) and shows the two commands and the adapter
    example before anything long."""
    text = readme.README.read_text()
    assert len(text.splitlines()) <= 300
    assert text.index("## Two commands") < text.index("<!-- example: adapter -->") < text.index("## The frameworks under test")


def test_the_documented_statuses_are_the_ones_the_table_shows():
    """Issue [11]: the table once showed a status ("variant") that the documented list lacked. Every
    status a table cell can show is in api.md's verdicts table, in docs/checking.md's list and in the
    README's per-framework summary, and nothing else is."""
    from conformance.runner.report import FINDING_DESCRIPTIONS, cell
    from conformance.runner.rows import RowResult, STATUSES

    def row(status: str, **kw) -> RowResult:
        return RowResult(id="f@a", spec_id="x.y", function="f", adapter="a", status=status, matched_preset="p", **kw)

    labels = {s: cell(row(s)) for s in STATUSES}  # a status the cell cannot render raises KeyError
    with pytest.raises(KeyError):
        cell(row("partial"))
    assert "(precision, partial)" in cell(row("pass", precision_findings=[{}], not_implemented_cases=["k=1"]))

    api = readme.API.read_text()
    verdicts = api[api.index("<!-- BEGIN GENERATED: verdicts -->"):api.index("<!-- END GENERATED: verdicts -->")]
    assert set(re.findall(r"^\| `(\w+)` \|", verdicts, re.MULTILINE)) == set(STATUSES) | set(FINDING_DESCRIPTIONS)

    checking = (readme.DOCS / "checking.md").read_text()
    listed = re.search(r"- \*\*(pass / .*?)\*\*", checking).group(1)
    assert [w.strip().split()[0] for w in listed.split("/")] == [labels[s].split()[0] for s in STATUSES]
    for kind in FINDING_DESCRIPTIONS:
        assert f"**{kind}**" in checking

    summary = readme.README.read_text().split("<!-- BEGIN GENERATED: frameworks-summary -->")[1].splitlines()[1]
    columns = [c.strip() for c in summary.strip("|").split("|")]
    assert [s.replace("_", " ") for s in STATUSES] == columns[3:3 + len(STATUSES)]
    assert "precision findings" in columns
