"""The OpenRLHF adapter (conformance/frameworks/openrlhf/adapter.py, via the subprocess worker) and the
OpenRLHF rows (conformance/frameworks/openrlhf/checks.py).

OpenRLHF runs in its own environment: these tests need `rlspec frameworks install openrlhf` (marked
`frameworks`, skipped with a reason otherwise; CI runs them as `pytest -m frameworks` after the
install). The "not installed" tests need no OpenRLHF and always run. Pins every row's status as
established against openrlhf 0.11.2 (torch 2.13.0 CPU, float32) and the findings.
"""

from __future__ import annotations

import numpy as np
import pytest

import oracle
from conformance.records.presets import preset_kwargs
from conformance.runner.loading import BUILTIN_ADAPTERS
from tests.frameworks import pinned_rows

FRAMEWORK = "openrlhf"
SKIP_REASON = pinned_rows.skip_reason("OpenRLHF", FRAMEWORK)


def test_registered():
    assert BUILTIN_ADAPTERS["openrlhf"] == "conformance.frameworks.openrlhf.adapter:OpenRLHFAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    'token_logprobs': 'pass',
    'token_entropy': 'pass',
    'rlhf_token_rewards': 'pass',
    'gae': 'fail',  # masked tool tokens inside a completion are not skipped (golden gae/multi-turn-gap-*)
    'kl_penalty': 'preset',  # its own clamp=10.0 (golden vectors with |k| > 10)
    # spec v1.1 kl.loss: estimator / unbiased_gradient per case (straight-through = log_probs_old None), its
    # clamp=10.0 (= verl's preset) from the golden vectors; 'partial': no abs, no bias-corrected form
    'kl_loss_term': 'preset',
    'ppo_token_loss': 'preset',  # its own log_ratio_clamp=20.0 (golden vectors with |d| > 20)
    'gspo_token_loss': 'fail',  # an overflowing ratio with A = 0 gives NaN (golden gspo/overflowing-ratio-zero-advantage)
    'value_token_loss': 'pass',
    # spec v1.1, through PolicyLoss's is_correction options (the coefficient read by the probe of the adapter's
    # docstring). "pass" with not-implemented cases (partial): level='sequence' and batch_normalize=True have no
    # OpenRLHF setting; every token-level case it is asked (the property case of seed 3650781494 and the
    # token-level golden vectors) matches canonical at float32 precision.
    'rollout_is_weights': 'pass',
    # "pass" (partial): statistic k1/k2/k3 and level seq_sum/seq_max/seq_all are not implemented; the ratio
    # at level token and seq_mean (the "seq" gate's geometric mean) matches exactly.
    'rollout_rejection_mask': 'pass',
    # --- spec v1.1 ctrl.kl: a fresh AdaptiveKLController (trainer/ppo_utils/kl_controller.py:4-19), one update: canonical (its
    # proportional error clipped at +-0.2, times n_steps/horizon) ---
    'kl_controller_update': 'pass',
    # --- spec v1.1 reward shaping: compute_advantages_and_returns with estimator "reinforce" (the returns are the
    # shaped rewards): apply_length_penalties, then compute_reward's clip ---
    # apply_overlong_penalty (length_penalty.py:16-58): eq. 13's floor, canonical for buffer >= 1; FAIL on the golden
    # vector overlong_penalty/buffer-zero-step (once published): with buffer 0, exceed = min(L - max_new_tokens, 0) is
    # never > 0 (:51-53), so nothing is penalised where eq. 13 (and TRL) give -factor beyond max_new_tokens
    'overlong_penalty': 'fail',
    # stop_properly_penalty_coef as truncated_scale (coef in [0, 1]) or truncated_value (coef < 0) and clip_range
    # (both ends): canonical; 'partial': truncated_shift, positive replacement values and one-sided clips have no
    # setting
    'shaped_rewards': 'pass',
    # --- spec v1.1 advantage estimators: compute_advantages_and_returns' "reinforce" (the token rewards through
    # compute_reward's KL channel) and "reinforce_baseline": cumulative returns over every position (a masked gap
    # discounts: gap='discount') and the biased whitening: preset openrlhf; 'partial' for reinforce (a batch
    # without action tokens whitens to NaN)
    'reinforce_pp_advantages': 'preset',
    'reinforce_pp_baseline_advantages': 'preset',
}

