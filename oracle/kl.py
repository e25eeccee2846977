"""Per-token KL estimators k1, k2, k3 between the policy and the reference (spec id ``kl.estimator``).

With d = logp − ref_logp = log π(x)/π_ref(x) at the sampled token x ~ π:

    k1 = d                      unbiased for KL(π‖π_ref), high variance, can be negative
    k2 = d² / 2                 biased, low variance, >= 0
    k3 = e^(−d) − 1 + d         unbiased, low variance, >= 0  (r = π_ref/π = e^(−d): (r − 1) − log r)

(e^(−d) − 1 is evaluated with ``expm1``: the same quantity, without the cancellation near d = 0 that
would make a literal ``exp(−d) − 1 + d`` slightly negative for tiny |d|.)

Spec v1.1 (``kl.loss``, :func:`kl_loss_term`) adds ``abs`` = |d| (verl's "abs"; ∂|d|/∂d = sgn(d), with
sgn(0) = 0) and the KL term as it enters a loss: the estimator's value with one of four gradients.

Source: J. Schulman, "Approximating KL divergence", blog post, 2020 (http://joschu.net/blog/kl-approx.html).
Optional clamps (frameworks' numerical guards): d is clipped to ±log_ratio_clamp before the
estimator, the estimate to ±clamp after it; a clip passes no gradient where it is active
(strictly outside the interval; on the boundary the gradient passes, like ``torch.clamp``).
"""

from __future__ import annotations

import numpy as np

from oracle.clipping import clip_passes_gradient, clip_symmetric
from oracle.validation import (
    check_choice,
    check_mask,
    check_optional_real,
    check_token_array,
    check_token_upstream,
    to_float64,
)

__all__ = ["kl_penalty", "kl_penalty_grad", "KL_ESTIMATORS", "kl_loss_term", "kl_loss_term_grad"]

KL_ESTIMATORS = ("k1", "k2", "k3")
KL_LOSS_ESTIMATORS = ("k1", "k2", "k3", "abs")  # kl.loss (spec v1.1) also takes verl's "abs"
KL_GRADIENTS = ("estimator", "straight_through", "unbiased", "bias_corrected")


def kl_estimate(logp_t: float, ref_logp_t: float, estimator: str, log_ratio_clamp, clamp) -> float:
    """One token's KL estimate (see the module docstring for the equations)."""
    d = clip_symmetric(logp_t - ref_logp_t, log_ratio_clamp)
    if estimator == "k1":
        k = d
    elif estimator == "k2":
        k = d * d / 2.0
    elif estimator == "abs":  # spec v1.1 (kl.loss only)
        k = abs(d)
    else:  # k3 = (e^(−d) − 1) + d, with e^(−d) − 1 evaluated as expm1(−d): the same number without the
        # cancellation of exp(−d) − 1 near d = 0 (which would make k3 slightly negative for tiny |d|)
        with np.errstate(over="ignore"):
            k = float(np.expm1(-d)) + d
    return clip_symmetric(k, clamp)


