"""Per-token critic loss with optional value clipping, and its gradient w.r.t. ``values`` (``loss.value``)."""

from __future__ import annotations

import numpy as np

from oracle.clipping import clip_passes_gradient, clip_symmetric, max_ties_unclipped
from oracle.validation import check_mask, check_optional_real, check_token_array, check_token_upstream, to_float64

__all__ = ["value_token_loss", "value_token_loss_grad"]


def _inputs(fn, values, old_values, returns, mask, clip):
    mask = check_mask(fn, mask)
    V = check_token_array(fn, "values", values, mask)
    V_old = check_token_array(fn, "old_values", old_values, mask)
    R = check_token_array(fn, "returns", returns, mask)
    clip = check_optional_real(fn, "clip", clip, gt=0.0)
    return to_float64(V), to_float64(V_old), to_float64(R), mask, clip


def _value_token(V_t, V_old_t, R_t, clip):
    """``(L_t, branch)`` with branch ``"unclipped"`` or ``"clipped"`` (ties -> unclipped)."""
    unclipped = 0.5 * (V_t - R_t) ** 2
    if clip is None:
        return unclipped, "unclipped"
    # V_c = V_old + clip(V − V_old, −ε, ε)
    V_c = V_old_t + clip_symmetric(V_t - V_old_t, clip)
    clipped = 0.5 * (V_c - R_t) ** 2
    return max_ties_unclipped(unclipped, clipped)


def value_token_loss(values, old_values, returns, mask, *, clip=None):
    """Squared-error critic loss with the PPO value clip.

    Spec: loss.value (v1)
    Equation (valid t, ε = clip):
        V_c,t = old_values_t + clip(values_t − old_values_t, −ε, ε)
        L_t   = ½ · max( (V_t − R_t)², (V_c,t − R_t)² )       (clip=None: ½ (V_t − R_t)²)
    Source: PPO arXiv:1707.06347 eq. (9) (L^VF = (V − V^targ)²); value clipping as in OpenAI baselines
        PPO2 and "The 37 implementation details of PPO" (2022); the ½ factor as in TRL/verl/OpenRLHF.
    Shapes: values, old_values, returns, mask [B, T] -> [B, T] float64.
    Edge cases: returns are a constant target; ties go to the unclipped branch; clip > 0; masked
        positions exactly 0 and never read.
    """
    fn = "value_token_loss"
    V, V_old, R, mask, clip = _inputs(fn, values, old_values, returns, mask, clip)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            L_t, _ = _value_token(V[b, t], V_old[b, t], R[b, t], clip)
            loss[b, t] = L_t
    return loss


def value_token_loss_grad(values, old_values, returns, mask, upstream, *, clip=None):
    """Vector-Jacobian product of :func:`value_token_loss`: dL/d values [B, T].

    Spec: loss.value (v1), gradient (old_values and returns are constants).
    Derivative:
        unclipped branch selected: ∂L_t/∂V_t = V_t − R_t
        clipped branch selected:   ∂L_t/∂V_t = (V_c,t − R_t) · ∂V_c,t/∂V_t = 0
                                   (strict selection implies |V_t − V_old,t| > ε, where V_c is constant)
        dL/dV_t = u_t · ∂L_t/∂V_t
    """
    fn = "value_token_loss_grad"
    V, V_old, R, mask, clip = _inputs(fn, values, old_values, returns, mask, clip)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            _, branch = _value_token(V[b, t], V_old[b, t], R[b, t], clip)
            if branch == "unclipped":
                grad[b, t] = u[b, t] * (V[b, t] - R[b, t])
            else:
                V_c = V_old[b, t] + clip_symmetric(V[b, t] - V_old[b, t], clip)
                dVc_dV = 1.0 if clip_passes_gradient(V[b, t] - V_old[b, t], clip) else 0.0
                grad[b, t] = u[b, t] * (V_c - R[b, t]) * dVc_dV
    return grad
