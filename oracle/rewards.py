"""Per-token RLHF rewards: a KL penalty on every token plus the sequence score on the last one (``reward.rlhf``)."""

from __future__ import annotations

import numpy as np

from oracle.kl import KL_ESTIMATORS, kl_estimate
from oracle.validation import (
    check_choice,
    check_mask,
    check_real,
    check_sequence_array,
    check_token_array,
    to_float64,
)

__all__ = ["rlhf_token_rewards"]


def rlhf_token_rewards(scores, logp, ref_logp, mask, *, kl_coef, estimator="k1"):
    """Token-level rewards for PPO-style RLHF.

    Spec: reward.rlhf (v1)
    Equation (row b with valid positions t_1 < … < t_n, β = kl_coef):
        R[b, t]    = −β · KL_t          at valid t (KL_t as ``kl_penalty``: k1/k2/k3 of logp − ref_logp)
        R[b, t_n] += scores[b]          the score sits on the row's last valid token
        R[b, t]    = 0                  at masked t
    Source: Ziegler et al. 2019, arXiv:1909.08593 (R(x, y) = r(x, y) − β log π/π_ref);
        Ouyang et al. 2022, arXiv:2203.02155 eq. (2); per-token placement as in
        "The N+ implementation details of RLHF with PPO", arXiv:2403.17031.
    Shapes: scores [B], logp [B, T], ref_logp [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: the last valid token is found from ``mask`` (positions), so left- and right-padded
        rows both get the score on their last real token; a row with no valid token is all 0
        (its score is dropped); scores must be finite everywhere.
    """
    fn = "rlhf_token_rewards"
    mask = check_mask(fn, mask)
    scores = check_sequence_array(fn, "scores", scores, batch=mask.shape[0])
    logp = check_token_array(fn, "logp", logp, mask)
    ref_logp = check_token_array(fn, "ref_logp", ref_logp, mask)
    beta = check_real(fn, "kl_coef", kl_coef)
    estimator = check_choice(fn, "estimator", estimator, KL_ESTIMATORS)
    scores, logp, ref_logp = to_float64(scores), to_float64(logp), to_float64(ref_logp)
    B, T = mask.shape
    R = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        valid_t = [t for t in range(T) if mask[b, t]]
        for t in valid_t:
            KL_t = kl_estimate(logp[b, t], ref_logp[b, t], estimator, None, None)
            R[b, t] = 0.0 if beta == 0.0 else -beta * KL_t  # 0 · inf := 0 (an overflowed k3)
        if valid_t:
            t_n = valid_t[-1]
            R[b, t_n] += scores[b]
    return R
