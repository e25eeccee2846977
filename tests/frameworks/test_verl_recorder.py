"""The verl trace recorder (conformance/frameworks/verl/recorder.py). It runs verl 0.9.1's real actor update
(``RayPPOTrainer._update_actor`` -> ``ActorRolloutRefWorker.update_actor`` -> the FSDP engine and ``ppo_loss``) in
verl's environment (marked `frameworks`, skipped with a reason without `rlspec frameworks install verl`; an
environment that cannot import verl's worker and trainer modules is a failure). The checks are worked by hand from the
recorder's configuration: batches of 2 prompts x 4 responses (8 rows, one mini-batch, ``ppo_epochs`` 2: two
optimizer steps on the same rows), micro-batches of 2 rows (4 per step), prompts left-padded to P = 5 columns,
responses right-padded to R = 6, vocabulary ids (pad 0, EOS 1, digit d = 4 + d), reward = the response's digit
sum over 9 x 6 on its last valid token.

Step 0 is on-policy (the old log-probs are the same weights' log-probs), so every ratio is 1 and no clip is
active: each token's PPO loss -A r has d/d logp = -A. verl's ``agg_loss`` with the global batch info ``ppo_loss``
passes (core_algos.py:1170-1202; dp_size 1) then gives, for a token of row i (n_i loss tokens) in a step of
N loss tokens and 8 rows:

- token-mean: d(backward scalar)/d logp = -A / N, micro-batch loss -Σ A_t / N;
- seq-mean-token-mean: -A_i / (n_i x 8), loss -Σ_i A_i / 8 (each row's token mean is A_i);
- seq-mean-token-sum-norm (loss_scale_factor None: R = 6): -A_i / (8 x 6), loss -Σ_i n_i A_i / 48.

With the KL term (low_var_kl, k3) the reference is the initial policy: at step 0 logp = ref, where k3 and its
slope 1 - exp(ref - logp) are 0. Step 1 trains the same rows after one update: the token-mean gradient is
-A r / N where the clipped objective follows r (A >= 0 and r <= 1.2, or A < 0 and 0.8 <= r <= 3) and 0 where
it is clipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.frameworks import subprocess_worker as sw
from tests.frameworks import pinned_rows
from tests.frameworks.recorder_traces import load_step, record_or_skip

ROOT = Path(__file__).resolve().parents[2]
SKIP_REASON = pinned_rows.skip_reason("verl", "verl")
SCENARIOS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "token_mean_kl")
STEPS = 2
MB, ROWS, STEP_ROWS, G, P, R, EOS, DIGIT0, V, D = 4, 2, 8, 4, 5, 6, 1, 4, 14, 32
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _python() -> str:
    python = sw.python_for("verl")[0]
    if python is None:
        pytest.skip(SKIP_REASON)
    probe = subprocess.run([python, "-c", "import verl.workers.engine_workers, verl.trainer.ppo.ray_trainer"],
                           capture_output=True, text=True, timeout=300, env=ENV)
    assert probe.returncode == 0, ("verl's environment cannot import its worker and trainer modules (requirements.txt "
                                   "pins their dependencies; reinstall: rlspec frameworks install verl --force):\n"
                                   + probe.stderr[-2000:])
    return python


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _python()
    return record_or_skip("verl", tmp_path_factory.mktemp("verl_traces"), SCENARIOS, steps=STEPS,
                          skip_reason=SKIP_REASON)


def _row_token_counts(mb: dict[str, np.ndarray]) -> np.ndarray:
    return mb["loss_mask"].sum(1).astype(np.float64)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_layout_and_shapes(traces: Path, scenario: str):
    for step in range(STEPS):
        manifest, _, mbs, st = load_step(traces, scenario, step)
        assert manifest["layout"] == {"dp": 1, "cp": 1, "micro_batches": MB}
        assert manifest["config"]["verl"]["ppo_micro_batch_size_per_gpu"] == ROWS
        assert len(mbs) == MB
        need = {"input_ids", "attention_mask", "prompt_mask", "completion_mask", "loss_mask", "logp", "grad_logp",
                "entropy", "old_logp", "advantages", "rewards", "token_rewards", "group_ids", "row_ids", "hidden",
                "old_hidden", "loss"}
        if scenario == "token_mean_kl":
            need |= {"ref_logp", "ref_hidden"}
        for mb in mbs:
            assert need <= set(mb), sorted(need - set(mb))
            assert mb["input_ids"].shape == (ROWS, P + R)
            for name in ("attention_mask", "prompt_mask", "completion_mask", "loss_mask", "logp", "grad_logp",
                         "entropy", "old_logp", "advantages", "token_rewards"):
                assert mb[name].shape == (ROWS, P + R), name
            assert mb["hidden"].shape == mb["old_hidden"].shape == (ROWS, P + R, D)
            assert mb["rewards"].shape == mb["group_ids"].shape == mb["row_ids"].shape == (ROWS,)
            assert mb["loss"].shape == ()
        assert st["lm_head_weight"].shape == st["probe_grad"].shape == st["old_lm_head_weight"].shape == (V, D)
        rows = np.concatenate([mb["row_ids"] for mb in mbs])
        assert sorted(rows.tolist()) == list(range(STEP_ROWS))
        groups = np.concatenate([mb["group_ids"] for mb in mbs])
        assert sorted(np.unique(groups, return_counts=True)[1].tolist()) == [G] * (STEP_ROWS // G)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_masks_left_padded_prompts_right_padded_responses(traces: Path, scenario: str):
    for step in range(STEPS):
        _, _, mbs, _ = load_step(traces, scenario, step)
        for mb in mbs:
            ids, L, Pm, C, A = (mb[k] for k in ("input_ids", "loss_mask", "prompt_mask", "completion_mask", "attention_mask"))
            assert not L[:, :P].any() and not Pm[:, P:].any(), "the prompt / response columns are not split at P"
            assert np.array_equal(L, C), "verl's response mask is the generated tokens through EOS here"
            assert not (L & ~A).any() and not (Pm & ~A).any()
            for i in range(ids.shape[0]):
                pcols, rcols = np.flatnonzero(Pm[i]), np.flatnonzero(L[i])
                assert pcols[-1] == P - 1 and np.array_equal(pcols, np.arange(pcols[0], P)), "prompt not left-padded"
                assert rcols[0] == P and np.array_equal(rcols, np.arange(P, P + len(rcols))), "response not right-padded"
                toks = ids[i, rcols]
                assert EOS not in toks[:-1].tolist()
                assert toks[-1] == EOS or len(toks) == R
                assert (ids[i, ~A[i]] == 0).all(), "padding is not the pad token"


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rewards_and_grpo_advantages_by_hand(traces: Path, scenario: str):
    """reward = digit sum / 54 on the last response token; A = (r - mean_g) / (unbiased std_g + 1e-6)."""
    _, _, mbs, _ = load_step(traces, scenario, 0)
    rewards, groups, adv = {}, {}, {}
    for mb in mbs:
        for i in range(ROWS):
            cols = np.flatnonzero(mb["loss_mask"][i])
            toks = mb["input_ids"][i, cols]
            r = sum(int(t) - DIGIT0 for t in toks if DIGIT0 <= t <= DIGIT0 + 9) / (9 * R)
            assert mb["rewards"][i] == pytest.approx(r, abs=1e-6)
            expected_tr = np.zeros(P + R)
            expected_tr[cols[-1]] = r
            np.testing.assert_allclose(mb["token_rewards"][i], expected_tr, atol=1e-6)
            row = int(mb["row_ids"][i])
            rewards[row], groups[row] = r, int(mb["group_ids"][i])
            a = mb["advantages"][i, cols]
            assert np.allclose(a, a[0]) and not mb["advantages"][i, ~mb["loss_mask"][i]].any()
            adv[row] = float(a[0])
    for g in set(groups.values()):
        members = [k for k in groups if groups[k] == g]
        r = np.array([rewards[k] for k in members])
        mean, std = r.mean(), np.sqrt(((r - r.mean()) ** 2).sum() / (len(r) - 1))
        for k, rk in zip(members, r):
            assert adv[k] == pytest.approx((rk - mean) / (std + 1e-6), rel=1e-4, abs=1e-5)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_global_normalisation_at_ratio_one(traces: Path, scenario: str):
    """Step 0: d(backward scalar)/d logp and each micro-batch's loss, as worked in the module docstring."""
    _, _, mbs, _ = load_step(traces, scenario, 0)
    N = sum(int(mb["loss_mask"].sum()) for mb in mbs)
    counts = [int(mb["loss_mask"].sum()) for mb in mbs]
    assert len(set(counts)) > 1, f"micro-batches of equal token counts {counts} cannot tell the normalisations apart"
    for mb in mbs:
        L = mb["loss_mask"]
        assert np.allclose(mb["logp"][L], mb["old_logp"][L], atol=1e-6)
        A = mb["advantages"].astype(np.float64)
        n = _row_token_counts(mb)[:, None]
        if scenario.startswith("token_mean"):
            want = -A / N
            loss = -A[L].sum() / N
        elif scenario == "seq_mean_token_mean":
            want = -A / (n * STEP_ROWS)
            loss = -(A[:, P] / STEP_ROWS).sum()
        else:
            want = -A / (STEP_ROWS * R)
            loss = -(A * L).sum() / (STEP_ROWS * R)
        np.testing.assert_allclose(mb["grad_logp"][L], want[L], rtol=1e-5, atol=1e-8)
        assert not mb["grad_logp"][~L].any()
        assert float(mb["loss"]) == pytest.approx(float(loss), rel=1e-5, abs=1e-7)


