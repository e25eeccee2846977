"""Reports of a conformance run: the terminal table, JSON (schema `report-v3`), JUnit XML and
Markdown. The JSON schema lives in `conformance/runner/report_schema.json`."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from conformance import SPEC_VERSION, SUITE_VERSION
from conformance.runner.rows import CASE_FAMILIES, MIN_COMPARED, STATUSES, RowResult

REPORT_SCHEMA_VERSION = "report-v3"
SCHEMA_PATH = Path(__file__).with_name("report_schema.json")


# What can count as a finding (`rlspec check --fail-on`): a row status (suite.STATUSES), a row
# with a precision finding, or a row with cases the adapter does not offer ("partial").
FINDING_DESCRIPTIONS = {
    "precision": "some input dtype's outputs meet only a coarser precision class than the dtype's own "
                 "(listed apart, with the class met, the worst case and its reproduce line)",
    "partial": "some keyword values are not implemented (NotImplementedError or `unsupported_kwargs`); "
               "the rest of the row was checked",
    "thin": f"a pass, preset or variant resting on fewer than {MIN_COMPARED} oracle-compared cases, or on no "
            "property case (the row's case counts say what ran)",
}
FINDINGS = tuple(s for s in STATUSES if s != "pass") + tuple(FINDING_DESCRIPTIONS)
DEFAULT_FAIL_ON = ("fail", "error", "precision")


def parse_fail_on(text: str) -> tuple[str, ...]:
    """The finding kinds of a comma-separated list (`--fail-on`, `--rlspec-fail-on`); ValueError names an
    unknown one."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FINDINGS]
    if unknown:
        raise ValueError(f"unknown finding kind(s) {', '.join(unknown)}; choose from {', '.join(FINDINGS)}")
    return kinds


@dataclass
class AdapterInfo:
    name: str
    version: str
    spec_version: str
    status: str = "ok"  # "ok" or "not_installed" / "load_error"
    message: str = ""
    ref: str = ""  # how the user named it (built-in name, entry point, module:attribute)


def row_findings(row: RowResult) -> set[str]:
    """The finding kinds a row has (see FINDINGS); a passing row has none."""
    out = {row.status} - {"pass"}
    if any(m["kind"] == "error" for m in row.failures):  # cases that raised, beside the semantic verdict
        out.add("error")
    if row.precision_findings:
        out.add("precision")
    if row.not_implemented_cases:
        out.add("partial")
    if row.thin:
        out.add("thin")
    return out


@dataclass
class Report:
    seed: int
    n_seeds: int
    adapters: list[AdapterInfo] = field(default_factory=list)
    rows: list[RowResult] = field(default_factory=list)
    seconds: float = 0.0
    fail_on: tuple[str, ...] = DEFAULT_FAIL_ON
    strict_precision: bool = False
    command: str = ""  # the command that reproduces the report, when not `rlspec check` (`rlspec replay DIR`)

    @property
    def ok(self) -> bool:
        """No row has a finding of a kind in `fail_on`."""
        return not any(row_findings(r) & set(self.fail_on) for r in self.rows)

    def idle_adapters(self) -> list[AdapterInfo]:
        """The loaded adapters for which nothing was checked: every row of theirs is "not implemented"
        (the function absent, or raising NotImplementedError on every case). A run that names such an
        adapter is broken, not clean (`rlspec check` exits 2)."""
        return [a for a in self.adapters if a.status == "ok"
                and all(r.status == "not_implemented" for r in self.rows if r.adapter == a.name)]

    @property
    def reproduce(self) -> str:
        if self.command:
            return self.command
        return (f"rlspec check --seed {self.seed} --n-seeds {self.n_seeds}"
                + "".join(f" --adapter {a.ref or a.name}" for a in self.adapters)
                + (" --strict-precision" if self.strict_precision else ""))

    def to_json(self) -> dict[str, Any]:
        import numpy
        import torch

        return {
            "schema": REPORT_SCHEMA_VERSION,
            "suite_version": SUITE_VERSION,
            "spec_version": SPEC_VERSION,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seed": self.seed,
            "n_seeds": self.n_seeds,
            "reproduce": self.reproduce,
            "strict_precision": self.strict_precision,
            "fail_on": list(self.fail_on),
            "environment": {
                "python": platform.python_version(),
                "numpy": numpy.__version__,
                "torch": torch.__version__,
            },
            "adapters": [vars(a) for a in self.adapters],
            "checks": [r.to_json() for r in self.rows],
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
        }


