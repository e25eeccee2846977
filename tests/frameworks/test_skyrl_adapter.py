"""The SkyRL adapter (conformance/frameworks/skyrl/adapter.py, via the subprocess worker) and the SkyRL rows
(conformance/frameworks/skyrl/checks.py).

SkyRL runs in its own environment: these tests need `rlspec frameworks install skyrl` (marked `frameworks`,
skipped with a reason otherwise; CI runs them as `pytest -m frameworks` after the install). The "not
installed" test needs no SkyRL and always runs. Pins every row's status as established against skyrl 0.3.0
(its skyrl-train backend; torch 2.13.0 CPU, Python 3.11) and the findings, each with a minimal reproduction
whose expected numbers are worked by hand in the docstring.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import oracle
from conformance.runner.loading import BUILTIN_ADAPTERS
from conformance.frameworks import subprocess_worker as sw
from tests.frameworks import pinned_rows

FRAMEWORK = "skyrl"
SKIP_REASON = pinned_rows.skip_reason("SkyRL", FRAMEWORK)
F32 = np.float32


def test_registered():
    assert BUILTIN_ADAPTERS["skyrl"] == "conformance.frameworks.skyrl.adapter:SkyRLAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    'token_logprobs': 'pass',
    'token_entropy': 'pass',
    'rloo_advantages': 'pass',  # a one-sample group gets 0 (ppo_utils.py:1246-1249): canonical
    # a one-sample group has mean 0 and std 1 (:1321-1323): preset verl, skyrl; also 'partial' (scale='batch' has
    # no setting) and a float64 precision finding (the singleton's std is a float32 0-d tensor plus epsilon)
    'grpo_advantages': 'preset',
    # RayPPOTrainer.apply_reward_kl_penalty driven (rewards - max(0, coef) * compute_approx_kl): canonical
    'rlhf_token_rewards': 'pass',
    # on SkyRL's own layout (responses right-aligned, response_mask over the whole response, TR:917): a masked
    # tool token inside a response is a step of the recursion (:1274-1278; golden gae/multi-turn-gap-*);
    # 'partial': a mask sum <= 1 makes masked_whiten raise
    'gae': 'fail',
    'whiten': 'pass',  # 'partial': masked_whiten raises for a mask sum of 0 or 1 (:135-140)
    'kl_penalty': 'preset',  # k3 clamped (:110-117): preset ms_swift, skyrl, verl; canonical k1/k2
    'ppo_token_loss': 'preset',  # safe_exp_delta's +-20 (log_ratio_clamp=20.0, openrlhf, skyrl); float64 precision finding
    'gspo_token_loss': 'variant',  # form='token_sg' (the eps are asked; its clamp(max=10) never binds here)
    'cispo_token_loss': 'pass',  # the bounds asked are SkyRL's clamp(r, 1 - low, 1 + high); float64 precision finding
    'value_token_loss': 'pass',
    'aggregate': 'pass',  # 'partial': seq_mean_token_sum and token_sum have no loss_reduction
    # 'partial': SkyRL's KL term is seq_mean_token_mean whatever loss_reduction (worker.py:980), the other modes
    # with a KL term are not implemented (the framework rows skyrl.worker_loss[*] show the composition)
    'policy_loss': 'pass',
    'rollout_is_weights': 'pass',  # TIS only ('partial'); its +-20 clamp is within float32 precision (e^-20)
    'rollout_rejection_mask': 'pass',  # the ratio at token / seq_all / seq_mean / seq_sum ('partial': k1-k3, seq_max)
    'decoupled_ppo_token_loss': 'pass',  # regular + token TIS against the rollout log-probs ('partial': no mask, no uncapped)
    'sapo_token_loss': 'preset',  # log-ratio clamped to +-20 (:632): preset verl, skyrl
    'dppo_token_loss': 'not_implemented',  # another surrogate with the same gradient: skyrl.policy_loss[dppo,*] rows
    # on the trainer's layout (response_mask over the whole response, TR:1168-1170): a masked tool token inside a response
    # is a step of the return and enters the whitening (golden reinforce_pp_advantages/* with a gapped mask); the reset
    # at a masked position (:1194) only meets the leading padding, so preset skyrl's gap='reset' never applies
    'reinforce_pp_advantages': 'fail',
    'maxrl_advantages': 'preset',  # a one-sample group gets r (:1368): singleton='raw', preset skyrl
    'kl_loss_term': 'preset',  # k3's clamp at 10: preset verl, openrlhf, skyrl, ms_swift ('partial': estimator gradient only)
    'clip_cov_mask': 'pass',  # its torch.randperm made the order of the draws (ops.py): canonical, exact
    # FAIL on the golden vector kl_cov_token_loss/zero-advantage-overflowing-ratio: -A * exp(d) with A = 0 and
    # d = 800 is 0 * inf = NaN (no log-ratio clamp, :964-966), 0 in the spec (verl's finding too)
    'kl_cov_token_loss': 'fail',
    'kl_controller_update': 'pass',
}

EXTRA = {  # row id -> (status, matched preset)
    # the trainer's path: _normalize_advantages scales the advantages, the loss sums (every reduction canonical)
    'skyrl.policy_loss[regular,token_mean]': ('pass', None),
    'skyrl.policy_loss[regular,sequence_mean]': ('pass', None),
    'skyrl.policy_loss[regular,seq_mean_token_sum_norm]': ('pass', None),
    'skyrl.policy_loss[regular,prompt_mean]': ('pass', None),  # mean over prompts of each prompt's token mean
    'skyrl.policy_loss[regular,token_mean_legacy]': ('pass', None),  # mean over micro-batches of their token means
    'skyrl.policy_loss[regular,token_mean,A=[B,T]]': ('pass', None),
    'skyrl.policy_loss[regular,token_mean,eps_clip_high=0.28]': ('pass', None),
    'skyrl.policy_loss[dual_clip,token_mean]': ('pass', None),
    # per-sequence advantages under sequence_mean: the token_sg form equals the paper's (spec note); per-token
    # advantages tell them apart: preset skyrl (form='token_sg')
    'skyrl.policy_loss[gspo,sequence_mean]': ('pass', None),
    'skyrl.policy_loss[gspo,sequence_mean,A=[B,T]]': ('preset', 'skyrl'),
    'skyrl.policy_loss[cispo,token_mean]': ('preset', 'skyrl'),  # CISPOConfig's [1, 6]
    'skyrl.policy_loss[cispo,sequence_mean,cispo.cispo_eps_clip_low=0.2,cispo.cispo_eps_clip_high=0.2]': ('pass', None),
    'skyrl.policy_loss[sapo,sequence_mean]': ('pass', None),
    'skyrl.policy_loss[sapo,token_mean,sapo.tau_pos=2.0,sapo.tau_neg=3.0,A=[B,T]]': ('pass', None),
    # the ratio surrogate -A*r*keep (the spec's DPPO gradient, another value), against old or rollout log-probs
    'skyrl.policy_loss[dppo,token_mean,dppo.dppo_type=binary_tv]': ('variant', None),
    'skyrl.policy_loss[dppo,token_mean,dppo.dppo_type=binary_tv,rollout_logprobs]': ('variant', None),
    'skyrl.policy_loss[dppo,token_mean,dppo.dppo_type=binary_kl]': ('variant', None),
    'skyrl.policy_loss[dppo,token_mean,dppo.dppo_type=binary_kl,rollout_logprobs]': ('variant', None),
    # findings: the covariance of the advantages the trainer already scaled (diagnosed in the messages)
    'skyrl.policy_loss[clip_cov,token_mean,clip_cov.clip_ratio=0.2,clip_cov.clip_cov_lb=0.2,clip_cov.clip_cov_ub=3.0]': ('fail', None),
    'skyrl.policy_loss[kl_cov,token_mean]': ('fail', None),
    'skyrl.policy_loss[clip_cov,sequence_mean,clip_cov.clip_ratio=0.2,clip_cov.clip_cov_lb=0.2,clip_cov.clip_cov_ub=3.0]': ('fail', None),
    'skyrl.policy_loss[kl_cov,sequence_mean]': ('fail', None),
    'skyrl.policy_loss[rollout_is,token_mean]': ('pass', None),
    'skyrl.policy_loss[importance_sampling,token_mean]': ('pass', None),
    'skyrl.policy_loss[cross_entropy,token_mean]': ('pass', None),
    # off-policy correction: TIS alone rejects nothing (drop = zero: canonical); a rejection keeps the token in the
    # trainer's count (rejected='zero', preset skyrl); under sequence_mean a rejected row is 0 either way
    'skyrl.policy_loss[regular,token_mean,tis_ratio_type=token]': ('pass', None),
    'skyrl.policy_loss[regular,token_mean,tis_ratio_type=sequence]': ('pass', None),
    'skyrl.policy_loss[regular,token_mean,sequence_mask_metric=geometric]': ('preset', 'skyrl'),
    'skyrl.policy_loss[regular,token_mean,sequence_mask_metric=product]': ('preset', 'skyrl'),
    'skyrl.policy_loss[regular,token_mean,outlier_token_is_threshold=0.5,2.0]': ('preset', 'skyrl'),
    'skyrl.policy_loss[regular,token_mean,token_mask_is_threshold=0.6,1.6]': ('preset', 'skyrl'),
    # the masks chained (the geometric mean and the TIS weight over the tokens the token mask kept): variant
    'skyrl.policy_loss[regular,token_mean,token_mask+geometric+tis=token]': ('variant', None),
    'skyrl.policy_loss[regular,sequence_mean,tis_ratio_type=token]': ('pass', None),
    'skyrl.policy_loss[regular,sequence_mean,sequence_mask_metric=product]': ('pass', None),
    # the worker's KL term by seq_mean_token_mean (with k3's clamp): preset skyrl; canonical when the loss
    # reduction is sequence_mean and no clamp binds (k1)
    'skyrl.worker_loss[regular,token_mean,kl_estimator_type=k3]': ('preset', 'skyrl'),
    'skyrl.worker_loss[regular,sequence_mean,kl_estimator_type=k3]': ('preset', 'skyrl'),
    'skyrl.worker_loss[regular,sequence_mean,kl_estimator_type=k1]': ('pass', None),
    'skyrl.worker_loss[regular,token_mean,kl_estimator_type=k2]': ('preset', 'skyrl'),
    'skyrl.ppo_critic_loss[value_clip=0.2]': ('pass', None),
    'skyrl.ppo_critic_loss[value_clip=None]': ('pass', None),
    # the whitening over response_mask counts the batch's masked tool token too (:1282), at every gamma and lambda;
    # 0.99 / 0.95 also shows it as a step of the recursion
    'skyrl.compute_gae_advantage_return[gamma=1,lambd=1,zeros at masked positions]': ('fail', None),
    'skyrl.compute_gae_advantage_return[gamma=1,lambd=1,garbage at masked positions]': ('fail', None),
    'skyrl.compute_gae_advantage_return[gamma=0.99,lambd=0.95,zeros at masked positions]': ('fail', None),
    'skyrl.compute_gae_advantage_return[gamma=0.99,lambd=0.95,garbage at masked positions]': ('fail', None),
    'skyrl.reinforce++[gamma=1,loss batch]': ('fail', None),  # whitened over row 3's tool token (finding)
    'skyrl.reinforce++[gamma=0.9,loss batch]': ('fail', None),  # whitened over row 3's tool token (finding)
    'skyrl.normalize_advantages[advantage_batch_normalize,token_mean]': ('fail', None),
}


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "skyrl" and adapter.version == "0.3.0"
    assert adapter.spec_version == "v1" and adapter.array_api == "numpy"
    assert adapter.dtypes == ("float64", "float32")
    assert adapter.has_trainer  # skyrl.train.trainer imports: the trainer-path rows run


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


@pytest.mark.frameworks
def test_every_registered_loss_and_estimator_has_a_row(adapter, extra):
    """Every name in the installed SkyRL's PolicyLossRegistry and AdvantageEstimatorRegistry is checked
    somewhere (checks.POLICY_LOSSES / ESTIMATORS): none left as a "not implemented" row."""
    from conformance.frameworks.skyrl import checks

    assert set(adapter.policy_losses()) == set(checks.POLICY_LOSSES)
    assert set(adapter.advantage_estimators()) == set(checks.ESTIMATORS)
    assert not [r for r in extra.values() if r.status == "not_implemented"]


# ---------------------------------------------------------------------------------------------
# Findings (skyrl 0.3.0), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


def _trainer_loss(adapter, name, arrays, config):
    """The ``policy_loss`` op on the trainer's path (RayPPOTrainer._normalize_advantages, then the loss)."""
    return adapter.call("policy_loss", arrays, {"name": name, "config": config, "normalize": {}})["outputs"]


