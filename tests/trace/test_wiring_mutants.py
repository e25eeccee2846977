"""Every wiring mutant (a training-step bug planted in the refimpl trainer) is caught by `rlspec replay` of its
trace at its own link and named; the unmutated trainer passes in every configuration the mutants use."""

from __future__ import annotations

import pytest

from conformance.mutants.wiring import discover
from conformance.mutants.wiring.judge import false_positives, judge

MUTANTS = discover()
NAMES = [m.name for m in MUTANTS]


def test_at_least_twelve_wiring_mutants_with_distinct_bug_classes():
    assert len(MUTANTS) >= 12
    assert len({m.bug_class for m in MUTANTS}) == len(MUTANTS)
    for m in MUTANTS:
        assert m.doc and m.cites and m.link.startswith("trace."), m.name


@pytest.mark.parametrize("name", NAMES)
def test_wiring_mutant_is_caught_at_its_link_and_named(name):
    result = judge(next(m for m in MUTANTS if m.name == name))
    assert result.caught, f"{name}: {result.link} is {result.status}: {result.message}"
    assert result.named, f"{name}: {result.link} identified {result.identified}: {result.message}"


def test_the_unmutated_trainer_has_no_false_positive_in_any_mutant_configuration():
    assert false_positives(MUTANTS) == []


def test_rlspec_mutants_reports_the_wiring_mutants_beside_the_function_mutants(tmp_path, capsys):
    import json

    from conformance import cli

    path = tmp_path / "m.json"
    code = cli.main(["mutants", "--only", "grad_accum_divided_twice", "--json", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "wiring: caught 1/1, named 1/1" in out and "grad_accum_divided_twice  trace.grad" in out
    assert "refimpl trainer: every link passes in every mutant's configuration (0 false positives)" in out
    data = json.loads(path.read_text())
    assert [w["name"] for w in data["wiring"]] == ["grad_accum_divided_twice"] and data["wiring_false_positives"] == []
    assert data["total"] == 0 and data["ok"]  # no function mutant matches the name