EXTRA = {  # row id -> (status, matched preset)
    'openrlhf.aggregate_loss[token,local]': ('pass', None),
    'openrlhf.aggregate_loss[token,trainer]': ('pass', None),
    'openrlhf.aggregate_loss[token,dp=2]': ('pass', None),
    'openrlhf.aggregate_loss[sample,local]': ('variant', None),
    'openrlhf.aggregate_loss[sample,trainer]': ('variant', None),
    'openrlhf.aggregate_loss[sample,dp=2]': ('variant', None),
    'openrlhf.PolicyLoss[ppo]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,local]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,clip_eps_high=0.28]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,dual_clip=3.0]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,A=[B,T]]': ('pass', None),
    'openrlhf.PolicyLoss[gspo]': ('preset', 'openrlhf'),
    'openrlhf.PolicyLoss[gspo,A=[B,T]]': ('preset', 'openrlhf'),
    'openrlhf.ValueLoss[clip_eps=0.5]': ('preset', 'openrlhf'),
    'openrlhf.ValueLoss[clip_eps=None]': ('pass', None),
    'openrlhf.compute_approx_kl[k1]': ('preset', 'areal, openrlhf'),
    'openrlhf.compute_approx_kl[k1,loss batch]': ('pass', None),
    # unbiased_gradient=True is spec v1.1 kl_loss_term(gradient='unbiased') (models/utils.py:115-128): canonical on the
    # loss batch (no estimate beyond 10 for k1/k2), and its clamp at 10 = preset openrlhf (= verl's) where one is
    'openrlhf.compute_approx_kl[k1,loss batch,unbiased_gradient]': ('pass', None),
    'openrlhf.compute_approx_kl[k1,unbiased_gradient]': ('preset', 'ms_swift, openrlhf, skyrl, verl'),
    'openrlhf.compute_approx_kl[k2]': ('preset', 'areal, openrlhf'),
    'openrlhf.compute_approx_kl[k2,loss batch]': ('pass', None),
    'openrlhf.compute_approx_kl[k2,loss batch,unbiased_gradient]': ('pass', None),
    'openrlhf.compute_approx_kl[k2,unbiased_gradient]': ('preset', 'ms_swift, openrlhf, skyrl, verl'),
    'openrlhf.compute_approx_kl[k3]': ('preset', 'areal, openrlhf'),
    'openrlhf.compute_approx_kl[k3,loss batch]': ('preset', 'openrlhf'),
    'openrlhf.compute_approx_kl[k3,loss batch,unbiased_gradient]': ('preset', 'openrlhf'),
    'openrlhf.compute_approx_kl[k3,unbiased_gradient]': ('preset', 'ms_swift, openrlhf, skyrl, verl'),
    'openrlhf.advantages[group_norm]': ('preset', 'openrlhf'),
    'openrlhf.advantages[dr_grpo]': ('pass', None),
    'openrlhf.advantages[rloo]': ('pass', None),
    'openrlhf.advantages[flash_reinforce]': ('pass', None),
    'openrlhf.advantages[reinforce_baseline]': ('preset', 'openrlhf'),  # spec v1.1 adv.reinforce_pp_baseline, std_ddof=0
    # spec v1.1: "reinforce" with the KL in the reward, the composition reinforce_pp_advantages(rlhf_token_rewards(...)):
    # preset openrlhf (gap='discount', std_ddof=0); at gamma 0.9 row 3's masked tool token makes the gap rule decide
    'openrlhf.advantages[reinforce,gamma=1,kl_coef=0.05]': ('preset', 'openrlhf'),
    'openrlhf.advantages[reinforce,gamma=0.9,kl_coef=0.05]': ('preset', 'openrlhf'),
    'openrlhf.advantages[gae,gamma=1,lambd=1]': ('preset', 'openrlhf'),
    'openrlhf.advantages[gae,gamma=0.99,lambd=0.95]': ('fail', None),
    # --- the rollout-engine importance correction inside PolicyLoss (spec v1.1, models/loss.py:216-247) ---
    # the coefficient with is_correction_level="token", every mode and bound the generator asks (all 8
    # property seeds at token level): rho clamped ("clip" = truncate) or zeroed outside the band ("mask").
    'openrlhf.PolicyLoss.is_coef[token]': ('pass', None),
    # the two default configurations, threshold (0.5, 5.0), as fixed keywords (so canonical under them)
    'openrlhf.PolicyLoss.is_coef[token,mask]': ('pass', None),
    'openrlhf.PolicyLoss.is_coef[token,clip]': ('pass', None),
    # the "mask" gate's keep decision: per token, and per row on the geometric mean (level "seq" =
    # rollout_rejection_mask(level="seq_mean")), at the default and at a tight threshold
    'openrlhf.PolicyLoss.is_keep[token]': ('pass', None),
    'openrlhf.PolicyLoss.is_keep[seq]': ('pass', None),
    'openrlhf.PolicyLoss.is_keep[seq,threshold=(0.8, 1.25)]': ('pass', None),
    # level "seq": not the spec's one-weight-per-row rollout_is_weights(level="sequence", seq_stat="geometric",
    # mode="mask"), but each surviving token's own rho = rollout_is_weights(mode="none") x
    # rollout_rejection_mask(level="seq_mean", lo=0.5, hi=5.0), as NOT_EXPRESSIBLE["openrlhf"] records
    'openrlhf.PolicyLoss.is_coef[seq,mask]': ('preset', 'openrlhf'),
    # the corrected PPO loss (trainer normalisers; rejected tokens stay in the token count), value and
    # gradient: the defaults are the openrlhf preset of rollout_is_weights (mask/truncate on [0.5, 5]) times
    # canonical ppo_token_loss; an explicit threshold is canonical; "seq" is the composition above times PPO
    'openrlhf.PolicyLoss[ppo,is_correction=token/mask]': ('preset', 'openrlhf'),
    'openrlhf.PolicyLoss[ppo,is_correction=token/clip]': ('preset', 'openrlhf'),
    'openrlhf.PolicyLoss[ppo,is_correction=token/mask,threshold=(0.8, 1.25)]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,is_correction=seq/mask]': ('preset', 'openrlhf'),
}