def kl_estimate_derivative(logp_t: float, ref_logp_t: float, estimator: str, log_ratio_clamp, clamp) -> float:
    """∂k/∂logp_t for one token.

        ∂d/∂logp = 1 if −c_d <= d_raw <= c_d else 0        (c_d = log_ratio_clamp; 1 when None)
        ∂k1/∂d = 1,   ∂k2/∂d = d,   ∂k3/∂d = 1 − e^(−d),   ∂|d|/∂d = sgn(d)   (sgn(0) = 0)
        ∂k_out/∂k = 1 if −c <= k <= c else 0                (c = clamp; 1 when None)
    """
    d_raw = logp_t - ref_logp_t
    d = clip_symmetric(d_raw, log_ratio_clamp)
    dd_dlogp = 1.0 if clip_passes_gradient(d_raw, log_ratio_clamp) else 0.0
    if dd_dlogp == 0.0:
        return 0.0
    if estimator == "k1":
        k, dk_dd = d, 1.0
    elif estimator == "k2":
        k, dk_dd = d * d / 2.0, d
    elif estimator == "abs":  # |d| = max(d, −d): at d = 0 both branches tie and sgn(0) = 0 (as torch.abs)
        k, dk_dd = abs(d), (1.0 if d > 0 else -1.0 if d < 0 else 0.0)
    else:  # k3: k = (e^(−d) − 1) + d,  ∂k/∂d = 1 − e^(−d) = −(e^(−d) − 1)   (expm1, as in kl_estimate)
        with np.errstate(over="ignore"):
            e_minus_d_minus_1 = float(np.expm1(-d))
        k, dk_dd = e_minus_d_minus_1 + d, -e_minus_d_minus_1
    dout_dk = 1.0 if clip_passes_gradient(k, clamp) else 0.0
    if dout_dk == 0.0:
        return 0.0
    return dout_dk * dk_dd * dd_dlogp


def _inputs(fn, logp, ref_logp, mask, estimator, log_ratio_clamp, clamp):
    mask = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, mask)
    ref_logp = check_token_array(fn, "ref_logp", ref_logp, mask)
    estimator = check_choice(fn, "estimator", estimator, KL_ESTIMATORS)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    clamp = check_optional_real(fn, "clamp", clamp, gt=0.0)
    return to_float64(logp), to_float64(ref_logp), mask, estimator, log_ratio_clamp, clamp


def kl_penalty(logp, ref_logp, mask, *, estimator="k1", log_ratio_clamp=None, clamp=None):
    """Per-token KL estimate between the policy and the reference policy.

    Spec: kl.estimator (v1)
    Equation (valid t; d_t = logp_t − ref_logp_t, clipped to ±log_ratio_clamp if set):
        k1_t = d_t
        k2_t = d_t² / 2
        k3_t = exp(−d_t) − 1 + d_t
        the result clipped to ±clamp if set; 0 at masked t.
    Source: Schulman, "Approximating KL divergence" (blog, 2020); k3 is the GRPO KL term of
        DeepSeekMath arXiv:2402.03300 eq. (4).
    Shapes: logp [B, T], ref_logp [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: k2, k3 >= 0 (up to clamp); masked positions exactly 0 and never read.
    """
    fn = "kl_penalty"
    logp, ref_logp, mask, estimator, log_ratio_clamp, clamp = _inputs(
        fn, logp, ref_logp, mask, estimator, log_ratio_clamp, clamp
    )
    B, T = mask.shape
    k = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            k[b, t] = kl_estimate(logp[b, t], ref_logp[b, t], estimator, log_ratio_clamp, clamp)
    return k


def kl_penalty_grad(logp, ref_logp, mask, upstream, *, estimator="k1", log_ratio_clamp=None, clamp=None):
    """Vector-Jacobian product of :func:`kl_penalty`: dL/d logp [B, T].

    Spec: kl.estimator (v1), gradient (ref_logp is a constant).
    Derivative (u = upstream):
        dL/dlogp_t = u_t · [|k_t| <= clamp] · ∂k/∂d(d_t) · [|d_raw_t| <= log_ratio_clamp]
        ∂k1/∂d = 1,   ∂k2/∂d = d,   ∂k3/∂d = 1 − exp(−d)
    Masked positions get exactly 0.
    """
    fn = "kl_penalty_grad"
    logp, ref_logp, mask, estimator, log_ratio_clamp, clamp = _inputs(
        fn, logp, ref_logp, mask, estimator, log_ratio_clamp, clamp
    )
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            dk_dlogp = kl_estimate_derivative(logp[b, t], ref_logp[b, t], estimator, log_ratio_clamp, clamp)
            grad[b, t] = 0.0 if u[b, t] == 0.0 else u[b, t] * dk_dlogp  # 0 · inf := 0 (k3 overflow)
    return grad


