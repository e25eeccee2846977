"""The ms-swift adapter (conformance/frameworks/ms_swift/adapter.py, via the subprocess worker) and the ms-swift
rows (conformance/frameworks/ms_swift/checks.py).

ms-swift runs in its own environment: these tests need `rlspec frameworks install ms_swift` (marked
`frameworks`, skipped with a reason otherwise; CI runs them as `pytest -m frameworks` after the install). The
"not installed" test needs no ms-swift and always runs. Pins every row's status as established against
ms-swift 4.6.0 (trl 0.29.1, torch 2.13.0 CPU) and the findings, each with a minimal reproduction whose
expected values are worked by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import oracle
from conformance.records.presets import preset_kwargs
from conformance.runner.loading import BUILTIN_ADAPTERS
from tests.frameworks import pinned_rows

FRAMEWORK = "ms_swift"
SKIP_REASON = pinned_rows.skip_reason("ms-swift", FRAMEWORK)


def test_registered():
    assert BUILTIN_ADAPTERS["ms_swift"] == "conformance.frameworks.ms_swift.adapter:MsSwiftAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    # GRPOTrainer._get_logps_via_local_forward (trl's selective_log_softmax / entropy_from_logits after the
    # trainer's in-place division by the temperature)
    'token_logprobs': 'pass',
    'token_entropy': 'pass',
    # compute_advantages: (r - mean)/(std + 1e-4) (preset ms_swift = trl's eps); RLOO canonical (scale 'none');
    # REINFORCE++ per sequence with the batch std of the centred rewards (preset ms_swift)
    'grpo_advantages': 'preset',
    'rloo_advantages': 'pass',
    'reinforce_pp_baseline_advantages': 'preset',
    # a batch of one sequence: the final s.std() of one element is NaN (advantage.py:93); golden and the other
    # property cases match preset ms_swift (eps 1e-8)
    'gdpo_advantages': 'fail',
    # per_token_kl: k3 clamped like verl's (preset); 'partial': k1/k2, other gradient forms
    'kl_penalty': 'preset',
    'kl_loss_term': 'preset',
    # no log-ratio clamp: an overflowing ratio with A = 0 gives NaN (golden */overflowing-ratio-zero-advantage)
    'ppo_token_loss': 'fail',
    'gspo_token_loss': 'fail',
    # canonical eps_high = 0.28 relative is epsilon_high = 1.28; 'partial': no lower bound
    'cispo_token_loss': 'pass',
    # an overflowing ratio: sigmoid'(inf) * inf = NaN in the gradient (golden sapo_token_loss/overflowing-ratio)
    'sapo_token_loss': 'fail',
    'entropy_top_mask': 'pass',
    'off_policy_sequence_mask': 'pass',  # 'partial': per-token advantages within a row
    'rollout_is_weights': 'preset',  # the +-20 log clamp; 'partial': product ratios, lower bounds, batch normalisation
    'rollout_rejection_mask': 'pass',  # 'partial': ratio upper bounds at token / seq_mean level only
    'overlong_penalty': 'preset',  # no floor (beyond='linear'); 'partial': no factor, buffer 0 or = max_length
}

EXTRA = {  # row id -> (status, matched preset)
    'ms_swift.loss[grpo]': ('pass', None),
    'ms_swift.loss[bnpo]': ('pass', None),
    'ms_swift.loss[dr_grpo]': ('pass', None),
    'ms_swift.loss[dapo]': ('pass', None),
    # the default cap: epsilon_high falls back to epsilon = 0.2, an absolute cap on the ratio (w = min(r, 0.2))
    'ms_swift.loss[cispo]': ('preset', 'ms_swift'),
    'ms_swift.loss[sapo]': ('pass', None),
    'ms_swift.loss[bnpo,epsilon_high=0.28]': ('pass', None),
    'ms_swift.loss[grpo,delta=3.0]': ('pass', None),  # delta >= 1 + epsilon_high is the dual clip
    'ms_swift.loss[grpo,A=[B,T]]': ('pass', None),
    'ms_swift.loss[cispo,epsilon_high=5.0]': ('pass', None),
    'ms_swift.loss[sapo,tau_pos=0.5,tau_neg=2.0]': ('pass', None),
    'ms_swift.loss[bnpo,importance_sampling_level=sequence]': ('pass', None),
    'ms_swift.loss[bnpo,importance_sampling_level=sequence_token]': ('pass', None),
    'ms_swift.loss[real]': ('not_implemented', None),
    'ms_swift.loss[fipo]': ('not_implemented', None),
    # the KL term's clamps (kl_penalty's preset ms_swift bind on the loss batch's k3 > 10)
    'ms_swift.loss[grpo,beta=0.04]': ('preset', 'ms_swift'),
    'ms_swift.loss[dapo,beta=0.04]': ('preset', 'ms_swift'),
    'ms_swift.loss[grpo,beta=0.04,top_entropy_quantile=0.5]': ('preset', 'ms_swift'),
    'ms_swift.loss[grpo,top_entropy_quantile=0.5]': ('pass', None),
    'ms_swift.loss[dapo,top_entropy_quantile=0.2]': ('pass', None),
    # each rank takes the quantile of its own tokens
    'ms_swift.entropy_mask[rho=0.5,ranks=2]': ('variant', None),
    'ms_swift.rollout_is[token_truncate]': ('pass', None),
    'ms_swift.rollout_is[token_mask]': ('pass', None),
    'ms_swift.rollout_is[sequence_truncate]': ('pass', None),
    'ms_swift.rollout_is[sequence_mask]': ('pass', None),
    # the IS weight multiplies the KL term too (corrected_policy_loss weight_kl=True)
    'ms_swift.loss[dapo,rollout_importance_sampling_mode=token_truncate,beta=0.04]': ('preset', 'ms_swift'),
    'ms_swift.loss[dapo,rollout_importance_sampling_mode=token_mask,beta=0.04]': ('preset', 'ms_swift'),
    'ms_swift.loss[dapo,rollout_importance_sampling_mode=sequence_truncate,beta=0.04]': ('preset', 'ms_swift'),
    'ms_swift.loss[dapo,rollout_importance_sampling_mode=sequence_mask,beta=0.04]': ('preset', 'ms_swift'),
    # OPSM edits completion_mask: rejected tokens leave the count for grpo and bnpo, but dapo divides by
    # num_items_in_batch, counted before the edit (rejected='zero')
    'ms_swift.loss[grpo,off_policy_sequence_mask_delta=δ]': ('pass', None),
    'ms_swift.loss[bnpo,off_policy_sequence_mask_delta=δ]': ('pass', None),
    'ms_swift.loss[dapo,off_policy_sequence_mask_delta=δ]': ('variant', None),
    'ms_swift.loss[grpo,rollout_importance_sampling_mode=token_truncate,beta=0.04,off_policy_sequence_mask_delta=δ]':
        ('preset', 'ms_swift'),
    # a batch split over ranks / gradient-accumulation steps: bnpo is a mean of local token means
    'ms_swift.loss[grpo,ranks=2,micro_batches=1]': ('pass', None),
    'ms_swift.loss[grpo,ranks=1,micro_batches=2]': ('pass', None),
    'ms_swift.loss[bnpo,ranks=2,micro_batches=1]': ('variant', None),
    'ms_swift.loss[bnpo,ranks=1,micro_batches=2]': ('variant', None),
    'ms_swift.loss[dr_grpo,ranks=2,micro_batches=1]': ('pass', None),
    'ms_swift.loss[dr_grpo,ranks=1,micro_batches=2]': ('pass', None),
    'ms_swift.loss[dapo,ranks=2,micro_batches=1]': ('pass', None),
    'ms_swift.loss[dapo,ranks=1,micro_batches=2]': ('pass', None),
    'ms_swift.loss[grpo,logits,temperature=0.7,top_entropy_quantile=0.5]': ('pass', None),
    'ms_swift.advantages[rloo,scale_rewards=group]': ('pass', None),
    'ms_swift.advantages[rloo,scale_rewards=batch]': ('pass', None),
    'ms_swift.advantages[reinforce_plus_plus,scale_rewards=group]': ('pass', None),
    'ms_swift.advantages[reinforce_plus_plus,scale_rewards=none]': ('pass', None),
    'ms_swift.advantages[reinforce_plus_plus,scale_rewards=batch]': ('pass', None),
    'ms_swift.advantages[grpo,reward_weights=(1.0, 0.5)]': ('pass', None),
    'ms_swift._compute_advantages[grpo,kl_in_reward,beta=0.04]': ('pass', None),
    'ms_swift._compute_advantages[rloo,kl_in_reward,beta=0.04]': ('pass', None),
    'ms_swift._compute_advantages[reinforce_plus_plus,kl_in_reward,beta=0.04]': ('pass', None),
}


# the `adapter` and `extra` fixtures are in conftest.py


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "ms_swift" and adapter.version == "4.6.0"
    assert adapter.array_api == "numpy" and adapter.dtypes == ("float64", "float32")
    assert adapter.value_token_loss is None and adapter.micro_batched_loss is None


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


# ---------------------------------------------------------------------------------------------
# Findings (ms-swift 4.6.0), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------

ROW = np.array([[False, True, True]])


def _loss(adapter, settings, logp, old, A, mask=ROW, upstream=None, **extra):
    arrays = {"per_token_logps": logp, "old_per_token_logps": old, "advantages": A, "completion_mask": mask, **extra}
    if upstream is None:
        return adapter.loss(arrays, settings)["outputs"]
    return adapter.loss(arrays, settings, wrt="per_token_logps", upstream=upstream)


@pytest.mark.frameworks
def test_finding_overflowing_ratio_with_zero_advantage_is_nan(adapter):
    """_compute_loss_and_metrics (grpo_trainer.py:1025-1058): coef_1 = exp(logp - old) with no clamp. A float32
    log-ratio of 100 overflows to inf and inf * A with A = 0 is NaN, so -min(r A, clip(r) A) is NaN (and the
    scalar loss NaN); the spec's term is 0 (verl, OpenRLHF clamp the log-ratio at 20)."""
    lp = np.array([[0.0, -1.0, -1.0]], dtype=np.float32)
    old = np.array([[0.0, -101.0, -1.0]], dtype=np.float32)
    A = np.array([[0.0, 0.0, 1.0]], dtype=np.float32)
    out = _loss(adapter, {"loss_type": "grpo"}, lp, old, A)
    assert np.isnan(out["per_token_loss"][0, 1]) and np.isnan(out["loss"])
    assert out["per_token_loss"][0, 2] == pytest.approx(-1.0)  # r = 1: -A
    spec = oracle.ppo_token_loss(lp.astype(np.float64), old.astype(np.float64), A.astype(np.float64), ROW)
    assert spec[0, 1] == 0.0 and spec[0, 2] == -1.0