# the `adapter` and `extra` fixtures are in conftest.py


@pytest.mark.frameworks
def test_reinforce_returns_discount_over_a_masked_token(adapter):
    """OpenRLHF's get_cumulative_returns multiplies the rewards by the action mask and runs over every
    position (experience_maker.py:414-419): a masked token between two actions still costs a factor gamma.
    r = [., 0, ., 1] on mask [0, 1, 0, 1], gamma 0.5: returns 0.25 (gap='discount'), not 0.5 (verl's skip)."""
    m = np.array([[False, True, False, True], [False, True, True, False]])
    r = np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    _, returns = adapter.reinforce_pp_advantages(r, m, gamma=0.5)
    np.testing.assert_allclose(returns, oracle.reinforce_pp_advantages(r, m, gamma=0.5, gap="discount")[1], rtol=1e-6)
    assert returns[0, 1] == pytest.approx(0.25)


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "openrlhf" and adapter.version == "0.11.2"
    assert adapter.array_api == "numpy" and adapter.dtypes == ("float32",)
    assert adapter.has_experience_maker


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


# ---------------------------------------------------------------------------------------------
# Findings (openrlhf 0.11.2), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_finding_gae_does_not_skip_masked_tokens(adapter):
    """get_advantages_and_returns (experience_maker.py:343-387) zeroes V and r at masked positions and
    runs the plain recursion through them: an environment token inside a multi-turn completion (the
    agent path builds such action masks, samples_generator.py:255-257) is a step with V = 0, so with
    lambda < 1 (or gamma < 1) the action before it bootstraps from 0. verl carries V and A across it."""
    m = np.array([[False, True, True, False, True]])
    r = np.array([[0.0, 0.0, 0.0, 0.0, 1.0]], dtype=np.float32)
    v = np.array([[0.0, 0.5, 0.5, 9.0, 0.5]], dtype=np.float32)
    adv, ret = adapter.gae(r, v, m, gamma=1.0, lam=0.5)
    np.testing.assert_allclose(adv, [[0, -0.0625, -0.125, 0, 0.5]], atol=1e-7)
    spec_adv, _ = oracle.gae(r.astype(np.float64), v.astype(np.float64), m, gamma=1.0, lam=0.5)
    np.testing.assert_allclose(spec_adv, [[0, 0.125, 0.25, 0, 0.5]], atol=1e-12)
    same, _ = adapter.gae(r, v, m, gamma=1.0, lam=1.0)  # gamma = lambda = 1 (the CLI defaults): no difference
    np.testing.assert_allclose(same, oracle.gae(r.astype(np.float64), v.astype(np.float64), m)[0], atol=1e-6)


