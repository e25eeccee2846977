"""The torchrl adapter (conformance/frameworks/torchrl/adapter.py, via the subprocess worker) and the torchrl
rows (conformance/frameworks/torchrl/checks.py).

torchrl runs in its own environment: these tests need `rlspec frameworks install torchrl` (marked
`frameworks`, skipped with a reason otherwise; CI runs them as `pytest -m frameworks` after the
install). The "not installed" tests need no torchrl and always run. Pins every row's status as
established against torchrl 0.14.1 (tensordict 0.14.3, torch 2.13.0 CPU) and the findings, each with a
minimal reproduction whose expected values are worked by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import oracle
from conformance.records.presets import homes, preset_kwargs
from conformance.runner.loading import BUILTIN_ADAPTERS
from tests.frameworks import pinned_rows

FRAMEWORK = "torchrl"
SKIP_REASON = pinned_rows.skip_reason("torchrl", FRAMEWORK)
pytestmark = pytest.mark.frameworks


def test_registered():
    assert BUILTIN_ADAPTERS["torchrl"] == "conformance.frameworks.torchrl.adapter:TorchRLAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    # LLMMaskedCategorical of an LLMWrapperBase actor: canonical; 'partial': no temperature in torchrl's loss path
    'token_logprobs': 'pass',
    'token_entropy': 'pass',
    # MCAdvantage: a one-sample group is NaN, and a float32 all-equal group whose mean rounds off gets
    # (r - mean)/1e-6 (findings below); otherwise preset torchrl (eps=0: the std clamped at 1e-6)
    'grpo_advantages': 'fail',
    # generalized_advantage_estimate: canonical, float32 precision on float64 inputs (gamma enters as float32)
    'gae': 'pass',
    'kl_penalty': 'pass',  # _kl_to_ref's k3 per token; 'partial': no k1/k2
    'kl_loss_term': 'pass',  # k3 differentiated as it is; 'partial': the other estimators and forms
    # GRPOLoss forward (aggregation="none"): exp(d)*A with no clamp: an overflowing ratio with A = 0 is NaN
    # (golden ppo_token_loss/overflowing-ratio-zero-advantage); 'partial': no dual clip
    'ppo_token_loss': 'fail',
    # CISPOLoss: the clipped ratio on the graph (surrogate='ratio', a bug against the paper: clipped tokens lose their
    # gradient) at the case's eps, float32 precision for float64 (clip_epsilon buffers in float32); 'partial': no
    # absolute bound, always a lower bound
    'cispo_token_loss': 'variant',
    'aggregate': 'pass',  # token_mean and prompt_mean (= seq_mean_token_mean)
    # loss_objective + loss_kl_to_ref: the KL is averaged over all B*T positions (finding below)
    'policy_loss': 'fail',
    'entropy_bonus': 'pass',  # loss_entropy of the forward
}

EXTRA = {  # row id -> (status, matched preset)
    # gamma * lmbda = 0 (lambda = 0: the TD(0) advantage) raises IndexError in the vectorised paths (finding below);
    # every other case is canonical
    'torchrl.vec_generalized_advantage_estimate': ('pass + raises IndexError', None),
    'torchrl.vec_generalized_advantage_estimate[gamma*lmbda>0]': ('pass', None),  # float32 precision on float64
    'torchrl.td_lambda_return_estimate': ('pass', None),  # exact in float64
    'torchrl.vec_td_lambda_return_estimate': ('pass + raises IndexError', None),
    'torchrl.vec_td_lambda_return_estimate[gamma*lmbda>0]': ('pass', None),
    'torchrl.GAE': ('pass', None),  # the module (vectorized=None: the loop), float32 gamma/lmbda buffers
    'torchrl.GAE[vectorized=True]': ('pass + raises IndexError', None),
    'torchrl.TDLambdaEstimator': ('pass + raises IndexError', None),  # vectorized=True by default
    'torchrl.MCAdvantage[grpo_size>=2]': ('preset', 'torchrl'),
    # trajectory_return="sum": the same formula on the returns; a float32 all-equal group of seed 0 fails
    'torchrl.MCAdvantage[trajectory_return=sum]': ('fail', None),
    # the forward on a tiny random-weight model, masking_strategy="sft" (default), value and gradient w.r.t. the logits
    'torchrl.GRPOLoss': ('pass', None),  # ppo 0.2 + entropy bonus 0.01, token_mean
    'torchrl.DAPO[clip_epsilon=(0.2, 0.28)]': ('pass', None),
    'torchrl.CISPOLoss': ('preset', 'torchrl'),  # the clipped ratio on the graph: a bug against the paper (findings)
    'torchrl.GRPOLoss[aggregation=prompt_mean]': ('pass', None),
    'torchrl.GRPOLoss[masking_strategy=rlhf]': ('pass', None),  # a multi-turn assistant mask with a gap
    'torchrl.GRPOLoss[kl_to_ref_coeff=0.1]': ('fail', None),  # the KL over all B*T positions, prompt included
    'torchrl.GRPOLoss[kl_mask_threshold=0.08]': ('pass', None),  # rejected tokens leave both terms and the count
    # B*T in the denominator, the prompt columns and padding included (a bug); sign-blind (the PPO logging convention)
    'torchrl.GRPOLoss.clip_fraction': ('fail', None),
}


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "torchrl" and adapter.version == "0.14.1"
    assert adapter.array_api == "numpy" and adapter.dtypes == ("float64", "float32")
    assert adapter._worker.hello["info"]["tensordict"] == "0.14.3"


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


# ---------------------------------------------------------------------------------------------
# Findings (torchrl 0.14.1), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------

R = np.array([[9.0, 0.0, 1.0, -1.0, 2.0]])  # position 0 is masked (no prediction): it never matters
V = np.array([[9.0, 0.5, 0.25, 1.0, -0.5]])
ONES = np.array([[False, True, True, True, True]])


@pytest.mark.frameworks
def test_finding_vectorised_gae_raises_at_lambda_zero(adapter):
    """vec_generalized_advantage_estimate / vec_td_lambda_return_estimate with gamma * lmbda = 0:
    _geom_series_like returns torch.zeros_like(t), a 1-D tensor (functional.py:197-198), where a [lim, 1]
    filter is expected, and _custom_conv1d reads filter.shape[-2] (value/utils.py:77): IndexError. (Had it run,
    an all-zero filter would also drop the k = 0 term: the advantage would be 0, not delta.) TDLambdaEstimator
    (vectorized=True by default) and GAE(vectorized=True) take that path. The loop is right: A_t = delta_t =
    r_t + gamma V_{t+1} - V_t (V after the last step 0), here with gamma = 0.5."""
    delta = np.array([[0.0, 0.0 + 0.5 * 0.25 - 0.5, 1.0 + 0.5 * 1.0 - 0.25, -1.0 + 0.5 * -0.5 - 1.0, 2.0 - (-0.5)]])
    adv, ret = adapter.gae(R, V, ONES, gamma=0.5, lam=0.0)
    np.testing.assert_allclose(adv, delta, atol=1e-7)
    np.testing.assert_allclose(ret, np.where(ONES, delta + V, 0.0), atol=1e-7)
    for name, op, params in (("vec_generalized_advantage_estimate", "value_function", {}),
                             ("vec_td_lambda_return_estimate", "value_function", {}),
                             ("TDLambdaEstimator", "value_estimator", {}),
                             ("GAE", "value_estimator", {"vectorized": True})):
        with pytest.raises(IndexError, match="tuple index out of range"):
            adapter.value_function(name, R, V, ONES, 0.5, 0.0, op=op, **params)
    with pytest.raises(IndexError):  # gamma = 0 too
        adapter.value_function("vec_generalized_advantage_estimate", R, V, ONES, 0.0, 0.95)


@pytest.mark.frameworks
def test_finding_gae_gamma_enters_as_float32(adapter):
    """generalized_advantage_estimate computes gamma * not_terminated and lmbda * gamma * not_done with a Python
    float times an int tensor (functional.py:163-172): torch's default dtype, float32. Two steps, V = [0, 100],
    r = 0, gamma 0.99, lambda 0.95, float64: A_0 = gamma*100 - gamma*lambda*100 = 4.95 exactly, torchrl gives
    float32(0.99)*100 - float32(0.9405)*100, 9.5e-7 away (float64 inputs, float32 precision)."""
    r, v, m = np.zeros((1, 3)), np.array([[0.0, 0.0, 100.0]]), np.array([[False, True, True]])
    adv, _ = adapter.gae(r, v, m, gamma=0.99, lam=0.95)
    assert adv[0, 1] == pytest.approx(float(np.float32(0.99)) * 100 - float(np.float32(0.99 * 0.95)) * 100, rel=1e-14)
    assert oracle.gae(r, v, m, gamma=0.99, lam=0.95)[0][0, 1] == pytest.approx(4.95, rel=1e-14)
    assert abs(adv[0, 1] - 4.95) > 1e-7


@pytest.mark.frameworks
def test_finding_vectorised_gae_truncates_the_series(adapter):
    """_fast_vec_gae keeps lim = int(log(1e-7) / log(gamma*lmbda)) terms of the series (functional.py:200-204):
    gamma*lmbda = 0.1 keeps 7 (1, 0.1, ..., 1e-6), so a reward 7 or 8 steps ahead (weight 1e-7, 1e-8) is dropped;
    the loop keeps it. A precision finding (float64 inputs: float32 precision), not a semantic one."""
    r = np.zeros((1, 10))
    r[0, 9] = 1.0
    v = np.zeros((1, 10))
    m = np.ones((1, 10), dtype=bool)
    m[0, 0] = False
    vec, _ = adapter.value_function("vec_generalized_advantage_estimate", r, v, m, 0.1, 1.0)
    loop, _ = adapter.gae(r, v, m, gamma=0.1, lam=1.0)
    assert math.log(1e-7) / math.log(0.1) == pytest.approx(7.0)
    assert vec[0, 1] == 0.0 and vec[0, 2] == 0.0 and vec[0, 3] == pytest.approx(1e-6, rel=1e-6)
    assert loop[0, 1] == pytest.approx(1e-8, rel=1e-6) and loop[0, 2] == pytest.approx(1e-7, rel=1e-6)


@pytest.mark.frameworks
def test_finding_kl_is_averaged_over_every_position(adapter):
    """GRPOLoss's KL terms (loss_kl_to_ref :747-755 and loss_kl_to_inference :756-765, both _kl_to_ref :907-915)
    zero the masked positions and take .mean() over every one of the B*T positions, the prompt columns included: kl_to_ref_coeff * sum_valid k3 / (B*T), where the policy term (and the
    spec's policy_loss) divide by the valid-token count N. One row, T = 5, 2 valid tokens with d = logp - ref =
    log 2 (k3 = 1/2 - 1 + log 2 = 0.19315 each), everything else 0: torchrl's KL term is 0.38629/5 = 0.07726;
    the token mean is 0.19315 (2.5x larger). The weight of the KL term shrinks with the prompt and the padding."""
    m = np.array([[False, True, True, False, False]])
    lp = np.array([[0.0, -1.0, -2.0, 0.0, 0.0]])
    ref = lp - math.log(2.0) * m
    k3 = 0.5 - 1.0 + math.log(2.0)
    out = adapter.call("kl_to_ref", {"log_probs": lp, "ref_log_probs": ref, "mask": m})["outputs"]
    assert float(out["kl"]) == pytest.approx(2 * k3 / 5, rel=1e-12)
    assert oracle.aggregate(oracle.kl_penalty(lp, ref, m, estimator="k3"), m, mode="token_mean") == pytest.approx(k3, rel=1e-12)
    # the same through policy_loss: logp = old_logp (ratio 1, clip inactive), A = 0: only the KL term is left
    got = adapter.policy_loss(lp, lp, ref, np.zeros(1), m, kl_coef=1.0)
    assert got == pytest.approx(2 * k3 / 5, rel=1e-12)
    assert oracle.policy_loss(lp, lp, ref, np.zeros(1), m, kl_coef=1.0) == pytest.approx(k3, rel=1e-12)


@pytest.mark.frameworks
def test_finding_all_equal_float32_group_is_not_zero(adapter):
    """MCAdvantage: (r - mean) / std.clamp_min(1e-6) (grpo.py:1508-1511). In float32 the mean of three rewards
    2.9 is 1 ulp off (2.9000001), so every advantage is -2.384e-7 / 1e-6 = -0.238 (bug-catalogue #9: an all-equal
    group must give exactly 0); once that rounding exceeds 1e-6 the std is no longer clamped and every member
    gets -(r - mean)/std = -sqrt(2/3) = -0.816 ([100.3] * 3). float64 rewards: 0. Sixteen rewards 0.1 (a GSM8K group
    whose answers are all formatted but wrong, torchrl's recipe's 16 repeats) get -0.00745 each, in both modes."""
    adv = adapter.grpo_advantages(np.full(3, 2.9, dtype=np.float32), 3)
    np.testing.assert_allclose(adv, [-0.2384186] * 3, rtol=1e-5)
    adv = adapter.grpo_advantages(np.full(3, 100.3, dtype=np.float32), 3)
    np.testing.assert_allclose(adv, [-math.sqrt(2.0 / 3.0)] * 3, rtol=1e-5)
    # real use: the reward parsers' format_reward 0.1 (envs/llm/reward/gsm8k.py:55), float32, the recipe's 16 repeats:
    # the float32 mean of sixteen 0.1 is 0.1 + 1 ulp (7.45e-9), so each member gets -7.45e-9 / 1e-6 = -0.00745
    for trajectory_return in (None, "sum"):
        adv = adapter.mc_advantages(np.full(16, 0.1, dtype=np.float32), 16, trajectory_return=trajectory_return)
        np.testing.assert_allclose(adv, [-0.0074505806] * 16, rtol=1e-5)
    assert adapter.grpo_advantages(np.full(3, 2.9), 3).tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_array_equal(oracle.grpo_advantages(np.full(3, 2.9, dtype=np.float32).astype(np.float64), 3), 0.0)


@pytest.mark.frameworks
def test_finding_singleton_group_is_nan(adapter):
    """MCAdvantage(grpo_size=1) in its default per-step mode on one-step trajectories: the unbiased std of one
    reward is NaN and NaN.clamp_min(1e-6) is NaN. Only trajectory_return refuses grpo_size < 2 (grpo.py:1165-1170);
    the per-step mode accepts it (torchrl's recipe passes grpo_size=cfg.env.repeats unchecked), so no input domain
    is declared for a group of one."""
    assert np.isnan(adapter.grpo_advantages(np.array([1.0, 2.0]), 1)).all()
    with pytest.raises(ValueError, match="grpo_size >= 2"):
        adapter.mc_advantages(np.array([1.0, 2.0]), 1, trajectory_return="sum")


@pytest.mark.frameworks
def test_finding_overflowing_ratio_with_zero_advantage_is_nan(adapter):
    """GRPOLoss._compute_policy_objective: gain1 = exp(log_weight) * A (grpo.py:776) with no log-ratio clamp; a
    ratio that overflows (d = 100 in float32: exp = inf) with A = 0 (an all-equal GRPO group) gives inf * 0 =
    NaN, the min keeps it, and the NaN reaches the aggregated loss. The spec's value is 0."""
    m = np.array([[False, True, True]])
    lp = np.array([[0.0, -1.0, -1.0]], dtype=np.float32)
    old = np.array([[0.0, -101.0, -1.0]], dtype=np.float32)
    got = adapter.ppo_token_loss(lp, old, np.zeros(1, dtype=np.float32), m)
    assert np.isnan(got[0, 1]) and got[0, 2] == 0.0
    assert np.isnan(adapter.policy_loss(lp, old, lp, np.zeros(1, dtype=np.float32), m))
    assert oracle.ppo_token_loss(lp.astype(np.float64), old.astype(np.float64), np.zeros(1), m)[0, 1] == 0.0


@pytest.mark.frameworks
def test_finding_clip_fraction_counts_every_position(adapter):
    """The logged clip_fraction is (clamped log-weight != log-weight).mean() over all B*T positions (grpo.py:778):
    masked positions (log-weight 0, :961-967: the prompt columns under "sft", and the padding) count as unclipped.
    One row, T = 5: column 0 the prompt, the response's ratios 2 and 1 with A > 0 (the sign plays no part),
    columns 3-4 padding: torchrl 1/5 = 0.2, the spec's token mean of ppo_clipped_mask 1/2."""
    m = np.array([[False, True, True, False, False]])
    lp = np.zeros((1, 5))
    old = -np.log(np.array([[1.0, 2.0, 1.0, 1.0, 1.0]]))
    A = np.ones(1)
    out, _, _ = adapter._forward("ppo_token_loss", "GRPOLoss", {"entropy_bonus": False}, ("loss_objective",), lp, m,
                                 old_logp=old, advantages=A)
    assert float(out["clip_fraction"]) == pytest.approx(0.2)
    spec = oracle.aggregate(oracle.ppo_clipped_mask(lp, old, A, m).astype(np.float64), m, mode="token_mean")
    assert spec == pytest.approx(0.5)


@pytest.mark.frameworks
def test_finding_clip_fraction_ignores_the_advantage_sign(adapter):
    """A convention, not a bug: clip_fraction counts a ratio outside the range whatever A's sign (grpo.py:778), as
    stable-baselines3, CleanRL and torchrl's own ClipPPOLoss (objectives/ppo.py:1632) log it. Position 0 masked (the
    same B*T = 3 denominator in both calls), both trained ratios 2: with A = [+1, +1] both are clipped; with
    A = [+1, -1] the second is not (the min picks r A, PPO's gradient is not zero there). torchrl logs 2/3 both
    times; the spec's token mean of ppo_clipped_mask goes from 1 to 1/2."""
    m = np.array([[False, True, True]])
    lp = np.zeros((1, 3))
    old = -np.log(np.array([[1.0, 2.0, 2.0]]))
    for A, spec_fraction in ((np.array([[0.0, 1.0, 1.0]]), 1.0), (np.array([[0.0, 1.0, -1.0]]), 0.5)):
        out, _, _ = adapter._forward("ppo_token_loss", "GRPOLoss", {"entropy_bonus": False}, ("loss_objective",), lp, m,
                                     old_logp=old, advantages=A)
        assert float(out["clip_fraction"]) == pytest.approx(2.0 / 3.0)
        clipped = oracle.ppo_clipped_mask(lp, old, A, m)
        assert oracle.aggregate(clipped.astype(np.float64), m, mode="token_mean") == pytest.approx(spec_fraction)


# ---------------------------------------------------------------------------------------------
# What the adapter calls, and the settings torchrl has
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_clip_epsilon_buffers_are_float32(adapter):
    """GRPOLoss registers clip_epsilon_low/high as torch.tensor(eps) (grpo.py:536-537): float32, so the clip
    bounds are float32 with float64 log-probs (the precision note of ppo/cispo)."""
    m = np.array([[False, True]])
    out = adapter.call("grpo_loss", {"log_probs": np.zeros((1, 2)), "old_log_probs": np.zeros((1, 2)), "advantage": np.ones((1, 2)),
                                     "mask": m}, {"init": {"clip_epsilon": [0.2, 0.28]}})["outputs"]
    assert out["clip_epsilon_dtype"] == "torch.float32"
    assert out["clip_epsilon"] == [float(np.float32(0.2)), float(np.float32(0.28))]


@pytest.mark.frameworks
def test_finding_cispo_clipped_tokens_lose_their_gradient(adapter):
    """CISPOLoss: L = -clip(r, 0.8, 1.2) * A with the clamp on the graph (grpo.py:1008-1016): r = 1.5 (clipped to
    1.2), A = 2: L = -2.4, gradient 0 (the clamp passes none); r = 1.1: L = -2.2, gradient -r A = -2.2. CISPO
    (arXiv:2506.13585 eqs. 4-5) makes the clipped weight a stop-gradient on A log pi: every token keeps the
    gradient -clip(r) A, here [-2.4, -2.2] (the spec's canonical surrogate "logp"). A bug in torchrl's CISPO; the
    preset torchrl (surrogate="ratio") describes what it computes."""
    m = np.array([[False, True, True]])
    lp = np.array([[0.0, -1.0, -1.0]])
    old = lp - np.log(np.array([[1.0, 1.5, 1.1]]))
    A = np.array([2.0])
    kw = preset_kwargs("torchrl", "cispo_token_loss")
    assert kw == {"eps_low": 0.2, "eps_high": 0.2, "surrogate": "ratio"}
    np.testing.assert_allclose(adapter.cispo_token_loss(lp, old, A, m, eps_low=0.2, eps_high=0.2), [[0.0, -2.4, -2.2]], rtol=1e-7)
    np.testing.assert_allclose(adapter.cispo_token_loss_grad(lp, old, A, m, np.ones((1, 3)), eps_low=0.2, eps_high=0.2),
                               [[0.0, 0.0, -2.2]], rtol=1e-7)
    np.testing.assert_allclose(oracle.cispo_token_loss(lp, old, A, m, **kw), [[0.0, -2.4, -2.2]], rtol=1e-7)
    np.testing.assert_allclose(oracle.cispo_token_loss_grad(lp, old, A, m, np.ones((1, 3)), eps_low=0.2, eps_high=0.2),
                               [[0.0, -2.4, -2.2]], rtol=1e-7)
    with pytest.raises(NotImplementedError):  # no "no lower bound" setting: 0 <= eps_low < 1 (objectives/utils.py:1103)
        adapter.cispo_token_loss(lp, old, A, m, eps_high=0.2)


@pytest.mark.frameworks
def test_entropy_bonus_defaults(adapter):
    """GRPOLoss() has the entropy bonus on: loss_entropy = -0.01 * token_mean(H) (grpo.py:501-503, :735);
    prompt_mean = the mean of the rows' token means (a row without tokens counts, with 0)."""
    H = np.array([[0.0, 1.0, 3.0, 0.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    m = np.array([[False, True, True, False], [False, True, False, False], [False, False, False, False]])
    kw = homes()["torchrl"].REQUIRED_DEFAULTS["entropy_bonus"]
    assert adapter.entropy_bonus(H, m, **kw) == pytest.approx(-0.01 * 6.0 / 3.0)
    assert adapter.entropy_bonus(H, m, entropy_coef=0.01, mode="seq_mean_token_mean") == pytest.approx(-0.01 * (2.0 + 2.0) / 3.0)


@pytest.mark.frameworks
def test_kl_mask_drops_tokens_from_both_terms_and_the_count(adapter):
    """kl_mask_threshold (grpo.py:683-707): tokens with 0.5 * (logp - old_logp)^2 > threshold leave the mask of
    every loss term (and its token count). The threshold is read against the sampling log-probs
    (("log_probs", "full"), the old policy), though the docstring speaks of pi_ref. d = [0.1, 0.5], threshold
    0.08: the second token (k2 = 0.125) is dropped; the loss is the first token's -r A = -exp(0.1)."""
    m = np.array([[False, True, True]])
    lp = np.zeros((1, 3))
    old = -np.array([[0.0, 0.1, 0.5]])
    out, _, _ = adapter._forward("policy_loss", "GRPOLoss", {"entropy_bonus": False, "kl_mask_threshold": 0.08,
                                                              "clip_epsilon": [0.2, 0.2]}, ("loss_objective",), lp, m,
                                 old_logp=old, advantages=np.ones(1))
    assert float(np.reshape(out["loss_objective"], ())) == pytest.approx(-math.exp(0.1))


@pytest.mark.frameworks
def test_not_expressible_settings(adapter):
    m = np.array([[False, True]])
    x = np.zeros((1, 2))
    with pytest.raises(NotImplementedError):
        adapter.token_logprobs(np.zeros((1, 2, 3)), np.zeros((1, 2), dtype=np.int64), m, temperature=0.7)
    with pytest.raises(NotImplementedError):
        adapter.ppo_token_loss(x, x, np.ones(1), m, dual_clip=3.0)
    with pytest.raises(NotImplementedError):
        adapter.aggregate(x, m, mode="token_mean", num_tokens=4.0)
    with pytest.raises(NotImplementedError):
        adapter.kl_penalty(x, x, m, estimator="k1")
    with pytest.raises(ValueError, match="grpo_advantages: group_size"):
        adapter.grpo_advantages(np.zeros(3), 2)