@pytest.mark.frameworks
def test_finding_clip_cov_reads_the_scaled_advantages(adapter):
    """The trainer divides the advantages by the loss reduction's counts before the loss (trainer.py:1456-1478);
    compute_policy_loss_clip_cov then compares the covariance of those scaled advantages with clip_cov_lb /
    clip_cov_ub (ppo_utils.py:911-919). One row, 4 valid tokens, ratio 1: logp = [-1, -3, -1, -3] (mean -2),
    A = [2, -2, 2, -2] (mean 0): every covariance is 2, inside (1, 5), so Clip-Cov cuts n = 1 token, the one of
    smallest draw (token 2). Under token_mean the loss sees A / 4, covariances 0.5: nothing is cut, and the loss
    is plain PPO, token mean of -A = 0, where the spec's Clip-Cov loss is -(2 + 2 - 2) / 4 = -0.5."""
    m = np.array([[False, True, True, True, True]])
    lp = np.array([[0.0, -1.0, -3.0, -1.0, -3.0]], dtype=F32)
    A = np.array([[0.0, 2.0, -2.0, 2.0, -2.0]], dtype=F32)
    draws = np.array([[0.0, 0.4, 0.1, 0.3, 0.2]], dtype=F32)
    arrays = {"log_probs": lp, "old_log_probs": lp.copy(), "advantages": A, "loss_mask": m.astype(F32), "clip_cov_draws": draws}
    direct = adapter.call("policy_loss", arrays, {"name": "clip_cov", "config": {}})["outputs"]
    np.testing.assert_array_equal(direct["clip_cov_keep"][0, 1:], [1, 0, 1, 1])  # the function alone: as the spec
    lp64, A64 = lp.astype(np.float64), A.astype(np.float64)
    keep = oracle.clip_cov_mask(lp64, lp64, A64, m, draws.astype(np.float64))
    np.testing.assert_array_equal(keep[0, 1:], [True, False, True, True])
    trainer = _trainer_loss(adapter, "clip_cov", arrays, {"loss_reduction": "token_mean"})
    np.testing.assert_allclose(trainer["advantages"][0, 1:], [0.5, -0.5, 0.5, -0.5])
    np.testing.assert_array_equal(trainer["clip_cov_keep"][0, 1:], [1, 1, 1, 1])  # nothing cut
    assert float(trainer["loss"]) == pytest.approx(0.0, abs=1e-7)
    spec = oracle.aggregate(oracle.ppo_token_loss(lp64, lp64, A64, m) * keep, m, mode="token_mean")
    assert spec == pytest.approx(-0.5)


