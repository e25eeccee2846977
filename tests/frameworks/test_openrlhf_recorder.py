"""The OpenRLHF trace recorder (conformance/frameworks/openrlhf/recorder.py). It runs OpenRLHF 0.11.2's real
``ActorPPOTrainer.ppo_train`` (micro-batch loop, ``iter_grad_accum_global_norm``, ``training_step``, ``PolicyLoss``,
the KL loss) in OpenRLHF's environment, a stand-in strategy doing DeepSpeed's loss / gas and boundary step (marked
`frameworks`, skipped with a reason without `rlspec frameworks install openrlhf`), then `rlspec replay`.

The checks are worked by hand from the recorder's configuration: one rollout of 4 prompts x 4 samples = 16 rows
feeds 2 optimizer steps (``--train.max_epochs 2``), each of 4 micro-batches of 4 rows (gas 4); completions of at
most 5 tokens; prompts of 2-4 digits then ``=``; vocabulary ids pad 0, EOS 1, ``=`` 3, digit d = 4 + d
(refimpl.trainer.task). Advantages: ``group_norm``, (r - mean_g) / (std_g + 1e-9), unbiased std, one value per row.

Every micro-batch's backward scalar is OpenRLHF's loss over the step's counts divided by gas (utils/loss_utils.py
:54-77) and divided by gas again (DeepSpeed), so with N the step's loss tokens and R = 16 its rows, the token
loss l_t's weight in d(backward scalar)/d logp_t is

    token-mean             l_t / N
    seq-mean-token-mean    l_t / (n_i R)       n_i: row i's loss tokens (gspo too: its sample level is forced)

Step 0 trains the fresh rollout: the weights are the rollout's, so every ratio is 1, no clip acts, the reference
(the initial model) equals the policy and k3's gradient 1 - exp(ref - logp) is 0: d/d logp_t = -A_t x the weight.
Step 1 is the second epoch over the same rows, after one update: ratios r = exp(logp - old) are off 1 and
d(-min(r A, clip(r) A))/d logp = -r A except where the clip holds (A > 0 and r > 1 + eps_high, A < 0 and r < 1 -
eps_low) and, with dual clip c, where A < 0 and r > c; GSPO uses the row's s = exp(mean_t (logp - old)), whose
d s/d logp_t is s / n_i; k3's value exp(ref - logp) - 1 + logp - ref has d/d logp = 1 - exp(ref - logp).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.frameworks import pinned_rows
from tests.frameworks.recorder_traces import load_step, record_or_skip

SKIP_REASON = pinned_rows.skip_reason("OpenRLHF", "openrlhf")
SCENARIOS = ("token_mean", "seq_mean_token_mean", "kl_loss_k3", "dual_clip", "gspo")
STEPS, GA, ROWS, G, MAX_NEW, EOS, SEP, DIGIT0, D, V = 2, 4, 4, 4, 5, 1, 3, 4, 32, 14
N_ROWS = GA * ROWS
SEQ_LEVEL = {"seq_mean_token_mean", "gspo"}
EPS = {"kl_loss_k3": (0.2, 0.28), "gspo": (3e-4, 4e-4)}  # else 0.2, 0.2
KL_COEF = {"kl_loss_k3": 0.05}
DUAL = {"dual_clip": 1.1}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_or_skip("openrlhf", tmp_path_factory.mktemp("openrlhf_traces"), SCENARIOS, steps=STEPS,
                          skip_reason=SKIP_REASON)


def _weights(mb: dict[str, np.ndarray], scenario: str, N: int) -> np.ndarray:
    """[b, T]: each loss token's weight in d(backward scalar)/d logp (module docstring)."""
    L = mb["loss_mask"]
    if scenario in SEQ_LEVEL:
        return np.where(L, 1.0 / (L.sum(1, keepdims=True) * N_ROWS), 0.0)
    return np.where(L, 1.0 / N, 0.0)


