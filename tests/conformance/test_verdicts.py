"""Verdicts for adapters written by someone else: precision as its own axis, cases the adapter does
not offer, reproduce lines that re-run the failure, diagnosis only where it means something, the
JSON figures, and the exit codes a CI job reads.

The adapters are in `precision_adapters.py` (low precision, partial, a float32 preset, a float32
bug), `example_adapters.py` (broken, misbehaving) and `raises_at_import.py`; each one's expected
verdict follows from how it is built (refimpl plus exactly one deviation), not from the runner.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.runner import report as reports
from conformance.cli import main
from conformance.runner.run import run, select_records
from conformance.runner.options import RunOptions

ROOT = Path(__file__).resolve().parents[2]
PRECISION = "tests.conformance.precision_adapters"
EXAMPLES = "tests.conformance.example_adapters"


def rows_of(adapter: str, *only: str, n_seeds: int = 4, **kw) -> dict:
    rep = run([f"{PRECISION}:{adapter}"], select_records(list(only)), RunOptions(seed=0, n_seeds=n_seeds, timeout=120, isolate="never", **kw))
    return {r.function: r for r in rep.rows}


# ---------------------------------------------------------------------------------------------
# precision is its own axis
# ---------------------------------------------------------------------------------------------


def test_float32_framework_passes_with_a_precision_finding():
    row = rows_of("float32_gae", "adv.gae")["gae"]
    assert row.status == "pass" and not row.consistent_with, row.message
    assert row.precision["float64"] == "float32" and row.precision["float32"] == "float32"
    (finding,) = row.precision_findings
    assert finding["dtype"] == "float64" and finding["meets"] == "float32"
    assert "float64 inputs: outputs meet float32 precision" in finding["message"]
    assert f"--adapter {PRECISION}:float32_gae" in finding["reproduce"]


def test_strict_precision_restores_the_input_dtype_tolerance():
    row = rows_of("float32_gae", "adv.gae", strict_precision=True)["gae"]
    assert row.status == "fail" and not row.precision_findings
    assert not row.consistent_with  # a rounding difference is no known bug


def test_preset_is_named_at_the_frameworks_own_precision():
    """SkyRL-style: k3 clamped as verl does, every estimator in float32. Judged at float64 precision
    nothing matches; at the float32 precision it meets, the k3 cases are a preset: the output clamp at 10
    (AReaL's and OpenRLHF's keywords) explains them as exactly as verl's (which adds the log-ratio clamp at
    20, inert once the output is clamped), and of equal explanations the first in framework order is named."""
    row = rows_of("float32_clamped_kl", "kl.estimator")["kl_penalty"]
    # the keywords {clamp: 10.0} are AReaL's and OpenRLHF's: the row names every preset with them
    assert row.status == "preset" and row.matched_preset == "areal, openrlhf", row.message
    assert "estimator='k3': preset areal, openrlhf (clamp=10.0)" in row.message
    assert row.precision["float64"] == "float32"
    assert [f["dtype"] for f in row.precision_findings] == ["float64"]
    strict = rows_of("float32_clamped_kl", "kl.estimator", strict_precision=True)["kl_penalty"]
    assert strict.status == "fail" and strict.matched_preset is None


def test_bfloat16_softmax_is_a_precision_finding_with_the_adapters_note():
    row = rows_of("bf16_softmax", "logprob.token", n_seeds=8)["token_logprobs"]
    assert row.status == "pass", row.message
    assert row.precision["bfloat16"] == "below_bfloat16" and row.precision["float64"] == "float64"
    (finding,) = row.precision_findings
    assert finding["note"] == "softmax in bfloat16" and finding["message"].endswith(": softmax in bfloat16")
    assert "below bfloat16" in finding["message"]


def test_float32_everywhere_is_never_a_fail_nor_a_bug():
    rows = rows_of("float32_everything", "adv.*", "loss.ppo", "loss.cispo", "loss.value")
    implemented = {f: r for f, r in rows.items() if r.status != "not_implemented"}
    assert len(implemented) == 6
    for function, row in implemented.items():
        assert row.status == "pass" and not row.consistent_with, (function, row.message)
        assert row.precision["float64"] != "float64" and row.precision_findings, function


def test_a_bug_in_a_float32_framework_is_diagnosed_at_its_precision():
    row = rows_of("float32_no_temperature", "logprob.token")["token_logprobs"]
    assert row.status == "fail"
    assert any("logprob_temperature_missing" in c and reports_pattern_only(c) is False for c in row.consistent_with), \
        row.consistent_with
    assert "judged at float32 precision" in row.message


def reports_pattern_only(label: str) -> bool:
    from conformance.runner.diagnosis import PATTERN_ONLY

    return label.endswith(PATTERN_ONLY)


# ---------------------------------------------------------------------------------------------
# cases the adapter does not offer
# ---------------------------------------------------------------------------------------------


def test_not_implemented_keyword_values_leave_the_rest_of_the_row_checked():
    rows = rows_of("partial_grpo", "adv.grpo", "agg")
    grpo, agg = rows["grpo_advantages"], rows["aggregate"]
    assert grpo.status == "pass", grpo.message
    assert grpo.not_implemented_cases == ["scale='batch': this framework normalises per group only"]  # the adapter's reason
    assert grpo.checks["property"] == "pass" and grpo.checks["golden"] == "pass"
    assert agg.status == "pass" and any("mode='seq_mean_token_sum'" in c for c in agg.not_implemented_cases)
    assert reports.cell(grpo) == "pass (partial)"
    assert "partial" in reports.row_findings(grpo) and "partial" not in reports.DEFAULT_FAIL_ON


def test_declared_unsupported_values_are_never_called(monkeypatch):
    import refimpl
    from tests.conformance import precision_adapters

    modes = []
    real = refimpl.aggregate

    def spy(*args, **kwargs):
        modes.append(kwargs.get("mode"))
        return real(*args, **kwargs)

    monkeypatch.setattr(refimpl, "aggregate", spy)
    adapter = precision_adapters.partial_grpo()
    assert adapter.aggregate is spy
    rep = run([adapter], select_records(["agg"]), RunOptions(seed=0, n_seeds=6, timeout=60))
    assert "seq_mean_token_sum" not in modes and "token_mean" in modes
    assert {r.status for r in rep.rows if r.function == "aggregate"} == {"pass"}


def test_a_skeleton_that_raises_everywhere_is_not_implemented_not_partial():
    rep = run([f"{EXAMPLES}:all_not_implemented"], select_records(["adv.grpo", "loss.ppo"]), RunOptions(seed=0, n_seeds=2, timeout=60, isolate="never"))
    for row in rep.rows:
        assert row.status == "not_implemented" and not row.not_implemented_cases, row
        assert reports.cell(row) == "not implemented"


# ---------------------------------------------------------------------------------------------
# diagnosis, relative errors, JSON figures
# ---------------------------------------------------------------------------------------------


def test_no_bug_hypothesis_for_an_exception():
    rep = run([f"{EXAMPLES}:misbehaving"], select_records(["adv.rloo"]), RunOptions(seed=0, n_seeds=2, timeout=20, isolate="never"))
    (row,) = rep.rows
    assert row.status == "error" and row.consistent_with == []


def test_relative_error_only_where_expected_exceeds_atol_and_json_equals_the_message(tmp_path):
    out = tmp_path / "r.json"
    code = main(["check", "--adapter", f"{EXAMPLES}:nonzero_at_masked", "--only", "loss.pg", "--n-seeds", "3",
                 "--no-progress", "--isolate", "never", "--json", str(out)])
    assert code == 1
    (row,) = [c for c in json.loads(out.read_text())["checks"] if c["function"] == "pg_token_loss"]
    assert row["status"] == "fail"
    assert "e+30" not in row["message"] and "no relative difference" in row["message"]
    assert row["max_rel_err"] is None  # every element it got wrong expected exactly 0
    shown = [float(x) for x in re.findall(r"greatest absolute difference ([0-9.e+-]+)", row["message"])]
    assert f"{row['max_abs_err']:.3g}" == f"{max(shown):.3g}"


# ---------------------------------------------------------------------------------------------
# reproduce lines that re-run the failure
# ---------------------------------------------------------------------------------------------


# (adapter, spec glob, a fragment one of its reproduce lines must carry)
FAILING = [
    (f"{EXAMPLES}:broken", "logprob.token", "--vector token_logprobs/"),  # a FAIL whose worst case is a golden vector
    (f"{PRECISION}:float32_no_temperature", "logprob.token", "--precision float32"),  # judged at float32
    (f"{PRECISION}:bf16_softmax", "logprob.token", "--dtype bfloat16"),  # a precision finding
    (f"{PRECISION}:float32_clamped_kl", "kl.estimator", "--oracle-kw clamp=10.0"),  # under a preset's keywords
    ("conformance.mutants.ppo_ratio_overflow_nan:MUTANT.adapter", "loss.ppo", "--invariant mask"),  # an invariant
    (f"{EXAMPLES}:with_framework_row", "agg", "--row 'with_framework_row.loss[sum]'"),  # a framework-specific row
]


@pytest.fixture(params=FAILING, ids=[a.rsplit(".", 1)[-1] for a, _, _ in FAILING])
def failing_report(request, tmp_path):
    adapter, only, fragment = request.param
    out = tmp_path / "r.json"
    code = main(["check", "--adapter", adapter, "--only", only, "--n-seeds", "8", "--no-progress",
                 "--isolate", "never", "--json", str(out)])
    return code, json.loads(out.read_text()), fragment


def test_every_reproduce_line_reruns_the_same_failure(failing_report, capsys):
    code, data, fragment = failing_report
    assert code == 1
    lines = [c["reproduce"] for c in data["checks"] if c["status"] in ("fail", "error") and c["reproduce"]]
    lines += [f["reproduce"] for c in data["checks"] for f in c["precision_findings"]]
    assert lines, "a failing report prints at least one reproduce line"
    for c in data["checks"]:
        for line in [c["reproduce"]] if c["status"] == "fail" else []:
            assert line in c["message"], "the JSON reproduce line is the one the message prints"
    assert any(fragment in line for line in lines), lines
    for line in lines:
        argv = shlex.split(line)
        assert argv[:2] == ["rlspec", "repro"], line
        capsys.readouterr()
        assert main(argv[1:]) == 1, line
        out = capsys.readouterr().out
        assert "status: fail" in out, (line, out)


def test_repro_row_is_a_usage_error_for_an_unknown_row_or_extra_arguments(capsys):
    assert main(["repro", "--row", "nope", "--adapter", f"{EXAMPLES}:with_framework_row"]) == 2
    assert "no such row among the 1 framework rows" in capsys.readouterr().err
    assert main(["repro", "aggregate", "--row", "with_framework_row.loss[sum]", "--adapter",
                 f"{EXAMPLES}:with_framework_row"]) == 2
    assert main(["repro", "--row", "x", "--adapter", f"{EXAMPLES}:partial"]) == 2
    assert "defines no framework-specific rows" in capsys.readouterr().err
    assert main(["repro", "aggregate"]) == 2  # neither --seed nor --vector


# ---------------------------------------------------------------------------------------------
# exit codes a CI job can trust
# ---------------------------------------------------------------------------------------------


def rlspec(*argv: str) -> subprocess.CompletedProcess:
    """The installed command line, as a CI job runs it (from the repository root)."""
    return subprocess.run([sys.executable, "-m", "conformance.cli", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("argv, reason", [
    (["check", "--adapter", "mypkg.typo:Adapter"], "could not be loaded"),
    (["check", "--adapter", "tests.conformance.raises_at_import:Adapter"], "RuntimeError: CUDA driver not found"),
    (["check", "--adapter", f"{EXAMPLES}:no_such_factory"], "has no attribute"),
    (["check", "--adapter", "refimpl", "--only", "adv.nothing"], "matches no spec id"),
    (["check", "--adapter", "refimpl", "--fail-on", "fail,bogus"], "unknown finding kind"),
    (["repro", "gae", "--vector", "gae/no-such-vector", "--adapter", "refimpl"], "no golden vector"),
    (["repro", "gae", "--seed", "1", "--kw", "gamma"], "expected NAME=VALUE"),
    (["repro", "ppo_token_loss", "--seed", "1", "--invariant", "detached"], "runs no such check"),
])
def test_a_broken_run_exits_2_with_one_line_and_no_traceback(argv, reason):
    run = rlspec(*argv, "--no-progress") if argv[0] == "check" else rlspec(*argv)
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert reason in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert len([line for line in run.stderr.splitlines() if line.startswith("rlspec")]) <= 1 or "usage:" in run.stderr


def test_debug_shows_the_traceback():
    run = rlspec("check", "--adapter", "tests.conformance.raises_at_import:Adapter", "--no-progress", "--debug")
    assert run.returncode != 0 and "Traceback" in run.stderr


@pytest.mark.parametrize("argv, code", [
    (["--adapter", "refimpl", "--only", "adv.grpo"], 0),
    (["--adapter", f"{EXAMPLES}:broken", "--only", "logprob.token"], 1),
    (["--adapter", f"{PRECISION}:float32_gae", "--only", "adv.gae"], 1),  # a precision finding counts by default
    (["--adapter", f"{PRECISION}:float32_gae", "--only", "adv.gae", "--fail-on", "fail,error"], 0),
    (["--adapter", f"{PRECISION}:float32_clamped_kl", "--only", "kl.*", "--fail-on", "fail,error,preset"], 1),
    (["--adapter", f"{PRECISION}:partial_grpo", "--only", "adv.grpo"], 0),
    (["--adapter", f"{PRECISION}:partial_grpo", "--only", "adv.grpo", "--fail-on", "partial"], 1),
])
def test_exit_code_is_0_pass_1_findings(argv, code):
    assert main(["check", *argv, "--n-seeds", "3", "--no-progress", "--isolate", "never"]) == code


def test_fixed_keywords_never_edit_the_shared_golden_cases():
    """A framework row pins keywords (`fixed`); the golden cases are cached objects shared by every
    row of the run, so pinning must copy them (an edit once leaked OpenRLHF's pinned keywords into
    verl's row of the same process)."""
    from conformance.runner.builtin import refimpl_adapter
    from conformance.runner.parts import golden_cases
    from conformance.records import BY_FUNCTION
    from conformance.runner.verdict import check_row

    record = BY_FUNCTION["kl_penalty"]
    before = [dict(c.kwargs) for c in golden_cases(record)]
    check_row(record, refimpl_adapter(), seeds=[1], golden=golden_cases(record), fixed={"estimator": "k2"})
    assert [dict(c.kwargs) for c in golden_cases(record)] == before