@pytest.mark.frameworks
def test_finding_kl_cov_term_is_not_scaled(adapter):
    """compute_policy_loss_kl_cov adds ppo_kl_coef * |d| to the selected tokens (ppo_utils.py:967) on advantages
    the trainer already divided by the token count N, and reduce_loss sums (:1088-1092): under token_mean the
    KL term is summed, N times its share. logp = [-1, -2, -1, -2], d = [0.5, 0, 0, 0], A = [2, -1, -1, 0]
    (N = 4, kl_cov_frac 0.25: n = 1, the largest covariance (A - 0)(logp + 1.5) = [1, 0.5, -0.5, 0] is token 1):
    SkyRL (-2e^0.5 + 1 + 1 + 0)/4 + 1 * 0.5 = 0.1756; the spec's token mean of kl_cov_token_loss
    (-2e^0.5 + 0.5 + 2)/4 = -0.1994."""
    m = np.array([[False, True, True, True, True]])
    lp = np.array([[0.0, -1.0, -2.0, -1.0, -2.0]], dtype=F32)
    old = lp - np.array([[0.0, 0.5, 0.0, 0.0, 0.0]], dtype=F32)
    A = np.array([[0.0, 2.0, -1.0, -1.0, 0.0]], dtype=F32)
    arrays = {"log_probs": lp, "old_log_probs": old, "advantages": A, "loss_mask": m.astype(F32)}
    out = _trainer_loss(adapter, "kl_cov", arrays, {"loss_reduction": "token_mean", "kl_cov": {"kl_cov_frac": 0.25, "ppo_kl_coef": 1.0}})
    assert float(out["loss"]) == pytest.approx((-2 * np.exp(0.5) + 2) / 4 + 0.5, rel=1e-6)
    spec = oracle.aggregate(oracle.kl_cov_token_loss(lp.astype(float), old.astype(float), A.astype(float), m, fraction=0.25, coef=1.0),
                            m, mode="token_mean")
    assert spec == pytest.approx((-2 * np.exp(0.5) + 2.5) / 4, rel=1e-12)


