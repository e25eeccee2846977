"""Trainer-level conformance of TRL (``rlspec e2e --trainer trl``): TRL's GRPOTrainer trained a few steps
on the tiny Llama and digit task, every step's batch checked against the oracle.

The quick run uses two steps over one generated batch (``num_iterations=2``), so it covers a fresh
batch (ratio 1) and a reused one (ratios off 1, TRL's old log-probs in use), beta > 0 (reference
model and KL term) and a temperature != 1.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from conformance.cli import main as cli_main  # noqa: E402
from conformance.frameworks.trl.e2e import run_trl_steps  # noqa: E402

CHECKS = ("mask", "rewards", "advantages", "old_logp", "ref_logp", "logp", "loss")


@pytest.fixture(scope="module")
def trl_run():
    return run_trl_steps(steps=2, seed=1)  # seed 1: the first batch has groups with unequal rewards


def test_every_step_is_checked_and_conforms(trl_run):
    rows, run = trl_run
    ids = [r.id for r in rows]
    assert ids[0] == "trl.grpo.sampling"
    for step in range(2):
        for check in CHECKS:
            assert f"trl.grpo_step[{step}].{check}" in ids
    bad = [(r.id, r.message) for r in rows if r.status not in ("pass", "preset")]
    assert not bad, bad
    by_id = {r.id: r for r in rows}
    # TRL normalises by std + 1e-4 (preset trl) and, once the ratio moves off 1, multiplies its KL term
    # by the ratio (use_bias_correction_kl, preset trl); at step 0 the policy is the reference, KL = 0
    assert by_id["trl.grpo_step[0].advantages"].matched_preset == "trl"
    assert by_id["trl.grpo_step[0].loss"].status == "pass"
    assert by_id["trl.grpo_step[1].loss"].matched_preset == "trl"
    assert "KL x importance ratio" in by_id["trl.grpo_step[1].loss"].message
    assert "ratio in [1.000, 1.000]" not in by_id["trl.grpo_step[1].loss"].message  # the reused batch is off-policy
    assert len(run.losses) == 2 and len(run.generations) == 1


def test_the_checks_see_a_wrong_temperature(trl_run):
    _, run = trl_run
    saved = run.config["temperature"]
    run.config["temperature"] = 1.0  # what an implementation that forgot the temperature would compute
    try:
        rows = {r.id: r for r in run.rows()}
    finally:
        run.config["temperature"] = saved
    for check in ("old_logp", "ref_logp", "logp", "loss"):
        assert rows[f"trl.grpo_step[0].{check}"].status == "fail", check
    assert rows["trl.grpo.sampling"].status == "fail"


def test_cli_e2e_trl_reports_per_step(tmp_path, capsys):
    path = tmp_path / "e2e.json"
    assert cli_main(["e2e", "--trainer", "trl", "--steps", "1", "--num-iterations", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "trl.grpo_step[0].loss" in out and "spec id" in out
    report = json.loads(path.read_text())
    assert report["ok"] and report["adapters"][0]["name"] == "trl"
    by_id = {c["id"]: c for c in report["checks"]}
    # num_iterations = 1: TRL uses the loss forward's own log-probs as old ones (no old forward)
    assert by_id["trl.grpo_step[0].old_logp"]["status"] == "not_implemented"
