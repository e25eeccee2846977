"""Per-token policy and value losses (spec ids ``loss.pg``, ``loss.ppo``, ``loss.gspo``, ``loss.cispo``,
``loss.value``).

Ties between a clipped and an unclipped branch go to the unclipped one: every ``max``/``min`` is a
``torch.where`` on ``>=``/``<=`` that keeps the unclipped branch on equality, so autograd takes its
gradient. Ratios are :func:`refimpl.masking.exp_zero_safe` of the log-ratio: an overflowing ratio is
``inf`` (the true value rounded, api.md "Numerical extremes"), and on an unselected branch or times a zero
advantage it passes an exact 0 gradient, never ``0·inf = NaN``.
"""

from __future__ import annotations

import torch

from refimpl.masking import capped_exp_arg, exp_zero_safe, masked, masked_advantages, masked_output
from refimpl.validation import (
    check_advantages,
    check_choice,
    check_clip_interval,
    check_finite,
    check_mask,
    check_optional_real,
    check_real,
    check_token_array,
    compute_dtypes,
)

__all__ = ["pg_token_loss", "ppo_token_loss", "gspo_token_loss", "cispo_token_loss", "value_token_loss"]


def _policy_inputs(fn: str, logp: object, old_logp: object | None, advantages: object, mask: object, *, with_old: bool = True):
    """Validated (mask, output dtype, masked logp, masked old_logp or None, masked [B, T] advantages).
    `with_old=False` (pg_token_loss): no old_logp argument; otherwise old_logp is required (None is a
    TypeError naming it, not a crash in the arithmetic)."""
    m = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, m)
    tensors = [logp]
    if with_old:
        old_logp = check_token_array(fn, "old_logp", old_logp, m)
        tensors.append(old_logp)
    adv = check_advantages(fn, advantages, m)
    out_dtype, cdt = compute_dtypes(*tensors, adv)
    lp = masked(logp, m, cdt)
    old = None if old_logp is None else masked(old_logp, m, cdt)
    A = masked_advantages(adv, m, cdt)
    items = [("logp", logp, m, lp)]
    if old is not None:
        items.append(("old_logp", old_logp, m, old))
    if adv.dim() == 2:  # a [B] advantage was checked everywhere by check_advantages
        items.append(("advantages", adv, m, A))
    check_finite(fn, *items)
    return m, out_dtype, lp, old, A