# ----------------------------------------------------------------------------------------------
# kl.loss (spec v1.1): the KL term as it enters a loss, value and gradient
# ----------------------------------------------------------------------------------------------


def _exp(x: float) -> float:
    """e^x in float64 (inf on overflow, no warning)."""
    with np.errstate(over="ignore"):
        return float(np.exp(x))


def _product(a: float, b: float) -> float:
    """a · b with 0 · inf := 0 (a zero factor contributes nothing, whatever the other one is)."""
    if a == 0.0 or b == 0.0:
        return 0.0
    return a * b


def _loss_inputs(fn, logp, ref_logp, mask, old_logp, estimator, gradient, log_ratio_clamp, clamp, weight_cap):
    mask = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, mask)
    ref_logp = check_token_array(fn, "ref_logp", ref_logp, mask)
    estimator = check_choice(fn, "estimator", estimator, KL_LOSS_ESTIMATORS)
    gradient = check_choice(fn, "gradient", gradient, KL_GRADIENTS)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    clamp = check_optional_real(fn, "clamp", clamp, gt=0.0)
    weight_cap = check_optional_real(fn, "weight_cap", weight_cap, gt=0.0)
    if old_logp is not None:  # validated whenever it is given; read only by the two ratio forms
        old_logp = to_float64(check_token_array(fn, "old_logp", old_logp, mask))
    elif gradient in ("unbiased", "bias_corrected"):
        raise ValueError(f"{fn}: old_logp: required for gradient={gradient!r} (the ratio pi/pi_old), got None")
    return (to_float64(logp), to_float64(ref_logp), mask, old_logp, estimator, gradient, log_ratio_clamp, clamp,
            weight_cap)


def _slope_plus_value(logp_t: float, ref_logp_t: float, estimator: str, log_ratio_clamp, clamp) -> float:
    """∂K/∂logp + K for one token (the bias-corrected gradient is r·(∂K/∂logp + K)).

    Where a clamp passes no gradient, ∂K/∂logp = 0 and this is K. Otherwise, for k3,
    (1 − e^(−d)) + (e^(−d) − 1 + d) = d exactly: the two e^(−d) cancel in the algebra, not in floating
    point (summed numerically they would lose every digit of d for d ≪ 0, and give inf − inf = NaN
    where e^(−d) overflows).
    """
    K = kl_estimate(logp_t, ref_logp_t, estimator, log_ratio_clamp, clamp)
    dK = kl_estimate_derivative(logp_t, ref_logp_t, estimator, log_ratio_clamp, clamp)
    d_raw = logp_t - ref_logp_t
    passes = clip_passes_gradient(d_raw, log_ratio_clamp) and clip_passes_gradient(
        kl_estimate(logp_t, ref_logp_t, estimator, log_ratio_clamp, None), clamp)
    if not passes:
        return K  # dK = 0: a clipped value is a constant
    if estimator == "k3":
        return clip_symmetric(d_raw, log_ratio_clamp)  # = d (a passing input clip leaves d unchanged)
    return dK + K


