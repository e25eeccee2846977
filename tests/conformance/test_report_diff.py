"""`rlspec reports --diff OLD NEW` ([20] item 6): what changed between two reports of a framework."""

from __future__ import annotations

import json
import subprocess
import sys

from conformance.runner.report_diff import diff_markdown, diff_reports, load_report


def _report(version: str, rows: list[dict]) -> dict:
    full = [{"matched_preset": None, "matched_kwargs": None, "precision": {"float64": "float64"}, **r} for r in rows]
    return {"schema": "report-v3", "suite_version": "0.1.0", "created": "2026-12-02T00:00:00+00:00",
            "adapters": [{"name": "fw", "version": version, "status": "ok"}], "checks": full}


OLD = _report("0.3.0", [
    {"id": "a@fw", "status": "fail"},
    {"id": "b@fw", "status": "pass"},
    {"id": "c@fw", "status": "preset", "matched_preset": "fw"},
    {"id": "d@fw", "status": "pass"},
    {"id": "e@fw", "status": "not_implemented"},
    {"id": "f@fw", "status": "pass"},
    {"id": "gone@fw", "status": "pass"},
])
NEW = _report("0.4.0", [
    {"id": "a@fw", "status": "pass"},                                   # fixed
    {"id": "b@fw", "status": "error"},                                  # regressed
    {"id": "c@fw", "status": "preset", "matched_preset": "fw@a956457"},  # another version's preset
    {"id": "d@fw", "status": "pass", "precision": {"float64": "float32"}},
    {"id": "e@fw", "status": "pass"},                                   # coverage
    {"id": "f@fw", "status": "pass"},                                   # unchanged
    {"id": "new@fw", "status": "fail"},
])


def test_each_row_change_gets_its_kind():
    d = diff_reports(OLD, NEW)
    kinds = {c.id: c.kind for c in d.changes}
    assert kinds == {"a@fw": "fixed", "b@fw": "regressed", "c@fw": "changed preset", "d@fw": "changed precision",
                     "e@fw": "coverage", "new@fw": "new", "gone@fw": "removed"}
    assert d.unchanged == 1
    (c,) = d.of("changed preset")
    assert (c.old, c.new) == ("preset fw", "preset fw@a956457")
    (p,) = d.of("changed precision")
    assert (p.old, p.new) == ("float64 meets float64", "float64 meets float32")


def test_markdown_names_both_versions_and_counts():
    text = diff_markdown(diff_reports(OLD, NEW))
    assert text.startswith("From fw 0.3.0 (rlspec 0.1.0, 2026-12-02T00:00:00+00:00)\nto fw 0.4.0")
    assert "1 regressed, 1 fixed, 1 changed preset, 1 changed precision, 1 coverage, 1 new, 1 removed; 1 row(s) unchanged" in text
    assert "| `b@fw` | pass | error |" in text


def test_the_command_compares_two_files_and_refuses_a_non_report(tmp_path):
    old, new, bad = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "bad.json"
    old.write_text(json.dumps(OLD))
    new.write_text(json.dumps(NEW))
    bad.write_text(json.dumps({"rows": []}))
    cmd = [sys.executable, "-m", "conformance.cli", "reports", "--diff"]
    ok = subprocess.run(cmd + [str(old), str(new)], capture_output=True, text=True)
    assert ok.returncode == 0 and "**regressed** (1)" in ok.stdout, ok.stderr
    refused = subprocess.run(cmd + [str(old), str(bad)], capture_output=True, text=True)
    assert refused.returncode == 2 and "no rlspec report (no 'checks' list)" in refused.stderr
    assert load_report(old)["adapters"][0]["version"] == "0.3.0"