def cell(row: RowResult) -> str:
    """The short verdict shown in a table cell: the semantic status, then "(ERROR)" when some cases
    raised beside that verdict, "(precision)" when an input dtype's outputs meet only a coarser class,
    "(partial)" when some keyword values are not implemented and "(thin)" when the verdict rests on too
    few cases (all detailed below the table)."""
    base = {
        "pass": "pass",
        "preset": f"preset {row.matched_preset}",
        "variant": "variant",
        "fail": "FAIL",
        "error": "ERROR",
        "not_implemented": "not implemented",
    }[row.status]
    raised = row.status != "error" and any(m["kind"] == "error" for m in row.failures)
    marks = [m for m, on in (("ERROR", raised), ("precision", row.precision_findings),
                             ("partial", row.not_implemented_cases), ("thin", row.thin)) if on]
    return base + (f" ({', '.join(marks)})" if marks else "")


COUNTS_LEGEND = "cases: " + "/".join(CASE_FAMILIES)


def counts_label(row: RowResult) -> str:
    """The cases a row's verdict rests on, per family ("24/5/16/0": property/golden/invariant/preset,
    COUNTS_LEGEND); the total for a framework's own row, "" for a row that ran nothing."""
    if row.counts:
        return "/".join(str(row.counts.get(f, 0)) for f in CASE_FAMILIES)
    return str(row.n_cases) if row.n_cases else ""


def cell_with_counts(row: RowResult) -> str:
    counts = counts_label(row)
    return cell(row) + (f" [{counts}]" if counts else "")


def row_details(row: RowResult, explain: bool = False) -> list[str]:
    """What the table's cell stands for: message, reproduce line, bugs it is consistent with,
    keyword values not implemented; with `explain`, the weaker failure-pattern-only hints too."""
    lines = row.message.splitlines() if row.message else []
    if row.reproduce and row.reproduce not in row.message:
        lines.append(f"Reproduce: {row.reproduce}")
    if len(row.failures) > 1:
        lines.append(f"{len(row.failures)} failure modes (the first is shown above):")
        for i, mode in enumerate(row.failures, 1):
            lines.append(f"  {i}. [{mode['kind']}] {mode['headline']}")
            lines.append(f"     worst: {mode['case']}: {mode['detail']}")
            lines.append(f"     Reproduce: {mode['reproduce']}")
    if row.consistent_with:
        lines.append("consistent with: " + "; ".join(row.consistent_with))
    if row.pattern_hints and explain:
        lines.append("failure pattern also fits (outputs not reproduced, a weak hint): " + "; ".join(row.pattern_hints))
    elif row.pattern_hints:
        lines.append(f"({len(row.pattern_hints)} weaker hint(s) whose failure pattern alone fits: rlspec check --explain)")
    if row.not_implemented_cases:
        lines.append("not implemented: " + "; ".join(row.not_implemented_cases) + " (the rest of the row was checked)")
    lines += [f"note: {n}" for n in row.notes]
    if row.thin:
        lines.append(f"thin: the verdict rests on {counts_label(row)} cases ({COUNTS_LEGEND}); at least "
                     f"{MIN_COMPARED} oracle-compared cases and one property case make it solid")
    return lines


def _grid(report: Report) -> tuple[list[str], list[str], dict[tuple[str, str], RowResult]]:
    adapters = [a.name for a in report.adapters if a.status == "ok"]
    functions: list[str] = []
    by_key: dict[tuple[str, str], RowResult] = {}
    for row in report.rows:
        label = row_label(row)
        if label not in functions:
            functions.append(label)
        by_key[(label, row.adapter)] = row
    return adapters, functions, by_key


