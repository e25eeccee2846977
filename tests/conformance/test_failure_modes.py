"""Every failure mode of a row is shown ([20] item 2): distinct failing clusters (which output misses,
and how), each with its worst case and its own reproduce line; cases that raise are their own mode,
beside the semantic verdict, never in place of it; small failing cases print their values.

The adapters are in `example_adapters.py`, each the refimpl with the deviations its docstring names, so
the modes expected follow from how it is built.
"""

from __future__ import annotations

import shlex

from conformance.cli import main
from conformance.records.tags import case_tags
from conformance.runner import report as reports
from conformance.runner.options import RunOptions
from conformance.runner.run import run, select_records

import numpy as np

EXAMPLES = "tests.conformance.example_adapters"


def row_of(adapter: str, only: str, n_seeds: int = 8):
    rep = run([f"{EXAMPLES}:{adapter}"], select_records([only]), RunOptions(seed=0, n_seeds=n_seeds, timeout=120, isolate="never"))
    (row,) = [r for r in rep.rows if r.status != "not_implemented"]
    return row


def test_two_bugs_in_one_function_are_two_modes_each_with_its_reproduce_line(capsys):
    row = row_of("two_bugs", "loss.ppo")
    assert row.status == "fail"
    labels = {m["label"]: m for m in row.failures}
    assert "value off" in labels and "value NaN" in labels, list(labels)  # the clamp at 2, the empty-row NaN
    assert "empty row" in labels["value NaN"]["tags"]
    assert "empty row" not in labels["value off"]["tags"]
    details = "\n".join(reports.row_details(row))
    assert f"{len(row.failures)} failure modes" in details
    for mode in (labels["value off"], labels["value NaN"]):
        assert mode["reproduce"] in details
        # each mode's own reproduce line re-runs a failing case of that mode
        argv = shlex.split(mode["reproduce"])[1:]
        assert main(argv) == 1
        out = capsys.readouterr().out
        assert ("NaN" in out) == (mode["label"] == "value NaN"), out


def test_an_error_on_a_degenerate_case_is_beside_the_verdict_not_in_place_of_it():
    row = row_of("raises_on_degenerate", "adv.gae")
    assert row.status == "pass"  # every case with a valid token is the canonical gae
    (mode,) = row.failures
    assert mode["kind"] == "error" and mode["label"] == "raises ValueError"
    assert "no valid token" in mode["tags"]
    assert reports.cell(row) == "pass (ERROR)"
    assert "error" in reports.row_findings(row)  # still a finding: --fail-on error (the default) fails it
    assert row.message.startswith("ERROR beside the verdict: raises ValueError")


def test_a_row_whose_every_case_raises_is_an_error():
    row = row_of("misbehaving", "adv.rloo", n_seeds=2)
    assert row.status == "error" and row.failures and row.failures[0]["kind"] == "error"


def test_case_tags_follow_from_the_arrays():
    mask = np.array([[True, False, True], [False, False, False], [False, True, False]])
    logp = np.zeros((3, 3))
    old = np.where([[True, False, False]] * 3, -100.0, 0.0)
    assert case_tags({"logp": logp, "old_logp": old, "mask": mask}) == (
        "empty row", "one-token row", "gapped mask", "|log-ratio| > 88")
    assert case_tags({"rewards": np.array([1.0, 1.0, 0.0, 1.0]), "group_size": 2}) == ("all-equal group",)
    assert case_tags({"rewards": np.array([1.0]), "group_size": 1}) == ("group of one",)
    assert case_tags({"x": np.array([[np.nan, 1.0]]), "mask": np.array([[False, True]])}) == (
        "one-token row", "non-finite at masked")
    assert case_tags({"mask": np.zeros((2, 2), dtype=bool)}) == ("no valid token", "empty row")


def test_a_small_failing_case_prints_its_inputs_expected_and_actual_values(capsys):
    code = main(["check", "--adapter", f"{EXAMPLES}:nonzero_at_masked", "--only", "loss.pg", "--n-seeds", "3",
                 "--no-progress", "--isolate", "never"])
    out = capsys.readouterr().out
    assert code == 1
    for label in ("input logp: [[", "input mask: [[", "expected value: [[", "actual value: [["):
        assert label in out, out