@pytest.mark.frameworks
def test_finding_batch_normalize_takes_the_mean_over_padding(adapter):
    """advantage_batch_normalize (trainer.py:1448-1454): mean = advantages.mean() over all B*T positions, the
    masked zeros included; the variance is masked. mask [0, 1, 1, 0], A = [0, 1, 3, 0]: SkyRL's mean is 1, the
    variance (0 + 4)/2 = 2, so A becomes [0, 2]/sqrt(2) = [0, 1.414], then /N = 2: [0, 0.707] (not centred);
    whiten(A, mask) is (A - 2)/sqrt(2) = [-0.707, 0.707], /2: [-0.354, 0.354]."""
    m = np.array([[False, True, True, False]])
    A = np.array([[0.0, 1.0, 3.0, 0.0]], dtype=F32)
    out = adapter.call("normalize_advantages", {"advantages": A, "loss_mask": m.astype(F32)},
                       {"config": {"advantage_batch_normalize": True, "loss_reduction": "token_mean"}})["outputs"]["advantages"]
    np.testing.assert_allclose(out[0, 1:3], [0.0, np.sqrt(2) / 2], atol=1e-6)
    np.testing.assert_allclose(oracle.whiten(A.astype(float), m)[0, 1:3] / 2, [-np.sqrt(2) / 4, np.sqrt(2) / 4], rtol=1e-8)  # eps 1e-8