def row_label(row: RowResult) -> str:
    """The table's row name: the function for a core-API row, the check id for a framework's own
    rows (e.g. `trl.grpo_loss[dapo,beta=0.04]`)."""
    return row.function if row.id == f"{row.function}@{row.adapter}" else row.id


def render_table(report: Report, explain: bool = False) -> str:
    adapters, functions, by_key = _grid(report)
    spec_of = {row_label(r): r.spec_id for r in report.rows}
    header = ["spec id", "check", *adapters]
    body = [
        [spec_of[f], f, *(cell_with_counts(by_key[(f, a)]) if (f, a) in by_key else "-" for a in adapters)]
        for f in functions
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in body]
    lines.append(f"[{COUNTS_LEGEND}]: the cases each verdict rests on")
    for a in report.adapters:
        if a.status != "ok":
            lines.append(f"{a.name}: {a.status.replace('_', ' ')} ({a.message})")
    details = [r for r in report.rows if _detailed(r)]
    if details:
        lines.append("")
        for r in details:
            lines.append(f"{row_label(r)} @ {r.adapter}: {cell(r)}")
            lines += ["    " + line for line in row_details(r, explain)]
    precise = [r for r in report.rows if r.precision_findings]
    if precise:
        lines += ["", "Precision findings (semantics as in the table; outputs coarser than the input dtype):"]
        for r in precise:
            for f in r.precision_findings:
                lines.append(f"{row_label(r)} @ {r.adapter}: {f['message']}")
                lines.append(f"    Reproduce: {f['reproduce']}")
    lines.append("")
    lines.append(summary(report))
    return "\n".join(lines)


def _detailed(row: RowResult) -> bool:
    """Whether a row gets a paragraph under the table (anything beyond a plain pass)."""
    return row.status in ("fail", "error", "preset", "variant") or bool(row.not_implemented_cases or row.notes
                                                                         or row.thin or row.failures)


def summary(report: Report) -> str:
    """The closing line: counts per status, precision findings, and what made the run fail."""
    counts = {s: sum(r.status == s for r in report.rows) for s in STATUSES}
    n_precision = sum(len(r.precision_findings) for r in report.rows)
    n_thin = sum(r.thin for r in report.rows)
    n_outside = sum(any(m["kind"] == "outside" for m in r.failures or []) for r in report.rows)
    counted = sorted({k for r in report.rows for k in row_findings(r) & set(report.fail_on)})
    verdict = "findings: " + ", ".join(counted) if counted else "no findings"
    unloaded = [a.ref or a.name for a in report.adapters if a.status != "ok"]
    if unloaded:  # not checked at all: never read as a clean run
        verdict += f"; not checked (not loaded): {', '.join(unloaded)}"
    idle = [a.ref or a.name for a in report.idle_adapters()]
    if idle:
        verdict += f"; nothing checked (no selected function implemented): {', '.join(idle)}"
    return (
        f"{counts['pass']} pass, {counts['preset']} preset, {counts['variant']} variant, {counts['fail']} fail, "
        f"{counts['error']} error, {counts['not_implemented']} not implemented; {n_precision} precision finding(s)"
        + (f", {n_thin} thin" if n_thin else "")
        + (f", {n_outside} with notes outside the framework's domain" if n_outside else "") + " "
        f"in {report.seconds:.1f}s (seed {report.seed}); {verdict} (--fail-on {','.join(report.fail_on)})"
    )


