"""Coefficient controllers (spec v1.1): one update of a loss coefficient from the statistic measured at
an optimizer step, as pure functions of the controller's state (``ctrl.kl``, ``ctrl.entropy``).

A trainer holds the coefficient between steps; each function takes the current coefficient and the
measurement and returns the next coefficient (or the one to apply). Scalars in, a float64 scalar out;
nothing here has a gradient (the coefficients are constants of every loss).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from oracle.validation import check_int, check_real

__all__ = ["kl_controller_update", "entropy_coef_update", "entropy_coef_applied"]

# Ziegler et al. 2019: the proportional error is clipped to +-0.2 (a constant in the paper and in every
# framework; not a keyword).
KL_ERROR_CLIP = 0.2


def kl_controller_update(kl_coef, current_kl, n_steps, *, target, horizon):
    """The adaptive KL controller of Ziegler et al. (2019): β after one update.

    Spec: ctrl.kl (v1), added by spec v1.1
    Equation:
        e     = clip(current_kl / target − 1, −0.2, 0.2)          (proportional error, clipped)
        β_new = β · (1 + e · n_steps / horizon)
    The KL is above its target: β grows by at most 0.2·n/H of itself; below: it shrinks as much.
    Source: Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences",
        arXiv:1909.08593 §2.2 (e_t = clip((KL − KL_target)/KL_target, −0.2, 0.2), β_{t+1} = β_t(1 + K_β·e_t),
        with K_β = n_steps/horizon in its released code); verl ``AdaptiveKLController``
        (trainer/ppo/core_algos.py), OpenRLHF ``AdaptiveKLController`` (trainer/ppo_utils/kl_controller.py).
    Shapes: scalars -> float64 scalar. ``n_steps``: samples (or steps) since the last update, an int >= 0.
    Edge cases: current_kl = target or n_steps = 0 leaves β unchanged; β = 0 stays 0; n_steps > 5·horizon
        with KL below target makes the factor negative (the formula is literal: no floor).
    """
    fn = "kl_controller_update"
    beta = check_real(fn, "kl_coef", kl_coef, ge=0.0)
    kl = check_real(fn, "current_kl", current_kl)
    n = check_int(fn, "n_steps", n_steps, ge=0)
    target = check_real(fn, "target", target, gt=0.0)
    horizon = check_real(fn, "horizon", horizon, gt=0.0)
    # e = clip(KL/target − 1, −0.2, 0.2)
    e = kl / target - 1.0
    e = min(max(e, -KL_ERROR_CLIP), KL_ERROR_CLIP)
    # β_new = β · (1 + e · n / H)
    return np.float64(beta * (1.0 + e * n / horizon))


def _check_entropy_state(fn, name, value):
    """A measured entropy: a real number, not NaN; +inf means "no measurement yet" (TRL's initial state)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: {name}: expected a real number, got {type(value).__name__} {value!r}")
    x = float(value)
    if math.isnan(x) or x == -math.inf:
        raise ValueError(f"{fn}: {name}: expected a number or +inf (no measurement yet), got {x!r}")
    return x


def _coef_bounds(fn, coef_min, coef_max):
    lo = check_real(fn, "coef_min", coef_min)
    hi = check_real(fn, "coef_max", coef_max)
    if lo > hi:
        raise ValueError(f"{fn}: coef_max: expected coef_max >= coef_min = {lo!r}, got {hi!r}")
    return lo, hi


def entropy_coef_update(coef, current_entropy, *, target=0.2, delta=0.005, coef_min=0.0, coef_max=1.0):
    """The adaptive entropy coefficient (Skywork-OR1): the coefficient after one optimizer step.

    Spec: ctrl.entropy (v1), added by spec v1.1
    Equation (H = the step's mean token entropy, measured over the tokens the bonus acts on):
        c_new = min(c + delta, coef_max)     if H ≤ target   (entropy too low: push it up)
              = max(c − delta, coef_min)     if H > target
    The clamp is one-sided: a coefficient outside [coef_min, coef_max] moves back by one step of
    delta in the direction the rule takes it, it is not projected.
    Source: He et al. 2025, Skywork Open Reasoner 1 technical report, arXiv:2505.22312 (adaptive
        entropy control); TRL ``use_adaptive_entropy`` (grpo_config.py ``entropy_coef_min/max/delta``,
        ``entropy_target``; the update in GRPOTrainer._compute_loss).
    Shapes: scalars -> float64 scalar.
    Edge cases: H = target counts as too low (≤); delta = 0 leaves c unchanged unless it is clamped.
    """
    fn = "entropy_coef_update"
    c = check_real(fn, "coef", coef)
    H = check_real(fn, "current_entropy", current_entropy)
    target = check_real(fn, "target", target)
    delta = check_real(fn, "delta", delta, ge=0.0)
    lo, hi = _coef_bounds(fn, coef_min, coef_max)
    if H <= target:
        return np.float64(min(c + delta, hi))
    return np.float64(max(c - delta, lo))


def entropy_coef_applied(coef, last_entropy, *, target=0.2):
    """The entropy coefficient a step applies under adaptive control: the bonus only acts at low entropy.

    Spec: ctrl.entropy (v1), added by spec v1.1
    Equation (H_prev = the entropy measured at the end of the previous optimizer step):
        c_applied = c     if H_prev ≤ target
                  = 0     otherwise
    Every micro-batch of a step applies the same c_applied (the previous step's measurement), and the
    update (entropy_coef_update) takes effect at the next step.
    Source: Skywork-OR1 arXiv:2505.22312; TRL GRPOTrainer._compute_loss (``apply_coef = entropy_coef if
        _last_world_entropy <= entropy_target else 0.0``; ``_last_world_entropy`` starts at +inf).
    Shapes: scalars -> float64 scalar.
    Edge cases: H_prev = +inf (the first step: nothing measured yet) applies 0; H_prev = target applies c.
    """
    fn = "entropy_coef_applied"
    c = check_real(fn, "coef", coef)
    H_prev = _check_entropy_state(fn, "last_entropy", last_entropy)
    target = check_real(fn, "target", target)
    if H_prev <= target:
        return np.float64(c)
    return np.float64(0.0)
