"""The verl adapter (conformance/frameworks/verl/adapter.py, via the subprocess worker) and the verl rows
(conformance/frameworks/verl/checks.py).

verl runs in its own environment: these tests need `rlspec frameworks install verl` (marked
`frameworks`, skipped with a reason otherwise; CI runs them as `pytest -m frameworks` after the
install). The tests of the "not installed" path and of the worker protocol need no verl and always run.
Pins every row's status as established against verl 0.9.1 (torch 2.13.0 CPU) and the findings.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import oracle
from conformance.records.presets import preset_kwargs
from conformance.runner.loading import BUILTIN_ADAPTERS
from conformance.frameworks import subprocess_worker as sw
from conformance.runner.run import load_adapters
from tests.frameworks import pinned_rows

FRAMEWORK = "verl"
SKIP_REASON = pinned_rows.skip_reason("verl", FRAMEWORK)


# ---------------------------------------------------------------------------------------------
# Always: the "not installed" row and the protocol
# ---------------------------------------------------------------------------------------------


def test_registered():
    assert BUILTIN_ADAPTERS["verl"] == "conformance.frameworks.verl.adapter:VerlAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


def test_environment_without_verl_is_a_not_installed_row(monkeypatch):
    """An interpreter that lacks verl (this one): the worker's hello carries the ImportError."""
    pytest.importorskip("numpy")
    if sw.importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is importable in this interpreter")
    monkeypatch.setenv("RLSPEC_VERL_PYTHON", sys.executable)
    monkeypatch.setattr(sw, "_WORKERS", {})
    adapters, infos = load_adapters(["verl"])
    assert adapters == [] and infos[0].status == "not_installed", infos[0]
    assert "ModuleNotFoundError" in infos[0].message


def test_protocol_round_trip_is_exact_and_pickle_free():
    arrays = {"a": np.array([0.1, 1e-300, np.nan, -np.inf], dtype=np.float64), "b": np.float32(3.25) * np.ones((2, 0, 3), np.float32),
              "c": np.arange(6, dtype=np.int64).reshape(2, 3), "s": np.array(2.5)}
    back = sw.decode(sw.encode({"x": arrays, "f": 0.1, "t": (1, "k")}))
    for k, v in arrays.items():
        assert back["x"][k].dtype == v.dtype and back["x"][k].shape == v.shape
        np.testing.assert_array_equal(back["x"][k], v)
    assert back["f"] == 0.1 and back["t"] == [1, "k"]
    with pytest.raises(ValueError):  # object arrays would need pickle: refused
        sw.encode(np.array([object()], dtype=object))


# ---------------------------------------------------------------------------------------------
# With verl installed (the `adapter` and `extra` fixtures are in conftest.py)
# ---------------------------------------------------------------------------------------------

CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    'token_logprobs': 'pass',
    # compute_offpolicy_metrics (rollout_corr_helper.py:904-1010): its chi2 exponents clamped at +-20 always
    # (the golden mismatch_metric/chi2-seq-clamped decides it); token_mult_prob_error, logprob_abs_diff and
    # seq_mean_token_mean are not verl metrics, not implemented cases
    'mismatch_metric': 'preset',
    # log_ppl_diff, log_ppl_abs_diff, ppl_ratio, chi2_seq (clamped at +-20: the golden chi2-seq-clamped); a batch
    # with an empty row is not offered (verl's .mean() counts it; its responses always hold a token)
    'sequence_mismatch_metric': 'preset',
    'token_entropy': 'pass',
    # the loop rloo (core_algos.py:587-636): a one-sample group keeps its score, singleton='raw' (spec v1.1):
    # preset verl, decided by the golden vectors rloo_advantages/group-size-1 and preset-verl
    'rloo_advantages': 'preset',
    # masked_whiten refuses a batch with no valid token, or one (torch_functional.py:311-326): declared not
    # offered, as for reinforce++ here and SkyRL's masked_whiten ('partial')
    'gae': 'pass',
    'whiten': 'pass',
    'kl_penalty': 'preset',  # verl clamps only k3: preset verl for estimator='k3', canonical otherwise
    # spec v1.1 kl.loss: estimator and "+" suffix per case, verl's k3 clamp as preset verl (= openrlhf; golden
    # vector kl_loss_term/preset-verl); also 'partial': the unbiased and bias-corrected forms have no verl name
    'kl_loss_term': 'preset',
    'ppo_token_loss': 'preset',
    'gspo_token_loss': 'variant',  # form='token_sg' (no preset of another name uses it)
    'cispo_token_loss': 'pass',
    'value_token_loss': 'pass',
    # token-mean of a batch without a valid token is 0/0 = NaN (core_algos.py:1175; golden vector
    # aggregate/all-masked-token-mean; finding token-mean-nan-without-loss-tokens); seq-mean-token-mean's
    # n_b + 1e-8 (:1196) is a float64 precision matter
    'aggregate': 'fail',
    # --- spec v1.1 advantage estimators (core_algos.py's registry, as ray_trainer.compute_advantage calls them) ---
    # reinforce_plus_plus: the return carries over masked positions (gap='skip'): canonical; 'partial' (a batch
    # with at most one valid token: masked_whiten raises) and a float64 precision finding (masked_mean's + 1e-8)
    'reinforce_pp_advantages': 'pass',
    # reinforce_plus_plus_baseline: a one-sample group has mean 0 (:572-573): preset verl (singleton='raw')
    'reinforce_pp_baseline_advantages': 'preset',
    # remax with the greedy reward repeated per sample (interleave=True): canonical
    'remax_advantages': 'pass',
    # opo: one-sample group baseline 0 (:678-679): preset verl; 'partial' (a row without response tokens
    # shows no advantage)
    'opo_advantages': 'preset',
    # grpo_passk: topk(2), unbiased std + 1e-6, norm_adv_by_std_in_grpo from the AlgoConfig: canonical
    'grpo_passk_advantages': 'pass',
    # gpg: alpha = B / count_nonzero (the paper counts groups with a spread), mean 0 for a one-sample group
    # (:817-818): preset verl (alpha='nonzero_rewards', singleton='raw'); a float64
    # precision finding (alpha is a float32 tensor)
    'gpg_advantages': 'preset',
    # optimal_token_baseline (align='position') / tir_optimal_token_baseline ('valid_token') with
    # handle_zero_tail = zero_tail, each group shifted to response column 0: preset verl (eps=1e-8 in the
    # baseline's denominator, :965, :1094; the zero tail cut at a token count used as a column, :982), decided
    # by the property cases with tool gaps and the golden vectors preset-verl and tail-length-count
    'optimal_token_baseline_advantages': 'preset',
    # --- spec v1.1 (rollout_corr_helper.py); every row is also 'partial': the keyword values verl has no
    # setting for are "not implemented" cases (verl_adapter.py's module docstring lists them) ---
    # verl clamps every log-ratio (and the sequence sum) to +-SAFETY_BOUND = 20 before exp
    # (rollout_corr_helper.py:75, :575, :585): preset verl (log_ratio_clamp=20.0), decided by the golden
    # vector rollout_is_weights/preset-verl (log-ratios beyond 20); canonical on every property case
    'rollout_is_weights': 'preset',
    # the spec's k1 bounds passed as "exp(lo)_exp(hi)" (verl compares -log_ratio with [log lower,
    # log upper]), k2/k3 as an upper bound: canonical (kl_of='rollout_old') on every case it offers
    'rollout_rejection_mask': 'pass',
    # decoupled mode with token TIS: compute_policy_loss_vanilla against prox times min(e^(prox - behav), cap),
    # value and gradient canonical (the +-20 log-ratio clamps never bind on these cases)
    'decoupled_ppo_token_loss': 'pass',
    # --- spec v1.1: policy losses of 2025-26 (core_algos.py's registered losses, the per-token matrix) ---
    # compute_policy_loss_sapo: d clamped to +-20 before exp (:1666): preset verl (log_ratio_clamp=20.0),
    # decided by the golden vectors sapo_token_loss/log-ratio-clamp and preset-verl; its hard-coded
    # seq-mean-token-mean (:1688-1690) comes after the matrix the adapter reads
    'sapo_token_loss': 'preset',
    # compute_policy_loss_geo_mean run on each row alone (torch.mean of one row, :2000): canonical with
    # eps -> clip_ratio_low/high; + a float64 precision finding (float32 class): rho and the row advantage
    # divide by n_b + 1e-8 (:1984, :1987)
    'gmpo_token_loss': 'pass',
    # compute_policy_loss_dppo_tv / _kl with ratio_cap -> clip_ratio_c: canonical on every case it offers;
    # also 'partial': ratio_cap=None is "not implemented" (verl always truncates the weight, :1427-1428,
    # :1508-1509). The +-20 clamp (:1420, :1501) never changes a value here: the golden preset-verl vector
    # has |d| < 20, and with a finite ratio_cap only d < -20 could tell (a weight below e^-20)
    'dppo_token_loss': 'pass',
    # compute_policy_loss_dro with beta -> policy_loss.dro_beta: canonical
    'dro_token_loss': 'pass',
    # --- spec v1.1 ctrl.kl: a fresh AdaptiveKLController (core_algos.py:153-174), one update: canonical (its
    # proportional error clipped at +-0.2, times n_steps/horizon) ---
    'kl_controller_update': 'pass',
    # --- spec v1.1: covariance-selected tokens ---
    # compute_policy_loss_clip_cov's corr with torch.randperm made the order of the draws (verl_ops.py):
    # canonical, exact (a bool mask) in float64 and float32
    'clip_cov_mask': 'pass',
    # compute_policy_loss_kl_cov's per-token matrix: canonical on every property case; FAIL on the golden
    # vector kl_cov_token_loss/zero-advantage-overflowing-ratio (once published): -A*ratio with A = 0 and
    # ratio = e^800 = inf is NaN in verl (0*inf, no log-ratio clamp, :1893), 0 in the spec
    'kl_cov_token_loss': 'fail',
    # --- spec v1.1 reward.overlong: DAPORewardManager (workers/reward_manager/dapo.py:121-127) with a score of 0 ---
    # min(-(L - L_start)/len * factor, 0), no floor beyond max_resp_len: preset verl (beyond='linear', = areal,
    # ms_swift); also 'partial' (buffer 0: verl asserts len > 0, :52-56) and a float64 precision finding (float32
    # class: an int64 length tensor divided by an int, :124-126)
    'overlong_penalty': 'preset',
}