@pytest.mark.frameworks
def test_finding_gae_counts_a_masked_tool_token_inside_a_response_as_a_step(adapter):
    """SkyRL's trainer sets response_mask to 1 on every response token (preprocess.py:130, trainer.py:917) and
    the loss mask to 0 on tool and observation tokens; compute_gae_advantage_return runs delta = r_t +
    gamma V_{t+1} - V_t over every position (ppo_utils.py:1274-1278) and whitens over response_mask (:1282).
    A masked tool token inside a response is therefore a step, with the critic's value there and reward 0.
    mask [0, 1, 0, 1] (position 2 a tool token), r = [., 0, ., 1], V = [., 0.5, 0, 0.5], gamma 1, lambda 0.5.
    The spec skips the tool token: A_3 = 0.5, A_1 = (0 + 0.5 - 0.5) + 0.5 * 0.5 = 0.25. SkyRL: A_3 = 0.5,
    A_2 = 0.5 + 0.5 * 0.5 = 0.75, A_1 = (0 + 0 - 0.5) + 0.5 * 0.75 = -0.125."""
    m = np.array([[False, True, False, True]])
    r = np.array([[0.0, 0.0, 0.0, 1.0]], dtype=F32)
    v = np.array([[0.0, 0.5, 0.0, 0.5]], dtype=F32)
    adv, _ = adapter.gae(r, v, m, gamma=1.0, lam=0.5)
    np.testing.assert_allclose(adv, [[0.0, -0.125, 0.0, 0.5]], atol=1e-7)
    np.testing.assert_allclose(oracle.gae(r.astype(float), v.astype(float), m, gamma=1.0, lam=0.5)[0], [[0, 0.25, 0, 0.5]], atol=1e-12)


