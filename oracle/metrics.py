"""Training metrics with a spec (``metric.clip``): what a trainer logs about the PPO clip.

A logged metric is not part of the objective, but a wrong one hides a broken run (bug-catalogue
class 21: the clip fraction ignored the advantage's sign in TRL; verl's lower clip fraction was always
0). The clip fraction of a batch is ``aggregate(ppo_clipped_mask(...), mask, mode="token_mean")``.
"""

from __future__ import annotations

import numpy as np

from oracle.policy_losses import _advantage_at, _policy_inputs, _ppo_params, _ppo_token

__all__ = ["ppo_clipped_mask"]


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
