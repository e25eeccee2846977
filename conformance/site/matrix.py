"""The conformance matrix as HTML: columns read from report JSON (schema report-v3), one row per spec
quantity, one column per adapter, each cell's verdict and the detail behind it.

Shared by `rlspec site` (conformance/site/build.py: cells link to a page each) and `rlspec check
--html` (`report_page`: one self-contained file, cells link to sections of the same page). Both work
from the report's JSON, so the page of a run and the published site say the same thing.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.records import FAMILIES, RECORDS, records_for
from conformance.records.presets import homes as preset_homes
from conformance.site.markdown_html import inline
from conformance.runner.rows import STATUSES

ASSETS = Path(__file__).resolve().parent / "assets"
# what a cell can say beyond a row status (suite.STATUSES)
COLUMN_STATES = {
    "not_installed": "the framework has no report: it is not installed where the reports were made",
    "load_error": "the adapter could not be loaded",
    "absent": "the report has no row for this quantity (the report predates it)",
}
_MUTANT = re.compile(r"\[mutant (?P<name>[\w.]+), bug-catalogue #(?P<n>\d+)\]")


@dataclass
class Column:
    """One adapter's results: its report rows, or why it has none (status not "ok")."""

    name: str
    version: str
    status: str = "ok"  # "ok", "not_installed", "load_error"
    message: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)  # the report's run-level fields (seed, reproduce, ...)
    ref: str = ""  # how the run named the adapter

    @property
    def header(self) -> str:
        return f"{self.name} {self.version}" if self.status == "ok" else self.name


@dataclass(frozen=True)
class Verdict:
    kind: str  # a row status (suite.STATUSES); the CSS class is s-<kind>
    text: str
    marks: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.text + (f" ({', '.join(self.marks)})" if self.marks else "")


@dataclass(frozen=True)
class Links:
    """Where the page's links point (None: no link)."""

    cell: Callable[[Column, dict[str, Any]], str | None]
    spec: Callable[[str], str | None] = lambda spec_id: None
    framework: Callable[[str], str | None] = lambda name: None
    mutant: Callable[[str], str | None] = lambda name: None


def esc(text: Any) -> str:
    return html.escape(str(text))


def columns_from_report(data: dict[str, Any]) -> list[Column]:
    """A column per adapter of a report JSON, with its rows."""
    run = {k: v for k, v in data.items() if k not in ("adapters", "checks")}
    out = []
    for a in data["adapters"]:
        rows = [c for c in data["checks"] if c["adapter"] == a["name"]]
        out.append(Column(a["name"], a["version"], a.get("status", "ok"), a.get("message", ""), rows, run,
                          a.get("ref") or a["name"]))
    return out


def framework_columns(reports_dir: Path, names: tuple[str, ...]) -> list[Column]:
    """A column per framework: its committed report `<reports_dir>/<name>.json`, or "not installed"."""
    columns = []
    for name in names:
        path = reports_dir / f"{name}.json"
        if not path.exists():
            columns.append(Column(name, "-", "not_installed",
                                  f"no report {path.name} (`rlspec frameworks install {name}`, then "
                                  f"`rlspec reports --adapter {name}`)"))
            continue
        found = [c for c in columns_from_report(json.loads(path.read_text())) if c.name == name]
        columns.append(found[0] if found else Column(name, "-", "not_installed", f"{path.name} has no {name} adapter"))
    return columns


def label(row: dict[str, Any]) -> str:
    """The row's name: the function for a core-API row, the check id for a framework's own row."""
    return row["function"] if is_matrix_row(row) else row["id"]


def is_matrix_row(row: dict[str, Any]) -> bool:
    """A row every adapter has (a spec function, or a shared check such as agg.partition[...]), as
    opposed to a framework's own rows (`extra_rows`: `trl.grpo_loss[...]`)."""
    return row["id"] == f"{row['function']}@{row['adapter']}"