EXTRA = {  # row id -> (status, matched preset)
    'verl.agg_loss[token-mean]': ('pass', None),
    'verl.agg_loss[token-mean,local]': ('pass', None),
    'verl.agg_loss[token-mean,dp=2]': ('pass', None),
    'verl.agg_loss[seq-mean-token-mean]': ('pass', None),
    'verl.agg_loss[seq-mean-token-mean,local]': ('variant', None),
    'verl.agg_loss[seq-mean-token-mean,dp=2]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum,local]': ('variant', None),
    'verl.agg_loss[seq-mean-token-sum,dp=2]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum-norm]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum-norm,local]': ('variant', None),
    'verl.agg_loss[seq-mean-token-sum-norm,dp=2]': ('pass', None),
    'verl.agg_loss[token-sum]': ('pass', None),
    'verl.agg_loss[token-sum,local]': ('pass', None),
    'verl.agg_loss[token-sum,dp=2]': ('pass', None),
    'verl.policy_loss[vanilla,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,seq-mean-token-sum]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,seq-mean-token-sum-norm]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,token-sum]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,token-mean,clip_ratio_high=0.28,clip_ratio_c=10.0]': ('pass', None),
    'verl.policy_loss[vanilla,token-mean,A=[B,T]]': ('preset', 'verl'),
    'verl.policy_loss[gspo,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[gspo,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.policy_loss[gspo,seq-mean-token-mean,A=[B,T]]': ('preset', 'verl'),
    'verl.policy_loss[gspo,seq-mean-token-mean,clip_ratio_low=0.0003,clip_ratio_high=0.0004]': ('pass', None),
    'verl.policy_loss[cispo,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[cispo,seq-mean-token-mean,clip_ratio_low=0.2,clip_ratio_high=0.28]': ('pass', None),
    'verl.compute_value_loss[cliprange_value=0.5,token-mean]': ('preset', 'verl'),
    'verl.compute_value_loss[cliprange_value=0.5,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.compute_value_loss[cliprange_value=0.2,token-mean]': ('pass', None),
    # --- spec v1.1: policy losses of 2025-26 (verl_checks.modern_loss_rows), ActorConfig defaults ---
    # sapo reduces seq-mean-token-mean whatever loss_agg_mode (:1688-1690): the other four modes match the
    # preset verl token loss under that reduction ("loss_agg_mode ... ignored"); canonical under its own
    # mode (the +-20 clamp never binds on this batch)
    'verl.policy_loss[sapo,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[sapo,seq-mean-token-mean]': ('pass', None),
    'verl.policy_loss[sapo,seq-mean-token-sum]': ('preset', 'verl'),
    'verl.policy_loss[sapo,seq-mean-token-sum-norm]': ('preset', 'verl'),
    'verl.policy_loss[sapo,token-sum]': ('preset', 'verl'),
    # geo_mean (GMPO): torch.mean over the rows whatever loss_agg_mode (:2000) = aggregate(mode=
    # 'seq_mean_token_mean') of gmpo_token_loss at ActorConfig's 0.2/0.2 (the paper's 0.4 is canonical):
    # preset verl under every mode (7 tokens of this batch are on a clipped branch)
    'verl.policy_loss[geo_mean,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[geo_mean,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.policy_loss[geo_mean,seq-mean-token-sum]': ('preset', 'verl'),
    'verl.policy_loss[geo_mean,seq-mean-token-sum-norm]': ('preset', 'verl'),
    'verl.policy_loss[geo_mean,token-sum]': ('preset', 'verl'),
    # dppo_tv / dppo_kl through agg_loss: ActorConfig's clip_ratio_c = 3.0 truncates the weight
    # (ratio_cap=3.0; 5 kept tokens with r > 3), preset verl under every mode (5 / 3 tokens dropped)
    'verl.policy_loss[dppo_tv,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[dppo_tv,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.policy_loss[dppo_tv,seq-mean-token-sum]': ('preset', 'verl'),
    'verl.policy_loss[dppo_tv,seq-mean-token-sum-norm]': ('preset', 'verl'),
    'verl.policy_loss[dppo_tv,token-sum]': ('preset', 'verl'),
    'verl.policy_loss[dppo_kl,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[dppo_kl,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.policy_loss[dppo_kl,seq-mean-token-sum]': ('preset', 'verl'),
    'verl.policy_loss[dppo_kl,seq-mean-token-sum-norm]': ('preset', 'verl'),
    'verl.policy_loss[dppo_kl,token-sum]': ('preset', 'verl'),
    # gpg = aggregate(pg_token_loss) under each mode: canonical
    'verl.policy_loss[gpg,token-mean]': ('pass', None),
    'verl.policy_loss[gpg,seq-mean-token-mean]': ('pass', None),
    'verl.policy_loss[gpg,seq-mean-token-sum]': ('pass', None),
    'verl.policy_loss[gpg,seq-mean-token-sum-norm]': ('pass', None),
    'verl.policy_loss[gpg,token-sum]': ('pass', None),
    # dro = aggregate(dro_token_loss(beta=dro_beta)) under each mode: canonical
    'verl.policy_loss[dro,token-mean,dro_beta=0.1]': ('pass', None),
    'verl.policy_loss[dro,seq-mean-token-mean,dro_beta=0.1]': ('pass', None),
    'verl.policy_loss[dro,seq-mean-token-sum,dro_beta=0.1]': ('pass', None),
    'verl.policy_loss[dro,seq-mean-token-sum-norm,dro_beta=0.1]': ('pass', None),
    'verl.policy_loss[dro,token-sum,dro_beta=0.1]': ('pass', None),
    # the keyword translations: tau -> ActorConfig.tau_pos/neg, the paper's GMPO range 0.4, DPPO's deltas
    # and a cap of 20 (above every ratio of the batch): canonical; per-token advantages as with [B] ones
    'verl.policy_loss[sapo,seq-mean-token-mean,tau_pos=2.0,tau_neg=3.0]': ('pass', None),
    'verl.policy_loss[sapo,seq-mean-token-mean,A=[B,T]]': ('pass', None),
    'verl.policy_loss[geo_mean,seq-mean-token-mean,clip_ratio_low=0.4,clip_ratio_high=0.4]': ('pass', None),
    'verl.policy_loss[geo_mean,seq-mean-token-mean,A=[B,T]]': ('preset', 'verl'),
    'verl.policy_loss[dppo_tv,token-mean,clip_ratio_low=0.05,clip_ratio_high=0.5,clip_ratio_c=20.0]': ('pass', None),
    'verl.policy_loss[dppo_kl,token-mean,clip_ratio_low=0.05,clip_ratio_high=0.5,clip_ratio_c=20.0]': ('pass', None),
    'verl.policy_loss[dppo_tv,token-mean,A=[B,T]]': ('preset', 'verl'),
    'verl.policy_loss[dro,token-mean,dro_beta=1.0,A=[B,T]]': ('pass', None),
    # covariance-selected tokens (verl_checks.covariance_rows): clip_cov = aggregate(ppo_token_loss(dual_clip=None)
    # * clip_cov_mask(draws)) with verl's torch.randperm made the order of the draws, kl_cov =
    # aggregate(kl_cov_token_loss); PolicyLossConfig defaults (n = 1 of 22 tokens) and other settings: canonical
    'verl.policy_loss[clip_cov,token-mean]': ('pass', None),
    'verl.policy_loss[clip_cov,seq-mean-token-mean]': ('pass', None),
    'verl.policy_loss[clip_cov,seq-mean-token-sum]': ('pass', None),
    'verl.policy_loss[clip_cov,seq-mean-token-sum-norm]': ('pass', None),
    'verl.policy_loss[clip_cov,token-sum]': ('pass', None),
    'verl.policy_loss[kl_cov,token-mean]': ('pass', None),
    'verl.policy_loss[kl_cov,seq-mean-token-mean]': ('pass', None),
    'verl.policy_loss[kl_cov,seq-mean-token-sum]': ('pass', None),
    'verl.policy_loss[kl_cov,seq-mean-token-sum-norm]': ('pass', None),
    'verl.policy_loss[kl_cov,token-sum]': ('pass', None),
    'verl.policy_loss[clip_cov,token-mean,clip_cov_ratio=0.2,clip_cov_lb=0.2,clip_cov_ub=3.0]': ('pass', None),
    'verl.policy_loss[clip_cov,seq-mean-token-mean,clip_cov_ratio=0.2,clip_cov_lb=0.2,clip_cov_ub=3.0,A=[B,T]]': ('pass', None),
    'verl.policy_loss[kl_cov,token-mean,kl_cov_ratio=0.2,ppo_kl_coef=1.0]': ('pass', None),  # SkyRL's values
    'verl.policy_loss[kl_cov,seq-mean-token-mean,kl_cov_ratio=0.5,ppo_kl_coef=0.1,A=[B,T]]': ('pass', None),
    'verl.kl_penalty[kl]': ('pass', None),
    'verl.kl_penalty[k1]': ('pass', None),
    'verl.kl_penalty[mse]': ('pass', None),
    'verl.kl_penalty[k2]': ('pass', None),
    'verl.kl_penalty[low_var_kl]': ('preset', 'ms_swift, skyrl, verl'),
    'verl.kl_penalty[k3]': ('preset', 'ms_swift, skyrl, verl'),
    # spec v1.1 kl_loss_term (kl.loss): "abs" is estimator='abs', the "+" suffix gradient='straight_through'
    # (the estimator's value, the gradient of the unclamped ½d², core_algos.py:2200-2213): canonical, with
    # verl's k3 clamp on the value as preset verl (= OpenRLHF's clamp=10.0; decided by the golden vectors
    # kl_loss_term/preset-verl and preset-openrlhf)
    'verl.kl_penalty[abs]': ('pass', None),
    'verl.kl_penalty[abs+]': ('pass', None),
    'verl.kl_penalty[k1+]': ('pass', None),
    'verl.kl_penalty[k2+]': ('pass', None),
    'verl.kl_penalty[k3+]': ('preset', 'ms_swift, openrlhf, skyrl, verl'),
    'verl.kl_penalty[low_var_kl+]': ('preset', 'ms_swift, openrlhf, skyrl, verl'),
    'verl.grpo_advantages[norm_adv_by_std_in_grpo=True]': ('preset', 'skyrl, verl'),  # + precision: epsilon added in float32
    'verl.grpo_advantages[norm_adv_by_std_in_grpo=False]': ('preset', 'skyrl, verl'),
    'verl.grpo_vectorized_advantages[norm_adv_by_std_in_grpo=True]': ('preset', 'skyrl, verl'),
    'verl.grpo_vectorized_advantages[norm_adv_by_std_in_grpo=False]': ('preset', 'skyrl, verl'),
    'verl.rloo_vectorized_advantages': ('pass', None),
    # spec v1.1: reinforce_plus_plus on the loss batch (garbage at masked positions, a masked tool token in
    # row 3): canonical at gamma 1 and 0.9 (the running return skips the tool token)
    'verl.reinforce_plus_plus[gamma=1,loss batch]': ('pass', None),
    'verl.reinforce_plus_plus[gamma=0.9,loss batch]': ('pass', None),
    # gdpo: per-key GRPO, weighted sum, masked_whiten over the response tokens (:466): the composition
    # whiten(gdpo_advantages(batch_normalize=False, singleton='raw')) (preset verl), not canonical GDPO
    'verl.gdpo_advantages[K=2]': ('preset', 'verl'),
    'verl.gdpo_advantages[K=3,gdpo_reward_weights=[1.0, 0.5, 2.0]]': ('preset', 'verl'),
    # spec v1.1 adv.optimal_token_baseline on a multi-turn batch in verl's layout (tool spans, garbage at masked
    # positions): the position form's zero tail cuts row 0 (7 tokens) from column 6, where row 2 (6 tokens, to
    # column 9) is still present: preset verl (tail_length='count'); the TIR form is canonical (1e-8 is invisible)
    'verl.optimal_token_baseline[multi-turn batch]': ('preset', 'verl'),
    'verl.optimal_token_baseline[multi-turn batch,rollout_is_weights]': ('preset', 'verl'),
    'verl.tir_optimal_token_baseline[multi-turn batch]': ('pass', None),
    'verl.tir_optimal_token_baseline[multi-turn batch,rollout_is_weights]': ('pass', None),
    'verl.compute_gae_advantage_return': ('pass', None),
    # k1 rejection thresholds read as verl documents them (ratio bounds on pi_old/pi_rollout): IcePop's
    # asymmetric "0.5_5.0" FAILs at every k1 level (verl bounds pi_rollout/pi_old: the keep decisions
    # for r in (2, 5] and [0.2, 0.5) are swapped); the reciprocal "0.5_2.0" (verl's decoupled_seq_is_rs
    # default) passes, both readings coincide
    'verl.compute_rollout_rejection_mask[token_k1,0.5_5.0]': ('fail', None),
    'verl.compute_rollout_rejection_mask[seq_sum_k1,0.5_5.0]': ('fail', None),
    'verl.compute_rollout_rejection_mask[seq_mean_k1,0.5_5.0]': ('fail', None),
    'verl.compute_rollout_rejection_mask[token_k1,0.5_2.0]': ('pass', None),
    'verl.compute_rollout_rejection_mask[seq_sum_k1,0.5_2.0]': ('pass', None),
    'verl.compute_rollout_rejection_mask[seq_mean_k1,0.5_2.0]': ('pass', None),
    # decoupled mode, token TIS: decoupled_ppo_token_loss(behav_cap=2.0) with ActorConfig's dual clip 3 = preset verl
    'verl.policy_loss[vanilla,token-mean,rollout_is=token,rollout_is_threshold=2.0]': ('preset', 'verl'),
    # decoupled mode, sequence TIS: ppo_token_loss * rollout_is_weights(level='sequence'), both at their verl
    # presets; ActorConfig's dual clip 3 decides (4 tokens with A < 0 and ratio > 3; no sequence sum nears 20)
    'verl.policy_loss[vanilla,token-mean,rollout_is=sequence,rollout_is_threshold=2.0]': ('preset', 'verl'),
    # bypass ppo_clip: PPO against the rollout on the seq_mean_k3-rejected response, divided by the unmasked
    # token count; canonical (no kept row has A < 0 with a ratio above the dual clip 3)
    'verl.policy_loss[bypass_mode,ppo_clip,token-mean,rollout_rs=seq_mean_k3,rollout_rs_threshold=0.5]': ('pass', None),
    # bypass reinforce: -A * logp * min(prod pi_theta/pi_rollout, 2), the weight a constant: canonical
    'verl.policy_loss[bypass_mode,reinforce,token-mean,rollout_is=sequence,rollout_is_threshold=2.0]': ('pass', None),
}


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "verl" and adapter.version == "0.9.1"
    assert adapter.spec_version == "v1" and adapter.array_api == "numpy"


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


