"""Entropy terms of the policy objective (spec ids ``entropy.top_mask``, ``loss.entropy``)."""

from __future__ import annotations

import math

import torch

from refimpl.aggregation import aggregate
from refimpl.masking import masked
from refimpl.validation import (
    check_finite,
    check_float,
    check_mask,
    check_real,
    check_same_device,
    check_token_array,
    compute_dtypes,
    errors_as,
)

__all__ = ["entropy_top_mask", "entropy_bonus"]


def _pooled(fn: str, value: object, like: torch.Tensor) -> torch.Tensor:
    """``pooled_entropy`` in float64 on ``like``'s device: a 1-D float tensor, or a list/tuple of floats
    (what an all_gather_object or a JSON file gives); finite."""
    if isinstance(value, (list, tuple)):
        try:
            probe = torch.tensor(value)  # its dtype and rank only (floats read at the default precision)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{fn}: pooled_entropy: expected a 1-D sequence of floats ({exc})") from None
        check_float(fn, "pooled_entropy", probe, 1, "[N] (the valid entropies of every part of the batch)")
        pool = torch.tensor(value, dtype=torch.float64, device=like.device)
    else:
        x = check_float(fn, "pooled_entropy", value, 1, "[N] (the valid entropies of every part of the batch)")
        check_same_device(fn, "pooled_entropy", x, like)
        pool = x.detach().to(torch.float64)
    check_finite(fn, ("pooled_entropy", pool, None, pool))
    return pool


def entropy_top_mask(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    *,
    rho: float = 1.0,
    pooled_entropy: torch.Tensor | list[float] | tuple[float, ...] | None = None,
) -> torch.Tensor:
    """Spec: entropy.top_mask. keep = mask ∧ H ≥ τ, τ = quantile(P, 1 − ρ) by linear interpolation, P the
    batch's valid entropies (``pooled_entropy``, else this call's). The two order statistics around
    p = (1 − ρ)(n − 1) come from ``kthvalue`` in float64 (every input float converts exactly; O(n), and no
    ``torch.quantile``, which refuses more than 2**24 elements)."""
    fn = "entropy_top_mask"
    m = check_mask(fn, mask)
    H = check_token_array(fn, "entropy", entropy, m)
    rho = check_real(fn, "rho", rho, ge=0.0, le=1.0)
    h = masked(H.detach(), m, torch.float64)
    check_finite(fn, ("entropy", H, m, h))
    pool = h[m] if pooled_entropy is None else _pooled(fn, pooled_entropy, h)
    n = pool.numel()
    if n == 0:  # an empty batch keeps nothing
        return torch.zeros_like(m)
    p = (1.0 - rho) * (n - 1)
    i = min(math.floor(p), n - 1)
    f = p - i
    low = torch.kthvalue(pool, i + 1).values
    tau = low if f == 0.0 else low + f * (torch.kthvalue(pool, i + 2).values - low)
    return m & (h >= tau)


def entropy_bonus(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropy_coef: float,
    mode: str,
    norm_length: float | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Spec: loss.entropy. −entropy_coef · aggregate(H, mask, mode, norm_length, num_tokens, num_seqs); the
    gradient (autograd) flows into ``entropy``. Half-precision entropies are aggregated in float32 and the
    result rounded once."""
    fn = "entropy_bonus"
    m = check_mask(fn, mask)
    H = check_token_array(fn, "entropy", entropy, m)
    c = check_real(fn, "entropy_coef", entropy_coef)
    out_dtype, cdt = compute_dtypes(H)
    check_finite(fn, ("entropy", H, m, masked(H.detach(), m, cdt)))
    with errors_as(fn):  # aggregate validates the rest; its errors name entropy_bonus
        agg = aggregate(H.to(cdt), m, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)
    return (-c * agg).to(out_dtype)