def verdict(row: dict[str, Any], column: str) -> Verdict:
    """The cell's verdict. A preset match is named as the column's own preset when the column is that
    framework; the same keywords matched by a framework that is another preset's namesake are a
    variant of it (verl's PPO clamp equals OpenRLHF's preset: "variant = preset openrlhf")."""
    status = row["status"]
    matched = row.get("matched_preset") or ""
    if status in ("preset", "variant"):
        presets = matched.split(", ") if matched else []
        if column in presets:
            kind, text = "preset", f"preset {column}"
        elif status == "preset" and column not in preset_homes():
            kind, text = "preset", f"preset {matched}"
        else:
            kind, text = "variant", "variant" + (f" = preset {matched}" if matched else "")
    else:
        kind, text = status, {"pass": "pass", "fail": "FAIL", "error": "error",
                              "not_implemented": "not implemented"}[status]
    raised = row["status"] != "error" and any(m["kind"] == "error" for m in row.get("failures") or [])
    marks = tuple(m for m, on in (("ERROR", raised), ("precision", row.get("precision_findings")),
                                  ("partial", row.get("not_implemented_cases")), ("thin", row.get("thin"))) if on)
    return Verdict(kind, text, marks)


def matrix_rows(columns: list[Column], *, every_quantity: bool = True) -> list[tuple[str, list[tuple[str, str]]]]:
    """(family, [(label, spec id)]): the registry's quantities in registry order (every one, or those
    the columns have rows for), grouped by family, each family followed by the other shared rows of
    the reports (agg.partition[...])."""
    present = {label(r) for c in columns for r in c.rows if is_matrix_row(r)}
    families: dict[str, list[tuple[str, str]]] = {}
    for q in RECORDS:
        families.setdefault(q.spec_id.split(".")[0], [])
        if every_quantity or q.function in present:
            families[q.spec_id.split(".")[0]].append((q.function, q.spec_id))
    known = {lab for rows in families.values() for lab, _ in rows}
    for column in columns:
        for row in column.rows:
            if is_matrix_row(row) and label(row) not in known:
                known.add(label(row))
                families.setdefault(row["spec_id"].split(".")[0], []).append((label(row), row["spec_id"]))
    return [(family, rows) for family, rows in families.items() if rows]


def rerun_command(column: Column, row: dict[str, Any]) -> str:
    """The command that reproduces the row: its own `rlspec repro` line, or else the `rlspec check`
    that runs it (a framework's own rows have no single-case reproduction)."""
    if row.get("reproduce"):
        return row["reproduce"]
    first = row["spec_id"].split("+")[0]  # a composition row names its quantities "loss.ppo+agg+..."
    family = first.split(".")[0]
    glob = next((g for g in (first, family, f"{family}.*", row["function"]) if records_for(g)), None)
    only = f" --only {shlex.quote(glob)}" if glob else ""
    return (f"rlspec check --adapter {shlex.quote(column.ref or column.name)}{only} "
            f"--seed {column.run.get('seed', 0)} --n-seeds {column.run.get('n_seeds', 8)}")


def cell_html(column: Column, row: dict[str, Any] | None, links: Links, *, lab: str = "") -> str:
    """One `<td class="cell">`: data-adapter, data-row (the row's label, `lab` where the column has
    no row) and data-status say what it stands for."""
    if column.status != "ok":
        kind, href, title = column.status, None, column.message
        inner = esc(column.status.replace("_", " "))
    elif row is None:
        kind, href, title, inner = "absent", None, COLUMN_STATES["absent"], "-"
    else:
        v = verdict(row, column.name)
        kind, lab, href = v.kind, label(row), links.cell(column, row)
        title = _first_line(row.get("message", "")) or STATUSES.get(row["status"], "")
        inner = esc(v.text) + (f' <span class="marks">{esc(", ".join(v.marks))}</span>' if v.marks else "")
    body = f'<a href="{esc(href)}">{inner}</a>' if href else inner
    return (f'<td class="cell s-{kind}" data-adapter="{esc(column.name)}" data-row="{esc(lab)}" '
            f'data-status="{kind}" title="{esc(title)}">{body}</td>')


def _first_line(message: str) -> str:
    for line in message.splitlines():
        if line and not line.startswith(("[", "inputs:", "Reproduce:")):
            return line
    return ""


