"""Coefficient controllers (spec ids ``ctrl.kl``, ``ctrl.entropy``): one update of a loss coefficient,
as pure functions of the controller's state. Scalars in (Python numbers or 0-d tensors), a Python float
out; no gradient (the coefficients are constants of every loss)."""

from __future__ import annotations

import math
import numbers

import torch

from refimpl.validation import check_int, check_real

__all__ = ["kl_controller_update", "entropy_coef_update", "entropy_coef_applied"]


def kl_controller_update(kl_coef: float, current_kl: float, n_steps: int, *, target: float, horizon: float) -> float:
    """Spec: ctrl.kl. β·(1 + clip(KL/target − 1, ±0.2)·n_steps/horizon) (Ziegler et al. 2019)."""
    fn = "kl_controller_update"
    beta = check_real(fn, "kl_coef", kl_coef, ge=0.0)
    kl = check_real(fn, "current_kl", current_kl)
    n = check_int(fn, "n_steps", n_steps, ge=0)
    target = check_real(fn, "target", target, gt=0.0)
    horizon = check_real(fn, "horizon", horizon, gt=0.0)
    error = min(0.2, max(-0.2, kl / target - 1.0))
    return beta * (1.0 + error * n / horizon)


def _bounds(fn: str, coef_min: float, coef_max: float) -> tuple[float, float]:
    lo, hi = check_real(fn, "coef_min", coef_min), check_real(fn, "coef_max", coef_max)
    if hi < lo:
        raise ValueError(f"{fn}: coef_max: expected coef_max >= coef_min = {lo!r}, got {hi!r}")
    return lo, hi


def entropy_coef_update(coef: float, current_entropy: float, *, target: float = 0.2, delta: float = 0.005,
                        coef_min: float = 0.0, coef_max: float = 1.0) -> float:
    """Spec: ctrl.entropy. min(c + delta, coef_max) if H ≤ target else max(c − delta, coef_min)."""
    fn = "entropy_coef_update"
    c = check_real(fn, "coef", coef)
    H = check_real(fn, "current_entropy", current_entropy)
    target = check_real(fn, "target", target)
    delta = check_real(fn, "delta", delta, ge=0.0)
    lo, hi = _bounds(fn, coef_min, coef_max)
    return min(c + delta, hi) if H <= target else max(c - delta, lo)


def entropy_coef_applied(coef: float, last_entropy: float, *, target: float = 0.2) -> float:
    """Spec: ctrl.entropy. c if the previous step's entropy ≤ target, else 0 (+inf: nothing measured yet)."""
    fn = "entropy_coef_applied"
    c = check_real(fn, "coef", coef)
    value = last_entropy.item() if isinstance(last_entropy, torch.Tensor) and last_entropy.dim() == 0 else last_entropy
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: last_entropy: expected a real number, got {type(value).__name__} {value!r}")
    H_prev = float(value)
    if math.isnan(H_prev) or H_prev == -math.inf:
        raise ValueError(f"{fn}: last_entropy: expected a number or +inf (no measurement yet), got {H_prev!r}")
    target = check_real(fn, "target", target)
    return c if H_prev <= target else 0.0
