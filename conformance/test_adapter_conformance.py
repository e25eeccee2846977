"""The conformance suite as pytest tests (collected with `pytest --pyargs conformance`)."""

from __future__ import annotations

import pytest

from conformance import report as reports
from conformance.commands.check import RunOptions, run_row
from conformance.commands.check import _fail_on as parse_fail_on


def test_conformance(rlspec_unit, request):
    record, adapter, ref = rlspec_unit
    option = request.config.getoption
    options = RunOptions(seed=option("--rlspec-seed"), n_seeds=option("--rlspec-n-seeds"),
                         strict_precision=option("--rlspec-strict-precision"))
    fail_on = parse_fail_on(option("--rlspec-fail-on") or ",".join(reports.DEFAULT_FAIL_ON))
    row = run_row(record, adapter, ref, options)
    if row.status == "not_implemented":
        pytest.skip(row.message)
    text = "\n".join([reports.cell(row), *reports.row_details(row), *(f["message"] for f in row.precision_findings)])
    if reports.row_findings(row) & set(fail_on):
        pytest.fail(text, pytrace=False)
    print(text)
