"""Reports of a conformance run: the terminal table, JSON (schema `report-v1`), JUnit XML and
Markdown. The JSON schema lives in `conformance/report_schema.json`."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from conformance import SPEC_VERSION, SUITE_VERSION
from conformance.suite import RowResult

REPORT_SCHEMA_VERSION = "report-v1"
SCHEMA_PATH = Path(__file__).with_name("report_schema.json")


@dataclass
class AdapterInfo:
    name: str
    version: str
    spec_version: str
    status: str = "ok"  # "ok" or "not_installed" / "load_error"
    message: str = ""


@dataclass
class Report:
    seed: int
    n_seeds: int
    adapters: list[AdapterInfo] = field(default_factory=list)
    rows: list[RowResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(r.status in ("fail", "error") for r in self.rows)

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
            "reproduce": f"rlspec check --seed {self.seed} --n-seeds {self.n_seeds}"
            + "".join(f" --adapter {a.name}" for a in self.adapters),
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
    """The short verdict shown in a table cell."""
    if row.status == "pass":
        return "pass"
    if row.status == "preset":
        return f"preset {row.matched_preset}" if row.matched_preset else "variant"
    if row.status == "fail":
        return "FAIL"
    if row.status == "error":
        return "ERROR"
    return "not implemented"


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


def render_table(report: Report) -> str:
    adapters, functions, by_key = _grid(report)
    spec_of = {row_label(r): r.spec_id for r in report.rows}
    header = ["spec id", "check", *adapters]
    body = [
        [spec_of[f], f, *(cell(by_key[(f, a)]) if (f, a) in by_key else "-" for a in adapters)]
        for f in functions
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in body]
    for a in report.adapters:
        if a.status != "ok":
            lines.append(f"{a.name}: {a.status.replace('_', ' ')} ({a.message})")
    details = [r for r in report.rows if r.status in ("fail", "error", "preset")]
    if details:
        lines.append("")
        for r in details:
            lines.append(f"{row_label(r)} @ {r.adapter}: {cell(r)}")
            lines += ["    " + line for line in r.message.splitlines()]
            if r.consistent_with:
                lines.append("    consistent with: " + "; ".join(r.consistent_with))
    counts = {s: sum(r.status == s for r in report.rows) for s in ("pass", "preset", "fail", "error", "not_implemented")}
    lines.append("")
    lines.append(
        f"{counts['pass']} pass, {counts['preset']} preset, {counts['fail']} fail, "
        f"{counts['error']} error, {counts['not_implemented']} not implemented "
        f"in {report.seconds:.1f}s (seed {report.seed})"
    )
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    adapters, functions, by_key = _grid(report)
    spec_of = {row_label(r): r.spec_id for r in report.rows}
    data = report.to_json()
    lines = [
        f"# rlspec conformance report",
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
        cells = [cell(by_key[(f, a)]) if (f, a) in by_key else "-" for a in adapters]
        lines.append(f"| `{spec_of[f]}` | `{f}` | " + " | ".join(cells) + " |")
    details = [r for r in report.rows if r.status in ("fail", "error", "preset")]
    if details:
        lines += ["", "## Details", ""]
        for r in details:
            lines += [f"### `{row_label(r)}` @ {r.adapter}: {cell(r)}", "", "```", r.message, "```", ""]
            if r.consistent_with:
                lines += ["Consistent with: " + "; ".join(r.consistent_with), ""]
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
            failures=str(sum(r.status == "fail" for r in rows)),
            errors=str(sum(r.status == "error" for r in rows)),
            skipped=str(sum(r.status == "not_implemented" for r in rows)),
            time=f"{sum(r.seconds for r in rows):.3f}",
        )
        for r in rows:
            case = ET.SubElement(
                suite, "testcase", classname=f"rlspec.{adapter.name}.{r.spec_id}", name=row_label(r), time=f"{r.seconds:.3f}"
            )
            if r.status == "fail":
                ET.SubElement(case, "failure", message=r.message.splitlines()[0] if r.message else "fail").text = r.message
            elif r.status == "error":
                ET.SubElement(case, "error", message=r.message.splitlines()[0] if r.message else "error").text = r.message
            elif r.status == "not_implemented":
                ET.SubElement(case, "skipped", message=r.message or "not implemented")
            elif r.status == "preset":
                ET.SubElement(case, "system-out").text = r.message
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_outputs(report: Report, *, json_path: str | None, junit_path: str | None, markdown_path: str | None) -> None:
    if json_path:
        Path(json_path).write_text(json.dumps(report.to_json(), indent=2, sort_keys=False) + "\n")
    if junit_path:
        Path(junit_path).write_text(render_junit(report))
    if markdown_path:
        Path(markdown_path).write_text(render_markdown(report))
