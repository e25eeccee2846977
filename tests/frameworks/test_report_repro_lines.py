"""Every reproduce line of a FAIL or ERROR row of the committed framework reports re-runs that row and
gets the same status (issue [11], "reproduction that runs"): the core rows' `rlspec repro <function>`
lines and the framework-specific rows' `rlspec repro --row ID` lines, as a user would paste them."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.frameworks import subprocess_worker as sw
from conformance.runner.discovery import framework_names as names

pytestmark = pytest.mark.frameworks

REPORTS = Path(__file__).resolve().parents[2] / "conformance" / "reports"


def _failing_lines() -> list[tuple[str, str, str, str]]:
    """(framework, row id, status, reproduce line) of every fail/error row of every committed report."""
    out = []
    for framework in names():
        path = REPORTS / f"{framework}.json"
        if not path.exists():
            continue
        for row in json.loads(path.read_text())["checks"]:
            if row["status"] in ("fail", "error"):
                out.append((framework, row["id"], row["status"], row["reproduce"]))
    return out


LINES = _failing_lines()


def test_every_failing_row_and_precision_finding_of_the_committed_reports_has_a_reproduce_line():
    assert LINES, "the committed reports hold FAIL rows (the frameworks' findings)"
    assert [(f, i) for f, i, _, line in LINES if not line.startswith("rlspec repro ")] == []
    findings = [(framework, row["id"], f["reproduce"]) for framework in names()
                if (REPORTS / f"{framework}.json").exists()
                for row in json.loads((REPORTS / f"{framework}.json").read_text())["checks"]
                for f in row["precision_findings"]]
    assert findings and [(fw, i) for fw, i, line in findings if not line.startswith("rlspec repro ")] == []


@pytest.mark.parametrize("framework, row_id, status, line", LINES, ids=[f"{f}:{i}" for f, i, _, _ in LINES])
def test_reproduce_line_reruns_the_row(framework, row_id, status, line, capsys):
    if framework != "trl" and sw.python_for(framework)[0] is None:
        pytest.skip(f"{framework} is not installed: run `rlspec frameworks install {framework}`")
    argv = shlex.split(line)
    assert argv[:2] == ["rlspec", "repro"], line
    capsys.readouterr()
    assert main(argv[1:]) == 1, line
    out = capsys.readouterr().out
    shown = "fail" if status == "fail" else "error"
    assert f"status: {shown}" in out, (line, out[-2000:])
