"""What changed between two reports of a framework (`rlspec reports --diff OLD NEW`, the site's changes page).

Rows are matched by id. A row whose verdict went from FAIL or ERROR to pass, preset or variant is **fixed**; the
reverse is **regressed**; a row explained by another preset, another variant's keywords, or canonically where a
preset explained it before (or the reverse) has a **changed preset**; a row whose semantic verdict stayed but
whose precision changed has **changed precision**; a row that became implemented or stopped being so changed
**coverage**; rows only in one report are **new** or **removed**. The reports may come from different
framework versions (a release re-checked) or from different rlspec versions (a spec or runner change): the
header says which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GOOD = ("pass", "preset", "variant")
BAD = ("fail", "error")
KINDS = ("regressed", "fixed", "changed preset", "changed precision", "coverage", "status", "new", "removed")


@dataclass(frozen=True)
class RowChange:
    kind: str
    id: str
    old: str  # the old verdict as a cell reads it ("" for a new row)
    new: str  # the new one ("" for a removed row)


@dataclass(frozen=True)
class ReportDiff:
    old_label: str
    new_label: str
    changes: tuple[RowChange, ...]
    unchanged: int

    def of(self, kind: str) -> list[RowChange]:
        return [c for c in self.changes if c.kind == kind]


def load_report(path: str | Path) -> dict[str, Any]:
    """A report JSON (`rlspec check --json`, `rlspec reports`), with a ValueError naming the file when it is none."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"rlspec reports --diff: cannot read report {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        raise ValueError(f"rlspec reports --diff: {path} is no rlspec report (no 'checks' list)")
    return data


def _label(report: dict[str, Any]) -> str:
    adapters = ", ".join(f"{a['name']} {a['version']}" for a in report.get("adapters", []) if a.get("status") == "ok")
    return f"{adapters or 'no adapter'} (rlspec {report.get('suite_version', '?')}, {report.get('created', '?')})"


def _cell(row: dict[str, Any]) -> str:
    status = row["status"]
    if status in ("preset", "variant"):
        what = row.get("matched_preset") or ", ".join(f"{k}" for k in (row.get("matched_kwargs") or {}))
        return f"{status} {what}".strip()
    return status.replace("_", " ")


def _precision(row: dict[str, Any]) -> dict[str, str]:
    return dict(row.get("precision") or {})


def _kind(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    a, b = old["status"], new["status"]
    if a in BAD and b in GOOD:
        return "fixed"
    if a in GOOD and b in BAD:
        return "regressed"
    if "not_implemented" in (a, b) and a != b:
        return "coverage"
    if a in GOOD and b in GOOD:
        if _cell(old) != _cell(new) or (old.get("matched_kwargs") or {}) != (new.get("matched_kwargs") or {}):
            return "changed preset"
        if _precision(old) != _precision(new):
            return "changed precision"
        return None
    return "status" if a != b else None


def diff_reports(old: dict[str, Any], new: dict[str, Any]) -> ReportDiff:
    """The row-by-row changes from report `old` to report `new` (both as loaded by `load_report`)."""
    before = {r["id"]: r for r in old["checks"]}
    after = {r["id"]: r for r in new["checks"]}
    changes: list[RowChange] = []
    unchanged = 0
    for rid, row in after.items():
        if rid not in before:
            changes.append(RowChange("new", rid, "", _cell(row)))
            continue
        kind = _kind(before[rid], row)
        if kind is None:
            unchanged += 1
        elif kind == "changed precision":
            shown = [", ".join(f"{k} meets {v}" for k, v in _precision(r).items()) or "-" for r in (before[rid], row)]
            changes.append(RowChange(kind, rid, *shown))
        else:
            changes.append(RowChange(kind, rid, _cell(before[rid]), _cell(row)))
    changes += [RowChange("removed", rid, _cell(row), "") for rid, row in before.items() if rid not in after]
    changes.sort(key=lambda c: (KINDS.index(c.kind), c.id))
    return ReportDiff(_label(old), _label(new), tuple(changes), unchanged)


def diff_markdown(d: ReportDiff) -> str:
    """The diff as Markdown: a count per kind, then one table per kind that occurs."""
    counts = ", ".join(f"{len(d.of(k))} {k}" for k in KINDS if d.of(k)) or "no row changed"
    lines = [f"From {d.old_label}", f"to {d.new_label}:", "", f"{counts}; {d.unchanged} row(s) unchanged."]
    for kind in KINDS:
        rows = d.of(kind)
        if rows:
            lines += ["", f"**{kind}** ({len(rows)})", "", "| row | before | after |", "|---|---|---|"]
            lines += [f"| `{c.id}` | {c.old or '-'} | {c.new or '-'} |" for c in rows]
    return "\n".join(lines)


__all__ = ["KINDS", "ReportDiff", "RowChange", "diff_markdown", "diff_reports", "load_report"]