def status_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many report rows have each status (every status of suite.STATUSES, 0 included)."""
    return {s: sum(r["status"] == s for r in rows) for s in STATUSES}


def summary_table(columns: list[Column], links: Links) -> str:
    """Per column: version, rows, the count of every status and the precision findings."""
    statuses = tuple(STATUSES)
    head = "".join(f"<th>{esc(s.replace('_', ' '))}</th>" for s in statuses)
    out = ['<div class="table-wrap"><table class="summary"><thead><tr><th>adapter</th><th>version</th>'
           f"<th>rows</th>{head}<th>precision findings</th><th>report</th></tr></thead><tbody>"]
    for c in columns:
        name = _link(links.framework(c.name), c.name)
        if c.status != "ok":
            out.append(f'<tr><td>{name}</td><td colspan="{len(statuses) + 4}" class="s-{c.status}">'
                       f"{esc(c.status.replace('_', ' '))}: {message_html(c.message)}</td></tr>")
            continue
        counts = "".join(f'<td class="num{" s-" + s if s in ("fail", "error") and n else ""}">{n}</td>'
                         for s, n in status_counts(c.rows).items())
        findings = sum(len(r.get("precision_findings") or []) for r in c.rows)
        made = esc(c.run.get("created", ""))
        out.append(f"<tr><td>{name}</td><td>{esc(c.version)}</td><td class=\"num\">{len(c.rows)}</td>{counts}"
                   f'<td class="num">{findings}</td><td>{made}</td></tr>')
    out.append("</tbody></table></div>")
    return "\n".join(out)


def matrix_table(columns: list[Column], links: Links, *, every_quantity: bool = True,
                 select: Callable[[str], bool] | None = None) -> str:
    """The matrix: a row per spec quantity (grouped by family; every one, or those the columns have
    rows for), a column per adapter. With `select(spec_id)`, only those rows, as an excerpt (a spec
    page's verdicts)."""
    index = {c.name: {label(r): r for r in c.rows if is_matrix_row(r)} for c in columns}
    head = "".join(f'<th class="col" data-adapter="{esc(c.name)}">{_link(links.framework(c.name), c.header)}</th>'
                   for c in columns)
    kind = '"matrix filterable" id="matrix"' if select is None else '"matrix excerpt"'
    out = [f'<div class="table-wrap"><table class={kind}><thead><tr>'
           f"<th>quantity <small>(spec id)</small></th>{head}</tr></thead>"]
    for family, rows in matrix_rows(columns, every_quantity=every_quantity):
        rows = [(lab, spec_id) for lab, spec_id in rows if select is None or select(spec_id)]
        if not rows:
            continue
        out.append(f'<tbody class="family" data-family="{esc(family)}"><tr class="family-row"><th colspan="{1 + len(columns)}">'
                   f"{esc(FAMILIES.get(family, family))} (<code>{esc(family)}.*</code>)</th></tr>")
        for lab, spec_id in rows:
            cells = "".join(cell_html(c, index[c.name].get(lab), links, lab=lab) for c in columns)
            out.append(f'<tr class="quantity" data-row="{esc(lab)}"><td class="quantity"><code>{esc(lab)}</code>'
                       f' <small>{spec_html(spec_id, links)}</small></td>{cells}</tr>')
        out.append("</tbody>")
    out.append("</table></div>")
    return "\n".join(out)


def framework_rows_table(column: Column, links: Links) -> str:
    """A framework's own rows (its settings, losses and trainer paths as compositions of spec
    quantities), one cell each."""
    rows = [r for r in column.rows if not is_matrix_row(r)]
    if not rows:
        return "<p>No framework rows.</p>"
    out = [f'<div class="table-wrap"><table class="framework-rows filterable" data-adapter="{esc(column.name)}">'
           f"<thead><tr><th>check</th><th>{esc(column.header)}</th><th>spec id</th></tr></thead><tbody>"]
    for r in rows:
        out.append(f'<tr class="quantity" data-row="{esc(label(r))}"><td class="check"><code>{esc(label(r))}</code></td>'
                   f'{cell_html(column, r, links)}<td>{spec_html(r["spec_id"], links)}</td></tr>')
    out.append("</tbody></table></div>")
    return "\n".join(out)


def message_html(text: str) -> str:
    """A one-line message whose `code` spans are shown as code."""
    return inline(text, lambda url: None)


def spec_html(spec_id: str, links: Links) -> str:
    """A spec id as code linked to its section; each part of a composition ("loss.ppo+agg") apart."""
    return "+".join(_link(links.spec(part), part, code=True) for part in spec_id.split("+"))


def _link(href: str | None, text: str, *, code: bool = False) -> str:
    inner = f"<code>{esc(text)}</code>" if code else esc(text)
    return f'<a href="{esc(href)}">{inner}</a>' if href else inner


def _kwargs(kwargs: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in (kwargs or {}).items())


def fingerprint_html(text: str, links: Links) -> str:
    """A `consistent_with` entry, its mutant name linked to the mutant catalogue."""
    m = _MUTANT.search(text)
    if not m:
        return esc(text)
    href = links.mutant(m.group("name"))
    name = _link(href, m.group("name"))
    return (esc(text[:m.start()]) + f"[mutant {name}, bug-catalogue #{m.group('n')}]" + esc(text[m.end():]))


def detail_html(column: Column, row: dict[str, Any], links: Links, *, level: int = 1) -> str:
    """Everything the report says about one cell: verdict, case and message (expected vs actual),
    the fingerprint (mutants it is consistent with, the preset or variant it matches), the command
    that reproduces it, precision findings, keyword values not implemented, the checks run."""
    v = verdict(row, column.name)
    heading, sub = f"h{level}", f"h{level + 1}"
    out = [f'<{heading}><code>{esc(label(row))}</code> @ {_link(links.framework(column.name), column.header)}: '
           f'<span class="verdict s-{v.kind}">{esc(v.label)}</span></{heading}>',
           '<dl class="facts">',
           f"<dt>spec id</dt><dd>{spec_html(row['spec_id'], links)}</dd>",
           f"<dt>status</dt><dd><code>{esc(row['status'])}</code>: {esc(STATUSES.get(row['status'], ''))}</dd>"]
    if row.get("max_abs_err") is not None or row.get("max_rel_err") is not None:
        out.append(f"<dt>greatest difference</dt><dd>absolute {esc(_num(row.get('max_abs_err')))}, "
                   f"relative {esc(_num(row.get('max_rel_err')))}</dd>")
    counts = row.get("counts") or {}
    by_family = ", ".join(f"{n} {family}" for family, n in counts.items())
    out.append(f"<dt>cases</dt><dd>{esc(row.get('n_cases', '-'))}" + (f" ({esc(by_family)})" if by_family else "")
               + (f"; property seeds {esc(', '.join(map(str, row['seeds'])))}" if row.get("seeds") else "")
               + (" <strong>thin</strong>: too few cases for a solid verdict" if row.get("thin") else "") + "</dd>")
    if row.get("precision"):
        out.append("<dt>precision met</dt><dd>" + esc(", ".join(f"{k} inputs: {v.replace('_', ' ')}"
                                                              for k, v in row["precision"].items())) + "</dd>")
    out.append("</dl>")
    out.append(f'<{sub}>Reproduce</{sub}><pre class="repro" data-repro="row"><code>'
               + esc(rerun_command(column, row)) + "</code></pre>")
    prints = []
    if row.get("matched_preset"):
        prints.append(f"matches preset {esc(row['matched_preset'])}"
                      + (f": <code>{esc(_kwargs(row['matched_kwargs']))}</code>" if row.get("matched_kwargs") else ""))
    elif row.get("matched_kwargs"):
        prints.append(f"matches the variant <code>{esc(_kwargs(row['matched_kwargs']))}</code>, not canonical")
    prints += [f"consistent with {fingerprint_html(t, links)}" for t in row.get("consistent_with") or []]
    prints += [f"weak hint, failure pattern only: {fingerprint_html(t, links)}" for t in row.get("pattern_hints") or []]
    if prints:
        out.append(f'<{sub}>Fingerprint</{sub}><ul class="fingerprint">' + "".join(f"<li>{p}</li>" for p in prints) + "</ul>")
    if row.get("message"):
        out.append(f'<{sub}>Case and message</{sub}><pre class="message">{esc(row["message"])}</pre>')
    for f in row.get("precision_findings") or []:
        out.append(f'<{sub}>Precision: {esc(f["dtype"])} meets {esc(f["meets"].replace("_", " "))}</{sub}>'
                   f'<pre class="message">{esc(f["message"])}</pre>'
                   f'<pre class="repro" data-repro="precision"><code>{esc(f["reproduce"])}</code></pre>')
    if row.get("notes"):
        out.append(f"<{sub}>Notes</{sub}><ul>" + "".join(f"<li>{esc(t)}</li>" for t in row["notes"]) + "</ul>")
    if row.get("not_implemented_cases"):
        out.append(f"<{sub}>Not implemented (the rest of the row was checked)</{sub}><ul>"
                   + "".join(f"<li>{esc(t)}</li>" for t in row["not_implemented_cases"]) + "</ul>")
    if row.get("checks"):
        out.append(f'<{sub}>Checks</{sub}><table class="checks"><tbody>'
                   + "".join(f'<tr><td><code>{esc(k)}</code></td><td class="s-{esc(s)}">{esc(s)}</td></tr>'
                             for k, s in row["checks"].items()) + "</tbody></table>")
    return "\n".join(out)


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)


