"""Per-token KL estimators k1, k2, k3 between the policy and the reference (spec id ``kl.estimator``).

With d = logp − ref_logp = log π(x)/π_ref(x) at the sampled token x ~ π:

    k1 = d                      unbiased for KL(π‖π_ref), high variance, can be negative
    k2 = d² / 2                 biased, low variance, >= 0
    k3 = e^(−d) − 1 + d         unbiased, low variance, >= 0  (r = π_ref/π = e^(−d): (r − 1) − log r)

(e^(−d) − 1 is evaluated with ``expm1``: the same quantity, without the cancellation near d = 0 that
would make a literal ``exp(−d) − 1 + d`` slightly negative for tiny |d|.)

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

__all__ = ["kl_penalty", "kl_penalty_grad", "KL_ESTIMATORS", "kl_estimate", "kl_estimate_derivative"]

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(logp_t: float, ref_logp_t: float, estimator: str, log_ratio_clamp, clamp) -> float:
    """One token's KL estimate (see the module docstring for the equations)."""
    d = clip_symmetric(logp_t - ref_logp_t, log_ratio_clamp)
    if estimator == "k1":
        k = d
    elif estimator == "k2":
        k = d * d / 2.0
    else:  # k3 = (e^(−d) − 1) + d, with e^(−d) − 1 evaluated as expm1(−d): the same number without the
        # cancellation of exp(−d) − 1 near d = 0 (which would make k3 slightly negative for tiny |d|)
        with np.errstate(over="ignore"):
            k = float(np.expm1(-d)) + d
    return clip_symmetric(k, clamp)


def kl_estimate_derivative(logp_t: float, ref_logp_t: float, estimator: str, log_ratio_clamp, clamp) -> float:
    """∂k/∂logp_t for one token.

        ∂d/∂logp = 1 if −c_d <= d_raw <= c_d else 0        (c_d = log_ratio_clamp; 1 when None)
        ∂k1/∂d = 1,   ∂k2/∂d = d,   ∂k3/∂d = 1 − e^(−d)
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