@pytest.mark.frameworks
def test_no_finding_singleton_group_is_refused_by_the_cli(adapter):
    """Withdrawn as a finding (findings.toml): group_norm with n_samples_per_prompt = 1 is NaN (torch.std of one
    element), but the CLI refuses n = 1 for rloo, reinforce_baseline, group_norm and dr_grpo
    (cli/train_ppo_ray.py:656-659), so no run reaches it; the adapter declares "group of one" outside
    reinforce_pp_baseline_advantages' domain with that citation."""
    assert np.isnan(adapter.outcome_advantages("group_norm", np.array([1.0, 2.0], dtype=np.float32), 1)).all()
    assert "cli/train_ppo_ray.py:656-659" in adapter.domain["reinforce_pp_baseline_advantages"]["group of one"]


@pytest.mark.frameworks
def test_finding_gspo_overflowing_ratio_is_nan(adapter):
    """PolicyLoss("gspo") takes exp of the row's mean log-ratio unclamped (models/loss.py:189-196): row 0 with mean
    log-ratio 800 has ratio inf, so inf * 0 at its masked (prompt) position and -0 * inf at A = 0 are NaN, and the
    sample-level aggregate (:34-39) makes the loss NaN. The spec's row 0 contributes 0: row 1's ratio e^0.05 =
    1.0513 (inside the clip 0.2) with A = 1 gives -1.0513 per token, the sample mean over 2 rows -0.5256."""
    m = np.array([[False, True, True], [False, True, True]])
    old = np.array([[0.0, -801.0, -801.0], [0.0, -1.0, -1.2]], dtype=np.float32)
    lp = np.array([[0.0, -1.0, -1.0], [0.0, -1.1, -1.0]], dtype=np.float32)
    A = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 1.0]], dtype=np.float32)
    arrays = {"log_probs": lp, "old_log_probs": old, "advantages": A, "action_mask": m.astype(np.float32)}
    out = adapter.call("policy_loss", arrays, {"init": {"policy_loss_type": "gspo"}})["outputs"]
    assert not out["token_level_loss"] and np.isnan(float(out["loss"]))
    spec = oracle.gspo_token_loss(lp.astype(float), old.astype(float), A.astype(float), m, eps_low=0.2, eps_high=0.2)
    assert oracle.aggregate(spec, m, mode="seq_mean_token_mean") == pytest.approx(-np.exp(0.05) / 2, rel=1e-6)  # float32 inputs


@pytest.mark.frameworks
def test_finding_whitening_uses_the_population_std(adapter):
    """compute_advantages_and_returns whitens with var = sum((A - mean)^2 * mask) / num_actions
    (experience_maker.py:324-339): std_ddof = 0. reinforce_baseline on groups [1, 0], [2, 0]: r - mean =
    [0.5, -0.5, 1, -1], population std sqrt(0.625) = 0.7906: [0.6325, ...]; the spec's sample std sqrt(2.5 / 3)
    = 0.9129: [0.5477, ...]."""
    r = np.array([1.0, 0.0, 2.0, 0.0], dtype=np.float32)
    m = np.array([[False, True]] * 4)  # one action token per sample (column 0: the prompt)
    got = adapter.reinforce_pp_baseline_advantages(r, 2, m)[:, 1]
    centred = np.array([0.5, -0.5, 1.0, -1.0])
    np.testing.assert_allclose(got, centred / np.sqrt(0.625), rtol=1e-6)
    spec = oracle.reinforce_pp_baseline_advantages(r.astype(float), 2, m)[:, 1]
    np.testing.assert_allclose(spec, centred / np.sqrt(2.5 / 3), rtol=1e-6)


@pytest.mark.frameworks
def test_finding_sample_level_loss_skips_empty_rows(adapter):
    """aggregate_loss(token_level_loss=False) averages over the rows with a valid token (locally, and
    get_loss_batch_info counts only those globally); the spec counts every row in S."""
    x = np.array([[0.0, 1.0, 3.0], [0.0, 5.0, 5.0]], dtype=np.float32)
    m = np.array([[0, 1, 1], [0, 0, 0]], dtype=np.float32)
    got = float(adapter.call("aggregate_loss", {"loss": x, "loss_mask": m}, {"token_level_loss": False})["outputs"]["loss"])
    assert got == pytest.approx(2.0)
    assert oracle.aggregate(x.astype(np.float64), m.astype(bool), mode="seq_mean_token_mean") == pytest.approx(1.0)


