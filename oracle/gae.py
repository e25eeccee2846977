"""Generalized advantage estimation over the valid tokens of each row (spec id ``adv.gae``).

Only valid positions are steps of the trajectory: a masked position inside a row (a tool
observation, a prompt token) is skipped, and the next *valid* token's value bootstraps. The value
after a row's last valid token is 0 (the episode ends there).
"""

from __future__ import annotations

import numpy as np

from oracle.validation import check_mask, check_real, check_token_array, to_float64

__all__ = ["gae"]


def gae(token_rewards, values, mask, *, gamma=1.0, lam=1.0):
    """Generalized advantage estimate and returns, per valid token.

    Spec: adv.gae (v1)
    Equation (t_1 < … < t_n the valid positions of row b, walked backwards k = n … 1):
        δ_k = r_{t_k} + γ · V_{t_{k+1}} − V_{t_k},     V_{t_{n+1}} = 0
        A_k = δ_k + γ · λ · A_{k+1},                   A_{n+1} = 0
        returns_{t_k} = A_k + V_{t_k}
    Source: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
        Estimation", arXiv:1506.02438, eq. (16).
    Shapes: token_rewards [B, T], values [B, T], mask [B, T] -> (advantages, returns), [B, T] float64 each.
    Edge cases: masked positions are skipped (never read, whatever they hold) and are 0 in both
        outputs; a row with no valid token is all 0; γ, λ in [0, 1].
    """
    fn = "gae"
    mask = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, mask)
    V = check_token_array(fn, "values", values, mask)
    gamma = check_real(fn, "gamma", gamma, ge=0.0, le=1.0)
    lam = check_real(fn, "lam", lam, ge=0.0, le=1.0)
    r, V = to_float64(r), to_float64(V)
    B, T = mask.shape
    advantages = np.zeros((B, T), dtype=np.float64)
    returns = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        valid_t = [t for t in range(T) if mask[b, t]]
        V_next = 0.0  # V after the last valid token
        A_next = 0.0
        for t in reversed(valid_t):
            delta_t = r[b, t] + gamma * V_next - V[b, t]
            A_t = delta_t + gamma * lam * A_next
            advantages[b, t] = A_t
            returns[b, t] = A_t + V[b, t]
            V_next = V[b, t]
            A_next = A_t
    return advantages, returns