def legend_html() -> str:
    kinds = {**STATUSES, **COLUMN_STATES,
             "precision": "mark: some input dtype's outputs meet only a coarser precision class",
             "partial": "mark: some keyword values are not implemented; the rest of the row was checked"}
    return ('<details class="legend"><summary>What a cell says</summary><dl>'
            + "".join(f'<dt class="s-{esc(k)}">{esc(k.replace("_", " "))}</dt><dd>{esc(v)}</dd>' for k, v in kinds.items())
            + "</dl></details>")


FILTER_HTML = ('<div class="filter"><label>filter rows <input type="search" id="row-filter" '
               'placeholder="spec id, function or check"></label> <label><input type="checkbox" '
               'id="only-findings"> only rows with a FAIL, error or precision finding</label></div>')


def document(title: str, body: str, *, nav: str = "", stylesheet: str | None = None, script: str | None = None,
             inline_assets: bool = False) -> str:
    """A complete HTML page; the stylesheet and script are linked (relative hrefs) or inlined."""
    if inline_assets:
        css = f"<style>\n{(ASSETS / 'site.css').read_text()}</style>"
        js = f"<script>\n{(ASSETS / 'site.js').read_text()}</script>"
    else:
        css = f'<link rel="stylesheet" href="{esc(stylesheet)}">' if stylesheet else ""
        js = f'<script src="{esc(script)}"></script>' if script else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{esc(title)}</title>{css}</head>\n'
            f"<body>{nav}<main>\n{body}\n</main>{js}</body></html>\n")