def kl_loss_term(logp, ref_logp, mask, old_logp=None, *, estimator="k3", gradient="estimator",
                 log_ratio_clamp=None, clamp=None, weight_cap=10.0):
    """The per-token KL term as it enters a loss: its value (the gradient is :func:`kl_loss_term_grad`).

    Spec: kl.loss (v1), added by spec v1.1
    Equation (valid t; d_t = logp_t − ref_logp_t; K_t the estimator of kl.estimator, plus abs = |d_t|,
        with d clipped to ±log_ratio_clamp before it and K clipped to ±clamp after it):
        gradient = "estimator", "straight_through", "unbiased":   L_t = K_t
        gradient = "bias_corrected":                             L_t = K_t · r_t,  r_t = exp(logp_t − old_logp_t)
        0 at masked t.
    The four forms differ in the gradient only (see kl_loss_term_grad), except "bias_corrected", whose
    value is K·r (= K on-policy, r = 1).
    Source: Schulman, "Approximating KL divergence" (2020) for k1-k3; verl core_algos.py kl_penalty
        ("abs", the "+" straight-through suffix); OpenRLHF models/utils.py compute_approx_kl
        (unbiased_gradient); TRL grpo_trainer.py _compute_loss (use_bias_correction_kl), after
        DeepSeek-V3.2 (arXiv:2512.02556) eq. 7.
    Shapes: logp, ref_logp, old_logp [B, T] (old_logp may be None except for the two ratio forms),
        mask [B, T] -> [B, T] float64.
    Edge cases: old_logp is validated when given and read only by "unbiased" and "bias_corrected";
        K·r with a zero factor is 0 whatever the other (0·inf := 0); masked positions 0, never read.
    """
    fn = "kl_loss_term"
    logp, ref_logp, mask, old_logp, estimator, gradient, log_ratio_clamp, clamp, _ = _loss_inputs(
        fn, logp, ref_logp, mask, old_logp, estimator, gradient, log_ratio_clamp, clamp, weight_cap)
    B, T = mask.shape
    L = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            K_t = kl_estimate(logp[b, t], ref_logp[b, t], estimator, log_ratio_clamp, clamp)
            if gradient == "bias_corrected":
                r_t = _exp(logp[b, t] - old_logp[b, t])
                L[b, t] = _product(K_t, r_t)
            else:
                L[b, t] = K_t
    return L


def kl_loss_term_grad(logp, ref_logp, mask, old_logp, upstream, *, estimator="k3", gradient="estimator",
                      log_ratio_clamp=None, clamp=None, weight_cap=10.0):
    """Vector-Jacobian product of :func:`kl_loss_term`: dL/d logp [B, T] (old_logp may be None).

    Spec: kl.loss (v1), gradient (ref_logp and old_logp are constants). With u = upstream,
    d_t = logp_t − ref_logp_t before any clip:
        "estimator":         u_t · ∂K_t/∂logp_t                (kl.estimator's gradient; sgn(0) = 0 for abs)
        "straight_through":  u_t · d_t                         (the gradient of ½d², unclipped: verl's "+")
        "unbiased":          u_t · w_t · d_t,  w_t = sg(min(exp(logp_t − old_logp_t), weight_cap))
                                                               (the gradient of w·½d²: OpenRLHF)
        "bias_corrected":    u_t · r_t · (∂K_t/∂logp_t + K_t), r_t = exp(logp_t − old_logp_t)
                                                               (the product rule through K·r: TRL)
    For k3 without an active clamp ∂K/∂logp + K = d (the e^(−d) terms cancel exactly), so the
    bias-corrected k3 gradient is r·d, the unbiased form's with an uncapped, attached weight.
    Every product follows 0·inf := 0. Masked positions get exactly 0.
    """
    fn = "kl_loss_term_grad"
    logp, ref_logp, mask, old_logp, estimator, gradient, log_ratio_clamp, clamp, weight_cap = _loss_inputs(
        fn, logp, ref_logp, mask, old_logp, estimator, gradient, log_ratio_clamp, clamp, weight_cap)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            d_t = logp[b, t] - ref_logp[b, t]
            if gradient == "estimator":
                dL = kl_estimate_derivative(logp[b, t], ref_logp[b, t], estimator, log_ratio_clamp, clamp)
            elif gradient == "straight_through":
                dL = d_t
            elif gradient == "unbiased":
                w_t = _exp(logp[b, t] - old_logp[b, t])
                if weight_cap is not None:
                    w_t = min(w_t, weight_cap)
                dL = _product(w_t, d_t)
            else:  # bias_corrected
                r_t = _exp(logp[b, t] - old_logp[b, t])
                dL = _product(r_t, _slope_plus_value(logp[b, t], ref_logp[b, t], estimator, log_ratio_clamp, clamp))
            grad[b, t] = _product(u[b, t], dL)
    return grad