@pytest.mark.frameworks
def test_clipped_token_mean_on_the_second_epoch(traces: Path):
    """Step 1 (same rows, one update later): -A r / N where the clipped objective follows r, 0 where clipped."""
    _, _, mbs0, _ = load_step(traces, "token_mean", 0)
    _, _, mbs, _ = load_step(traces, "token_mean", 1)
    N = sum(int(mb["loss_mask"].sum()) for mb in mbs)
    old0 = {int(r): mb["old_logp"][i] for mb in mbs0 for i, r in enumerate(mb["row_ids"])}
    clipped = moved = 0
    for mb in mbs:
        L = mb["loss_mask"]
        for i, row in enumerate(mb["row_ids"]):
            np.testing.assert_allclose(mb["old_logp"][i], old0[int(row)], atol=1e-6)  # pi_old of the batch
        r = np.exp(mb["logp"].astype(np.float64) - mb["old_logp"])
        A = mb["advantages"].astype(np.float64)
        follows = np.where(A >= 0, r <= 1.2, (r >= 0.8) & (r <= 3.0))
        want = np.where(follows, -A * r / N, 0.0)
        np.testing.assert_allclose(mb["grad_logp"][L], want[L], rtol=1e-4, atol=1e-8)
        clipped += int((~follows & L & (A != 0)).sum())
        moved += int((np.abs(r - 1) > 1e-3)[L].sum())
    assert moved > 0, "the second epoch's ratios did not move off 1"
    print(f"step 1: {clipped} clipped tokens of {N}")