def test_a_failing_preset_check_names_the_keyword_the_adapter_ignored():
    row = row_of("ignores_a_preset_keyword", "loss.ppo")
    assert row.status == "fail"
    (mode,) = [m for m in row.failures if m["kind"] == "preset"]
    assert mode["checks"] == ["preset:verl"]  # the only preset passing dual_clip
    assert "preset verl tried: the adapter was passed dual_clip=3.0, log_ratio_clamp=20.0" in row.message
    assert "dual_clip=3.0: the outputs match dual_clip=None: the adapter ignores it" in row.message
    assert "log_ratio_clamp=20.0: taken as passed" in row.message


def test_pattern_only_hints_are_behind_explain(capsys):
    argv = ["check", "--adapter", f"{EXAMPLES}:ignores_a_preset_keyword", "--only", "loss.ppo", "--no-progress",
            "--isolate", "never"]
    assert main(argv) == 1
    plain = capsys.readouterr().out
    assert main(argv + ["--explain"]) == 1
    explained = capsys.readouterr().out
    assert "failure pattern only" not in plain and "rlspec check --explain" in plain
    assert "failure pattern also fits (outputs not reproduced, a weak hint)" in explained


def test_a_preset_never_hides_a_failure_of_a_framework_without_the_canonical_form():
    honest = row_of("lacks_the_canonical_form", "loss.gspo")
    buggy = row_of("lacks_the_canonical_form_nan", "loss.gspo")
    for row in (honest, buggy):
        assert any(n.startswith("canonical form not offered") and "skyrl, verl" in n for n in row.notes), row.notes
        assert row.counts["golden"] > 0  # the golden vectors ran, under the presets' keywords
    assert honest.status == "pass", honest.message
    assert buggy.status == "fail" and "NaN" in buggy.message
    assert "--kw" in buggy.reproduce and "form='token_sg'" in buggy.reproduce  # under the preset's keywords


def test_a_divergence_outside_the_declared_domain_is_a_note_and_the_same_vector_still_runs():
    undeclared = row_of("nan_for_a_group_of_one", "adv.grpo")
    declared = row_of("group_of_one_outside_its_domain", "adv.grpo")
    assert undeclared.status == "fail" and "group of one" in undeclared.failures[0]["tags"]
    assert declared.status == "pass", declared.message  # every in-domain case is canonical
    (note,) = [n for n in declared.notes if n.startswith("outside the framework's domain")]
    assert "group of one: the trainer's config refuses num_generations = 1 (config.py:12)" in note
    assert "value NaN" in note and "Reproduce: rlspec repro grpo_advantages" in note
    assert [m["kind"] for m in declared.failures] == ["outside"]  # listed apart, no finding counted
    assert reports.row_findings(declared) == set()
    # the verdict rests on the in-domain cases only: every golden vector but those with a group of one
    from conformance.vectors.golden import cases_for

    singles = sum(c.args["group_size"] == 1 for c in cases_for("grpo_advantages"))
    assert singles > 0 and declared.counts["golden"] == len(cases_for("grpo_advantages")) - singles


def test_a_domain_naming_an_unknown_feature_is_a_load_error():
    import types

    import pytest

    from conformance.runner.protocol import AdapterError, LoadedAdapter

    bad = types.SimpleNamespace(name="x", version="0", spec_version="v1", array_api="torch",
                                domain={"grpo_advantages": {"groups of one": "typo"}})
    with pytest.raises(AdapterError, match="unknown input feature"):
        LoadedAdapter.of(bad)


def test_notes_outside_the_domain_are_listed_apart_in_the_markdown_and_the_summary():
    rep = run([f"{EXAMPLES}:group_of_one_outside_its_domain"], select_records(["adv.grpo"]),
              RunOptions(seed=0, n_seeds=8, timeout=120, isolate="never"))
    text = reports.render_markdown(rep)
    section = text.split("## Outside the framework's domain", 1)[1]
    assert "`grpo_advantages` @ group_of_one_outside_its_domain: outside the framework's domain (group of one" in section
    assert "1 with notes outside the framework's domain" in reports.summary(rep)
    assert "no findings" in reports.summary(rep)
