"""The conformance suite as pytest tests (collected with `pytest --pyargs conformance`; conformance/pytest_plugin.py)."""

from __future__ import annotations

import pytest

from conformance.runner import report as reports


def test_conformance(rlspec_rows):
    rows, fail_on, idle = rlspec_rows
    if idle:
        pytest.fail("the adapter implements none of the selected spec functions (each is absent or raises "
                    "NotImplementedError on every case): nothing was checked", pytrace=False)
    if rows and all(r.status == "not_implemented" for r in rows):
        pytest.skip("; ".join(r.message for r in rows))
    text = "\n\n".join("\n".join([f"{reports.row_label(r)}: {reports.cell(r)}", *reports.row_details(r),
                                  *(f["message"] for f in r.precision_findings)]) for r in rows)
    if any(reports.row_findings(r) & set(fail_on) for r in rows):
        pytest.fail(text, pytrace=False)
    print(text)