def _ppo_inputs(fn: str, logp: object, old_logp: object, advantages: object, mask: object, eps_low: object,
                eps_high: object, dual_clip: object, log_ratio_clamp: object):
    """``_policy_inputs`` and the PPO keywords, validated: (mask, output dtype, the log-ratio
    logp − old_logp clamped to ±log_ratio_clamp if set, masked advantages, eps_low, eps_high, dual_clip)."""
    m, out_dtype, lp, old, A = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    dual_clip = check_optional_real(fn, "dual_clip", dual_clip, gt=1.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    d = lp - old
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    return m, out_dtype, d, A, eps_low, eps_high, dual_clip


def _clipped_surrogate(ratio: torch.Tensor, A: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """max(−A·r, −A·clip(r, 1−eps_low, 1+eps_high)); a tie keeps the unclipped −A·r."""
    unclipped = -A * ratio
    clipped = -A * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return torch.where(unclipped >= clipped, unclipped, clipped)


def _ppo_surrogate(d: torch.Tensor, A: torch.Tensor, eps_low: float, eps_high: float, dual_clip: float | None) -> torch.Tensor:
    """PPO's token loss of the (masked, clamped) log-ratio ``d``: the clipped surrogate of r = e^d, then
    min(·, −c·A) for A < 0 with dual_clip c; ties to the unclipped branch, 0·inf := 0 (shared by
    ``ppo_token_loss`` and ``refimpl.offpolicy.decoupled_ppo_token_loss``)."""
    L = _clipped_surrogate(exp_zero_safe(d), A, eps_low, eps_high)
    if dual_clip is not None:
        cap = -dual_clip * A
        L = torch.where((A < 0) & (L > cap), cap, L)
    return L


def pg_token_loss(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Spec: loss.pg. L = −A·logp at valid tokens."""
    m, out_dtype, lp, _, A = _policy_inputs("pg_token_loss", logp, None, advantages, mask, with_old=False)
    return masked_output(-A * lp, m, out_dtype)


def ppo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Spec: loss.ppo. max(−A·r, −A·clip(r, 1−ε_l, 1+ε_h)), then min(·, −c·A) for A < 0 with dual_clip c; ties to the unclipped branch."""
    m, out_dtype, d, A, eps_low, eps_high, dual_clip = _ppo_inputs(
        "ppo_token_loss", logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, log_ratio_clamp
    )
    return masked_output(_ppo_surrogate(d, A, eps_low, eps_high, dual_clip), m, out_dtype)


def gspo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    form: str = "sequence",
) -> torch.Tensor:
    """Spec: loss.gspo. s_b = exp(masked mean of logp − old); every valid token carries max(−A·s, −A·clip(s)); "token_sg": value s_b, gradient s_b·[u=t]."""
    fn = "gspo_token_loss"
    m, out_dtype, lp, old, A = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    form = check_choice(fn, "form", form, ("sequence", "token_sg"))
    n = m.sum(dim=1, keepdim=True).clamp(min=1).to(lp.dtype)
    log_s = (lp - old).sum(dim=1, keepdim=True) / n  # masked mean: masked terms are exact zeros
    if form == "sequence":
        ratio = exp_zero_safe(log_s).expand(m.shape)
    else:  # logp − sg(logp) is exactly 0: value s_b, gradient s_b·[u = t]
        ratio = exp_zero_safe(lp - lp.detach() + log_s.detach())
    return masked_output(_clipped_surrogate(ratio, A, eps_low, eps_high), m, out_dtype)


def cispo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float | None = None,
    eps_high: float = 0.28,
    bound: str = "relative",
) -> torch.Tensor:
    """Spec: loss.cispo. L = −sg(clip(r, lo, hi))·A·logp, hi = 1+ε_h ("relative") or ε_h ("absolute"), lo = 1−ε_l or none."""
    fn = "cispo_token_loss"
    m, out_dtype, lp, old, A = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low = check_optional_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    bound = check_choice(fn, "bound", bound, ("relative", "absolute"))
    low = None if eps_low is None else 1.0 - eps_low
    high = 1.0 + eps_high if bound == "relative" else eps_high
    check_clip_interval(fn, low, high, bound)
    with torch.no_grad():
        weight = torch.exp(capped_exp_arg(lp - old)).clamp(min=low, max=high)
    return masked_output(-weight * A * lp, m, out_dtype)


def value_token_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip: float | None = None,
) -> torch.Tensor:
    """Spec: loss.value. ½·max((V−R)², (V_c−R)²), V_c = V_old + clip(V − V_old, ±clip); returns detached; ties to the unclipped term."""
    fn = "value_token_loss"
    m = check_mask(fn, mask)
    values = check_token_array(fn, "values", values, m)
    old_values = check_token_array(fn, "old_values", old_values, m)
    returns = check_token_array(fn, "returns", returns, m)
    clip = check_optional_real(fn, "clip", clip, gt=0.0)
    out_dtype, cdt = compute_dtypes(values, old_values, returns)
    V, V_old, R = masked(values, m, cdt), masked(old_values, m, cdt), masked(returns, m, cdt).detach()
    check_finite(fn, ("values", values, m, V), ("old_values", old_values, m, V_old), ("returns", returns, m, R))
    unclipped = (V - R).square()
    if clip is None:
        return masked_output(0.5 * unclipped, m, out_dtype)
    clipped = (V_old + (V - V_old).clamp(-clip, clip) - R).square()
    return masked_output(0.5 * torch.where(unclipped >= clipped, unclipped, clipped), m, out_dtype)