def row_key(row: dict[str, Any]) -> str:
    """A file-name and anchor-safe key of a row, unique within its adapter (the check id, shortened
    and made safe, plus a hash of it)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", label(row)).strip("-.")[:80]
    return f"{safe}-{hashlib.sha1(row['id'].encode()).hexdigest()[:8]}"


def name_key(name: str) -> str:
    """A file-name and anchor-safe form of an adapter name (`module:attr` included)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "adapter"


def report_page(data: dict[str, Any]) -> str:
    """One run's report (`rlspec check --html`) as a single self-contained page: the matrix, each
    adapter's own rows, and every cell's details further down (cells link to them)."""
    columns = columns_from_report(data)
    with_rows = {c.name for c in columns if c.status == "ok" and any(not is_matrix_row(r) for r in c.rows)}

    def anchor(column: Column, row: dict[str, Any]) -> str:
        return f"#cell-{name_key(column.name)}-{row_key(row)}"

    links = Links(cell=anchor, framework=lambda name: f"#adapter-{name_key(name)}" if name in with_rows else None)
    body = [f"<h1>rlspec conformance report</h1><p>Suite {esc(data.get('suite_version', ''))}, spec "
            f"{esc(data.get('spec_version', ''))}, seed {esc(data.get('seed', ''))}, {esc(data.get('created', ''))}; "
            f"reproduce with <code>{esc(data.get('reproduce', ''))}</code>.</p>",
            summary_table(columns, links), legend_html(), FILTER_HTML,
            matrix_table(columns, links, every_quantity=False)]
    for c in columns:
        if c.name in with_rows:
            body.append(f'<h2 id="adapter-{esc(name_key(c.name))}">{esc(c.header)}: its own rows</h2>')
            body.append(framework_rows_table(c, links))
    body.append("<h2>Details</h2>")
    for c in columns:
        for r in c.rows:
            body.append(f'<section class="detail" id="{esc(anchor(c, r)[1:])}">'
                        + detail_html(c, r, links, level=3) + "</section>")
    return document("rlspec conformance report", "\n".join(body), inline_assets=True)