@pytest.mark.frameworks
def test_reference_is_the_initial_policy(traces: Path):
    for step in range(STEPS):
        manifest, _, mbs, st = load_step(traces, "token_mean_kl", step)
        assert manifest["config"]["kl_coef"] == 0.1 and manifest["config"]["verl"]["kl_loss_type"] == "low_var_kl"
        for mb in mbs:
            L = mb["loss_mask"]
            np.testing.assert_allclose(mb["ref_logp"][L], mb["old_logp"][L], atol=1e-6)  # batch 0: pi_old = initial
            assert (mb["ref_logp"][L] < 0).all()
        np.testing.assert_allclose(st["ref_lm_head_weight"], st["old_lm_head_weight"], atol=0)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_probe_finite_nonzero_and_backward_scale_one(traces: Path, scenario: str):
    for step in range(STEPS):
        _, _, _, st = load_step(traces, scenario, step)
        g = st["probe_grad"]
        assert np.isfinite(g).all() and np.abs(g).max() > 0
        part = json.loads((traces / scenario / f"step-{step:06d}" / "part-dp0-cp0.json").read_text())
        extra = part["extra"]
        assert extra["backward_scale"] == [1.0] * MB  # forward_backward_batch calls loss.backward() on it
        assert extra["global_batch_size"] == [STEP_ROWS] * MB and extra["dp_size"] == [1] * MB
        _, _, mbs, _ = load_step(traces, scenario, step)
        assert extra["batch_num_tokens"] == [sum(int(mb["loss_mask"].sum()) for mb in mbs)] * MB


def _replay(trace: Path, tmp: Path) -> tuple[int, dict[str, dict]]:
    """``python -m conformance.cli replay TRACE --json``: its exit status and its rows by link."""
    out = tmp / f"{trace.name}.json"
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "replay", str(trace), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=ENV)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return done.returncode, {row["function"]: row for row in json.loads(out.read_text())["checks"]}


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replay_every_checked_link_passes(traces: Path, scenario: str, tmp_path: Path):
    rc, rows = _replay(traces / scenario, tmp_path)
    assert rc == 0, {name: row["message"] for name, row in rows.items() if row["status"] == "fail"}
    checked = {name: row for name, row in rows.items() if row["status"] != "not_implemented"}
    bad = {name: (row["status"], row["message"]) for name, row in checked.items()
           if not (row["status"] == "pass" or (row["status"] == "preset" and row["matched_preset"]))}
    assert not bad, bad
    must = {"trace.mask", "trace.logp", "trace.old_logp", "trace.entropy", "trace.advantages", "trace.grad", "trace.loss",
            "trace.probe"} | ({"trace.ref_logp", "trace.rewards"} if scenario == "token_mean_kl" else set())
    assert must <= set(checked), sorted(must - set(checked))


@pytest.mark.frameworks
def test_replay_fails_a_wrong_claim(traces: Path, tmp_path: Path):
    """The trace tells the modes apart: the token_mean trace claimed as seq_mean_token_mean FAILs trace.grad."""
    wrong = tmp_path / "token_mean_claimed_seq_mean"
    shutil.copytree(traces / "token_mean", wrong)
    for manifest in wrong.glob("step-*/manifest.json"):
        m = json.loads(manifest.read_text())
        m["config"]["agg"] = "seq_mean_token_mean"
        manifest.write_text(json.dumps(m))
    rc, rows = _replay(wrong, tmp_path)
    assert rc == 1 and rows["trace.grad"]["status"] == "fail", rows["trace.grad"]["message"]
