"""The ms-swift trace recorder (conformance/frameworks/ms_swift/recorder.py). It trains ms-swift 4.6.0's real
GRPOTrainer in ms-swift's environment (marked `frameworks`, skipped with a reason without `rlspec frameworks
install ms_swift`). The checks are worked by hand from the recorder's configuration: 4 micro-batches of 2 rows
per step (gradient_accumulation_steps 4), groups of 4, completions of at most 6 tokens, and vocabulary ids
(pad 0, EOS 1, digit d = 6 + d).

The gradient checks use step 0. There the batch is fresh (num_iterations 2: the old log-probs are the same
weights' log-probs), so every ratio is 1 and no clip is active. Each token loss then has d/d logp = -A_t, for
dapo's -min(r A, clip(r) A) and for cispo's -sg(min(r, 5)) A logp. ms-swift documents dapo and cispo as a token
mean over the completion tokens of the whole accumulation window (grpo_trainer.py:79-81, 1126-1133). So the
recorded d(backward scalar)/d logp must be -A_t / N, with N the step's loss tokens. Issue #10117's double
division by the accumulation steps would give -A_t / (4 N). Each micro-batch's backward scalar is its token
losses' sum over N: -Σ A_t / N for dapo, -Σ A_t logp_t / N for cispo.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.frameworks import pinned_rows
from tests.frameworks.recorder_traces import load_step, record_or_skip

SKIP_REASON = pinned_rows.skip_reason("ms-swift", "ms_swift")
SCENARIOS = ("dapo", "cispo", "dapo_kl")
STEPS = 2
GA, ROWS, G, MAX_LEN, EOS, DIGIT0 = 4, 2, 4, 6, 1, 6


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_or_skip("ms_swift", tmp_path_factory.mktemp("ms_swift_traces"), SCENARIOS, steps=STEPS,
                          skip_reason=SKIP_REASON)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_layout_and_shapes(traces: Path, scenario: str):
    for step in range(STEPS):
        manifest, _, mbs, st = load_step(traces, scenario, step)
        assert manifest["layout"] == {"dp": 1, "cp": 1, "micro_batches": GA}
        assert manifest["config"]["ms_swift"]["gradient_accumulation_steps"] == GA
        assert len(mbs) == GA
        need = {"input_ids", "attention_mask", "prompt_mask", "completion_mask", "loss_mask", "logp", "grad_logp",
                "old_logp", "advantages", "rewards", "group_ids", "row_ids", "hidden", "loss"}
        if scenario == "dapo_kl":
            need.add("ref_logp")
        for mb in mbs:
            assert need <= set(mb), sorted(need - set(mb))
            b, T = mb["input_ids"].shape
            assert b == ROWS
            for name in ("attention_mask", "prompt_mask", "completion_mask", "loss_mask", "logp", "grad_logp",
                         "old_logp", "advantages"):
                assert mb[name].shape == (b, T), name
            assert mb["hidden"].shape == (b, T, 32)
            assert mb["rewards"].shape == mb["group_ids"].shape == mb["row_ids"].shape == (b,)
            assert mb["loss"].shape == ()
        assert st["lm_head_weight"].shape == st["probe_grad"].shape == (16, 32)
        rows = np.concatenate([mb["row_ids"] for mb in mbs])
        assert sorted(rows.tolist()) == list(range(GA * ROWS))
        groups = np.concatenate([mb["group_ids"] for mb in mbs])
        assert sorted(np.unique(groups, return_counts=True)[1].tolist()) == [G] * (GA * ROWS // G)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_masks(traces: Path, scenario: str):
    for step in range(STEPS):
        _, _, mbs, _ = load_step(traces, scenario, step)
        for mb in mbs:
            ids, L, P, C, A = (mb[k] for k in ("input_ids", "loss_mask", "prompt_mask", "completion_mask", "attention_mask"))
            assert not (L & P).any(), "a prompt token is in the loss mask"
            assert not (L & ~A).any(), "a padding token is in the loss mask"
            assert not L[:, 0].any()
            assert (L.sum(1) >= 1).all() and (C.sum(1) <= MAX_LEN).all()
            for i in range(ids.shape[0]):
                cols = np.flatnonzero(C[i])
                assert np.array_equal(cols, np.arange(cols[0], cols[0] + len(cols))), "completion not contiguous"
                assert cols[0] == np.flatnonzero(P[i])[-1] + 1, "completion does not follow the prompt"
                toks = ids[i, cols]
                assert EOS not in toks[:-1].tolist(), "a completion token after the first EOS"
                assert toks[-1] == EOS or len(toks) == MAX_LEN, "a completion stops short without EOS"


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rewards_of_the_completions(traces: Path, scenario: str):
    """The reward function is the sum of the completion's digits over 9 x 6, by hand from the token ids."""
    _, _, mbs, _ = load_step(traces, scenario, 0)
    for mb in mbs:
        for i in range(mb["input_ids"].shape[0]):
            toks = mb["input_ids"][i][mb["completion_mask"][i]]
            digits = [int(t) - DIGIT0 for t in toks if DIGIT0 <= t <= DIGIT0 + 9]
            assert mb["rewards"][i] == pytest.approx(sum(digits) / (9 * MAX_LEN), abs=1e-6)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_window_token_mean_at_ratio_one(traces: Path, scenario: str):
    """Step 0 (ratio 1): d(backward scalar)/d logp_t = -A_t / N over the step's N loss tokens, and the
    micro-batch's loss is -(its sum of A_t)/N (worked in the module docstring). With beta > 0 the k3 term adds
    nothing there: the reference is the initial policy, and d k3/d logp = 1 - exp(ref - logp) = 0 at logp = ref."""
    _, _, mbs, _ = load_step(traces, scenario, 0)
    N = sum(int(mb["loss_mask"].sum()) for mb in mbs)
    counts = [int(mb["loss_mask"].sum()) for mb in mbs]
    assert len(set(counts)) > 1, f"micro-batches of equal token counts {counts} cannot tell the normalisations apart"
    for mb in mbs:
        L = mb["loss_mask"]
        assert np.allclose(mb["logp"][L], mb["old_logp"][L], atol=1e-6)
        A = mb["advantages"].astype(np.float64)
        np.testing.assert_allclose(mb["grad_logp"][L], -A[L] / N, rtol=1e-5, atol=1e-8)
        assert not mb["grad_logp"][~L].any()
        # dapo's token loss at r = 1 is -A_t; cispo's is -A_t logp_t (its value keeps the log-prob factor)
        value = A[L] * (mb["logp"][L].astype(np.float64) if scenario == "cispo" else 1.0)
        expected = -float(value.sum()) / N
        assert float(mb["loss"]) == pytest.approx(expected, rel=1e-5, abs=1e-7)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_probe_finite_nonzero(traces: Path, scenario: str):
    for step in range(STEPS):
        _, _, _, st = load_step(traces, scenario, step)
        g = st["probe_grad"]
        assert np.isfinite(g).all() and np.abs(g).max() > 0


@pytest.mark.frameworks
def test_reference_log_probs_with_beta(traces: Path):
    """beta 0.04: ms-swift loads the reference model (the initial weights); at step 0 it equals the policy."""
    manifest, _, mbs, _ = load_step(traces, "dapo_kl", 0)
    assert manifest["config"]["kl_coef"] == 0.04
    for mb in mbs:
        L = mb["loss_mask"]
        assert np.allclose(mb["ref_logp"][L], mb["old_logp"][L], atol=1e-6)
        assert (mb["ref_logp"][L] < 0).all()
