"""Masked-input handling shared by the per-token functions.

Masked positions must never reach a valid output or a gradient, whatever they hold (NaN, ±inf,
1e30). Inputs are therefore *selected*, never multiplied, by the mask (``x * mask`` turns a masked
NaN into NaN and a masked inf into NaN): ``torch.where(mask, x, 0)`` gives exact zeros there and
routes an exact 0 gradient back. Outputs are selected the same way.
"""

from __future__ import annotations

import math

import torch

__all__ = ["masked", "masked_advantages", "masked_output", "capped_exp_arg"]


def masked(x: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype`` with exact zeros at masked positions."""
    return torch.where(mask, x.to(dtype), 0.0)


def masked_advantages(advantages: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Advantages [B] (broadcast over the row) or [B, T] as a [B, T] tensor, zero at masked positions."""
    a = advantages.to(dtype)
    if a.dim() == 1:
        a = a.unsqueeze(1).expand(mask.shape)
    return torch.where(mask, a, 0.0)


def masked_output(y: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The output: ``y`` at valid positions, exact 0 elsewhere, in the output ``dtype``."""
    return torch.where(mask, y, 0.0).to(dtype)


def capped_exp_arg(x: torch.Tensor) -> torch.Tensor:
    """``min(x, log(float max))``: ``exp`` of it equals ``exp(x)`` wherever that is finite and stays
    finite where it would overflow, so an overflowing ratio on a branch that is not selected (or
    multiplied by a zero advantage) never turns a gradient into ``0 · inf = NaN``."""
    return x.clamp(max=math.log(torch.finfo(x.dtype).max))
