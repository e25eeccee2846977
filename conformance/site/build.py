"""`rlspec site DIR`: the static conformance site, built from what the repository has committed.

Inputs: every framework's report (`conformance/reports/<framework>.json`, a framework without one is
a "not installed" column), optional extra report JSONs (e.g. `rlspec check --adapter oracle
--adapter refimpl --json run.json`), the mutant catalogue (discovered from `conformance.mutants`, no
run needed: `rlspec mutants` proves in CI that each one is caught and diagnosed), the bench tables
(`conformance/reports/bench_*.json`), the plots (`conformance/reports/*.png`) and the spec sections.

Pages (all relative links; the stylesheet and the script are local files; nothing is fetched at
view time, so it works from `file://` and from any static host):

    index.html                     the matrix: a row per spec quantity, a column per framework
    cells/<adapter>/<row>.html     one per cell: case, message, fingerprint, reproduce command
    frameworks/<name>.html         a framework's report, its own rows and its README
    spec/index.html, spec/<id>.html  the spec's index and one page per section
    mutants.html                   the mutation catalogue, and the cells consistent with each mutant
    performance.html               the bench tables
    plots.html, plots/*.png        the learning curves
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import spec
from conformance.frameworks import findings
from conformance.runner.report_diff import diff_markdown, diff_reports, load_report
from conformance.runner.discovery import FRAMEWORKS_DIR, framework_names
from conformance.site.markdown_html import Linker, to_html
from conformance.site.matrix import (
    ASSETS,
    FILTER_HTML,
    Column,
    Links,
    columns_from_report,
    detail_html,
    document,
    esc,
    framework_columns,
    framework_rows_table,
    is_matrix_row,
    legend_html,
    matrix_table,
    message_html,
    name_key,
    row_key,
    summary_table,
)

REPORTS_DIR = Path(__file__).resolve().parent.parent / "reports"
MARKER = ".rlspec-site"  # marks a folder as a built site: a rebuild may empty it
# what the committed plots show (a plot not listed here is captioned by its file name)
PLOT_CAPTIONS = {
    "tiny_policy.png": "rlspec tiny-policy: a table-of-logits policy writing 3 tokens with a +10 reward offset; "
                       "mean matches per sequence of REINFORCE (with and without the offset), REINFORCE with a "
                       "batch-mean baseline, 4 passes per batch and PPO, over 300 Adam updates, 10 seeds, two "
                       "learning rates (docs/end-to-end.md, part I).",
    "train_curves.png": "rlspec train --compare: the refimpl trainer on a random-weight Llama learning to reverse "
                        "three digits; reward, exact answers, KL to the reference, entropy, clip fraction, completion "
                        "length, gradient norm and value loss per step, for GRPO, RLOO and PPO with different KL "
                        "coefficients (docs/end-to-end.md, part II).",
    "async_study.png": "rlspec async-study: GRPO on the digit task, synchronous vs asynchronous (Ray rollout actors, "
                       "max staleness 1, 2, 4, 8) with no correction, token TIS and decoupled PPO; reward curves (mean "
                       "over seeds), steps to the target reward, final reward and throughput (docs/async.md).",
    "async_study_capped.png": "rlspec async-study --corrections decoupled --behav-cap 2 --no-sync: decoupled PPO with its "
                              "behaviour weight capped at 2 (with the recomputed proximal policy, the same objective as "
                              "token TIS with cap 2), max staleness 1, 2, 4, 8 (docs/async.md).",
}


@dataclass
class Site:
    """Where each page of the site lives, and the relative links between them."""

    columns: list[Column]
    reports_dir: Path = REPORTS_DIR
    pages: dict[str, str] = field(default_factory=dict)  # site path -> HTML
    files: dict[str, Path] = field(default_factory=dict)  # site path -> file copied as is
    markdown_pages: dict[Path, str] = field(init=False)  # source .md -> site path

    def __post_init__(self) -> None:
        self.markdown_pages = {p.resolve(): ("spec/index.html" if p.name == "README.md" else f"spec/{p.stem}.html")
                               for p in sorted(spec.SPEC_DIR.glob("*.md"))}

    # -- where things are ---------------------------------------------------------------------
    @staticmethod
    def cell_path(column: Column, row: dict[str, Any]) -> str:
        return f"cells/{name_key(column.name)}/{row_key(row)}.html"

    @staticmethod
    def framework_path(name: str) -> str:
        return f"frameworks/{name_key(name)}.html"

    @staticmethod
    def spec_path(spec_id: str) -> str | None:
        try:
            return f"spec/{spec.section_path(spec_id).stem}.html"
        except KeyError:
            return None

    def links(self, page: str) -> Links:
        """The matrix's links as seen from `page`."""
        rel = self.rel
        names = {c.name for c in self.columns}
        return Links(
            cell=lambda column, row: rel(page, self.cell_path(column, row)),
            spec=lambda spec_id: rel(page, self.spec_path(spec_id)) if self.spec_path(spec_id) else None,
            framework=lambda name: rel(page, self.framework_path(name)) if name in names else None,
            mutant=lambda name: rel(page, "mutants.html") + f"#mutant-{name}",
        )

    @staticmethod
    def rel(page: str, target: str) -> str:
        return posixpath.relpath(target, posixpath.dirname(page) or ".")

    def markdown_linker(self, source: Path, page: str) -> Linker:
        """Links of a Markdown file, as seen from `page`: a link to another rendered Markdown file
        becomes a link to its page; links out of the site (other files, http) become text."""

        def link(url: str) -> str | None:
            if url.startswith("#"):
                return url
            if re.match(r"^[A-Za-z][\w+.-]*:", url):
                return None
            path, _, fragment = url.partition("#")
            target = self.markdown_pages.get((source.parent / path).resolve())
            if target is None:
                return None
            return self.rel(page, target) + (f"#{fragment}" if fragment else "")

        return link

    # -- pages ----------------------------------------------------------------------------------
    def nav(self, page: str) -> str:
        entries = [("index.html", "Matrix")] + [(self.framework_path(c.name), c.name) for c in self.columns] + [
            ("spec/index.html", "Spec"), ("mutants.html", "Mutants"), ("findings.html", "Findings"),
            ("changes.html", "Changes"), ("performance.html", "Performance"), ("plots.html", "Plots")]
        current = ' class="current"'
        items = "".join(f'<a href="{esc(self.rel(page, target))}"{current if target == page else ""}>{esc(text)}</a>'
                        for target, text in entries)
        return f'<nav><span class="brand">rlspec conformance</span>{items}</nav>'

    def add(self, page: str, title: str, body: str) -> None:
        self.pages[page] = document(title, body, nav=self.nav(page), stylesheet=self.rel(page, "assets/site.css"),
                                    script=self.rel(page, "assets/site.js"))

    def matrix_page(self) -> None:
        page = "index.html"
        links = self.links(page)
        installed = [c.name for c in self.columns if c.status == "ok"]
        body = [
            "<h1>The conformance matrix</h1>",
            "<p>Every spec quantity (a row) against every framework under test (a column), each checked "
            "through the framework's own installed code by <code>rlspec check</code>; the committed reports "
            f"of <code>rlspec reports</code> ({esc(', '.join(installed) or 'none')}). A cell links to what the "
            "check found: the case, expected against actual, the known bug or preset it matches, and the "
            "command that reproduces it. A framework's own rows (its settings, losses and trainer paths) are "
            "on its page.</p>",
            summary_table(self.columns, links), legend_html(), FILTER_HTML, matrix_table(self.columns, links)]
        self.add(page, "rlspec conformance matrix", "\n".join(body))

    def cell_pages(self) -> None:
        for column in self.columns:
            for row in column.rows:
                page = self.cell_path(column, row)
                back = (f'<p><a href="{esc(self.rel(page, "index.html"))}">matrix</a>' if is_matrix_row(row)
                        else f'<p><a href="{esc(self.rel(page, self.framework_path(column.name)))}">{esc(column.name)} rows</a>')
                spec_page = self.spec_path(row["spec_id"])
                if spec_page:
                    back += f' · <a href="{esc(self.rel(page, spec_page))}">spec section</a>'
                self.add(page, f"{row['id']}: {row['status']}", back + "</p>\n" + detail_html(column, row, self.links(page)))

    def framework_pages(self) -> None:
        for column in self.columns:
            page = self.framework_path(column.name)
            links = self.links(page)
            body = [f"<h1>{esc(column.header)}</h1>"]
            if column.status == "ok":
                run = column.run
                env = ", ".join(f"{k} {v}" for k, v in (run.get("environment") or {}).items())
                body.append('<dl class="facts">'
                            f"<dt>report</dt><dd>{esc(run.get('created', '-'))}, suite {esc(run.get('suite_version', '-'))}, "
                            f"spec {esc(run.get('spec_version', '-'))}, seed {esc(run.get('seed', '-'))}, "
                            f"{esc(run.get('n_seeds', '-'))} property seeds per quantity</dd>"
                            f"<dt>environment</dt><dd>{esc(env or '-')}</dd>"
                            f"<dt>reproduce</dt><dd><code>{esc(run.get('reproduce', '-'))}</code></dd></dl>")
                body.append(summary_table([column], links))
                body.append(f"<h2>{esc(column.name)}'s own rows</h2><p>The framework's own settings, losses and "
                            "trainer paths, each checked as a composition of spec quantities.</p>")
                body += [legend_html(), FILTER_HTML, framework_rows_table(column, links)]
            else:
                body.append(f'<p class="s-{esc(column.status)}">{esc(column.status.replace("_", " "))}: '
                            f"{message_html(column.message)}</p>")
            readme = FRAMEWORKS_DIR / column.name / "README.md"
            if readme.exists():
                body.append(f'<h2>About the {esc(column.name)} adapter</h2><div class="markdown">'
                            + to_html(readme.read_text(), self.markdown_linker(readme, page)) + "</div>")
            self.add(page, f"{column.header}: rlspec conformance", "\n".join(body))

    def spec_pages(self) -> None:
        """Every Markdown file of the spec; a section's page starts with its row of the matrix."""
        for source, page in self.markdown_pages.items():
            title = next((line[2:] for line in source.read_text().splitlines() if line.startswith("# ")), source.stem)
            body = to_html(source.read_text(), self.markdown_linker(source, page))
            verdicts = matrix_table(self.columns, self.links(page), select=lambda spec_id, page=page: self.spec_path(spec_id) == page)
            if 'class="quantity"' in verdicts:
                body = f'<details class="verdicts" open><summary>The frameworks on this quantity</summary>{verdicts}</details>\n{body}'
            self.add(page, title, f'<div class="markdown">{body}</div>')

    def mutants_page(self) -> None:
        from conformance.mutants import all_mutants

        page = "mutants.html"
        links = self.links(page)
        seen: dict[str, list[str]] = {}
        for column in self.columns:
            for row in column.rows:
                for text in row.get("consistent_with") or []:
                    m = re.search(r"\[mutant ([\w.]+),", text)
                    if m:
                        seen.setdefault(m.group(1), []).append(
                            f'<a href="{esc(links.cell(column, row))}">{esc(row["id"])}</a>')
        rows = []
        for m in sorted(all_mutants(), key=lambda m: (m.catalogue, m.name)):
            replaces = ", ".join(f"<code>{esc(fn)}</code>" for fn in m.replace)
            fails = "; ".join(f"<code>{esc(fn)}</code>: {esc(', '.join(kinds))}" for fn, kinds in m.signature.items())
            doc = f"<details><summary>details</summary><pre>{esc(m.doc)}</pre></details>" if m.doc else ""
            rows.append(f'<tr id="mutant-{esc(m.name)}"><td><code>{esc(m.name)}</code></td><td class="num">{m.catalogue}</td>'
                        f"<td>{esc(m.bug_class)}{doc}</td><td>{replaces}</td><td>{fails}</td>"
                        f"<td>{esc('; '.join(m.cites))}</td><td>{'<br>'.join(seen.get(m.name, [])) or '-'}</td></tr>")
        body = ("<h1>The mutation catalogue</h1><p>Each mutant is the refimpl with one real-world RL-trainer bug "
                "injected (<code>conformance/mutants/</code>). <code>rlspec mutants</code> checks every one: each is "
                "caught (its rows are not a pass), diagnosed (the failing row names it among the bugs it is "
                "consistent with), and fails exactly the checks declared below; the refimpl passes every check. "
                "The last column lists the framework cells whose failure matches the mutant.</p>"
                '<div class="table-wrap"><table class="mutants"><thead><tr><th>mutant</th><th>class</th><th>bug</th>'
                "<th>replaces</th><th>fails</th><th>where it happened</th><th>framework cells consistent with it</th>"
                f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")
        self.add(page, "rlspec mutation catalogue", body)

    def findings_page(self) -> None:
        """Every framework's findings file (the text of docs/frameworks.md), each repro script copied into the site."""
        page = "findings.html"
        parts = ["<h1>Findings</h1><p>What the runs found in each framework, from its findings file "
                 "(<code>conformance/frameworks/&lt;name&gt;/findings.toml</code>): each with the framework's own "
                 "lines, the real configuration that reaches it, its report rows, and a reproduction that needs only "
                 "the framework (no rlspec), with its expected and actual output.</p>"]
        for name in findings.homes_with_findings():
            home = findings.load(name)
            for f in home.findings:
                script = home.repro(f)
                if script.exists():
                    self.files[f"repro/{name}/{script.name}"] = script
            parts.append(f"<h2>{esc(home.framework)} {esc(home.version)}</h2>")
            parts.append(to_html(findings.markdown(home), lambda url, name=name: (
                url.replace("repro/", f"repro/{name}/", 1) if url.startswith("repro/") else None)))
        self.add(page, "rlspec findings", "\n".join(parts))

    def changes_page(self) -> None:
        """Each report kept in conformance/reports/history/ against the framework's current report."""
        page = "changes.html"
        parts = ["<h1>Changes between reports</h1><p>Each report kept in <code>conformance/reports/history/</code> "
                 "(an earlier framework release, or the same release under an earlier rlspec) against the "
                 "framework's current report: rows fixed, regressed, with a changed preset or precision "
                 "(<code>rlspec reports --diff OLD NEW</code>).</p>"]
        history = sorted((self.reports_dir / "history").glob("*.json"))
        for path in history:
            current = self.reports_dir / f"{path.stem.split('-')[0]}.json"
            if not current.exists():
                continue
            parts.append(f"<h2>{esc(path.name)} → {esc(current.name)}</h2>")
            parts.append(to_html(diff_markdown(diff_reports(load_report(path), load_report(current))), lambda url: None))
        if not history:
            parts.append("<p>No earlier report is kept.</p>")
        self.add(page, "rlspec report changes", "\n".join(parts))

    def performance_page(self) -> None:
        from conformance.bench import bench_table_markdown

        page = "performance.html"
        parts = ["<h1>Performance</h1><p>The committed <code>rlspec bench</code> results: fused log-probs and GAE "
                 "against their peers, measured in the same run.</p>"]
        results = sorted(self.reports_dir.glob("bench_*.json"))
        for path in results:
            parts.append(f"<h2>{esc(path.stem.removeprefix('bench_').upper())} ({esc(path.name)})</h2>")
            parts.append(to_html(bench_table_markdown(path), lambda url: None))
        if not results:
            parts.append("<p>No bench results are committed (<code>rlspec bench --json "
                         "conformance/reports/bench_cpu.json</code>).</p>")
        self.add(page, "rlspec performance", "\n".join(parts))

    def plots_page(self) -> None:
        page = "plots.html"
        parts = ["<h1>Plots</h1>"]
        plots = sorted(self.reports_dir.glob("*.png"))
        for path in plots:
            target = f"plots/{path.name}"
            self.files[target] = path
            caption = PLOT_CAPTIONS.get(path.name, path.stem.replace("_", " "))
            parts.append(f'<figure><img src="{esc(self.rel(page, target))}" alt="{esc(path.stem.replace("_", " "))}">'
                         f"<figcaption>{esc(caption)}</figcaption></figure>")
        if not plots:
            parts.append("<p>No plots are committed.</p>")
        self.add(page, "rlspec plots", "\n".join(parts))

    def build(self) -> None:
        self.matrix_page()
        self.cell_pages()
        self.framework_pages()
        self.spec_pages()
        self.mutants_page()
        self.findings_page()
        self.changes_page()
        self.performance_page()
        self.plots_page()
        for asset in sorted(ASSETS.iterdir()):
            self.files[f"assets/{asset.name}"] = asset

    def write(self, out: Path) -> None:
        """Write the site into `out`: a new or empty folder, or a site built before (emptied first)."""
        if out.exists() and any(out.iterdir()):
            if not (out / MARKER).exists():
                raise FileExistsError(f"{out} is not empty and holds no rlspec site ({MARKER}); choose another folder")
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / MARKER).write_text("built by `rlspec site`; a rebuild empties this folder\n")
        for path, text in self.pages.items():
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            (out / path).write_text(text, encoding="utf-8")
        for path, source in self.files.items():
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out / path)


def site_columns(reports_dir: Path = REPORTS_DIR, names: Sequence[str] | None = None,
                 extra_reports: Sequence[Path] = ()) -> list[Column]:
    """The framework columns (committed reports, or "not installed"), then the adapters of the extra
    report JSONs; an extra adapter named like a framework replaces that framework's column. Columns
    with results come first."""
    columns = framework_columns(reports_dir, tuple(framework_names() if names is None else names))
    for path in extra_reports:
        for column in columns_from_report(json.loads(Path(path).read_text())):
            same = [i for i, c in enumerate(columns) if c.name == column.name]
            if same:
                columns[same[0]] = column
            else:
                columns.append(column)
    return sorted(columns, key=lambda c: c.status != "ok")


def build_site(out: Path, *, reports_dir: Path = REPORTS_DIR, names: Sequence[str] | None = None,
               extra_reports: Sequence[Path] = ()) -> Site:
    """Build the site into `out` and return it (its `pages` and `files` say what was written)."""
    site = Site(site_columns(reports_dir, names, extra_reports), reports_dir)
    site.build()
    site.write(Path(out))
    return site