@pytest.mark.frameworks
def test_finding_sapo_gradient_of_an_overflowing_ratio_is_nan(adapter):
    """loss_type "sapo" (grpo_trainer.py:1039-1045): the gate sigmoid(tau (r - 1)) is 1 at r = inf, its value
    -4/tau * A fine, but autograd multiplies sigmoid' = 0 by dr/dlogp = r = inf: the gradient is NaN where
    the spec's -A 4 sigma (1 - sigma) r tends to 0."""
    lp = np.array([[0.0, -1.0, -1.0]], dtype=np.float32)
    old = np.array([[0.0, -101.0, -1.0]], dtype=np.float32)
    A = np.array([[0.0, 1.0, 1.0]], dtype=np.float32)
    out = _loss(adapter, {"loss_type": "sapo"}, lp, old, A)
    assert out["per_token_loss"][0, 1] == pytest.approx(-4.0)  # -(4/tau_pos) * A, tau_pos = 1
    g = adapter.sapo_token_loss_grad(lp, old, A, ROW, np.ones_like(lp))
    assert np.isnan(g[0, 1])
    assert g[0, 2] == pytest.approx(-1.0)  # r = 1: -A * 4 * 1/4 * 1
    assert oracle.sapo_token_loss_grad(lp.astype(np.float64), old.astype(np.float64), A.astype(np.float64), ROW,
                                       np.ones((1, 3)))[0, 1] == 0.0


