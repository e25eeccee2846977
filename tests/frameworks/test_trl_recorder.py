"""The TRL trace recorder (conformance/frameworks/trl/recorder.py): TRL 1.16.0's real GRPOTrainer (every
loss_type, gradient accumulation 4 and 1, num_iterations 2, beta > 0 with and without
the ratio on the KL term) and RLOOTrainer, each trained two optimizer steps on CPU, then `rlspec replay`.

The checks are worked by hand from the recorder's configuration: micro-batches of 2 rows (8 with accumulation
1), 4 per step, groups of 4, completions of at most 5 tokens, vocabulary ids (pad 0, EOS 1, digit d = 4 + d:
refimpl.trainer.task). Step 0 has a fresh batch: pi_old is the policy's own weights (TRL recomputed it,
num_iterations 2), so every ratio is 1, no clip is active, and the reference (the initial model) equals the
policy, so the k3 term and its gradient 1 - exp(ref - logp) vanish. Each token's d loss/d logp_t is then -A_t
times the weight TRL documents for its loss type (grpo_config.py loss_type's docs; 1/G: HF Trainer's division
by the accumulation steps G, which GRPOTrainer does itself where it applies):

    dapo, cispo, vespo -A_t / N                  N: the step's loss tokens ("global accumulated batch"); VESPO's
                                                 gamma weight phi(1) = 1
    sapo               as grpo                   4/tau sigmoid(tau (r - 1)) has slope 1 at r = 1
    bnpo               -A_t / (n_mb G)           n_mb: the micro-batch's loss tokens ("local batch")
    grpo               -A_t / (|y_i| b G)        |y_i|: the row's loss tokens, b rows per micro-batch
    dr_grpo            -A_t / (b L G)            L = max_completion_length = 5
    luspo              -A_t / (b G)              the sequence ratio s_i, d s_i/d logp_t = s_i/|y_i|, times |y_i|
    rloo               -A_t / (b G)              RLOO's sequence ratio exp(sum_t (logp - old)): d/d logp_t = r A
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl", reason="TRL is not installed (pip install -c .ci/constraints.txt -e '.[trl]')")

from conformance.frameworks.trl import recorder  # noqa: E402
from conformance.trace.replay import replay  # noqa: E402
from tests.frameworks.recorder_traces import load_step  # noqa: E402

STEPS, G, GEN, MAX_LEN, EOS, DIGIT0 = 2, 4, 4, 5, 1, 4
SCENARIOS = tuple(recorder.SCENARIOS)
# the trace row each scenario's grad link must give: pass, or TRL's documented convention as a named preset
PRESETS = {"bnpo": "token_mean", "bnpo_ga1": "token_mean", "grpo": "seq_mean_token_mean",
           "dr_grpo": "seq_mean_token_sum_norm", "luspo": "seq_mean_token_sum", "rloo": "seq_mean_token_sum",
           "sapo": "seq_mean_token_mean"}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trl_traces")
    t0 = time.perf_counter()
    for name in SCENARIOS:
        recorder.record(out, name, steps=STEPS, seed=0)
    print(f"recorder: {time.perf_counter() - t0:.1f} s")
    return out


def _layout(scenario: str) -> tuple[int, int]:
    """(micro-batches per step, rows per micro-batch)."""
    return (1, 8) if scenario.endswith("_ga1") else (4, 2)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_layout_and_masks(traces: Path, scenario: str):
    n_mb, rows = _layout(scenario)
    for step in range(STEPS):
        manifest, _, mbs, st = load_step(traces, scenario, step)
        assert manifest["layout"] == {"dp": 1, "cp": 1, "micro_batches": n_mb}
        assert len(mbs) == n_mb and all(mb["input_ids"].shape[0] == rows for mb in mbs)
        assert sorted(np.concatenate([mb["row_ids"] for mb in mbs]).tolist()) == list(range(n_mb * rows))
        for mb in mbs:
            ids, L, P, C = (mb[k] for k in ("input_ids", "loss_mask", "prompt_mask", "completion_mask"))
            assert not (L & P).any() and not L[:, 0].any()
            assert np.array_equal(L, C), "TRL's completion mask is the completion through the first EOS"
            for i in range(ids.shape[0]):
                toks = ids[i, C[i]]
                assert 1 <= len(toks) <= MAX_LEN and EOS not in toks[:-1].tolist()
                assert toks[-1] == EOS or len(toks) == MAX_LEN
        assert st["probe_grad"].shape == st["lm_head_weight"].shape and np.abs(st["probe_grad"]).max() > 0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rewards_and_advantages_by_hand(traces: Path, scenario: str):
    """Rewards: the task's partial credit (reverse the 3 prompt digits; one point per digit in place and one for
    stopping right after them, over 4) plus the share of digit tokens. Advantages: GRPO (r - mean_g) / (std_g + 1e-4)
    with the unbiased std; RLOO r_i - mean of the group's others."""
    _, _, mbs, _ = load_step(traces, scenario, 0)
    rewards, adv, groups = {}, {}, {}
    for mb in mbs:
        for i in range(mb["input_ids"].shape[0]):
            ids = mb["input_ids"][i]
            prompt = ids[mb["prompt_mask"][i]]
            digits = [int(t) - DIGIT0 for t in prompt if DIGIT0 <= t < DIGIT0 + 10]
            comp = ids[mb["completion_mask"][i]].tolist()
            body = comp[:-1] if comp[-1] == EOS else comp
            target = [DIGIT0 + d for d in reversed(digits)]
            credit = sum(1 for k, t in enumerate(target) if k < len(body) and body[k] == t)
            credit += comp[-1] == EOS and len(body) == len(target)
            share = sum(1 for t in comp if DIGIT0 <= t < DIGIT0 + 10) / len(comp)
            r = int(mb["row_ids"][i])
            assert float(mb["rewards"][i]) == pytest.approx(credit / 4 + share, abs=1e-6)
            rewards[r], adv[r], groups[r] = float(mb["rewards"][i]), float(mb["advantages"][i]), int(mb["group_ids"][i])
    assert all(groups[r] == r // GEN for r in groups)
    spread = 0
    for g in set(groups.values()):
        rs = np.array([rewards[r] for r in sorted(rewards) if groups[r] == g])
        if scenario == "rloo":
            exp = rs - (rs.sum() - rs) / (len(rs) - 1)
        else:
            exp = (rs - rs.mean()) / (rs.std(ddof=1) + 1e-4)
        np.testing.assert_allclose([adv[r] for r in sorted(adv) if groups[r] == g], exp, rtol=1e-5, atol=1e-6)
        spread += rs.std() > 0
    assert spread, "every group has equal rewards: the gradient checks would compare zeros"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_gradient_at_ratio_one_by_hand(traces: Path, scenario: str):
    manifest, _, mbs, _ = load_step(traces, scenario, 0)
    lt = manifest["config"]["trl"]["loss_type"] if scenario != "rloo" else "rloo"
    n_mb, b = _layout(scenario)
    N = sum(int(mb["loss_mask"].sum()) for mb in mbs)
    for mb in mbs:
        L = mb["loss_mask"]
        assert np.allclose(mb["logp"][L], mb["old_logp"][L], atol=1e-6), "step 0's pi_old is the policy itself"
        if "ref_logp" in mb:
            assert np.allclose(mb["ref_logp"][L], mb["logp"][L], atol=1e-6), "step 0's reference is the policy"
        A = np.broadcast_to(mb["advantages"].astype(np.float64)[:, None], L.shape)
        lens = L.sum(1, keepdims=True)
        weight = {"dapo": 1 / N, "cispo": 1 / N, "vespo": 1 / N, "bnpo": 1 / (L.sum() * n_mb),
                  "grpo": 1 / (lens * b * n_mb), "sapo": 1 / (lens * b * n_mb),
                  "dr_grpo": 1 / (b * MAX_LEN * n_mb), "luspo": 1 / (b * n_mb), "rloo": 1 / (b * n_mb)}[lt]
        expected = np.broadcast_to(-A * weight, L.shape)
        np.testing.assert_allclose(mb["grad_logp"][L], expected[L], rtol=1e-5, atol=1e-8)
        assert not mb["grad_logp"][~L].any()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replay_passes_or_names_trl_convention(traces: Path, scenario: str):
    _, rows = replay(str(traces / scenario))
    by = {r.function: r for r in rows}
    bad = [(r.function, r.status, r.message) for r in rows if r.status not in ("pass", "preset", "not_implemented")]
    assert not bad, bad
    checked = {"trace.sampling", "trace.mask", "trace.logp", "trace.entropy", "trace.advantages", "trace.old_logp",
               "trace.grad", "trace.probe"} | ({"trace.loss"} if scenario != "rloo" else set())
    if "kl" in scenario:
        checked.add("trace.ref_logp")
    assert {f for f, r in by.items() if r.status != "not_implemented"} == checked
    preset = PRESETS.get(scenario)
    for link in ("trace.grad", "trace.probe"):
        if preset is None:
            assert by[link].status == "pass", (link, by[link].message)
        else:
            r = by[link]
            assert r.status == "preset" and r.matched_preset == f"trl: {preset} per micro-batch", (link, r.matched_preset)
            if not scenario.endswith("_ga1"):  # one micro-batch per step: its counts are the step's
                assert f"{preset} of each micro-batch (its own counts)" in r.message, (link, r.message)


def test_replay_tells_the_kl_forms_apart(traces: Path, tmp_path: Path):
    """dapo_kl_ratio (TRL's default use_bias_correction_kl: K3 x r): claimed as plain K3, its step 1 (ratios and
    log-ratios to the reference off 0) fails the gradient link."""
    import shutil

    trace = tmp_path / "edited"
    shutil.copytree(traces / "dapo_kl_ratio", trace)
    for manifest in trace.glob("step-*/manifest.json"):
        data = json.loads(manifest.read_text())
        assert data["config"].pop("kl_gradient") == "bias_corrected"
        manifest.write_text(json.dumps(data))
    _, rows = replay(str(trace))
    grad = next(r for r in rows if r.function == "trace.grad")
    assert grad.status == "fail" and "step 1" in grad.message, grad.message
