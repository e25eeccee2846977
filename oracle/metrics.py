"""Training metrics with a spec (``metric.clip``, ``metric.mismatch``): what a trainer logs about the PPO clip
and about the gap between the inference engine's log-probs and its own.

A logged metric is not part of the objective, but a wrong one hides a broken run (bug-catalogue
class 21: the clip fraction ignored the advantage's sign in TRL; verl's lower clip fraction was always
0). The clip fraction of a batch is ``aggregate(ppo_clipped_mask(...), mask, mode="token_mean")``. The mismatch
metrics (verl's ``rollout_corr/*``, NeMo-RL's ``token_mult_prob_error``, slime's
``train_rollout_logprob_abs_diff``) are the numbers a user reads to decide whether engine and trainer agree.
"""

from __future__ import annotations

import math

import numpy as np

from oracle.policy_losses import _advantage_at, _policy_inputs, _ppo_params, _ppo_token
from oracle.validation import check_choice, check_mask, check_optional_real, check_token_array, to_float64

__all__ = ["ppo_clipped_mask", "mismatch_metric", "sequence_mismatch_metric"]

TOKEN_METRICS = ("kl", "k3_kl", "chi2_token", "token_mult_prob_error", "logprob_abs_diff")
SEQUENCE_METRICS = ("log_ppl_diff", "log_ppl_abs_diff", "ppl_ratio", "chi2_seq")
MISMATCH_AGGS = ("token_mean", "seq_mean_token_mean")


def ppo_clipped_mask(logp, old_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None,
                     log_ratio_clamp=None):
    """Indicator of the tokens whose PPO loss is on a clipped branch (zero gradient because of the clip).

    Spec: metric.clip (v1)
    Equation (valid t; d_t = logp_t − old_logp_t clipped to ±log_ratio_clamp if set, r_t = exp(d_t)),
    with the branch rule of loss.ppo (ties go to the unclipped branch):
        clipped_t = 1  if  −A_t · clip(r_t, 1 − ε_low, 1 + ε_high) > −A_t · r_t
                           (A_t > 0 and r_t > 1 + ε_high, or A_t < 0 and r_t < 1 − ε_low)
        clipped_t = 1  if  dual_clip = c, A_t < 0 and −c · A_t < max(−A_t·r_t, −A_t·clip(r_t, …))
                           (the dual clip's cap is selected: r_t > c)
        clipped_t = 0  otherwise (A_t = 0 is never clipped); 0 at masked t.
    Source: PPO arXiv:1707.06347 eq. (7) (the branches); the sign-aware clip fraction of TRL
        5b586da / trl#3175 and verl ``pg_clipfrac`` + ``pg_clipfrac_lower`` (verl#972).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64 of 0/1.
    Edge cases: on-policy (r = 1) gives 0 everywhere (ε >= 0); masked positions never read.
    """
    fn = "ppo_clipped_mask"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _ppo_params(fn, eps_low, eps_high, dual_clip, log_ratio_clamp)
    B, T = mask.shape
    clipped = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            # the branch loss.ppo selects for this token: "unclipped", "clipped" or "dual"
            _, branch, _, _ = _ppo_token(logp[b, t], old_logp[b, t], _advantage_at(A, b, t), *params)
            clipped[b, t] = 0.0 if branch == "unclipped" else 1.0
    return clipped


def _clip(x, c):
    return x if c is None else min(max(x, -c), c)


def _mismatch_inputs(fn, old_logp, rollout_logp, mask, log_ratio_clamp):
    mask = check_mask(fn, mask)
    old_logp = to_float64(check_token_array(fn, "old_logp", old_logp, mask))
    rollout_logp = to_float64(check_token_array(fn, "rollout_logp", rollout_logp, mask))
    c = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    return old_logp, rollout_logp, mask, c


def _row_deltas(old_logp, rollout_logp, mask, b):
    return [old_logp[b, t] - rollout_logp[b, t] for t in range(mask.shape[1]) if mask[b, t]]


