"""Masked whitening over the valid positions of the batch (spec id ``adv.whiten``).

The mean is taken about the batch's first valid value, ``μ = x₀ + mean(x − x₀)``, as in
:mod:`refimpl.advantages`: all-equal values give exactly 0, and large offsets lose no precision."""

from __future__ import annotations

import torch

from refimpl.advantages import _safe_divide, _safe_sqrt, _var
from refimpl.masking import masked, masked_output
from refimpl.validation import check_bool, check_finite, check_int, check_mask, check_real, check_token_array, compute_dtypes

__all__ = ["whiten"]


@torch.no_grad()
def whiten(
    x: torch.Tensor,
    mask: torch.Tensor,
    *,
    shift_mean: bool = True,
    std_ddof: int = 1,
    eps: float = 1e-8,
) -> torch.Tensor:
    """Spec: adv.whiten. (x − μ)/sqrt(var + eps) (+ μ if not shift_mean) over all valid positions of the batch; stats about a valid element."""
    fn = "whiten"
    m = check_mask(fn, mask)
    x = check_token_array(fn, "x", x, m)
    shift_mean = check_bool(fn, "shift_mean", shift_mean)
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    out_dtype, cdt = compute_dtypes(x)
    xs = masked(x, m, cdt)
    check_finite(fn, ("x", x, m, xs))
    n = int(m.sum())
    if n == 0:
        return torch.zeros_like(x)
    ref = xs.reshape(-1)[m.reshape(-1).nonzero()[0]].detach()  # the first valid value
    shifted = torch.where(m, xs - ref, 0.0)
    mean_shifted = shifted.sum() / n
    centered = torch.where(m, shifted - mean_shifted, 0.0)
    out = _safe_divide(centered, _safe_sqrt(_var(centered, n, std_ddof) + eps))
    if not shift_mean:
        out = out + (ref + mean_shifted)
    return masked_output(out, m, out_dtype)
