"""Masked-input handling shared by the per-token functions.

Masked positions must never reach a valid output or a gradient, whatever they hold (NaN, ±inf,
1e30). Inputs are therefore *selected*, never multiplied, by the mask (``x * mask`` turns a masked
NaN into NaN and a masked inf into NaN): ``torch.where(mask, x, 0)`` gives exact zeros there and
routes an exact 0 gradient back. Outputs are selected the same way.
"""

from __future__ import annotations

import math

import torch

__all__ = ["masked", "masked_advantages", "masked_output", "capped_exp_arg", "exp_zero_safe", "expm1_zero_safe"]


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


class _ExpZeroSafe(torch.autograd.Function):
    """``exp(x)``, whose backward is exactly 0 where the incoming gradient is 0 (0·inf := 0)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return torch.where(g == 0, 0.0, g * y)


class _Expm1ZeroSafe(torch.autograd.Function):
    """``expm1(x)``, whose backward is exactly 0 where the incoming gradient is 0 (0·inf := 0)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.expm1(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return torch.where(g == 0, 0.0, g * torch.exp(x))


def exp_zero_safe(x: torch.Tensor) -> torch.Tensor:
    """``exp(x)`` rounded as IEEE rounds it (``inf`` where it exceeds the dtype: spec api.md "Numerical
    extremes"), with a gradient that is ``g·exp(x)`` (``±inf`` where that overflows) except exactly 0
    where ``g`` is 0: an overflowing ratio on an unselected branch, or times a zero advantage, never
    turns a gradient into ``0·inf = NaN``, and a selected one gives the correctly rounded ``±inf``."""
    return _ExpZeroSafe.apply(x)


def expm1_zero_safe(x: torch.Tensor) -> torch.Tensor:
    """``expm1(x)`` with the gradient rule of :func:`exp_zero_safe`."""
    return _Expm1ZeroSafe.apply(x)