def mismatch_metric(old_logp, rollout_logp, mask, *, metric="kl", agg="token_mean", log_ratio_clamp=None):
    """A token-level measure of how far the trainer's log-probs are from the inference engine's on the sampled
    tokens: a statistic per valid token, aggregated over the batch.

    Spec: metric.mismatch (v1), added in v1.2
    Equation (δ_{b,t} = old_logp − rollout_logp = log ρ at a valid token, ρ = π_train / π_rollout; n_b the valid
    tokens of row b; R the rows with n_b ≥ 1; c = log_ratio_clamp, clip(x) = min(max(x, −c), c) or x):
        "kl"                      s = −δ                 (k1 of KL(π_rollout ‖ π_train), tokens from π_rollout)
        "k3_kl"                   s = e^δ − δ − 1        (k3 of the same KL)
        "chi2_token"              s = e^{2·clip(δ)}, and the metric is agg(s) − 1   (χ² = E[ρ²] − 1)
        "token_mult_prob_error"   s = e^{|δ|}            (NeMo-RL)
        "logprob_abs_diff"        s = |δ|                (slime, SkyRL)
        agg = "token_mean":           Σ_b Σ_t m·s / Σ_b n_b
        agg = "seq_mean_token_mean":  (1/|R|) Σ_{b∈R} Σ_t m·s / n_b
        A batch without a valid token gives 0.
    Source: verl 0.9.1 ``trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics`` (:904-1010, logged as
        ``rollout_corr/<metric>``; SAFETY_BOUND = 20 on the χ² exponent, :75); NeMo-RL
        ``nemo_rl/algorithms/loss_functions.py`` ClippedPGLossFn (``token_mult_prob_error``); slime
        ``slime/backends/megatron_utils/loss.py`` (``train_rollout_logprob_abs_diff``, a per-sample mean averaged
        over samples: seq_mean_token_mean); the χ² reading of the IS variance: Liu, Li et al. 2025, "When Speed
        Kills Stability" (richardli.xyz/rl-collapse).
    Shapes: old_logp, rollout_logp, mask [B, T] -> a float64 scalar, a constant (no gradient).
    Edge cases: equal log-probs give 0 (1 for token_mult_prob_error); rows without valid tokens are left out of
        the seq_mean_token_mean; e^x that overflows float64 is inf.
    """
    fn = "mismatch_metric"
    old_logp, rollout_logp, mask, c = _mismatch_inputs(fn, old_logp, rollout_logp, mask, log_ratio_clamp)
    metric = check_choice(fn, "metric", metric, TOKEN_METRICS)
    agg = check_choice(fn, "agg", agg, MISMATCH_AGGS)
    row_means, token_sum, token_count = [], 0.0, 0
    for b in range(mask.shape[0]):
        deltas = _row_deltas(old_logp, rollout_logp, mask, b)
        if not deltas:
            continue
        s = []
        for d in deltas:
            if metric == "kl":
                s.append(-d)
            elif metric == "k3_kl":
                s.append(_exp(d) - d - 1.0)
            elif metric == "chi2_token":
                s.append(_exp(2.0 * _clip(d, c)))
            elif metric == "token_mult_prob_error":
                s.append(_exp(abs(d)))
            else:  # logprob_abs_diff
                s.append(abs(d))
        token_sum += sum(s)
        token_count += len(s)
        row_means.append(sum(s) / len(s))
    if not row_means:
        return 0.0
    value = token_sum / token_count if agg == "token_mean" else sum(row_means) / len(row_means)
    return value - 1.0 if metric == "chi2_token" else value


def sequence_mismatch_metric(old_logp, rollout_logp, mask, *, metric="log_ppl_diff", log_ratio_clamp=None):
    """A sequence-level measure of the trainer-engine gap: one value per sequence, averaged over the sequences.

    Spec: metric.mismatch (v1), added in v1.2, the sequence metrics
    Equation (δ, n_b, R, clip as in `mismatch_metric`; Δ_b = −(1/n_b) Σ_t m·δ = log PPL_train − log PPL_rollout):
        "log_ppl_diff"       (1/|R|) Σ_{b∈R} Δ_b
        "log_ppl_abs_diff"   (1/|R|) Σ_{b∈R} |Δ_b|
        "ppl_ratio"          (1/|R|) Σ_{b∈R} e^{Δ_b}                    (PPL_train / PPL_rollout)
        "chi2_seq"           (1/|R|) Σ_{b∈R} e^{2·clip(Σ_t m·δ)} − 1   (E[(Π_t ρ_t)²] − 1)
        A batch without a valid token gives 0.
    Source: verl 0.9.1 ``trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics`` (:947-1008).
    Shapes: old_logp, rollout_logp, mask [B, T] -> a float64 scalar, a constant (no gradient).
    Edge cases: equal log-probs give 0 (1 for ppl_ratio); rows without valid tokens are left out of the mean.
    """
    fn = "sequence_mismatch_metric"
    old_logp, rollout_logp, mask, c = _mismatch_inputs(fn, old_logp, rollout_logp, mask, log_ratio_clamp)
    metric = check_choice(fn, "metric", metric, SEQUENCE_METRICS)
    values = []
    for b in range(mask.shape[0]):
        deltas = _row_deltas(old_logp, rollout_logp, mask, b)
        if not deltas:
            continue
        total = sum(deltas)
        delta_b = -total / len(deltas)
        if metric == "log_ppl_diff":
            values.append(delta_b)
        elif metric == "log_ppl_abs_diff":
            values.append(abs(delta_b))
        elif metric == "ppl_ratio":
            values.append(_exp(delta_b))
        else:  # chi2_seq
            values.append(_exp(2.0 * _clip(total, c)))
    if not values:
        return 0.0
    value = sum(values) / len(values)
    return value - 1.0 if metric == "chi2_seq" else value


def _exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf
