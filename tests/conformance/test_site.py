"""`rlspec site` and `rlspec check --html`: the matrix has a cell per report row, every link stays
inside the site, nothing points at the network, and each cell says what the report says.

The browser test (headless Chromium) is tests/conformance/test_site_browser.py (`-m browser`)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import jsonschema
import pytest

from conformance.cli import main
from conformance.mutants import all_mutants
from conformance.records import RECORDS
from conformance.runner.report import SCHEMA_PATH
from conformance.site import report_page
from conformance.site.build import PLOT_CAPTIONS, build_site
from conformance.site.markdown_html import to_html
from tests.conformance import site_fixture
from tests.conformance.site_fixture import Page


def _matrix_rows(data: dict) -> list[dict]:
    return [c for c in data["checks"] if c["id"] == f"{c['function']}@{c['adapter']}"]


def _links(root: Path) -> tuple[list[tuple[Path, str]], list[str]]:
    """Every (page, href/src) of the site, and the ones that do not resolve to a file (and anchor)
    inside it."""
    pages = {p: Page(p.read_text()) for p in root.rglob("*.html")}
    urls, broken = [], []
    for path, page in pages.items():
        for el in page.elements:
            for attr in ("href", "src"):
                if attr not in el.attrs:
                    continue
                url = el.attrs[attr]
                urls.append((path, url))
                if url.startswith("data:"):
                    continue
                target_path, _, fragment = url.partition("#")
                target = (path.parent / target_path).resolve() if target_path else path.resolve()
                if re.match(r"^[A-Za-z][\w+.-]*:", url) or root.resolve() not in target.parents or not target.is_file():
                    broken.append(f"{path.relative_to(root)}: {url}")
                elif fragment and target.suffix == ".html" and fragment not in pages[target].ids():
                    broken.append(f"{path.relative_to(root)}: {url} (no such anchor)")
    return urls, broken


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> site_fixture.Built:
    return site_fixture.build_committed(tmp_path_factory.mktemp("committed"))


@pytest.fixture(scope="module")
def committed_site(committed) -> Path:
    return committed.out


@pytest.fixture(scope="module")
def fixture_site(tmp_path_factory) -> Path:
    """The site of the hand-written report: trl has a report, verl has none."""
    reports = tmp_path_factory.mktemp("reports")
    (reports / "trl.json").write_text(json.dumps(site_fixture.report("trl")))
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(out, reports_dir=reports, names=("trl", "verl"))
    return out


def test_the_fixture_is_a_valid_report():
    jsonschema.validate(site_fixture.report("trl"), json.loads(SCHEMA_PATH.read_text()))


def test_committed_site_has_a_cell_per_report_row(committed, committed_site):
    """One matrix cell per core row of each committed report, one framework-page cell per framework
    row, one page per row; a framework without a report is a column of "not installed" cells."""
    index = Page((committed_site / "index.html").read_text())
    n_rows = len(index.find("tr", "quantity"))
    assert n_rows >= len(RECORDS)
    cell_pages = 0
    for name in committed.names:
        cells = index.find("td", "cell", data_adapter=name)
        assert len(cells) == n_rows, name
        path = committed.reports / f"{name}.json"
        if not path.exists():
            assert {c.attrs["data-status"] for c in cells} == {"not_installed"}
            continue
        data = json.loads(path.read_text())
        core = _matrix_rows(data)
        checked = [c for c in cells if c.attrs["data-status"] != "absent"]
        assert len(checked) == len(core), name
        assert sorted(c.attrs["data-row"] for c in checked) == sorted(r["function"] for r in core)
        own = Page((committed_site / "frameworks" / f"{name}.html").read_text()).find("td", "cell", data_adapter=name)
        assert len(own) == len(data["checks"]) - len(core), name
        assert len(list((committed_site / "cells" / name).glob("*.html"))) == len(data["checks"])
        cell_pages += len(data["checks"])
    assert len(list((committed_site / "cells").rglob("*.html"))) == cell_pages


def test_committed_site_links_stay_inside_and_never_reach_the_network(committed_site):
    urls, broken = _links(committed_site)
    assert broken == []
    assert len(urls) > 1000
    network = [u for _, u in urls if re.match(r"^(https?:)?//", u)]
    assert network == []
    for page in committed_site.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.IGNORECASE), page
        assert "@import" not in text and "url(http" not in text


def test_committed_site_has_spec_pages_mutants_bench_and_plots(committed, committed_site):
    from conformance import spec

    for q in RECORDS:
        page = committed_site / "spec" / f"{spec.section_path(q.spec_id).stem}.html"
        assert f"<code>{q.function}</code>" in page.read_text(), q.function
    mutants = Page((committed_site / "mutants.html").read_text())
    assert {e.attrs["id"] for e in mutants.find("tr") if "id" in e.attrs} == {f"mutant-{m.name}" for m in all_mutants()}
    bench = (committed_site / "performance.html").read_text()
    for path in committed.reports.glob("bench_*.json"):
        assert path.name in bench
    plots = Page((committed_site / "plots.html").read_text())
    pngs = sorted(p.name for p in committed.reports.glob("*.png"))
    assert sorted(Path(img.attrs["src"]).name for img in plots.find("img")) == pngs
    assert set(PLOT_CAPTIONS) <= set(pngs)  # every caption is for a committed plot
    for name in pngs:
        assert (committed_site / "plots" / name).read_bytes() == (committed.reports / name).read_bytes()


def test_cells_say_what_the_report_says(fixture_site):
    """The verdict of each kind of row, written out by hand from the fixture's rows."""
    index = Page((fixture_site / "index.html").read_text())
    cells = {c.attrs["data-row"]: c for c in index.find("td", "cell", data_adapter="trl")}
    said = {row: " ".join(c.text.split()) for row, c in cells.items() if c.attrs["data-status"] != "absent"}
    assert said == {
        "token_logprobs": "pass precision",
        "grpo_advantages": "preset trl",
        "ppo_token_loss": "variant = preset openrlhf",  # trl's own rows matching OpenRLHF's keywords
        "aggregate": "FAIL",
        "gae": "error",
        "rollout_is_weights": "pass partial",
        "whiten": "not implemented",
        "agg.partition[token_mean]": "pass",
    }
    assert cells["aggregate"].attrs["data-status"] == "fail"
    assert cells["ppo_token_loss"].attrs["data-status"] == "variant"
    absent = [c for c in index.find("td", "cell", data_adapter="trl") if c.attrs["data-status"] == "absent"]
    assert len(absent) == len(RECORDS) - 7
    verl = index.find("td", "cell", data_adapter="verl")
    assert len(verl) == len(RECORDS) + 1 and {c.attrs["data-status"] for c in verl} == {"not_installed"}
    assert sorted(c.attrs["data-row"] for c in verl) == sorted([q.function for q in RECORDS] + ["agg.partition[token_mean]"])
    assert "rlspec frameworks install verl" in (fixture_site / "frameworks" / "verl.html").read_text()
    headers = [" ".join(h.text.split()) for h in index.find("th", "col")]
    assert headers == ["trl 9.9.9", "verl"]


