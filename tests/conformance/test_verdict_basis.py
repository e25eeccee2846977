"""What a verdict rests on ([20] item 11): case counts per row and family, thin verdicts, an adapter that
checks nothing is a broken run, `supports_grad` and `dtypes` per function, and "no gradient offered" for
an output without an autograd graph.

The adapters are in `example_adapters.py`; each expected count follows from how the adapter and the run
are built (the dtypes it declares, `--n-seeds`, the golden vectors on disk), not from the runner.
"""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
from pathlib import Path

from conformance.records import BY_FUNCTION
from conformance.runner import report as reports
from conformance.runner.options import RunOptions
from conformance.runner.rows import CASE_FAMILIES, MIN_COMPARED
from conformance.runner.run import run, select_records

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = "tests.conformance.example_adapters"
VECTORS = ROOT / "conformance" / "vectors" / "v1"


def rows_of(adapter: str, *only: str, n_seeds: int = 3) -> dict:
    rep = run([f"{EXAMPLES}:{adapter}"], select_records(list(only)),
              RunOptions(seed=0, n_seeds=n_seeds, timeout=120, isolate="never"))
    return {r.function: r for r in rep.rows}


def rows_of_builtin(adapter: str, *only: str, n_seeds: int = 3) -> dict:
    rep = run([adapter], select_records(list(only)), RunOptions(seed=0, n_seeds=n_seeds, timeout=120, isolate="never"))
    return {r.function: r for r in rep.rows}


def golden_on_disk(function: str) -> int:
    return len(list((VECTORS / function).glob("*.json")))