@pytest.mark.frameworks
def test_finding_gdpo_batch_of_one_sequence_is_nan(adapter):
    """scale_rewards="gdpo" (advantage.py:83-94): with one sequence in the batch the last step divides by
    summed.std() of one element, NaN (torch's unbiased std), where "group" and "batch" guard numel() > 1
    (:75, :80) and give 0. The spec gives 0. Reached by on-policy distillation (a teacher model allows
    num_generations = 1, arguments/rlhf_args.py:409-410) with reward_funcs, scale_rewards="gdpo" and a generation
    batch of one sequence (findings.toml gdpo-batch-of-one-nan)."""
    r = np.array([[1.0, 2.0]], dtype=np.float32)
    assert np.isnan(adapter.gdpo_advantages(r, 1)).all()
    assert adapter.grpo_advantages(r[:, 0], 1, scale="batch").tolist() == [0.0]
    assert oracle.gdpo_advantages(r.astype(np.float64), 1).tolist() == [0.0]
    two = np.array([[1.0, 2.0], [3.0, 5.0]], dtype=np.float32)  # two sequences in groups of one: 0, no NaN
    assert adapter.gdpo_advantages(two, 1).tolist() == [0.0, 0.0]


@pytest.mark.frameworks
def test_finding_default_cispo_cap_is_two_tenths(adapter):
    """loss_type "cispo" (grpo_trainer.py:1036-1038): torch.clamp(coef_1, max=epsilon_high), and epsilon_high
    defaults to epsilon = 0.2 (:2139): on-policy (r = 1) every token's weight is 0.2, so the gradient is
    -0.2 A (the CISPO paper's relative bound 1 + eps_high would give -A). cispo_token_loss(bound="absolute",
    eps_high=0.2) is the preset ms_swift."""
    lp = np.array([[0.0, -1.0, -2.0]], dtype=np.float32)
    A = np.array([[0.0, 1.0, -2.0]], dtype=np.float32)
    g = _loss(adapter, {"loss_type": "cispo"}, lp, lp, A, upstream={"per_token_loss": np.ones_like(lp)})
    np.testing.assert_allclose(g["grads"]["per_token_logps"][0, 1:], [-0.2, 0.4], rtol=1e-6)
    spec = oracle.cispo_token_loss_grad(lp.astype(np.float64), lp.astype(np.float64), A.astype(np.float64), ROW,
                                        np.ones((1, 3)), **preset_kwargs("ms_swift", "cispo_token_loss"))
    np.testing.assert_allclose(spec[0, 1:], [-0.2, 0.4])