@pytest.mark.frameworks
def test_import_stubs_are_reported(adapter):
    """On CPU the worker skips the package __init__ files and stubs deepspeed and ray (never flash_attn)."""
    assert any(s.startswith("deepspeed") for s in adapter.stubs)
    assert not any("flash_attn" in s for s in adapter.stubs)


# ---------------------------------------------------------------------------------------------
# The rollout importance correction (spec v1.1): how it is read, and what OpenRLHF does
# ---------------------------------------------------------------------------------------------

RHO = np.array([[1.0, 3.0, 1.0, 0.5, 1.5]])  # the spec's worked row (offpolicy.is_weights.md), token 0 masked
RHO_MASK = np.array([[False, True, True, True, True]])


def _rho_inputs(rho=RHO):
    old = np.full(rho.shape, -1.0, dtype=np.float32)
    return old, (old - np.log(rho)).astype(np.float32)


@pytest.mark.frameworks
def test_probe_reads_the_coefficient_policy_loss_multiplies_by(adapter):
    """The probe (log_probs = old_log_probs, A = -1) reads coef; PolicyLoss with real log-probs and advantages
    then yields exactly coef x its uncorrected per-token loss (models/loss.py:241), bit for bit in float32."""
    rng = np.random.default_rng(5)
    m = np.ones((3, 6), dtype=bool)
    m[:, 0] = False
    old = -np.abs(rng.normal(0, 1.5, size=m.shape)).astype(np.float32)
    roll = (old + rng.normal(0, 1.0, size=m.shape)).astype(np.float32)
    lp = (old + rng.normal(0, 0.5, size=m.shape)).astype(np.float32)
    adv = rng.normal(0, 1, size=m.shape).astype(np.float32)
    arrays = {"log_probs": lp, "old_log_probs": old, "advantages": adv, "rollout_log_probs": roll, "action_mask": m.astype(np.float32)}
    plain = adapter.call("policy_loss", arrays, {"init": {"policy_loss_type": "ppo"}})["outputs"]["per_token"]
    for level, mode in (("token", "mask"), ("token", "clip"), ("seq", "mask")):
        init = adapter.correction_init(level, mode, (0.5, 5.0))
        corrected = adapter.call("policy_loss", arrays, {"init": init})["outputs"]["per_token"]
        coef = adapter.is_correction_coef(old, roll, m, level=level, mode=mode, threshold=(0.5, 5.0))
        np.testing.assert_array_equal(np.where(m, corrected, 0), np.where(m, coef * plain, 0))


@pytest.mark.frameworks
def test_seq_level_keeps_each_tokens_own_rho(adapter):
    """is_correction_level="seq" (mask, [0.5, 5]): the row's geometric mean 2.25^(1/4) = 1.2247 is in bounds,
    so the row is kept, but each token keeps its own rho (models/loss.py:223-224 gate, :239 coef), where the
    spec's sequence-level weight is 1.2247 on every token. Hence rollout_is_weights(level="sequence") is not
    implemented and the framework row openrlhf.PolicyLoss.is_coef[seq,mask] names the composition."""
    old, roll = _rho_inputs()
    coef = adapter.is_correction_coef(old, roll, RHO_MASK, level="seq", mode="mask", threshold=(0.5, 5.0))
    np.testing.assert_allclose(coef, [[0, 3, 1, 0.5, 1.5]], rtol=1e-6)
    o, r = old.astype(np.float64), roll.astype(np.float64)
    spec_row = oracle.rollout_is_weights(o, r, RHO_MASK, level="sequence", seq_stat="geometric", mode="mask", lo=0.5, hi=5.0)
    np.testing.assert_allclose(spec_row, [[0] + [2.25 ** 0.25] * 4], rtol=1e-6)
    composition = oracle.rollout_is_weights(o, r, RHO_MASK, mode="none") * oracle.rollout_rejection_mask(
        o, r, RHO_MASK, level="seq_mean", lo=0.5, hi=5.0)
    np.testing.assert_allclose(coef, composition, rtol=1e-6)
    with pytest.raises(NotImplementedError):
        adapter.rollout_is_weights(old, roll, RHO_MASK, level="sequence", seq_stat="geometric", mode="mask", lo=0.5, hi=5.0)