def test_counts_per_family_follow_from_the_dtypes_seeds_and_vectors():
    rows = rows_of("per_function_dtypes", "adv.gae", "adv.grpo", n_seeds=3)
    gae, grpo = rows["gae"], rows["grpo_advantages"]
    assert gae.status == grpo.status == "pass", (gae.message, grpo.message)
    assert set(gae.counts) == set(CASE_FAMILIES)
    # gae declared float64 only, grpo_advantages the "*" default (float64 and float32): the same property cases
    # per dtype as the refimpl's own rows (float64, float32, bfloat16), so 1/3 and 2/3 of them
    full = rows_of_builtin("refimpl", "adv.gae", "adv.grpo", n_seeds=3)
    per_dtype = {f: full[f].counts["property"] // 3 for f in ("gae", "grpo_advantages")}
    assert full["gae"].counts["property"] == 3 * per_dtype["gae"] and per_dtype["gae"] >= 3  # at least the 3 seeds
    assert gae.counts["property"] == per_dtype["gae"] and grpo.counts["property"] == 2 * per_dtype["grpo_advantages"]
    # every golden vector of the function runs (no adapter-side refusal, none ill-conditioned for refimpl)
    assert gae.counts["golden"] == golden_on_disk("gae")
    assert grpo.counts["golden"] == golden_on_disk("grpo_advantages")
    assert gae.counts["preset"] == grpo.counts["preset"] == 0  # accepts_variants is off
    assert not gae.thin and not grpo.thin
    assert reports.counts_label(gae) == f"{per_dtype['gae']}/{golden_on_disk('gae')}/{gae.counts['invariant']}/0"


def test_a_pass_resting_on_golden_vectors_alone_is_thin_and_says_so(tmp_path):
    (row,) = rows_of("golden_vectors_only", "adv.grpo").values()
    assert row.status == "pass" and row.counts["property"] == 0, row
    assert row.counts["golden"] == golden_on_disk("grpo_advantages") >= MIN_COMPARED
    assert row.thin and "thin" in reports.row_findings(row)
    assert reports.cell(row) == "pass (partial, thin)"
    assert any(line.startswith("thin: the verdict rests on 0/") for line in reports.row_details(row))
    # thin is a finding kind of its own: not failing by default, failing when asked
    base = [sys.executable, "-m", "conformance.cli", "check", "--adapter", f"{EXAMPLES}:golden_vectors_only",
            "--only", "adv.grpo", "--n-seeds", "2", "--no-progress", "--isolate", "never"]
    default = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert default.returncode == 0, default.stdout + default.stderr
    asked = subprocess.run(base + ["--fail-on", "fail,thin"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert asked.returncode == 1 and "findings: thin" in asked.stdout, asked.stdout


def test_an_adapter_that_implements_nothing_is_a_broken_run(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "check", "--adapter",
                           f"{EXAMPLES}:all_not_implemented", "--only", "adv.grpo", "--only", "loss.ppo",
                           "--n-seeds", "2", "--no-progress", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "implements none of the selected spec functions" in proc.stderr and "Traceback" not in proc.stderr
    assert "nothing checked (no selected function implemented): " in proc.stdout
    assert json.loads(out.read_text())["schema"] == reports.REPORT_SCHEMA_VERSION  # the report is still written


def test_the_pytest_plugin_fails_an_adapter_that_implements_nothing():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "conformance",
                           "--rlspec-adapter", f"{EXAMPLES}:all_not_implemented", "--rlspec-only", "adv.grpo",
                           "--rlspec-n-seeds", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout + proc.stderr
    assert "nothing was checked" in proc.stdout


def test_an_output_without_graph_fails_with_the_no_gradient_hint():
    (row,) = rows_of("metric_without_graph", "kl.estimator").values()
    assert row.status == "fail", row
    assert "no gradient offered: the output has no autograd graph" in row.message
    assert "supports_grad = {'kl_penalty': False}" in row.message


def test_supports_grad_per_function_checks_values_only_there():
    rows = rows_of("metric_declared_without_grad", "kl.estimator", "adv.gae")
    kl, gae = rows["kl_penalty"], rows["gae"]
    assert kl.status == "pass", kl.message
    assert kl.notes == ["no gradient offered: values only (supports_grad is False for kl_penalty)"]
    assert "invariant:detached" not in kl.checks  # no gradient: nothing to be detached from
    assert gae.status == "pass" and gae.notes == [] and "invariant:detached" in gae.checks
    assert BY_FUNCTION["gae"].stop_grad_args  # (why gae has that check at all)


def test_a_framework_import_failing_in_every_function_is_one_load_error():
    rep = run([f"{EXAMPLES}:framework_not_installed"], select_records(["adv.grpo", "adv.gae", "loss.ppo", "adv.rloo"]),
              RunOptions(seed=0, n_seeds=2, timeout=60, isolate="always"))
    (info,) = rep.adapters
    assert info.status == "load_error", info
    assert "ModuleNotFoundError: No module named 'rlspec_no_such_framework'" in info.message
    assert rep.rows == []
    text = reports.render_table(rep)
    assert text.count("rlspec_no_such_framework") == 1, text  # said once, not once per row
    assert "not checked (not loaded)" in text


def test_unsupported_kwargs_takes_a_predicate():
    (row,) = rows_of("scalar_policy_loss_without_kl", "loss.policy", n_seeds=8).values()
    assert row.status == "pass", row.message
    assert row.not_implemented_cases and all(c.startswith("kl_coef=") for c in row.not_implemented_cases), row.not_implemented_cases
    refused = {float(c.split(":")[0].removeprefix("kl_coef=")) for c in row.not_implemented_cases}
    assert refused and 0.0 not in refused, row.not_implemented_cases
    assert row.counts["property"] > 0  # the cases with kl_coef = 0 ran


def test_an_adapter_offering_only_the_canonical_keywords_gets_property_cases(capsys):
    from conformance.cli import main
    from conformance.runner.verdict import alone_cases
    from conformance.runner.rows import seeds_for

    record = BY_FUNCTION["ppo_token_loss"]
    seeds = seeds_for("ppo_token_loss", 0, 8)
    canonical = [c for c in alone_cases(record, seeds) if not record.question_kwargs(c.kwargs)]
    assert len(canonical) == 1  # one case varies no keyword; the others vary one each
    assert all(len(record.question_kwargs(c.kwargs)) <= 1 for c in alone_cases(record, seeds))
    (row,) = rows_of("canonical_keywords_only", "loss.ppo", n_seeds=8).values()
    # the case passing no keyword ran in each of the three dtypes and matched the spec; the keywords the
    # function's signature cannot take are "not implemented", not errors
    assert row.status == "pass" and not row.failures, row.message
    assert row.counts["property"] == 3, row.counts
    assert row.not_implemented_cases and all("the function takes no such keyword" in c for c in row.not_implemented_cases)
    assert reports.cell(row).startswith("pass (partial")
    code = main(["repro", "ppo_token_loss", "--seed", str(canonical[0].seed), "--canonical", "--adapter",
                 f"{EXAMPLES}:canonical_keywords_only"])
    assert code == 0 and "status: pass" in capsys.readouterr().out


def test_per_function_attributes_naming_no_spec_function_are_load_errors():
    import types

    import pytest

    from conformance.runner.protocol import AdapterError, LoadedAdapter

    def adapter(**attributes):
        return types.SimpleNamespace(name="x", version="0", spec_version="v1", array_api="torch", **attributes)

    for attribute, value in (("supports_grad", {"kl_penalti": False}), ("dtypes", {"gea": ("float64",)}),
                             ("domain", {"grpo_advantage": {"group of one": "why"}})):
        with pytest.raises(AdapterError, match=f"adapter 'x': {attribute} names no spec function"):
            LoadedAdapter.of(adapter(**{attribute: value}))
    LoadedAdapter.of(adapter(supports_grad={"kl_penalty": False, "*": True}, dtypes={"micro_batched_loss": ("float64",)}))


@pytest.mark.parametrize("adapter", ["scalar_loss_one_token_at_a_time", "scalar_loss_from_weight_gradient"])
def test_a_scalar_only_loss_wrapped_as_the_docs_say_is_checked_in_value_and_gradient(adapter):
    """docs/checking.md, "A framework whose loss returns only a scalar": both recipes give per-token losses
    whose value and gradient the runner checks; the keywords the framework lacks are not offered."""
    (row,) = rows_of(adapter, "loss.ppo", n_seeds=8).values()
    assert row.status == "pass", row.message
    assert not any("no gradient offered" in n for n in row.notes), row.notes  # the gradient was compared
    assert row.counts["property"] > 0 and row.counts["golden"] > 0, row.counts
    assert row.not_implemented_cases  # dual_clip and eps_low != eps_high: said, never a pass


def test_the_weight_gradient_recipe_without_create_graph_is_caught():
    (row,) = rows_of("scalar_loss_weight_gradient_without_graph", "loss.ppo", n_seeds=8).values()
    assert row.status == "fail" and "autograd graph" in row.message, (row.status, row.message)
