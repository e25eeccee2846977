"""The conformance suite as pytest tests (collected with `pytest --pyargs conformance`)."""

from __future__ import annotations

import pytest

from conformance.commands.check import golden_cases
from conformance.suite import check_row, seeds_for


def test_conformance(rlspec_unit, request):
    record, adapter = rlspec_unit
    seeds = seeds_for(record.function, request.config.getoption("--rlspec-seed"),
                      request.config.getoption("--rlspec-n-seeds"))
    row = check_row(record, adapter, seeds=seeds, golden=golden_cases(record))
    if row.status == "not_implemented":
        pytest.skip(row.message)
    if row.status == "preset":
        if request.config.getoption("--rlspec-strict-presets"):
            pytest.fail(row.message, pytrace=False)
        print(row.message)
        return
    assert row.status == "pass", row.message