@pytest.mark.frameworks
def test_no_finding_gae_never_bootstraps_from_padding_in_real_use(adapter):
    """SkyRL right-aligns every response (preprocess.py:60-80, :130): the last valid token sits in the last
    column, whose next value is 0 (ppo_utils.py:1275), so the critic's output at padding never enters GAE. A spec
    batch with padding after the response, laid out as SkyRL's trainer lays it out, gets the spec's value
    (mask [0, 1, 1, 0], r = [., 0, 1, .], V = [., 0.5, 0.5, 7 at the padding], gamma 1, lambda 0.5: returns
    [., 0.75, 1, .]). Only a caller that hands SkyRL's function a left-aligned response (never its trainer)
    would see the padding value: 4.5 at token 2."""
    m = np.array([[False, True, True, False]])
    r = np.array([[0.0, 0.0, 1.0, 0.0]], dtype=F32)
    v = np.array([[0.0, 0.5, 0.5, 7.0]], dtype=F32)
    _, ret = adapter.gae(r, v, m, gamma=1.0, lam=0.5)
    expected = oracle.gae(r.astype(float), v.astype(float), m, gamma=1.0, lam=0.5)[1]
    np.testing.assert_allclose(expected, [[0.0, 0.75, 1.0, 0.0]], atol=1e-12)
    np.testing.assert_allclose(ret, expected, atol=1e-6)
    out = adapter.call("advantages", {"token_level_rewards": r, "values": v, "response_mask": m.astype(F32)},
                       {"name": "gae", "gamma": 1.0, "lambd": 0.5})["outputs"]
    assert float(out["returns"][0, 2]) == pytest.approx(4.5)  # left-aligned: not what the trainer builds


@pytest.mark.frameworks
def test_finding_reinforce_pp_whitens_over_a_masked_tool_token(adapter):
    """The trainer hands reinforce++ the response_mask (trainer.py:1168-1170), 1 over the whole right-aligned response
    (preprocess.py:128-130): the tool token at position 2 is a step (reward 0) and its return enters masked_whiten
    (ppo_utils.py:1190-1197). loss mask [0, 1, 0, 1], r = [., 1, ., 1], gamma 1: returns [2, ., 1] at positions 1..3
    (the tool token's 1), SkyRL whitens [2, 1, 1] (mean 4/3, sample std 0.5774): [1.1547, -0.5774] at the loss
    tokens; the spec whitens [2, 1] (mean 1.5, std 0.7071): [0.7071, -0.7071]."""
    m = np.array([[False, True, False, True]])
    r = np.array([[0.0, 1.0, 0.0, 1.0]], dtype=F32)
    adv, ret = adapter.reinforce_pp_advantages(r, m, gamma=1.0)
    np.testing.assert_allclose(ret, [[0, 2, 0, 1]], atol=1e-6)
    np.testing.assert_allclose(adv, [[0, 2 / np.sqrt(3), 0, -1 / np.sqrt(3)]], atol=1e-6)
    spec, _ = oracle.reinforce_pp_advantages(r.astype(float), m)
    np.testing.assert_allclose(spec, [[0, np.sqrt(0.5), 0, -np.sqrt(0.5)]], atol=1e-8)


