"""The per-token value loss (spec id ``loss.value``): the squared error to the returns, optionally
clipped around the old values (PPO's value clip). Ties go to the unclipped term; the returns are constants."""

from __future__ import annotations

import torch

from refimpl.masking import masked, masked_output
from refimpl.validation import check_finite, check_mask, check_optional_real, check_token_array, compute_dtypes

__all__ = ["value_token_loss"]


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