@pytest.mark.frameworks
def test_finding_entropy_quantile_per_rank(adapter):
    """top_entropy_quantile (grpo_trainer.py:958-962) takes torch.nanquantile of the rank's own tokens: two ranks
    holding entropies [1, 2] and [3, 4] with rho = 0.5 each keep their own top half ({2} and {4}), where the
    batch's median 2.5 keeps {3, 4} (entropy_top_mask with the pooled entropies)."""
    m = np.array([[False, True, True]])
    kept = [adapter.entropy_top_mask(np.array([[0.0, h1, h2]]), m, rho=0.5)[0, 1:].tolist() for h1, h2 in ((1.0, 2.0), (3.0, 4.0))]
    assert kept == [[False, True], [False, True]]
    pooled = np.array([1.0, 2.0, 3.0, 4.0])
    spec = [oracle.entropy_top_mask(np.array([[0.0, h1, h2]]), m, rho=0.5, pooled_entropy=pooled)[0, 1:].tolist()
            for h1, h2 in ((1.0, 2.0), (3.0, 4.0))]
    assert spec == [[False, False], [True, True]]
    with pytest.raises(NotImplementedError):
        adapter.entropy_top_mask(np.array([[0.0, 1.0, 2.0]]), m, rho=0.5, pooled_entropy=pooled)


@pytest.mark.frameworks
def test_finding_bnpo_token_mean_is_per_micro_batch(adapter):
    """loss_type "bnpo" (grpo_trainer.py:1085-1086) divides by the micro-batch's own token count: micro-batches
    of 1 and 3 tokens with per-token losses -A = 1 and 0, 0, 0 give (1/1 + 0/3)/2 = 0.5 after the Trainer's
    division by the 2 accumulation steps; the batch's token mean is 1/4. dapo divides by num_items_in_batch (4):
    (1/4 + 0)*2/2 summed over the steps = 1/4."""
    one = np.array([[False, True, False, False]])
    three = np.array([[False, True, True, True]])
    lp = np.zeros((1, 4), dtype=np.float32)

    def step(loss_type, mask, A):
        arrays = {"per_token_logps": lp, "old_per_token_logps": lp, "advantages": np.full((1, 4), A, dtype=np.float32),
                  "completion_mask": mask, "num_items_in_batch": np.float32(4.0)}
        return float(adapter.loss(arrays, {"loss_type": loss_type}, grad_accum=2)["outputs"]["loss"]) / 2

    assert step("bnpo", one, -1.0) + step("bnpo", three, 0.0) == pytest.approx(0.5)
    assert step("dapo", one, -1.0) + step("dapo", three, 0.0) == pytest.approx(0.25)