def _reverse_reward(prompt_digits: list[int], completion: list[int]) -> float:
    """Partial credit of the reverse task, by hand: a point per digit in place, one for EOS right after them."""
    target = [DIGIT0 + d for d in reversed(prompt_digits)]
    c, stopped = [], False
    for t in completion:
        if t == EOS:
            stopped = True
            break
        if t not in (0, 2):
            c.append(t)
    hits = sum(1 for i, t in enumerate(target) if i < len(c) and c[i] == t)
    return (hits + (stopped and len(c) == len(target))) / (len(target) + 1)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_layout_shapes_and_claims(traces: Path, scenario: str):
    low, high = EPS.get(scenario, (0.2, 0.2))
    for step in range(STEPS):
        manifest, part, mbs, st = load_step(traces, scenario, step)
        assert manifest["layout"] == {"dp": 1, "cp": 1, "micro_batches": GA}
        cfg = manifest["config"]
        assert cfg["algorithm"] == "grpo" and cfg["grpo_scale"] == "group" and cfg["grpo_eps"] == 1e-9
        assert cfg["loss"] == ("gspo" if scenario == "gspo" else "ppo")
        assert cfg["agg"] == ("seq_mean_token_mean" if scenario in SEQ_LEVEL else "token_mean")
        assert cfg["agg_scope"] == "step"
        assert (cfg["eps_low"], cfg["eps_high"]) == pytest.approx((low, high))
        assert cfg["dual_clip"] == DUAL.get(scenario)
        assert cfg["kl_coef"] == KL_COEF.get(scenario, 0.0)
        assert cfg["temperature"] == 0.7 and cfg["group_size"] == G and cfg["eos_token_id"] == EOS
        assert cfg["sampling"] == {"temperature": 0.7, "top_k": -1, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0}
        need = {"input_ids", "attention_mask", "prompt_mask", "completion_mask", "loss_mask", "logp", "grad_logp",
                "old_logp", "advantages", "rewards", "group_ids", "row_ids", "hidden", "old_hidden", "loss", "token_loss"}
        if scenario == "kl_loss_k3":
            need |= {"ref_logp", "ref_hidden"}
        for mb in mbs:
            assert need <= set(mb), sorted(need - set(mb))
            b, T = mb["input_ids"].shape
            assert b == ROWS
            for name in ("attention_mask", "prompt_mask", "completion_mask", "loss_mask", "logp", "grad_logp",
                         "old_logp", "advantages"):
                assert mb[name].shape == (b, T), name
            assert mb["hidden"].shape == mb["old_hidden"].shape == (b, T, D)
            assert mb["loss"].shape == ()
        assert st["lm_head_weight"].shape == st["probe_grad"].shape == (V, D)
        rows = np.concatenate([mb["row_ids"] for mb in mbs])
        assert sorted(rows.tolist()) == list(range(N_ROWS)), "a step is the whole rollout"
        groups = np.concatenate([mb["group_ids"] for mb in mbs])
        assert np.array_equal(groups, rows // G)
        extra = part["extra"]
        assert extra["accumulated_gradient"] == GA and extra["strategy_backward_scale"] == [1 / GA] * GA


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_masks_are_the_generated_tokens(traces: Path, scenario: str):
    """OpenRLHF's action mask (action range shifted by one, on the last T - 1 columns) is exactly the generated
    tokens: the prompt starts at column 0 (no left padding), the completion follows it, the rest is right padding."""
    for step in range(STEPS):
        _, _, mbs, _ = load_step(traces, scenario, step)
        for mb in mbs:
            ids, L, P, C, A = (mb[k] for k in ("input_ids", "loss_mask", "prompt_mask", "completion_mask", "attention_mask"))
            assert np.array_equal(L, C), "the loss mask is not the completion"
            assert np.array_equal(A, P | C) and not (P & C).any()
            assert not L[:, 0].any()
            for i in range(ids.shape[0]):
                p = np.flatnonzero(P[i])
                assert np.array_equal(p, np.arange(len(p))) and 3 <= len(p) <= 5
                prompt = ids[i, p]
                assert prompt[-1] == SEP and all(DIGIT0 <= t <= DIGIT0 + 9 for t in prompt[:-1])
                cols = np.flatnonzero(C[i])
                assert np.array_equal(cols, np.arange(len(p), len(p) + len(cols))) and 1 <= len(cols) <= MAX_NEW
                toks = ids[i, cols].tolist()
                assert EOS not in toks[:-1] and (toks[-1] == EOS or len(toks) == MAX_NEW)
                assert not A[i, len(p) + len(cols):].any() and not ids[i, len(p) + len(cols):].any()


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rewards_and_group_norm_advantages(traces: Path, scenario: str):
    for step in range(STEPS):
        _, part, mbs, _ = load_step(traces, scenario, step)
        r = np.zeros(N_ROWS)
        adv = np.zeros(N_ROWS)
        for mb, from_experience in zip(mbs, part["extra"]["experience_rewards"]):
            assert np.allclose(mb["rewards"], from_experience)
            for i, row in enumerate(mb["row_ids"]):
                ids, P, C = mb["input_ids"][i], mb["prompt_mask"][i], mb["completion_mask"][i]
                digits = [int(t) - DIGIT0 for t in ids[P][:-1]]
                assert mb["rewards"][i] == pytest.approx(_reverse_reward(digits, ids[C].tolist()), abs=1e-6)
                a = mb["advantages"][i][mb["loss_mask"][i]]
                assert np.all(a == a[0]), "group_norm gives one advantage per row"
                r[row], adv[row] = mb["rewards"][i], a[0]
        groups = r.reshape(-1, G)
        expected = (groups - groups.mean(1, keepdims=True)) / (groups.std(1, ddof=1, keepdims=True) + 1e-9)
        np.testing.assert_allclose(adv, expected.reshape(-1), rtol=1e-5, atol=1e-6)
    assert np.any(adv != 0), "every group has equal rewards: nothing to train on"


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_step_normalisation_at_ratio_one(traces: Path, scenario: str):
    """Step 0: d(backward scalar)/d logp_t = -A_t x the mode's weight over the step's counts; the micro-batch's
    loss is -sum_t A_t x weight; OpenRLHF hands training_step the step's counts divided by gas."""
    _, part, mbs, _ = load_step(traces, scenario, 0)
    N = sum(int(mb["loss_mask"].sum()) for mb in mbs)
    counts = [int(mb["loss_mask"].sum()) for mb in mbs]
    assert len(set(counts)) > 1, f"micro-batches of equal token counts {counts} cannot tell the normalisations apart"
    assert part["extra"]["batch_num_tokens"] == [N / GA] * GA
    assert part["extra"]["global_batch_size"] == [N_ROWS / GA] * GA
    for mb in mbs:
        L = mb["loss_mask"]
        assert np.allclose(mb["logp"][L], mb["old_logp"][L], atol=1e-6)
        A, w = mb["advantages"].astype(np.float64), _weights(mb, scenario, N)
        np.testing.assert_allclose(mb["grad_logp"][L], (-A * w)[L], rtol=1e-5, atol=1e-8)
        assert not mb["grad_logp"][~L].any()
        assert float(mb["loss"]) == pytest.approx(float((-A * w)[L].sum()), rel=1e-5, abs=1e-7)


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_off_policy_gradient_by_hand(traces: Path, scenario: str):
    """Step 1 (the second epoch): the clip, the dual clip, GSPO's sequence ratio and the k3 term, by hand."""
    _, _, mbs, _ = load_step(traces, scenario, 1)
    low, high = EPS.get(scenario, (0.2, 0.2))
    N = sum(int(mb["loss_mask"].sum()) for mb in mbs)
    clipped = moved = dual = 0
    for mb in mbs:
        L = mb["loss_mask"]
        A = mb["advantages"].astype(np.float64)
        logp, old = mb["logp"].astype(np.float64), mb["old_logp"].astype(np.float64)
        w = _weights(mb, scenario, N)
        if scenario == "gspo":
            n = L.sum(1, keepdims=True)
            r = np.broadcast_to(np.exp(np.where(L, logp - old, 0).sum(1, keepdims=True) / n), L.shape)
            dr = r / n  # d s / d logp_t, one s per row
        else:
            r = np.exp(logp - old)
            dr = r
        flat = ((A > 0) & (r > 1 + high)) | ((A < 0) & (r < 1 - low))
        if scenario in DUAL:
            flat |= (A < 0) & (r > DUAL[scenario])
            dual += int(((A < 0) & (r > DUAL[scenario]) & (r < 1 + high) & L).sum())  # only the dual clip holds them
        near = np.isclose(r, 1 + high, rtol=0, atol=1e-5) | np.isclose(r, 1 - low, rtol=0, atol=1e-5)
        g = np.where(flat, 0.0, -A * dr) * (w * np.where(L, L.sum(1, keepdims=True), 1) if scenario == "gspo" else w)
        if scenario in KL_COEF:
            ref = mb["ref_logp"].astype(np.float64)
            k3 = np.exp(ref - logp) - 1 + logp - ref
            assert (k3[L] < 10).all() and ((logp - ref)[L] > -10).all(), "OpenRLHF's KL clamps would act"
            g = g + KL_COEF[scenario] * (1 - np.exp(ref - logp)) / N
        check = L & ~near
        np.testing.assert_allclose(mb["grad_logp"][check], g[check], rtol=1e-4, atol=1e-8)
        clipped += int((flat & L & (A != 0)).sum())
        moved += int((L & (np.abs(r - 1) > 1e-3)).sum())
    assert moved > 0, "the second epoch's ratios are all 1"
    assert clipped > 0, "no clip acts: the check does not tell the clip apart"
    assert dual > 0 or scenario not in DUAL, "the dual clip acts on no token"


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_probe_finite_nonzero(traces: Path, scenario: str):
    for step in range(STEPS):
        _, _, _, st = load_step(traces, scenario, step)
        g = st["probe_grad"]
        assert np.isfinite(g).all() and np.abs(g).max() > 0


@pytest.mark.frameworks
def test_token_loss_by_hand(traces: Path):
    """kl_loss_k3: the per-token loss is -min(r A, clip(r, 0.8, 1.28) A) + 0.05 x k3(logp, ref)."""
    for step in range(STEPS):
        _, _, mbs, _ = load_step(traces, "kl_loss_k3", step)
        for mb in mbs:
            L = mb["loss_mask"]
            logp, old, ref = (mb[k].astype(np.float64) for k in ("logp", "old_logp", "ref_logp"))
            A = mb["advantages"].astype(np.float64)
            r = np.exp(logp - old)
            ppo = -np.minimum(r * A, np.clip(r, 0.8, 1.28) * A)
            k3 = np.exp(ref - logp) - 1 + logp - ref
            np.testing.assert_allclose(mb["token_loss"][L], (ppo + 0.05 * k3)[L], rtol=1e-5, atol=1e-7)


@pytest.mark.frameworks
def test_reference_is_the_initial_policy(traces: Path):
    """kl.init_coef > 0: a reference Actor on the same weights; the rollout (both epochs) was sampled by them."""
    for step in range(STEPS):
        _, _, mbs, st = load_step(traces, "kl_loss_k3", step)
        assert np.array_equal(st["ref_lm_head_weight"], st["old_lm_head_weight"])
        for mb in mbs:
            L = mb["loss_mask"]
            assert np.allclose(mb["ref_logp"][L], mb["old_logp"][L], atol=1e-6)
            assert (mb["ref_logp"][L] < 0).all()


@pytest.mark.frameworks
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replay_passes(traces: Path, scenario: str):
    """Every link the trace can check passes: OpenRLHF's claims are what its actor step computes (no link needs a
    preset: the step's global counts are the spec's normalisation)."""
    from conformance.trace.replay import replay

    _, rows = replay(str(traces / scenario))
    by = {r.function: r for r in rows}
    bad = [(r.function, r.status, r.message) for r in rows if r.status not in ("pass", "preset", "not_implemented")]
    assert not bad, bad
    checked = {"trace.mask", "trace.sampling", "trace.logp", "trace.old_logp", "trace.advantages", "trace.grad",
               "trace.loss", "trace.probe", "trace.token_loss"} | ({"trace.ref_logp"} if scenario == "kl_loss_k3" else set())
    assert {f for f, r in by.items() if r.status != "not_implemented"} == checked
    for link in checked:
        assert by[link].status == "pass", (link, by[link].status, by[link].matched_preset, by[link].message)


@pytest.mark.frameworks
def test_replay_tells_the_aggregation_modes_apart(traces: Path, tmp_path: Path):
    """seq_mean_token_mean claimed as token_mean: step 0's gradient FAILs (rows of different lengths)."""
    from conformance.trace.replay import replay

    trace = tmp_path / "edited"
    shutil.copytree(traces / "seq_mean_token_mean", trace)
    for manifest in trace.glob("step-*/manifest.json"):
        data = json.loads(manifest.read_text())
        assert data["config"]["agg"] == "seq_mean_token_mean"
        data["config"]["agg"] = "token_mean"
        manifest.write_text(json.dumps(data))
    _, rows = replay(str(trace))
    grad = next(r for r in rows if r.function == "trace.grad")
    assert grad.status == "fail" and "step 0" in grad.message, grad.message