# ---------------------------------------------------------------------------------------------
# Findings (verl 0.9.1), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_finding_grpo_statistics_in_float32_are_a_precision_finding(extra):
    """verl adds GRPO's epsilon in float32 (core_algos.py) and its vectorised group_mean_std computes
    in float32 (utils/groupwise.py): float64 rewards get float32-precision advantages. The semantic
    verdict is still its own preset, at that precision; the precision is reported apart."""
    for row_id in ("verl.grpo_advantages[norm_adv_by_std_in_grpo=True]",
                   "verl.grpo_vectorized_advantages[norm_adv_by_std_in_grpo=True]"):
        row = extra[row_id]
        assert row.status == "preset" and "verl" in row.matched_preset.split(", "), row.message
        assert [(f["dtype"], f["meets"]) for f in row.precision_findings] == [("float64", "float32")], row.precision_findings


@pytest.mark.frameworks
def test_finding_singleton_groups(adapter):
    """A group of one: the loop GRPO gives r/(1 + 1e-6) (mean 0, std 1; core_algos.py:315-317), the
    loop RLOO gives the raw reward, the vectorised RLOO gives 0 (core_algos.py:864). The spec's
    singleton="raw" is A = r exactly, so at float64 the GRPO row fails by 1e-6 relative."""
    r = np.array([1.0, 2.0])
    # (1 + 1e-6 is formed with verl's float32 0-d std tensor: r / 1.00000095 even for float64 rewards)
    np.testing.assert_allclose(adapter.outcome_advantages("grpo", r, 1), r / np.float32(1 + 1e-6), rtol=1e-12)
    assert abs(adapter.outcome_advantages("grpo", r, 1)[0] - 1.0) > 1e-7  # not the spec's "raw" (A = r)
    np.testing.assert_array_equal(adapter.outcome_advantages("rloo", r, 1), r)
    np.testing.assert_array_equal(adapter.outcome_advantages("rloo_vectorized", r, 1), [0.0, 0.0])


@pytest.mark.frameworks
def test_finding_gpg_alpha_counts_nonzero_rewards(adapter):
    """[1, 0 | 1, 1 | 0, 0], G = 2 (the issue's vector): verl's alpha = 6 / 3 non-zero rewards = 2, where the GPG
    authors' code counts the two all-equal groups, alpha = 6 / 2 = 3 (by hand)."""
    A = adapter.gpg_advantages(np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), 2)
    np.testing.assert_allclose(A, [1.0, -1.0, 0.0, 0.0, 0.0, 0.0], rtol=1e-6)  # not the paper's [1.5, -1.5, 0...]


@pytest.mark.frameworks
def test_every_registered_advantage_estimator_has_a_row(adapter, extra):
    """Every name in the installed verl's ADV_ESTIMATOR_REGISTRY is checked somewhere (a core row or a
    framework row): none is left "not implemented"."""
    from conformance.frameworks.verl import checks as vc

    registered = set(adapter.advantage_estimators())
    assert {"reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "grpo_passk", "gpg", "gdpo",
            "optimal_token_baseline", "tir_optimal_token_baseline"} <= registered
    assert registered <= set(vc.ESTIMATORS)
    assert not [r for r in extra.values() if r.id.startswith("verl.") and r.spec_id == "adv.*"]
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        assert extra[f"verl.{name}[multi-turn batch]"].status in ("pass", "preset")