@pytest.mark.frameworks
def test_finding_opsm_with_dapo_keeps_rejected_tokens_in_the_count(adapter):
    """off_policy_sequence_mask_delta edits completion_mask (grpo_trainer.py:1069-1080), but dapo's normaliser is
    num_items_in_batch, counted before (:795-801, :1128): a rejected row of 2 tokens beside a kept row with
    per-token losses 1, 1 gives 2/4 = 0.5 under dapo ('zero'), 2/2 = 1 under bnpo ('drop')."""
    m = np.array([[False, True, True], [False, True, True]])
    lp = np.full((2, 3), -1.0, dtype=np.float32)
    old = lp.copy()
    old[1] = -0.5  # row 1: mean(old - logp) = 0.5 > delta = 0.1 and A < 0: rejected
    A = np.full((2, 3), -1.0, dtype=np.float32)  # row 0: r = 1, loss 1 per token; row 1: r = e^-0.5, clipped: 0.8
    arrays = {"per_token_logps": lp, "old_per_token_logps": old, "advantages": A, "completion_mask": m}
    for loss_type, expected in (("dapo", 0.5), ("bnpo", 1.0)):
        out = adapter.loss(arrays, {"loss_type": loss_type, "off_policy_sequence_mask_delta": 0.1})["outputs"]
        assert out["off_policy_seq_mask"].tolist() == [True, False]
        assert float(out["loss"]) == pytest.approx(expected, rel=1e-6)


@pytest.mark.frameworks
def test_rollout_weight_multiplies_the_kl_term(adapter):
    """(policy term + beta k3) * rollout_is_weights (grpo_trainer.py:1063-1067): with A = 0 the loss is the KL
    term alone, so token_truncate with rho = exp(1) > 2 scales it by exactly 2 (corrected_policy_loss
    weight_kl=True, the preset ms_swift)."""
    lp = np.full((1, 3), -1.0, dtype=np.float32)
    ref = np.full((1, 3), -1.5, dtype=np.float32)  # k3 = exp(-0.5) + 0.5 - 1
    rollout = lp - np.float32(1.0)  # old = logp (no old given): rho = e
    A = np.zeros((1, 3), dtype=np.float32)
    k3 = math.exp(-0.5) + 0.5 - 1.0
    plain = _loss(adapter, {"loss_type": "bnpo", "beta": 1.0}, lp, lp, A, ref_per_token_logps=ref)
    weighted = _loss(adapter, {"loss_type": "bnpo", "beta": 1.0, "rollout_importance_sampling_mode": "token_truncate"},
                     lp, lp, A, ref_per_token_logps=ref, rollout_per_token_logps=rollout)
    assert float(plain["loss"]) == pytest.approx(k3, rel=1e-5)
    assert float(weighted["loss"]) == pytest.approx(2.0 * k3, rel=1e-5)


@pytest.mark.frameworks
def test_overlong_penalty_has_no_floor_and_no_factor(adapter):
    """SoftOverlong (rewards/orm.py:216-232): max 8, buffer 4: 0 up to 4, -1/4 per token after, -1 at 8 and -1.25
    at 9 (no floor: beyond='linear'); no factor, and buffer 0 or = max_length is refused (:220, :231)."""
    got = adapter.overlong_penalty(np.array([0, 4, 5, 8, 9]), max_length=8, buffer=4)
    np.testing.assert_array_equal(got, [0.0, 0.0, -0.25, -1.0, -1.25])
    for kw in ({"buffer": 4, "factor": 2.0}, {"buffer": 0}, {"buffer": 8}):
        with pytest.raises(NotImplementedError):
            adapter.overlong_penalty(np.array([9]), max_length=8, **kw)


@pytest.mark.frameworks
def test_delta_below_the_clip_is_not_the_dual_clip(adapter):
    """delta caps the unclipped ratio whatever the advantage's sign (grpo_trainer.py:1053-1054): for
    delta >= 1 + epsilon_high it only acts for A < 0 (the dual clip); below, it caps A > 0 tokens too, so the
    adapter refuses dual_clip < 1 + eps_high. r = 1.1, A = 1, delta = 1.05: -min(1.05, 1.1) = -1.05."""
    lp = np.array([[0.0, math.log(1.1), 0.0]], dtype=np.float32)
    old = np.zeros((1, 3), dtype=np.float32)
    A = np.array([[0.0, 1.0, 1.0]], dtype=np.float32)
    out = _loss(adapter, {"loss_type": "bnpo", "delta": 1.05}, lp, old, A)
    assert out["per_token_loss"][0, 1] == pytest.approx(-1.05, rel=1e-6)
    with pytest.raises(NotImplementedError):
        adapter.ppo_token_loss(lp, old, A, ROW, dual_clip=1.05)
