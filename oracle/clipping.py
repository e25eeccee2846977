"""Clips and the clipped losses' branch rule, one number at a time (policy losses, KL clamps, value clip).

- ``clip(x, low, high)``: x limited to [low, high]; a bound that is None is absent.
- ``clip_symmetric(x, c)``: clip(x, −c, c), or x when c is None (an optional clamp).
- ``clip_passes_gradient(x, c)``: ∂clip(x, −c, c)/∂x = 1 inside the closed interval −c <= x <= c (on the
  boundary the gradient passes, like ``torch.clamp``), 0 strictly outside where the clip is active.
- ``max_ties_unclipped(unclipped, clipped)``: max(unclipped, clipped) and the branch it selects; a tie
  selects ``"unclipped"``, whose gradient is the one used.
"""

from __future__ import annotations

__all__ = ["clip", "clip_symmetric", "clip_passes_gradient", "max_ties_unclipped"]


def clip(x: float, low: float | None, high: float | None) -> float:
    """clip(x, low, high); a bound that is None is absent."""
    if low is not None and x < low:
        x = low
    if high is not None and x > high:
        x = high
    return x


def clip_symmetric(x: float, c: float | None) -> float:
    """clip(x, −c, c); x itself when c is None (no clamp)."""
    return x if c is None else clip(x, -c, c)


def clip_passes_gradient(x: float, c: float | None) -> bool:
    """Whether clip(x, −c, c) passes x's gradient: −c <= x <= c (the boundary included); always when c is None."""
    return c is None or -c <= x <= c


def max_ties_unclipped(unclipped: float, clipped: float) -> tuple[float, str]:
    """``(max(unclipped, clipped), branch)``: ``"clipped"`` only when it is strictly larger, else ``"unclipped"``."""
    if clipped > unclipped:
        return clipped, "clipped"
    return unclipped, "unclipped"