def _otb_call(adapter, name, m, r, **params):
    """verl's estimator `name` in its own layout (one group), pi = 0.5 and sum_pi_squared = 0.5 (w = 0.5)."""
    arrays = {"token_level_rewards": r, "response_mask": m, "index": np.zeros(m.shape[0], dtype=np.int64),
              "old_log_probs": np.full(m.shape, np.log(0.5)), "sum_pi_squared": np.full(m.shape, 0.5)}
    return adapter.call("advantage", arrays, {"name": name, **params})["outputs"]


@pytest.mark.frameworks
def test_finding_otb_zero_tail_cuts_at_a_count_used_as_a_column(adapter):
    """optimal_token_baseline's zero tail zeroes baselines[i*, second_max_length:] with second_max_length a
    token count (core_algos.py:975-982). Row 0 has 4 tokens, row 1 two tokens around a tool token (columns 0
    and 2): the cut falls at column 2, where row 1 is present, so row 0 loses its baseline there (A = 1) while
    row 1 keeps it (A = 0). The spec's zero tail starts past the other row's last position (tail_length=
    'extent'); verl's rule is tail_length='count' (preset verl). The TIR form compacts first: no difference."""
    m = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
    r = np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])  # every return is 1
    np.testing.assert_allclose(_otb_call(adapter, "optimal_token_baseline", m, r)["advantages"],
                               [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], atol=1e-7)
    spec = {"token_rewards": np.concatenate([np.zeros((2, 1)), r], 1), "mask": np.concatenate([np.zeros((2, 1)), m], 1) > 0,
            "group_size": 2, "old_logp": np.full((2, 5), np.log(0.5)), "sum_pi_squared": np.full((2, 5), 0.5)}
    np.testing.assert_allclose(oracle.optimal_token_baseline_advantages(**spec)[0][:, 1:], [[0, 0, 0, 1.0], [0, 0, 0, 0]])
    np.testing.assert_allclose(oracle.optimal_token_baseline_advantages(**spec, tail_length="count")[0][:, 1:],
                               [[0, 0, 1.0, 1.0], [0, 0, 0, 0]])
    np.testing.assert_allclose(_otb_call(adapter, "tir_optimal_token_baseline", m, r)["advantages"],
                               [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], atol=1e-7)


@pytest.mark.frameworks
def test_tir_otb_group_of_one_non_empty_row_is_not_offered(adapter):
    """tir_optimal_token_baseline leaves empty rows out of the group and gives a group of one baseline 0
    (core_algos.py:1072-1088): with handle_zero_tail=False the non-empty row of a group keeps A = G, where
    optimal_token_baseline (and the spec) use its own weighted return as the baseline (A = 0 up to eps). The
    trainer never passes handle_zero_tail (ray_trainer.py:264-276; default True), where both agree, so the claim
    is withdrawn (findings.toml) and the adapter reports the handle_zero_tail=False case "not implemented"."""
    m = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    r = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    tir = _otb_call(adapter, "tir_optimal_token_baseline", m, r, handle_zero_tail=False)["advantages"]
    pos = _otb_call(adapter, "optimal_token_baseline", m, r, handle_zero_tail=False)["advantages"]
    np.testing.assert_allclose(tir[0], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(pos[0], [2e-8, 1e-8, 0.0], rtol=1e-3)  # G - G·W/(W + 1e-8), W = 0.5, 1
    with pytest.raises(NotImplementedError, match="group of one"):
        adapter.optimal_token_baseline_advantages(np.zeros((2, 4)), np.concatenate([np.zeros((2, 1)), m], 1) > 0, 2,
                                                  np.full((2, 4), -1.0), np.full((2, 4), 0.5), align="valid_token",
                                                  zero_tail=False)
    for name in ("tir_optimal_token_baseline", "optimal_token_baseline"):
        np.testing.assert_allclose(_otb_call(adapter, name, m, r)["advantages"][0], [1.0, 1.0, 0.0])


@pytest.mark.frameworks
def test_finding_otb_reads_masked_log_probs(adapter):
    """Both estimators compute w = 1 - 2 exp(old_log_probs) + sum_pi_squared at every position and mask after
    (core_algos.py:927-937, :1043-1053): a NaN log-prob at a masked (tool) position becomes NaN * 0 = NaN in the
    running W, and the group's baseline at every later step is NaN for every member present there (row 1 too).
    The spec never reads masked positions (the adapter sends 0)."""
    m = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    arrays = {"token_level_rewards": np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]), "response_mask": m,
              "index": np.zeros(2, dtype=np.int64), "old_log_probs": np.array([[-1.0, np.nan, -1.0], [-1.0] * 3]),
              "sum_pi_squared": np.full((2, 3), 0.5)}
    pos = adapter.call("advantage", arrays, {"name": "optimal_token_baseline", "handle_zero_tail": False})["outputs"]
    assert np.isfinite(pos["advantages"][:, 0]).all() and np.isnan(pos["advantages"][:, 2]).all(), pos["advantages"]
    tir = adapter.call("advantage", arrays, {"name": "tir_optimal_token_baseline", "handle_zero_tail": False})["outputs"]
    assert np.isnan([tir["advantages"][0, 2], tir["advantages"][1, 1]]).all(), tir["advantages"]  # both rows' 2nd token


@pytest.mark.frameworks
def test_reinforce_plus_plus_carries_the_return_over_a_tool_token(adapter):
    """verl#6376 (bug-catalogue class 11): r = [0, 0, 1] on mask [1, 0, 1], gamma 0.5; verl 0.9.1's running
    return skips the masked token (core_algos.py:720-726): 0.5 at the first token, as gap='skip', not 0
    (SkyRL's reset) or 0.25 (OpenRLHF's positional discount)."""
    m = np.array([[False, True, False, True], [False, True, True, False]])
    r = np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    _, returns = adapter.reinforce_pp_advantages(r, m, gamma=0.5)
    np.testing.assert_allclose(returns[0], [0.0, 0.5, 0.0, 1.0], rtol=1e-12)


@pytest.mark.frameworks
def test_finding_reinforce_plus_plus_reads_masked_rewards(adapter):
    """reinforce_plus_plus adds every position's reward before multiplying by the mask (core_algos.py:721,
    :725-726): a NaN reward at a masked (tool) position becomes NaN * 0 = NaN in the running return, the
    row's earlier returns, and, through masked_whiten, every advantage of the batch. The spec never reads
    masked positions (the adapter sends 0 there, so the core row is unaffected)."""
    m = np.array([[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    r = np.array([[0.0, 1.0, np.nan, 1.0], [0.0, 1.0, 1.0, 0.0]])
    out = adapter.call("advantage", {"token_level_rewards": r, "response_mask": m},
                       {"name": "reinforce_plus_plus", "algo": {"gamma": 1.0}})["outputs"]
    assert np.isnan(out["returns"][0, 1]) and out["returns"][0, 3] == 1.0
    assert np.isnan(out["advantages"]).all()


@pytest.mark.frameworks
def test_finding_opo_group_without_tokens_is_nan(adapter):
    """opo divides sum(len * score) by sum(len) (core_algos.py:683): a group whose rows have no response token
    gets 0/0 = NaN at every position (NaN * 0 stays NaN); the spec gives 0 (adapter: not implemented)."""
    m = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    arrays = {"token_level_rewards": np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]]), "response_mask": m,
              "index": np.array([0, 0, 1, 1])}
    out = adapter.call("advantage", arrays, {"name": "opo"})["outputs"]["advantages"]
    assert np.isnan(out[:2]).all() and np.isfinite(out[2:]).all()
    with pytest.raises(NotImplementedError, match="without response tokens"):
        adapter.opo_advantages(np.array([1.0, 0.0, 1.0, 0.0]), 2, m.astype(bool))


@pytest.mark.frameworks
def test_finding_masked_whiten_refuses_one_token(adapter):
    """masked_whiten (and so compute_gae_advantage_return) raises on a mask with 0 or 1 valid tokens
    (torch_functional.py:311-326); the spec returns 0 / the token's own value. verl raises it itself (the
    framework called directly); the adapter declares those cases not offered, as SkyRL's does."""
    m = np.array([[False, True, False]])
    with pytest.raises(ValueError, match="sum of the mask is one"):
        adapter.call("masked_whiten", {"values": np.array([[0.0, 3.0, 0.0]]), "mask": m.astype(np.float64)},
                     {"shift_mean": True})
    with pytest.raises(ValueError, match="At least one element"):
        adapter.call("masked_whiten", {"values": np.zeros((1, 3)), "mask": np.zeros((1, 3))}, {"shift_mean": True})
    with pytest.raises(NotImplementedError, match="torch_functional.py:311-326"):
        adapter.whiten(np.array([[0.0, 3.0, 0.0]]), m)
    with pytest.raises(NotImplementedError, match="mask sum of 0"):
        adapter.gae(np.zeros((1, 3)), np.zeros((1, 3)), np.zeros((1, 3), dtype=bool))


@pytest.mark.frameworks
def test_finding_masked_mean_count_epsilon_in_whitening(adapter):
    """masked_mean divides by n + 1e-8 (utils/torch_functional.py:308) and masked_whiten divides x - mean by
    sqrt(var + 1e-8) (:343): on equal values the residue mean * 1e-8 / n is multiplied by 1e4. Five valid values
    of 2.5 in float64 whiten to 2.5 * 1e-8 / 5 * 1e4 = 5e-5 each, where the spec gives 0 exactly (the golden vector
    whiten/constant-x-eps0: the whiten row's float64 precision is bfloat16's); in float32 n + 1e-8 rounds to n."""
    x = np.array([[0.0, 2.5, 2.5, 2.5], [0.0, 2.5, 2.5, 0.0]])
    m = np.array([[False, True, True, True], [False, True, True, False]])
    got = adapter.whiten(x, m)
    np.testing.assert_allclose(got[m], 5e-5, rtol=1e-6)
    assert (oracle.whiten(x, m) == 0).all()
    assert (adapter.whiten(x.astype(np.float32), m) == 0).all()
    assert "1e-4" in adapter.precision_notes["whiten"]