@pytest.mark.frameworks
def test_no_finding_reinforce_pp_never_resets_inside_a_response_in_real_use(adapter):
    """Withdrawn (findings.toml): "SkyRL's REINFORCE++ restarts the return at a masked position (gap='reset')". The
    function does (running *= response_mask[t], ppo_utils.py:1194), but the trainer's response_mask has no gap inside a
    response (preprocess.py:128-130, right-aligned), so the reset only meets the leading padding. Handing the function
    the loss mask itself (never the trainer) would reset: G_1 = 1, not 2, for r = [., 1, ., 1] on [0, 1, 0, 1]."""
    m = np.array([[False, True, False, True]])
    r = np.array([[0.0, 1.0, 0.0, 1.0]], dtype=F32)
    _, ret = adapter.reinforce_pp_advantages(r, m, gamma=1.0)
    assert float(ret[0, 1]) == pytest.approx(2.0)  # the trainer's layout: no reset
    out = adapter.call("advantages", {"token_level_rewards": r, "response_mask": m.astype(F32)},
                       {"name": "reinforce++", "gamma": 1.0})["outputs"]
    assert float(out["returns"][0, 1]) == pytest.approx(1.0)  # a gapped response_mask: not what the trainer builds


@pytest.mark.frameworks
def test_finding_clip_cov_overflowing_ratio_with_zero_advantage_is_nan(adapter):
    """compute_policy_loss_clip_cov takes exp(d) unclamped (ppo_utils.py:902-905): A = 0 and d = 800 give -0 * inf =
    NaN, torch.maximum keeps it (:937) and reduce_loss sums it (:1088-1092). The spec's token loss there is 0."""
    m = np.array([[False, True, True, True]])
    lp = np.array([[0.0, -1.0, -2.0, -3.0]], dtype=F32)
    old = lp - np.array([[0.0, 800.0, 0.2, 0.1]], dtype=F32)
    A = np.array([[0.0, 0.0, 1.0, 2.0]], dtype=F32)
    arrays = {"log_probs": lp, "old_log_probs": old, "advantages": A, "loss_mask": m.astype(F32)}
    out = adapter.call("policy_loss", arrays, {"name": "clip_cov", "config": {}})["outputs"]
    assert np.isnan(float(out["loss"]))
    spec = oracle.ppo_token_loss(lp.astype(float), old.astype(float), A.astype(float), m, eps_low=0.2, eps_high=0.2)
    assert spec[0, 1] == 0.0 and spec.sum() == pytest.approx(-1.2 - 2 * np.exp(0.1), rel=1e-6)


@pytest.mark.frameworks
def test_finding_kl_cov_overflowing_ratio_with_zero_advantage_is_nan(adapter):
    """compute_policy_loss_kl_cov forms -A * exp(d) with no log-ratio clamp (ppo_utils.py:964-966): A = 0 and
    d = 800 give 0 * inf = NaN; the spec's 0 * inf is 0 (verl's kl_cov has the same finding)."""
    m = np.array([[False, True, True]])
    lp = np.array([[0.0, -1.0, -1.0]])
    old = np.array([[0.0, -801.0, -1.2]])
    A = np.array([[0.0, 0.0, 1.0]])
    got = adapter.kl_cov_token_loss(lp, old, A, m)
    assert np.isnan(got[0, 1]) and got[0, 2] == pytest.approx(-np.exp(0.2))
    assert oracle.kl_cov_token_loss(lp, old, A, m)[0, 1] == 80.0  # 0 * inf = 0, plus coef * |d| on the top token


