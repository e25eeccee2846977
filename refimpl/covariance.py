"""Covariance-selected tokens (spec v1.1: ``select.clip_cov``, ``loss.kl_cov``).

Both rank the valid tokens of the batch by ``cov = (A − Ā)·(logp − l̄)`` (means over every valid
token of the batch). The covariance and the ranking are computed in float64 from the inputs as given
(exact for float32 and bfloat16 inputs, [B, T] only: cheap), under ``torch.no_grad`` (the selection
is a constant of the loss). A ranking is one stable sort of the eligible tokens in row-major order, so
equal keys keep that order (the spec's tie rule: the earlier token wins); nothing loops over rows or
tokens.
"""

from __future__ import annotations

import math

import torch

from refimpl.policy_losses import _SAFE_LOG_F32, _constant_policy_inputs
from refimpl.masking import exp_zero_safe, masked, masked_output
from refimpl.validation import check_finite, check_real, check_token_array

__all__ = ["clip_cov_mask", "kl_cov_token_loss"]


def _count(fraction: float, n_valid: int) -> int:
    """n = max(1, ⌊fraction·N⌋), the product one float64 multiplication (as Python computes it)."""
    return max(1, math.floor(fraction * n_valid))


def _covariance(lp: torch.Tensor, A: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """[B, T] float64 (A − Ā)·(logp − l̄), the means over the valid tokens (masked inputs are exact 0)."""
    n = m.sum().to(torch.float64)
    lp64, A64 = lp.detach().double(), A.double()
    return torch.where(m, (A64 - A64.sum() / n) * (lp64 - lp64.sum() / n), 0.0)


def _first(eligible: torch.Tensor, key: torch.Tensor, n: int) -> torch.Tensor:
    """[B, T] bool: the ``n`` eligible positions of smallest ``key`` (all if fewer); equal keys in
    row-major order (a stable sort of the eligible positions, which ``nonzero`` lists in that order)."""
    flat = eligible.flatten().nonzero().squeeze(1)
    order = torch.sort(key.flatten()[flat], stable=True).indices[:n]
    chosen = torch.zeros(eligible.numel(), dtype=torch.bool, device=eligible.device)
    chosen[flat[order]] = True
    return chosen.view(eligible.shape)


def clip_cov_mask(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    draws: torch.Tensor,
    *,
    fraction: float = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> torch.Tensor:
    """Spec: select.clip_cov. keep = mask minus the n = max(1, ⌊fraction·N⌋) candidates of smallest draw; a
    candidate is a valid token off PPO's clipped branch (A > 0 and r > 1 + ε_h, or A < 0 and r < 1 − ε_l)
    with cov_low < cov < cov_high. Returns a bool [B, T] (a constant: no gradient)."""
    fn = "clip_cov_mask"
    m, _, _, lp, old, A = _constant_policy_inputs(fn, logp, old_logp, advantages, mask)
    draws = check_token_array(fn, "draws", draws, m)
    u = masked(draws, m, torch.float64)
    check_finite(fn, ("draws", draws, m, u))
    fraction = check_real(fn, "fraction", fraction, gt=0.0, le=1.0)
    cov_low = check_real(fn, "cov_low", cov_low)
    cov_high = check_real(fn, "cov_high", cov_high)
    if not cov_low < cov_high:
        raise ValueError(f"{fn}: cov_high: expected a number > cov_low = {cov_low!r}, got {cov_high!r}")
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    n_valid = int(m.sum())
    if n_valid == 0:
        return m.clone()
    with torch.no_grad():
        cov = _covariance(lp, A, m)
        r = torch.exp(lp.detach().double() - old.double())  # inf on overflow: A > 0 makes it clipped
        clipped = ((A > 0) & (r > 1.0 + eps_high)) | ((A < 0) & (r < 1.0 - eps_low))
        candidates = m & ~clipped & (cov > cov_low) & (cov < cov_high)
        cut = _first(candidates, u, _count(fraction, n_valid))
    return m & ~cut


def kl_cov_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    fraction: float = 2e-4,
    coef: float = 0.1,
) -> torch.Tensor:
    """Spec: loss.kl_cov. L = −A·r + coef·|d|·[selected], r = e^d, d = logp − old_logp, selected = the
    n = max(1, ⌊fraction·N⌋) valid tokens of largest cov (a constant); gradient −A·r + coef·sign(d)·[selected]
    with sign(0) = 0; 0·inf := 0."""
    fn = "kl_cov_token_loss"
    m, out_dtype, cdt, lp, old, A = _constant_policy_inputs(fn, logp, old_logp, advantages, mask)
    fraction = check_real(fn, "fraction", fraction, gt=0.0, le=1.0)
    coef = check_real(fn, "coef", coef, ge=0.0)
    d = lp - old
    if cdt == torch.float32 and bool((m & (A != 0) & (d.detach().abs() > _SAFE_LOG_F32)).any()):
        # A·e^d can be in range where e^d alone over- or underflows float32: computed in float64, rounded once
        return kl_cov_token_loss(logp.double(), old_logp.double(), advantages.double(), m, fraction=fraction,
                                 coef=coef).to(out_dtype)
    n_valid = int(m.sum())
    with torch.no_grad():  # the selection is a constant; the largest covariances first: the smallest −cov
        selected = _first(m, -_covariance(lp, A, m), _count(fraction, n_valid)) if n_valid else torch.zeros_like(m)
    ratio_loss = torch.where(A == 0, 0.0, -A * exp_zero_safe(d))  # 0·inf := 0, value and gradient
    penalty = torch.where(selected, coef * d.abs(), 0.0)  # torch.abs: gradient sign(d), 0 at d = 0
    return masked_output(ratio_loss + penalty, m, out_dtype)