@pytest.mark.frameworks
def test_keep_of_an_underflowed_ratio(adapter):
    """A kept token whose rho underflows to 0 in float32 (old - rollout = -150) has coef 0 like a rejected
    one; the adapter tells them apart with PolicyLoss's is_filter_ratio (loss.py:243-246): with no lower
    bound (threshold low = 0.0) it is kept, with lo = 0.1 it is not."""
    old, roll = _rho_inputs()
    roll[0, 2] = old[0, 2] + 150.0
    o, r = old.astype(np.float64), roll.astype(np.float64)
    for kw in ({"hi": 2.0}, {"lo": 0.1}, {"level": "seq_mean", "hi": 2.0}):
        got = adapter.rollout_rejection_mask(old, roll, RHO_MASK, **kw)
        np.testing.assert_array_equal(got, oracle.rollout_rejection_mask(o, r, RHO_MASK, **kw))
    assert adapter.rollout_rejection_mask(old, roll, RHO_MASK, hi=2.0)[0, 2]
    # a row whose every rho underflows: its geometric mean 0 is kept without a lower bound (asked alone)
    gone = np.stack([roll[0], old[0] + 150.0]).astype(np.float32)
    olds, both = np.stack([old[0], old[0]]), np.vstack([RHO_MASK, RHO_MASK])
    got = adapter.rollout_rejection_mask(olds, gone, both, level="seq_mean", hi=2.0)
    np.testing.assert_array_equal(got, both)


@pytest.mark.frameworks
def test_not_expressible_settings(adapter):
    """What PolicyLoss's is_correction options cannot express: level="seq" with "clip" is refused by
    PolicyLoss itself (loss.py:166-169); k1/k2/k3 statistics and seq_sum/seq_max/seq_all have no gate
    (loss.py:222-233), batch normalisation no option."""
    old, roll = _rho_inputs()
    arrays = {"log_probs": old, "old_log_probs": old, "advantages": -np.ones_like(old), "rollout_log_probs": roll,
              "action_mask": RHO_MASK.astype(np.float32)}
    with pytest.raises(ValueError, match="is_correction_mode=clip requires"):
        adapter.call("policy_loss", arrays, {"init": adapter.correction_init("seq", "clip", (0.5, 5.0))})
    for kw in ({"statistic": "k1", "lo": -0.5}, {"level": "seq_sum", "hi": 2.0}, {"level": "seq_all", "hi": 2.0}):
        with pytest.raises(NotImplementedError):
            adapter.rollout_rejection_mask(old, roll, RHO_MASK, **kw)
    with pytest.raises(NotImplementedError):
        adapter.rollout_is_weights(old, roll, RHO_MASK, batch_normalize=True)
    assert adapter.unsupported_kwargs["rollout_is_weights"] == {"level": ("sequence",), "batch_normalize": (True,)}


@pytest.mark.frameworks
def test_unbiased_gradient_is_kl_loss_term_unbiased(adapter):
    """models/utils.py:113-128 with unbiased_gradient=True: the value is the estimate clamped to [-10, 10]; the
    gradient is w·(logp - ref), w = min(exp(logp - old), KL_IS_WEIGHT_CLIP = 10) detached, with the raw log-ratio.
    d = 12 (k1 = 12 -> 10): r = 3 gives 36, r = e^3 = 20.1 gives w = 10, 120; log_probs_old=None gives w = 1,
    12 (the straight-through form). spec v1.1 kl_loss_term(gradient="unbiased", clamp=10.0)."""
    m = np.array([[False, True, True]])
    lp = np.array([[0.0, -1.0, -1.0]], dtype=np.float32)
    ref = lp - np.float32(12.0)
    old = lp - np.array([[0.0, np.log(3.0), 3.0]], dtype=np.float32)
    u = np.ones_like(lp)
    kw = {"estimator": "k1", "unbiased_gradient": True}
    np.testing.assert_allclose(adapter.approx_kl(lp, ref, m, old_logp=old, **kw), [[0.0, 10.0, 10.0]])
    np.testing.assert_allclose(adapter.approx_kl(lp, ref, m, old_logp=old, upstream=u, **kw), [[0.0, 36.0, 120.0]], rtol=1e-6)
    np.testing.assert_allclose(adapter.approx_kl(lp, ref, m, upstream=u, **kw), [[0.0, 12.0, 12.0]])
    spec = {"estimator": "k1", "gradient": "unbiased", **preset_kwargs("openrlhf", "kl_loss_term")}
    np.testing.assert_allclose(adapter.kl_loss_term_grad(lp, ref, m, old, u, estimator="k1", gradient="unbiased"),
                               oracle.kl_loss_term_grad(lp, ref, m, old, u, **spec), rtol=1e-6)
    with pytest.raises(NotImplementedError):  # no estimate-times-ratio form, no |d|
        adapter.kl_loss_term(lp, ref, m, old, gradient="bias_corrected")
    assert adapter.unsupported_kwargs["kl_loss_term"] == {"estimator": ("abs",), "gradient": ("bias_corrected",)}