@pytest.mark.frameworks
def test_dppo_is_the_ratio_surrogate(adapter):
    """dppo_policy_loss's per-token loss is -(ratio * A * mask) with the ratio on the graph (ppo_utils.py:833,
    :866): value -A*r, gradient -A*r. The spec's DPPO is -A * sg(r) * logp: value -A*r*logp, the same gradient.
    logp = -1, old = -1.5, A = 1 (p - p_old = 0.145 < 0.2: kept): SkyRL -e^0.5 = -1.6487, the spec +1.6487,
    both gradients -1.6487."""
    m = np.array([[False, True]])
    lp = np.array([[0.0, -1.0]], dtype=F32)
    old = np.array([[0.0, -1.5]], dtype=F32)
    A = np.array([[0.0, 1.0]], dtype=F32)
    r = adapter.call("policy_loss", {"log_probs": lp, "old_log_probs": old, "advantages": A, "loss_mask": m.astype(F32)},
                     {"name": "dppo", "config": {}}, wrt=["log_probs"], upstream={"per_token": np.ones((1, 2), F32)})
    assert float(r["outputs"]["per_token"][0, 1]) == pytest.approx(-np.exp(0.5), rel=1e-6)
    assert float(r["grads"]["log_probs"][0, 1]) == pytest.approx(-np.exp(0.5), rel=1e-6)
    args = (lp.astype(float), old.astype(float), A.astype(float), m)
    assert oracle.dppo_token_loss(*args)[0, 1] == pytest.approx(np.exp(0.5), rel=1e-12)
    assert oracle.dppo_token_loss_grad(*args, np.ones((1, 2)))[0, 1] == pytest.approx(-np.exp(0.5), rel=1e-12)
    with pytest.raises(NotImplementedError, match="ratio surrogate"):
        adapter.dppo_token_loss(*args)


@pytest.mark.frameworks
def test_finding_skyrl_backends_does_not_import_on_python_311(adapter):
    """skyrl 0.3.0 declares Requires-Python >= 3.11, but skyrl/tinker/types.py types a pydantic field with a
    typing.TypedDict (:9, :132-139), which pydantic refuses on Python < 3.12: `import skyrl.backends` (and so
    every skyrl-train module) raises PydanticUserError. The worker imports with typing.TypedDict bound to
    typing_extensions.TypedDict (ops.py) and says so."""
    python = sw.python_for(FRAMEWORK)[0]
    probe = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2]); import skyrl.backends"],
                           capture_output=True, text=True, env=sw._worker_env(), timeout=120, check=False)
    if "(3, 11)" not in probe.stdout:
        pytest.skip(f"the SkyRL environment is not Python 3.11: {probe.stdout.strip()}")
    assert probe.returncode != 0 and "typing_extensions.TypedDict" in probe.stderr
    assert any("typing.TypedDict" in s for s in adapter.stubs)


@pytest.mark.frameworks
def test_worker_kl_term_is_a_sequence_mean(adapter):
    """workers/worker.py:970-989: policy_loss + kl_loss_coef * masked_mean(kl, loss_mask, dim=-1).mean(). Row 0
    has 1 valid token with k1 = 1, row 1 has 3 with k1 = 0: the KL term is (1 + 0)/2 = 0.5 (seq_mean_token_mean),
    not 1/4 (token_mean); with A = 0 the policy term is 0."""
    m = np.array([[False, True, False, False], [False, True, True, True]])
    lp = np.full(m.shape, -1.0, dtype=F32)
    ref = lp - np.array([[0, 1, 0, 0], [0, 0, 0, 0]], dtype=F32)
    arrays = {"log_probs": lp, "old_log_probs": lp.copy(), "base_log_probs": ref, "advantages": np.zeros(m.shape, F32),
              "loss_mask": m.astype(F32)}
    out = adapter.call("policy_loss", arrays, {"name": "regular", "config": {"loss_reduction": "token_mean"}, "normalize": {},
                                               "kl": {"coef": 1.0, "estimator": "k1"}})["outputs"]
    assert float(out["loss"]) == pytest.approx(0.5)
    with pytest.raises(NotImplementedError, match="seq_mean_token_mean|per-sequence token"):
        adapter.policy_loss(lp, lp, ref, np.zeros(2), m, kl_coef=1.0, kl_estimator="k1", mode="token_mean")