@pytest.mark.frameworks
def test_finding_seq_mean_token_mean_guard(adapter):
    """agg_loss divides each row by (n_b + 1e-8) (core_algos.py:1196): 1e-8/n_b relative, visible at
    float64 (a precision finding: the core aggregate row meets float32 precision there), invisible at float32."""
    x = np.array([[0.0, 1.0, 2.0]])
    m = np.array([[False, True, True]])
    got = adapter.aggregate(x, m, mode="seq_mean_token_mean")
    assert got == pytest.approx(3.0 / (2 + 1e-8), rel=1e-15)
    assert got != oracle.aggregate(x, m, mode="seq_mean_token_mean")


@pytest.mark.frameworks
def test_finding_token_mean_without_loss_tokens_is_nan(adapter):
    """agg_loss's token-mean divides by batch_num_tokens (core_algos.py:1175), the engine's loss-mask count: a
    mini-batch without a loss token (rollout rejection can make one) gives 0/0 = NaN, where the spec's empty
    token mean is 0 (golden vector aggregate/all-masked-token-mean: the core aggregate row FAILs)."""
    x = np.array([[0.0, 1.0, 2.0], [0.5, -1.0, 3.0]])
    m = np.zeros(x.shape, dtype=bool)
    assert math.isnan(float(adapter.aggregate(x, m, mode="token_mean")))
    assert oracle.aggregate(x, m, mode="token_mean") == 0.0
    for mode in ("seq_mean_token_mean", "token_sum"):  # divided by the row count, or not divided: 0
        assert float(adapter.aggregate(x, m, mode=mode)) == 0.0


@pytest.mark.frameworks
def test_finding_gspo_aggregation_default(adapter):
    """verl 0.9.1 aggregates GSPO with the actor's loss_agg_mode (token-mean by default), verl main
    hard-codes seq-mean-token-mean (peer-conventions §7): on ragged rows the two differ."""
    from conformance.frameworks import loss_batch as checks

    b = checks.round_batch(checks.loss_batch(0), "float32")
    arrays = {"old_log_prob": b["old_logp"].astype(np.float32), "log_prob": b["logp"].astype(np.float32),
              "advantages": np.broadcast_to(b["advantages"][:, None], b["mask"].shape).astype(np.float32),
              "response_mask": b["mask"].astype(np.float32)}
    losses = {mode: float(adapter.call("policy_loss", arrays, {"name": "gspo", "loss_agg_mode": mode})["outputs"]["loss"])
              for mode in ("token-mean", "seq-mean-token-mean")}
    assert abs(losses["token-mean"] - losses["seq-mean-token-mean"]) > 1e-3


@pytest.mark.frameworks
def test_plus_suffix_is_straight_through_on_the_raw_log_ratio(adapter):
    """core_algos.py:2200-2213: "k3+" keeps k3's clamped value (d = -3: e^3 - 4 = 16.1 -> 10; d = 25: ref - logp
    clamped to -20, e^-20 + 19 -> 10) and back-propagates the d of 0.5 * (logprob - ref_logprob)^2, unclamped:
    -3 and 25 (the clamps act on the value only). "abs" at d = 0 has gradient 0 (torch.abs), the spec's
    sgn(0) = 0. Both are kl_loss_term with preset verl's keyword (its ±20 log-ratio clamp is subsumed)."""
    m = np.array([[False, True, True, True]])
    lp = np.array([[0.0, -3.5, -0.5, -1.0]])
    ref = lp - np.array([[0.0, -3.0, 25.0, 0.0]])
    u = np.ones_like(lp)
    np.testing.assert_allclose(adapter.verl_kl_penalty(lp, ref, m, "k3+"), [[0.0, 10.0, 10.0, 0.0]], rtol=1e-12)
    np.testing.assert_allclose(adapter.verl_kl_penalty(lp, ref, m, "k3+", u), [[0.0, -3.0, 25.0, 0.0]], rtol=1e-12)
    assert adapter.verl_kl_penalty(lp, ref, m, "abs", u).tolist() == [[0.0, -1.0, 1.0, 0.0]]
    kw = {**preset_kwargs("verl", "kl_loss_term"), "gradient": "straight_through"}
    np.testing.assert_allclose(adapter.kl_loss_term(lp, ref, m, gradient="straight_through"), oracle.kl_loss_term(lp, ref, m, **kw))
    np.testing.assert_allclose(adapter.kl_loss_term_grad(lp, ref, m, None, u, gradient="straight_through"),
                               oracle.kl_loss_term_grad(lp, ref, m, None, u, **kw))
    with pytest.raises(NotImplementedError):  # no importance ratio enters verl's KL
        adapter.kl_loss_term(lp, ref, m, lp, gradient="bias_corrected")