def test_a_fail_cell_leads_to_its_case_fingerprint_and_reproduce_line(fixture_site):
    index = Page((fixture_site / "index.html").read_text())
    cell = index.find("td", "cell", data_adapter="trl", data_row="aggregate")[0]
    link = next(e for e in index.elements if e.tag == "a" and e.attrs["href"].startswith("cells/trl/aggregate-"))
    assert link.text == cell.text
    page_path = fixture_site / link.attrs["href"]
    page = Page(page_path.read_text())
    repro = page.find("pre", "repro", data_repro="row")
    assert [r.text for r in repro] == [site_fixture.FAIL_REPRO.format(a="trl")]
    assert "(actual nan, expected 0)" in page.find("pre", "message")[0].text
    fingerprint = page.find("ul", "fingerprint")[0]
    assert "consistent with masked mean without a zero-count guard" in fingerprint.text
    mutant_link = [a.attrs["href"] for a in page.find("a") if "#mutant-" in a.attrs["href"]]
    assert mutant_link == ["../../mutants.html#mutant-agg_empty_rows_nan"]
    # the mutant page lists the cell back
    mutants = (fixture_site / "mutants.html").read_text()
    assert f'href="{link.attrs["href"]}"' in mutants


def test_other_cells_carry_their_preset_precision_and_partial_details(fixture_site):
    def page(row: str) -> str:
        return next((fixture_site / "cells" / "trl").glob(f"{row}-*.html")).read_text()

    assert "matches preset openrlhf: <code>log_ratio_clamp=20.0</code>" in page("ppo_token_loss")
    precision = Page(page("token_logprobs"))
    assert [p.text for p in precision.find("pre", "repro", data_repro="precision")] == [
        "rlspec repro token_logprobs --seed 11 --dtype bfloat16 --adapter trl"]
    assert "mode=&#x27;none&#x27;: every mode bounds the ratio" in page("rollout_is_weights")
    # a framework row has no reproduce line of its own: the check that runs it
    own = Page(page("trl.own_loss-clip-0.3"))
    assert [p.text for p in own.find("pre", "repro", data_repro="row")] == [
        "rlspec check --adapter trl --only loss.ppo --seed 0 --n-seeds 8"]
    assert len(Page((fixture_site / "frameworks" / "trl.html").read_text()).find("td", "cell", data_adapter="trl")) == 1


def test_fixture_site_links_resolve(fixture_site):
    assert _links(fixture_site)[1] == []