@pytest.mark.frameworks
def test_finding_seq_filter_ratio_counts_empty_rows(adapter):
    """A metric, not the loss: at level "seq" is_filter_ratio = filtered.float().mean() over all B rows
    (loss.py:243-244), and a row without action tokens has a NaN mean (masked_mean divides 0 by 0,
    models/utils.py:199-202), so it counts as filtered: one kept row and one empty row log 0.5, not 0.
    (Its coefficient is 0 on masked positions only, so the loss is unaffected.)"""
    old = np.full((2, 4), -1.0, dtype=np.float32)
    m = np.array([[False, True, True, True], [False, False, False, False]])
    arrays = {"log_probs": old, "old_log_probs": old, "advantages": -np.ones_like(old), "rollout_log_probs": old,
              "action_mask": m.astype(np.float32)}
    out = adapter.call("policy_loss", arrays, {"init": adapter.correction_init("seq", "mask", (0.5, 5.0))})["outputs"]
    assert out["is_filter_ratio"] == pytest.approx(0.5)
    assert adapter.rollout_rejection_mask(old, old, m, level="seq_mean", lo=0.5, hi=5.0)[0, 1:].all()


# ---------------------------------------------------------------------------------------------
# Spec v1.1 reward shaping: apply_length_penalties and compute_reward's clip (the trainer's path)
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_overlong_penalty_is_eq13_with_the_floor(adapter):
    """apply_overlong_penalty (length_penalty.py:41-56): exceed = min(L - (max - buf), buf): max 8, buffer 4,
    factor 2: 0 up to 4, -0.5 per token after, -2 at 8 and beyond (the floor; verl's line would give -2.5 at 9)."""
    got = adapter.overlong_penalty(np.array([0, 4, 5, 8, 9, 20]), max_length=8, buffer=4, factor=2.0)
    np.testing.assert_array_equal(got, [0.0, 0.0, -0.5, -2.0, -2.0, -2.0])


@pytest.mark.frameworks
def test_finding_overlong_buffer_zero_never_penalises(adapter):
    """--reward.overlong_buffer_len 0: exceed = min(L - max_new_tokens, 0) is never > 0 (length_penalty.py:51-53),
    so no completion is penalised; DAPO eq. 13 with L_cache = 0 (and TRL's soft_punish_cache = 0) give -factor
    beyond max_new_tokens."""
    lengths = np.array([7, 8, 9, 100])
    assert adapter.overlong_penalty(lengths, max_length=8, buffer=0).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert oracle.overlong_penalty(lengths, max_length=8, buffer=0).tolist() == [0.0, 0.0, -1.0, -1.0]


@pytest.mark.frameworks
def test_stop_properly_penalty_and_clip(adapter):
    """stop_properly_penalty_coef 0.5 halves a truncated sample's reward, -0.5 replaces it (length_penalty.py:97-103);
    the clip to (-10, 10) comes after (models/utils.py:141-142), so a replacement below the range is clipped too."""
    r = np.array([2.0, -30.0, 4.0, 30.0], dtype=np.float32)
    t = np.array([True, True, False, False])
    np.testing.assert_array_equal(adapter.shaped_rewards(r, t, truncated_scale=0.5), [1.0, -15.0, 4.0, 30.0])
    np.testing.assert_array_equal(adapter.shaped_rewards(r, t, truncated_value=-0.5, clip_low=-10.0, clip_high=10.0),
                                  [-0.5, -0.5, 4.0, 10.0])
    np.testing.assert_array_equal(adapter.shaped_rewards(r, t, truncated_value=-15.0, clip_low=-10.0, clip_high=10.0),
                                  [-10.0, -10.0, 4.0, 10.0])
    for kw in ({"truncated_shift": -1.0}, {"truncated_value": 1.0}, {"truncated_scale": 2.0}, {"clip_high": 1.0}):
        with pytest.raises(NotImplementedError):
            adapter.shaped_rewards(r, t, **kw)
