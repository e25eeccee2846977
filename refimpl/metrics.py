"""Training metrics with a spec (``metric.clip``), vectorized."""

from __future__ import annotations

import torch

from refimpl.policy_losses import _ppo_inputs
from refimpl.masking import capped_exp_arg, masked_output

__all__ = ["ppo_clipped_mask"]


@torch.no_grad()
def ppo_clipped_mask(
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
    """Spec: metric.clip. 1.0 where ppo_token_loss takes a clipped branch (A>0, r>1+ε_h; A<0, r<1−ε_l; dual: A<0, r>c), else 0; no gradient."""
    m, out_dtype, d, A, eps_low, eps_high, dual_clip = _ppo_inputs(
        "ppo_clipped_mask", logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, log_ratio_clamp
    )
    ratio = torch.exp(capped_exp_arg(d))
    # the same branch selection as ppo_token_loss (strict: ties stay unclipped)
    clipped = ((A > 0) & (ratio > 1.0 + eps_high)) | ((A < 0) & (ratio < 1.0 - eps_low))
    if dual_clip is not None:
        clipped |= (A < 0) & (ratio > dual_clip)
    return masked_output(clipped.to(d.dtype), m, out_dtype)