def test_rlspec_site_command(tmp_path, capsys):
    extra = tmp_path / "mine.json"
    extra.write_text(json.dumps(site_fixture.report("myframework", "1.2.3")))
    out = tmp_path / "site"
    assert main(["site", str(out), "--report", str(extra)]) == 0
    assert "open" in capsys.readouterr().out
    index = Page((out / "index.html").read_text())
    headers = [" ".join(h.text.split()) for h in index.find("th", "col")]
    installed = [h for h in headers if " " in h]  # "name version"; a column without a report has no version
    assert "myframework 1.2.3" in installed and headers[:len(installed)] == installed  # results first
    # a column that is no preset's namesake names the preset it matches
    assert " ".join(index.find("td", "cell", data_adapter="myframework", data_row="ppo_token_loss")[0].text.split()) \
        == "preset openrlhf"
    (out / "cells" / "stale.html").write_text("left from an older build")
    assert main(["site", str(out)]) == 0  # a rebuild replaces the site
    assert not (out / "cells" / "stale.html").exists() and not (out / "cells" / "myframework").exists()


def test_rlspec_site_refuses_a_folder_that_is_not_a_site(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["site", str(tmp_path)]) == 2
    assert "is not empty and holds no rlspec site" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert main(["site", str(tmp_path / "s"), "--reports", str(tmp_path / "missing")]) == 2


def test_check_html_writes_the_matrix_page_of_the_run(tmp_path):
    html_path, json_path = tmp_path / "run.html", tmp_path / "run.json"
    code = main(["check", "--adapter", "oracle", "--adapter", "conformance.mutants.adapters:agg_empty_rows_nan",
                 "--only", "agg", "--n-seeds", "2", "--no-progress", "--html", str(html_path), "--json", str(json_path)])
    assert code == 1  # the mutant fails
    data = json.loads(json_path.read_text())
    page = Page(html_path.read_text())
    cells = page.find("td", "cell")
    assert len(cells) == len(_matrix_rows(data)) == len(data["checks"])
    assert len(page.find("section", "detail")) == len(data["checks"])
    ids = page.ids()
    for a in page.find("a"):
        assert a.attrs["href"].startswith("#") and a.attrs["href"][1:] in ids, a.attrs["href"]
    fail = [c for c in cells if c.attrs["data-status"] == "fail"]
    assert [c.attrs["data-row"] for c in fail] == ["aggregate"]
    row = next(r for r in data["checks"] if r["status"] == "fail")
    section = next(s for s in page.find("section", "detail") if row["reproduce"] in s.text)
    assert "agg_empty_rows_nan" in section.text
    assert "<link" not in html_path.read_text().replace('<link rel="icon" href="data:,">', "")  # one file: CSS inlined
    assert "<script src" not in html_path.read_text()


def test_markdown_converter():
    text = """# Title *one*

A paragraph with `code | pipe`, **bold**, a [section](agg.md#edge-cases), an
[outside link](https://example.org) and <b>raw html</b>.

| a | b |
|---|---|
| `x \\| y` | 2 |

- item one
  continued
  - nested
- item two

1. first
2. second

```
x < y && z
```
<!-- BEGIN GENERATED: x -->
> quoted
"""
    links = {"agg.md#edge-cases": "agg.html#edge-cases"}
    html = to_html(text, links.get)
    assert '<h1 id="title-one">Title <em>one</em></h1>' in html
    assert ("<p>A paragraph with <code>code | pipe</code>, <strong>bold</strong>, a "
            '<a href="agg.html#edge-cases">section</a>, an outside link (https://example.org) and '
            "&lt;b&gt;raw html&lt;/b&gt;.</p>") in html
    assert "<thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td><code>x | y</code></td><td>2</td></tr>" in html
    assert "<ul><li>item one continued\n<ul><li>nested</li></ul></li><li>item two</li></ul>" in html
    assert "<ol><li>first</li><li>second</li></ol>" in html
    assert "<pre><code>x &lt; y &amp;&amp; z</code></pre>" in html
    assert "<blockquote><p>quoted</p></blockquote>" in html
    assert "GENERATED" not in html and "https://example.org\"" not in html


def test_report_text_is_escaped_never_markup(tmp_path):
    """Messages come from adapters (third-party code): they are shown as text on every page."""
    data = site_fixture.report("trl")
    data["checks"][3]["message"] = 'value off <script>alert("x")</script> & <img src=x onerror=alert(1)>'
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "trl.json").write_text(json.dumps(data))
    build_site(tmp_path / "site", reports_dir=reports, names=("trl",))
    pages = [p.read_text() for p in (tmp_path / "site").rglob("*.html")]
    single = report_page(data)
    for text in [*pages, single]:
        assert "<script>alert" not in text and "<img src=x" not in text
    assert any("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x" in t for t in pages)
    assert "&lt;script&gt;alert" in single


def test_committed_site_has_the_findings_and_the_changes_between_reports(committed, committed_site):
    from conformance.frameworks import findings

    page = (committed_site / "findings.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for name in findings.homes_with_findings():
        home = findings.load(name)
        for f in home.findings:
            assert f.title.replace("`", "") in text, f"{name}:{f.id}"
            if home.repro(f).exists():
                copied = committed_site / "repro" / name / f"{f.id}.py"
                assert copied.read_text() == home.repro(f).read_text()
                assert f'href="repro/{name}/{f.id}.py"' in page
    changes = (committed_site / "changes.html").read_text()
    for path in sorted((committed.reports / "history").glob("*.json")):
        assert html.escape(path.name) in changes and "row(s) unchanged" in changes