@pytest.mark.frameworks
def test_dual_clip_off_is_exact(adapter):
    """dual_clip=None is run as clip_ratio_c=inf: identical to the canonical PPO loss and gradient."""
    rng = np.random.default_rng(1)
    m = np.zeros((3, 5), dtype=bool)
    m[:, 1:] = True
    lp = -np.abs(rng.normal(size=(3, 5)))
    old = lp - np.array([[0, 2.0, -2.0, 1.5, 0.1]] * 3)
    A = np.array([-1.0, 0.0, 2.0])
    u = rng.normal(size=(3, 5))
    np.testing.assert_allclose(adapter.ppo_token_loss(lp, old, A, m), oracle.ppo_token_loss(lp, old, A, m), rtol=1e-12)
    np.testing.assert_allclose(adapter.ppo_token_loss_grad(lp, old, A, m, u), oracle.ppo_token_loss_grad(lp, old, A, m, u), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Spec v1.1 (rollout_corr_helper.py): the k1 rejection bounds, the keyword translations
# ---------------------------------------------------------------------------------------------


def _rollout_arrays(old, rollout, mask):
    return {"old_log_prob": old, "rollout_log_prob": rollout, "response_mask": mask.astype(old.dtype)}


@pytest.mark.frameworks
def test_finding_k1_rejection_bounds_act_on_the_inverse_ratio(adapter, extra):
    """CONFIRMED: a k1 "lower_upper" rollout_rs_threshold is documented as ratio bounds, r = pi_old/pi_rollout
    (trainer/config/algorithm.py:107-124: "token_k1": rejection with -log r, "ratio thresholds"; log_ratio is
    the "Log ratio of training policy probability to rollout policy probability", rollout_corr_helper.py:219;
    decoupled_geo_rs "uses IS ratio semantics", :268-270), and the same config's IS threshold in the same
    form keeps lower <= r <= upper (IcePop, :94). verl computes k1 = -log_ratio (:263) kept when
    log(lower) <= k1 <= log(upper) (:300-301, :316): 1/upper <= r <= 1/lower, bounds on pi_rollout/pi_old.
    Minimal reproduction: r = 3, 0.3, 1 with IcePop's "0.5_5.0": token_k1 keeps [F, T, T]; the
    documented reading (and verl's own IS "0.5_5.0") keeps [T, F, T]. Reciprocal bounds agree."""
    r = np.array([3.0, 0.3, 1.0])
    m = np.zeros((3, 2), dtype=bool)
    m[:, 1] = True
    rollout = np.full((3, 2), -1.0)
    old = rollout + np.log(r)[:, None]
    arrays = _rollout_arrays(old, rollout, m)
    keep = adapter.call("rollout_correction", arrays, {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_5.0"})["outputs"]["response_mask"]
    assert keep[:, 1].tolist() == [0.0, 1.0, 1.0]  # verl: drops r = 3, keeps r = 0.3
    icepop = adapter.call("rollout_correction", arrays, {"rollout_is": "token", "rollout_is_threshold": "0.5_5.0"})["outputs"]["rollout_is_weights"]
    np.testing.assert_allclose(icepop[:, 1], [3.0, 0.0, 1.0], rtol=1e-12)  # the IS "0.5_5.0" keeps 0.5 <= r <= 5
    documented = oracle.rollout_rejection_mask(old, rollout, m, lo=0.5, hi=5.0)  # statistic="ratio": 0.5 <= r <= 5
    assert documented[:, 1].tolist() == [True, False, True]
    computed = oracle.rollout_rejection_mask(old, rollout, m, statistic="k1", lo=np.log(0.5), hi=np.log(5.0))
    np.testing.assert_array_equal(keep > 0.5, computed)  # = (statistic="ratio", lo=1/5, hi=1/0.5)
    np.testing.assert_array_equal(computed, oracle.rollout_rejection_mask(old, rollout, m, lo=0.2, hi=2.0))
    for level in ("seq_sum", "seq_mean"):  # one token per row: the sequence options decide the same
        out = adapter.call("rollout_correction", arrays, {"rollout_rs": f"{level}_k1", "rollout_rs_threshold": "0.5_5.0"})["outputs"]
        assert out["response_mask"][:, 1].tolist() == [0.0, 1.0, 1.0], level
    # reciprocal bounds (verl's own factories, "0.5_2.0"): both readings keep only r = 1
    keep = adapter.call("rollout_correction", arrays, {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"})["outputs"]["response_mask"]
    assert keep[:, 1].tolist() == [0.0, 0.0, 1.0]
    # the framework rows say so, with the same reproduction
    for option in ("token_k1", "seq_sum_k1", "seq_mean_k1"):
        row = extra[f"verl.compute_rollout_rejection_mask[{option},0.5_5.0]"]
        assert row.status == "fail" and "the bounds act on the inverse ratio" in row.message, row.message
        assert "verl keeps [False, True, True], the documented reading keeps [True, False, True]" in row.message
        assert extra[f"verl.compute_rollout_rejection_mask[{option},0.5_2.0]"].status == "pass"


@pytest.mark.frameworks
def test_k1_bounds_translation_is_faithful(adapter):
    """The spec's k1 bounds (kl_of="rollout_old": k1 = rollout - old) go to verl as "exp(lo)_exp(hi)": verl
    then tests exactly lo <= k1 <= hi. The spec's worked values (offpolicy.rejection.md): r = [3, 1, 0.5,
    1.5], statistic="k1", lo=-0.5, hi=1.5 keeps [F, T, T, T]."""
    r = np.array([[1.0, 3.0, 1.0, 0.5, 1.5]])
    m = np.array([[False, True, True, True, True]])
    rollout = np.full(r.shape, -2.0)
    old = rollout + np.log(r)
    keep = adapter.rollout_rejection_mask(old, rollout, m, statistic="k1", lo=-0.5, hi=1.5)
    assert keep.dtype == bool and keep.tolist() == [[False, False, True, True, True]]
    np.testing.assert_array_equal(keep, oracle.rollout_rejection_mask(old, rollout, m, statistic="k1", lo=-0.5, hi=1.5))
    assert adapter._rs_settings("k1", "seq_mean", -0.5, 1.5, "rollout_old") == {
        "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": f"{math.exp(-0.5)!r}_{math.exp(1.5)!r}"}
    assert adapter._rs_settings("k3", "seq_max", None, 0.1, "rollout_old") == {"rollout_rs": "seq_max_k3", "rollout_rs_threshold": "0.1"}


@pytest.mark.frameworks
@pytest.mark.parametrize("function, kwargs", [
    ("rollout_is_weights", {"mode": "none"}),
    ("rollout_is_weights", {"level": "sequence", "seq_stat": "geometric"}),
    ("rollout_is_weights", {"lo": 0.5}),  # truncation from below
    ("rollout_is_weights", {"hi": None}),
    ("rollout_is_weights", {"mode": "mask", "hi": 5.0}),  # IcePop needs both bounds
    ("rollout_is_weights", {"log_ratio_clamp": 10.0}),
    ("rollout_rejection_mask", {"lo": 0.5, "hi": 2.0}),  # statistic="ratio"
    ("rollout_rejection_mask", {"statistic": "k2", "level": "seq_all", "hi": 0.1}),
    ("rollout_rejection_mask", {"statistic": "k1", "level": "seq_max", "lo": -0.1, "hi": 0.1}),
    ("rollout_rejection_mask", {"statistic": "k1", "hi": 0.1}),  # k1 needs both bounds
    ("rollout_rejection_mask", {"statistic": "k3", "lo": 0.0, "hi": 0.1}),
    ("rollout_rejection_mask", {"statistic": "k3"}),  # no upper bound
    ("rollout_rejection_mask", {"statistic": "k2", "hi": 0.1, "kl_of": "old_rollout"}),
    ("decoupled_ppo_token_loss", {}),  # behav_cap=None
    ("decoupled_ppo_token_loss", {"behav_cap": 2.0, "behav_mode": "mask"}),
])
def test_inexpressible_keywords_are_not_implemented(adapter, function, kwargs):
    """Keyword values no documented verl setting expresses raise NotImplementedError (a "not implemented"
    case of the row), never an approximation (an infinite threshold, a tiny lower bound)."""
    m = np.array([[False, True, True]])
    x = np.array([[0.0, -1.0, -0.5]])
    y = np.array([[0.0, -1.2, -0.4]])
    args = (x, y, m) if function != "decoupled_ppo_token_loss" else (x, y, y - 0.3, np.array([1.0]), m)
    with pytest.raises(NotImplementedError):
        getattr(adapter, function)(*args, **kwargs)


@pytest.mark.frameworks
def test_decoupled_loss_is_ppo_against_prox_times_truncated_weight(adapter):
    """decoupled_ppo_token_loss(behav_cap=C) is verl's decoupled mode: the driver's token TIS weight
    min(e^(prox - behav), C) times compute_policy_loss_vanilla against prox (core_algos.py:1365); the
    gradient is w times PPO's. The spec's worked values (offpolicy.decoupled_ppo.md), token c with cap 3:
    r = 1.5, w = 4 -> 3, A = -1: L = 4.5, dL/dlogp = 4.5."""
    m = np.array([[False, True]])
    prox = np.array([[0.0, -1.0]])
    logp = prox + np.log(1.5)
    behav = prox - np.log(4.0)
    A = np.array([-1.0])
    loss = adapter.decoupled_ppo_token_loss(logp, prox, behav, A, m, behav_cap=3.0)
    np.testing.assert_allclose(loss, [[0.0, 4.5]], rtol=1e-12)
    grad = adapter.decoupled_ppo_token_loss_grad(logp, prox, behav, A, m, np.ones((1, 2)), behav_cap=3.0)
    np.testing.assert_allclose(grad, [[0.0, 4.5]], rtol=1e-12)


@pytest.mark.frameworks
def test_finding_rollout_correction_refuses_a_batch_without_valid_tokens(adapter):
    """compute_rollout_correction_and_rejection_mask raises ValueError on a response_mask without a valid
    token (rollout_corr_helper.py:837-838; compute_rs_metrics and compute_is_metrics check it again,
    :441-442, :689-690); the spec gives all-0 weights / an all-False mask. A deliberate refusal (finding
    rollout-correction-refuses-empty-batch, a convention): verl raises it itself (called directly), and the
    adapter declares those cases not offered, as for masked_whiten (with --seed 2 the rollout_rejection_mask row
    meets one: B = 1, an empty completion)."""
    m = np.zeros((1, 4), dtype=bool)
    x = np.full((1, 4), -1.0)
    arrays = {"old_log_prob": x, "rollout_log_prob": x - 0.1, "response_mask": m.astype(np.float64)}
    for settings in ({"rollout_is": "token", "rollout_is_threshold": 2.0},
                     {"rollout_rs": "token_k3", "rollout_rs_threshold": "0.1"}):
        with pytest.raises(ValueError, match="at least one valid token"):
            adapter.call("rollout_correction", arrays, settings)
    with pytest.raises(NotImplementedError, match="rollout_corr_helper.py:837-838"):
        adapter.rollout_is_weights(x, x - 0.1, m)
    with pytest.raises(NotImplementedError, match="rollout_corr_helper.py:837-838"):
        adapter.rollout_rejection_mask(x, x - 0.1, m, statistic="k3", hi=0.1)
    with pytest.raises(NotImplementedError, match="rollout_corr_helper.py:837-838"):
        adapter.decoupled_ppo_token_loss(x, x, x - 0.1, np.array([1.0]), m, behav_cap=2.0)
    np.testing.assert_array_equal(oracle.rollout_is_weights(x, x - 0.1, m), np.zeros((1, 4)))


@pytest.mark.frameworks
def test_finding_batch_normalize_mean_has_an_epsilon(adapter):
    """rollout_is_batch_normalize divides by masked_mean (rollout_corr_helper.py:628-655), which divides by
    n + 1e-8 (utils/torch_functional.py:308): the normalised weights are (1 + 1e-8/n) times the spec's, a
    float64 precision finding (float32 class) when a batch-normalised case is drawn (--seed 3), never a
    semantic difference. Row [3, 1] truncated at 2: [2, 1] / 1.5 -> spec [4/3, 2/3]."""
    m = np.array([[False, True, True]])
    rollout = np.full((1, 3), -1.0)
    old = rollout + np.log([[1.0, 3.0, 1.0]])
    got = adapter.rollout_is_weights(old, rollout, m, batch_normalize=True)
    spec = oracle.rollout_is_weights(old, rollout, m, batch_normalize=True)
    np.testing.assert_allclose(spec, [[0.0, 4 / 3, 2 / 3]], rtol=1e-15)
    np.testing.assert_allclose(got, spec * (1 + 1e-8 / 2), rtol=1e-13)
    assert not np.allclose(got, spec, rtol=1e-9, atol=0)
    assert "1e-8" in adapter.precision_notes["rollout_is_weights"]


# ---------------------------------------------------------------------------------------------
# Spec v1.1: the policy losses of 2025-26 (sapo, geo_mean, dppo_tv/_kl, dro, gpg; clip_cov, kl_cov)
# ---------------------------------------------------------------------------------------------


def _one_row(d, A, logp=None):
    """One row [0, d_1, ..., d_n] (column 0 masked): logp (default -1 per token), old = logp - d, A [1]."""
    d = np.asarray(d, dtype=np.float64)
    lp = np.concatenate([[0.0], np.full(d.shape, -1.0) if logp is None else np.asarray(logp, dtype=np.float64)])[None]
    old = lp - np.concatenate([[0.0], d])[None]
    m = np.zeros(lp.shape, dtype=bool)
    m[0, 1:] = True
    return lp, old, np.array([float(A)]), m


@pytest.mark.frameworks
@pytest.mark.parametrize("r, A, loss, grad", [
    (1.0, 1.0, -2.0, -1.0), (1.0, -1.0, 4 / 1.05 / 2, 1.0), (2.0, -1.0, 2.822000, 1.536220),
    (0.5, 1.0, -1.510163, -0.470007), (math.exp(25.0), 1.0, -4.0, 0.0),  # the last: verl's clamp at 20 binds
])
def test_sapo_worked_values(adapter, r, A, loss, grad):
    """loss.sapo.md's worked values through compute_policy_loss_sapo's per-token matrix (tau 1.0/1.05 =
    ActorConfig's, actor.py:167-168), with verl's autograd gradient."""
    lp, old, adv, m = _one_row([math.log(r)], A)
    np.testing.assert_allclose(adapter.sapo_token_loss(lp, old, adv, m)[0, 1], loss, atol=1e-6)
    np.testing.assert_allclose(adapter.sapo_token_loss_grad(lp, old, adv, m, np.ones_like(lp))[0, 1], grad, atol=1e-6)


@pytest.mark.frameworks
def test_finding_sapo_ignores_loss_agg_mode(adapter):
    """compute_policy_loss_sapo always reduces seq-mean-token-mean (core_algos.py:1688-1690), whatever
    loss_agg_mode. Minimal reproduction: on-policy (L = -2A/tau), a row of 1 token with A = +1 (L = -2) and
    a row of 3 tokens with A = -1 (L = 2/1.05 = 1.905 each): token-mean, seq-mean-token-mean and token-sum
    all give the mean of the row means (-2 + 1.905)/2 = -0.0476; aggregate(mode="token_mean") of the same
    token losses is (-2 + 3 * 1.905)/4 = 0.929 (token_sum 3.714)."""
    m = np.array([[False, True, False, False], [False, True, True, True]])
    lp = np.full(m.shape, -1.0)
    arrays = {"old_log_prob": lp, "log_prob": lp, "advantages": np.array([[1.0] * 4, [-1.0] * 4]), "response_mask": m.astype(np.float64)}
    losses = {mode: float(adapter.call("policy_loss", arrays, {"name": "sapo", "loss_agg_mode": mode})["outputs"]["loss"])
              for mode in ("token-mean", "seq-mean-token-mean", "token-sum")}
    row_means = (-2.0 + 2 / 1.05) / 2
    for mode, value in losses.items():
        assert value == pytest.approx(row_means, rel=1e-6), mode
    tok = oracle.aggregate(oracle.sapo_token_loss(lp, lp, np.array([1.0, -1.0]), m), m, mode="token_mean")
    assert tok == pytest.approx((-2.0 + 3 * 2 / 1.05) / 4) and abs(tok - row_means) > 0.9


@pytest.mark.frameworks
def test_gmpo_worked_values_and_per_row(adapter):
    """loss.gmpo.md's worked values (eps 0.4, two tokens, upstream 1): the adapter runs compute_policy_loss_
    geo_mean on each row alone, so every valid token carries the row's -A*rho and the gradient is verl's
    autograd gradient of the row's loss times the row's upstream sum. verl divides by n_b + 1e-8
    (core_algos.py:1984, :1987): a relative 1e-8/n_b, the float64 precision note."""
    for d, A, loss, grad in (([0.1, 0.3], 1.0, -math.exp(0.2), [-math.exp(0.2)] * 2),
                             ([0.1, 0.6], 1.0, -math.exp(0.25), [-math.exp(0.25), 0.0]),
                             ([-0.6, 0.2], -1.0, math.exp(-0.1), [0.0, math.exp(-0.1)])):
        lp, old, adv, m = _one_row(d, A)
        np.testing.assert_allclose(adapter.gmpo_token_loss(lp, old, adv, m)[0, 1:], [loss, loss], rtol=1e-7)
        np.testing.assert_allclose(adapter.gmpo_token_loss_grad(lp, old, adv, m, np.ones_like(lp))[0, 1:], grad, rtol=1e-7, atol=1e-12)
    # two rows at once: each its own rho (the batch call would return their mean), masked tokens never read
    m = np.array([[False, True, True], [False, True, False]])
    lp = np.where(m, -1.0, np.nan)
    old = lp - np.array([[0.0, 0.1, 0.3], [0.0, 0.6, 0.0]])
    A = np.array([1.0, -2.0])
    u = np.array([[0.0, 1.0, 2.0], [0.0, -1.0, 0.0]])
    np.testing.assert_allclose(adapter.gmpo_token_loss(lp, old, A, m), oracle.gmpo_token_loss(lp, old, A, m), rtol=1e-7)
    np.testing.assert_allclose(adapter.gmpo_token_loss_grad(lp, old, A, m, u), oracle.gmpo_token_loss_grad(lp, old, A, m, u), rtol=1e-7)
    assert "1e-8" in adapter.precision_notes["gmpo_token_loss"]


@pytest.mark.frameworks
def test_finding_geo_mean_is_a_row_mean_at_eps_0_2(adapter):
    """compute_policy_loss_geo_mean's scalar is torch.mean over the rows whatever loss_agg_mode
    (core_algos.py:2000), and ActorConfig's clip range is 0.2/0.2 (actor.py:158-160), not the paper's
    0.4 (the verl preset). Minimal reproduction: one row d = [0.1, 0.3], A = +1: verl -e^{(0.1+0.2)/2}
    = -1.1618 (0.3 clipped at 0.2), canonical -e^{0.2} = -1.2214; a second, empty row halves it under
    every mode (the row mean counts it, as seq_mean_token_mean does)."""
    lp, old, A, m = _one_row([0.1, 0.3], 1.0)
    lp2, old2, m2 = np.vstack([lp, lp]), np.vstack([old, old]), np.vstack([m, np.zeros_like(m)])
    arrays = {"old_log_prob": old2, "log_prob": lp2, "advantages": np.ones_like(lp2), "response_mask": m2.astype(np.float64)}
    for mode in ("token-mean", "seq-mean-token-mean", "token-sum"):
        loss = float(adapter.call("policy_loss", arrays, {"name": "geo_mean", "loss_agg_mode": mode})["outputs"]["loss"])
        assert loss == pytest.approx(-math.exp(0.15) / 2, rel=1e-7), mode
    preset = preset_kwargs("verl", "gmpo_token_loss")
    assert preset == {"eps_low": 0.2, "eps_high": 0.2}
    assert oracle.gmpo_token_loss(lp, old, A, m, **preset)[0, 1] == pytest.approx(-math.exp(0.15))
    assert oracle.gmpo_token_loss(lp, old, A, m)[0, 1] == pytest.approx(-math.exp(0.2))


@pytest.mark.frameworks
@pytest.mark.parametrize("divergence, p, A, kw, loss, grad", [
    ("tv", 0.6, 1.0, {}, 0.612991, -1.2),
    ("tv", 0.8, 1.0, {}, 0.0, 0.0),  # p - p_old = 0.3 > 0.2: dropped
    ("tv", 0.8, -1.0, {"ratio_cap": 1.5}, -0.334715, 1.5),
    ("tv", 0.2, -1.0, {}, 0.0, 0.0),
    ("kl", 0.8, 1.0, {}, 0.0, 0.0),  # binary KL log 1.25 = 0.223 > 0.2
    ("kl", 0.8, 1.0, {"delta_high": 0.25}, 0.357030, -1.6),
    ("kl", 0.8, -1.0, {}, -0.357030, 1.6),
])
def test_dppo_worked_values(adapter, divergence, p, A, kw, loss, grad):
    """loss.dppo.md's worked values (p_old = 0.5) through compute_policy_loss_dppo_tv / _kl: delta ->
    clip_ratio_low/high, ratio_cap -> clip_ratio_c (20 where the table has no cap: above every ratio)."""
    kw = {"ratio_cap": 20.0, **kw}
    lp, old, adv, m = _one_row([math.log(p / 0.5)], A, logp=[math.log(p)])
    np.testing.assert_allclose(adapter.dppo_token_loss(lp, old, adv, m, divergence=divergence, **kw)[0, 1], loss, atol=1e-6)
    g = adapter.dppo_token_loss_grad(lp, old, adv, m, np.ones_like(lp), divergence=divergence, **kw)
    np.testing.assert_allclose(g[0, 1], grad, atol=1e-6)


@pytest.mark.frameworks
def test_finding_dppo_weight_is_truncated_at_the_dual_clip_constant(adapter):
    """compute_policy_loss_dppo_tv truncates its weight at config.get("clip_ratio_c", 20.0) (core_algos.py:
    1427-1428), and ActorConfig has clip_ratio_c = 3.0 (actor.py:163, vanilla PPO's dual-clip constant), so
    the 20.0 is never used: the verl preset is ratio_cap=3.0. Minimal reproduction: p_old = 0.1, p = 0.4
    (r = 4, kept: p - p_old = 0.3 with A = -1), default config: verl's loss is 3 * log 0.4 = -2.749, the
    spec's (no cap) 4 * log 0.4 = -3.665."""
    lp, old, A, m = _one_row([math.log(4.0)], -1.0, logp=[math.log(0.4)])
    arrays = {"old_log_prob": old, "log_prob": lp, "advantages": np.array([[-1.0, -1.0]]), "response_mask": m.astype(np.float64)}
    out = adapter.call("policy_loss", arrays, {"name": "dppo_tv", "loss_agg_mode": "token-sum"})["outputs"]
    assert out["clip_ratio_c"] == 3.0
    assert float(out["loss"]) == pytest.approx(3.0 * math.log(0.4), rel=1e-9)
    assert oracle.dppo_token_loss(lp, old, A, m)[0, 1] == pytest.approx(4.0 * math.log(0.4))
    assert oracle.dppo_token_loss(lp, old, A, m, **preset_kwargs("verl", "dppo_token_loss"))[0, 1] == pytest.approx(3.0 * math.log(0.4))


@pytest.mark.frameworks
def test_dro_worked_values(adapter):
    """loss.dro.md's worked values through compute_policy_loss_dro with beta -> policy_loss.dro_beta."""
    for logp, old, A, beta, loss, grad in ((-1.0, -1.4, 1.0, 0.5, 1.04, -0.8), (-1.0, -1.4, -1.0, 0.5, -0.96, 1.2),
                                           (-2.5, -0.5, 0.0, 0.1, 0.2, -0.2), (-0.5, -0.5, 2.0, 1.0, 1.0, -2.0)):
        lp, o, adv, m = _one_row([logp - old], A, logp=[logp])
        np.testing.assert_allclose(adapter.dro_token_loss(lp, o, adv, m, beta=beta)[0, 1], loss, atol=1e-12)
        np.testing.assert_allclose(adapter.dro_token_loss_grad(lp, o, adv, m, np.ones_like(lp), beta=beta)[0, 1], grad, atol=1e-12)
    with pytest.raises(ValueError, match="dro_token_loss: beta"):
        adapter.dro_token_loss(lp, o, adv, m, beta=0.0)


@pytest.mark.frameworks
@pytest.mark.parametrize("function, kwargs", [
    ("dppo_token_loss", {}),  # ratio_cap=None: verl always truncates
    ("dppo_token_loss", {"divergence": "kl"}),
    ("dppo_token_loss", {"ratio_cap": 3.0, "log_ratio_clamp": 10.0}),
    ("sapo_token_loss", {"log_ratio_clamp": 10.0}),
])
def test_inexpressible_loss_keywords_are_not_implemented(adapter, function, kwargs):
    lp, old, A, m = _one_row([0.1, -0.2], 1.0)
    with pytest.raises(NotImplementedError):
        getattr(adapter, function)(lp, old, A, m, **kwargs)
    # the clamp verl applies is accepted under both names: None (canonical, the preset names it) and 20
    ok = {"ratio_cap": 3.0} if function == "dppo_token_loss" else {}
    np.testing.assert_array_equal(getattr(adapter, function)(lp, old, A, m, **ok),
                                  getattr(adapter, function)(lp, old, A, m, **ok, log_ratio_clamp=20.0))


def _clip_cov_call(adapter, b, draws, policy_loss=None):
    """verl's clip_cov on the float32 batch ``b`` with its torch.randperm decided by ``draws``: (keep, per-token loss)."""
    from conformance.frameworks.verl import checks as vc

    arrays = {**vc._policy_arrays(b), "clip_cov_draws": draws.astype(np.float32)}
    params = {"name": "clip_cov", "loss_agg_mode": "token-mean", "config": {}}
    if policy_loss:
        params["policy_loss"] = policy_loss
    out = adapter.call("policy_loss", arrays, params)["outputs"]
    return (np.asarray(out["clip_cov_keep"]) > 0.5) & b["mask"], np.where(b["mask"], out["per_token"], 0.0)


@pytest.mark.frameworks
@pytest.mark.parametrize("policy_loss, asked", [({}, {}), ({"clip_cov_ratio": 0.2, "clip_cov_lb": 0.2, "clip_cov_ub": 3.0},
                                                           {"fraction": 0.2, "cov_low": 0.2, "cov_high": 3.0})])
def test_clip_cov_is_ppo_times_the_mask_and_the_draws_decide(adapter, policy_loss, asked):
    """verl's Clip-Cov loss matrix is ppo_token_loss(dual_clip=None) * clip_cov_mask, the mask verl's
    corr; reversed draws cut other tokens in both (so the adapter's randperm really follows the draws,
    and the cut tokens carry a PPO loss that the mask removes)."""
    from conformance.frameworks.verl import checks as vc

    b = vc._covariance_batch(0, "clip_cov_mask", asked, False)
    m, A = b["mask"], vc.broadcast_advantages(b)
    cuts = []
    for draws in (b["draws"], 1.0 - b["draws"]):
        keep, per_token = _clip_cov_call(adapter, b, draws, policy_loss)
        expected = oracle.clip_cov_mask(b["logp"], b["old_logp"], A, m, draws, **asked)
        assert np.array_equal(keep, expected)
        ppo = oracle.ppo_token_loss(b["logp"], b["old_logp"], A, m)
        np.testing.assert_allclose(per_token, ppo * expected, rtol=1e-5, atol=1e-6)
        assert np.all(ppo[m & ~keep] != 0)  # the cut tokens had a loss
        cuts.append(m & ~keep)
    assert cuts[0].any() and not np.array_equal(cuts[0], cuts[1])


@pytest.mark.frameworks
def test_kl_cov_penalises_the_largest_covariances_not_the_largest_log_ratios(adapter):
    """On the kl_cov row's batch with SkyRL's fraction 0.2 (n = 4 of 22), the tokens of largest covariance
    are not those of largest |log-ratio| (the mutant kl_cov_selects_by_abs_logratio), and verl's matrix is
    kl_cov_token_loss's: the row tells the two apart."""
    import torch

    from conformance.frameworks.verl import checks as vc
    from conformance.mutants import by_name

    kw = {"fraction": 0.2, "coef": 1.0}
    b = vc._covariance_batch(0, "kl_cov_token_loss", kw, False)
    m = b["mask"]
    got = adapter.kl_cov_token_loss(b["logp"].astype(np.float32), b["old_logp"].astype(np.float32), b["advantages"].astype(np.float32), m, **kw)
    np.testing.assert_allclose(got, oracle.kl_cov_token_loss(b["logp"], b["old_logp"], b["advantages"], m, **kw), rtol=1e-5, atol=1e-6)
    mutant = by_name("kl_cov_selects_by_abs_logratio").replace["kl_cov_token_loss"]
    wrong = mutant(*(torch.tensor(b[k]) for k in ("logp", "old_logp", "advantages")), torch.tensor(m), **kw).numpy()
    assert not np.allclose(got, wrong, rtol=1e-5, atol=1e-6)


@pytest.mark.frameworks
def test_finding_clip_cov_and_kl_cov_nan_at_zero_advantage_with_an_overflowing_ratio(adapter):
    """verl 0.9.1's clip_cov and kl_cov compute -A * exp(logp - old_logp) with no log-ratio clamp
    (core_algos.py:1797-1801, :1889-1893): a valid token with A = 0 and a log-ratio of 100 (e^100 = inf in
    float32) gives 0 * inf = NaN, and the NaN reaches the loss and every gradient (torch.maximum keeps it in
    Clip-Cov, :1832). In the spec the ratio term there is 0 (0 * inf := 0): finite values (the token, selected
    by KL-Cov, carries only coef * |d| = 10); vanilla PPO, which clamps at +-20, gives 0."""
    f32 = np.float32
    lp, old = np.array([[-1.0, -2.0, -1.5]], f32), np.array([[-1.0, -102.0, -1.2]], f32)
    A, m = np.array([[0.0, 0.0, -1.0]], f32), np.array([[0.0, 1.0, 1.0]], f32)
    for name in ("clip_cov", "kl_cov", "vanilla"):
        arrays = {"log_prob": lp, "old_log_prob": old, "advantages": A, "response_mask": m}
        if name == "clip_cov":
            arrays["clip_cov_draws"] = np.zeros_like(lp)
        r = adapter.call("policy_loss", arrays, {"name": name, "loss_agg_mode": "token-mean", "config": {}},
                         wrt=["log_prob"], upstream={"loss": 1.0})
        assert np.isnan(float(r["outputs"]["loss"])) == (name != "vanilla"), name
    spec = oracle.kl_cov_token_loss(lp.astype(float), old.astype(float), A.astype(float), m > 0)
    assert np.isfinite(spec).all() and spec[0, 1] == 0.1 * 100.0


@pytest.mark.frameworks
def test_finding_gmpo_row_sum_epsilon_is_a_precision_finding(adapter):
    """The core gmpo_token_loss row is canonical, with a float64 precision finding (float32 class): verl's
    n_b + 1e-8 (core_algos.py:1984, :1987) is a relative 1e-8/n_b, printed with the adapter's note."""
    from conformance.runner.parts import golden_cases
    from conformance.records import BY_FUNCTION
    from conformance.runner.verdict import check_row
    from conformance.runner.rows import seeds_for

    record = BY_FUNCTION["gmpo_token_loss"]
    row = check_row(record, adapter, seeds=seeds_for("gmpo_token_loss", 0, 8), golden=golden_cases(record))
    assert row.status == "pass", row.message
    assert [(f["dtype"], f["meets"]) for f in row.precision_findings] == [("float64", "float32")], row.precision_findings


# ---------------------------------------------------------------------------------------------
# Spec v1.1 reward.overlong: DAPORewardManager (workers/reward_manager/dapo.py)
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_finding_dapo_overlong_has_no_floor(adapter):
    """min(-(L - (max_resp_len - len))/len * penalty_factor, 0) (dapo.py:121-127): max 8, len 4, factor 1: -1 at 8,
    then -1.25, -1.5, ... beyond (DAPO eq. 13, TRL and OpenRLHF stay at -1); float32 (an int64 length tensor / int)."""
    lengths = np.array([0, 4, 5, 8, 9, 12, 20])
    got = adapter.overlong_penalty(lengths, max_length=8, buffer=4)
    np.testing.assert_array_equal(got, [0.0, 0.0, -0.25, -1.0, -1.25, -2.0, -4.0])
    np.testing.assert_array_equal(got, oracle.overlong_penalty(lengths, max_length=8, buffer=4, beyond="linear"))
    assert oracle.overlong_penalty(lengths, max_length=8, buffer=4)[-1] == -1.0
    third = adapter.overlong_penalty(np.array([6]), max_length=8, buffer=3)[0]  # -1/3, rounded to float32
    assert third == np.float32(-1.0 / 3.0) and third != -1.0 / 3.0
    with pytest.raises(NotImplementedError, match="len > 0"):
        adapter.overlong_penalty(lengths, max_length=8, buffer=0)