def render_markdown(report: Report) -> str:
    adapters, functions, by_key = _grid(report)
    spec_of = {row_label(r): r.spec_id for r in report.rows}
    data = report.to_json()
    lines = [
        "# rlspec conformance report",
        "",
        f"Suite {SUITE_VERSION}, spec {SPEC_VERSION}, seed {report.seed}; "
        f"reproduce with `{data['reproduce']}`.",
        "",
        "| adapter | version | status |",
        "|---|---|---|",
    ]
    lines += [f"| {a.name} | {a.version} | {a.status} |" for a in report.adapters]
    lines += ["", "| spec id | check | " + " | ".join(adapters) + " |", "|---|---|" + "---|" * len(adapters)]
    for f in functions:
        cells = [cell_with_counts(by_key[(f, a)]) if (f, a) in by_key else "-" for a in adapters]
        lines.append(f"| `{spec_of[f]}` | `{f}` | " + " | ".join(cells) + " |")
    lines += ["", f"Each cell: the verdict, then [{COUNTS_LEGEND}], the cases it rests on."]
    details = [r for r in report.rows if _detailed(r)]
    if details:
        lines += ["", "## Details", ""]
        for r in details:
            lines += [f"### `{row_label(r)}` @ {r.adapter}: {cell(r)}", "", "```", *row_details(r), "```", ""]
    precise = [r for r in report.rows if r.precision_findings]
    if precise:
        lines += ["## Precision findings", "",
                  "The semantic verdict is the table's; these input dtypes' outputs meet only a coarser class.", ""]
        for r in precise:
            for f in r.precision_findings:
                lines += [f"- `{row_label(r)}` @ {r.adapter}: {f['message']}. Reproduce: `{f['reproduce']}`"]
        lines.append("")
    outside = [(r, n) for r in report.rows for n in r.notes if n.startswith("outside the framework's domain")]
    if outside:
        lines += ["## Outside the framework's domain", "",
                  "Divergences on inputs the adapter declares its framework never receives (its `domain`, with "
                  "the citation): notes, not findings; the table's verdict rests on the other cases.", ""]
        lines += [f"- `{row_label(r)}` @ {r.adapter}: {n}" for r, n in outside]
        lines.append("")
    lines += ["", summary(report)]
    return "\n".join(lines) + "\n"


def render_junit(report: Report) -> str:
    suites = ET.Element("testsuites", name="rlspec", time=f"{report.seconds:.3f}")
    for adapter in report.adapters:
        rows = [r for r in report.rows if r.adapter == adapter.name]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"rlspec.{adapter.name}",
            tests=str(len(rows)),
            failures=str(sum(bool(row_findings(r) & set(report.fail_on)) and r.status != "error" for r in rows)),
            errors=str(sum(r.status == "error" and "error" in report.fail_on for r in rows)),
            skipped=str(sum(r.status == "not_implemented" for r in rows)),
            time=f"{sum(r.seconds for r in rows):.3f}",
        )
        for r in rows:
            case = ET.SubElement(
                suite, "testcase", classname=f"rlspec.{adapter.name}.{r.spec_id}", name=row_label(r), time=f"{r.seconds:.3f}"
            )
            counted = row_findings(r) & set(report.fail_on)
            text = "\n".join(row_details(r) + [f["message"] for f in r.precision_findings])
            if r.status == "error" and "error" in counted:
                ET.SubElement(case, "error", message=r.message.splitlines()[0] if r.message else "error").text = text
            elif counted:
                first = r.message.splitlines()[0] if r.message else r.precision_findings[0]["message"] if r.precision_findings else cell(r)
                ET.SubElement(case, "failure", type=",".join(sorted(counted)), message=first).text = text
            elif r.status == "not_implemented":
                ET.SubElement(case, "skipped", message=r.message or "not implemented")
            elif text:
                ET.SubElement(case, "system-out").text = text
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_outputs(report: Report, *, json_path: str | None, junit_path: str | None, markdown_path: str | None) -> None:
    """Write the report's JSON, JUnit XML and Markdown to the paths given (None: not written). The HTML
    page of a run is the site's (`rlspec check --html`)."""
    if json_path:
        Path(json_path).write_text(json.dumps(report.to_json(), indent=2, sort_keys=False) + "\n")
    if junit_path:
        Path(junit_path).write_text(render_junit(report))
    if markdown_path:
        Path(markdown_path).write_text(render_markdown(report))
