"""Per-token KL estimators to a reference policy (spec id ``kl.estimator``) and the KL term as it enters a
loss, value and gradient (spec v1.1 ``kl.loss``)."""

from __future__ import annotations

import torch

from refimpl.masking import expm1_zero_safe, masked, masked_output
from refimpl.validation import (
    check_choice,
    check_finite,
    check_mask,
    check_optional_real,
    check_token_array,
    compute_dtypes,
)

__all__ = ["kl_penalty", "kl_loss_term"]

KL_ESTIMATORS = ("k1", "k2", "k3")
KL_LOSS_ESTIMATORS = ("k1", "k2", "k3", "abs")  # kl.loss also takes verl's "abs"
KL_GRADIENTS = ("estimator", "straight_through", "unbiased", "bias_corrected")


def kl_estimate(
    d: torch.Tensor, estimator: str, log_ratio_clamp: float | None, clamp: float | None
) -> torch.Tensor:
    """Schulman's estimator of d = logp − ref_logp (already masked): k1 = d, k2 = d²/2, k3 = e^(−d) − 1 + d,
    with the optional input / output clamps (no gradient outside them)."""
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    if estimator == "k1":
        k = d
    elif estimator == "k2":
        k = 0.5 * d * d
    elif estimator == "abs":  # kl.loss only; torch.abs's gradient is sgn(d), 0 at d = 0 (the spec's rule)
        k = d.abs()
    else:  # k3 via expm1: no cancellation in e^(−d) − 1 near d = 0; inf where e^(−d) overflows
        k = expm1_zero_safe(-d) + d
    if clamp is not None:
        k = k.clamp(-clamp, clamp)
    return k


def kl_penalty(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    estimator: str = "k1",
    log_ratio_clamp: float | None = None,
    clamp: float | None = None,
) -> torch.Tensor:
    """Spec: kl.estimator. k1/k2/k3 of d = logp − ref_logp per valid token; k3 = expm1(−d) + d (inf where e^(−d) overflows the dtype; a zero upstream gives a zero gradient, no 0·inf)."""
    fn = "kl_penalty"
    m = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, m)
    ref_logp = check_token_array(fn, "ref_logp", ref_logp, m)
    estimator = check_choice(fn, "estimator", estimator, KL_ESTIMATORS)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    clamp = check_optional_real(fn, "clamp", clamp, gt=0.0)
    out_dtype, cdt = compute_dtypes(logp, ref_logp)
    lp, ref = masked(logp, m, cdt), masked(ref_logp, m, cdt)
    check_finite(fn, ("logp", logp, m, lp), ("ref_logp", ref_logp, m, ref))
    return masked_output(kl_estimate(lp - ref, estimator, log_ratio_clamp, clamp), m, out_dtype)


# ----------------------------------------------------------------------------------------------
# kl.loss (spec v1.1)
# ----------------------------------------------------------------------------------------------


def _times(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a · b with 0 · inf := 0."""
    return torch.where((a == 0) | (b == 0), 0.0, a * b)


class _Surrogate(torch.autograd.Function):
    """``value`` (a constant) in the forward pass; in the backward pass the incoming gradient times the
    constant ``slope`` goes to ``lp`` (0 · inf := 0). The straight-through, unbiased and bias-corrected
    KL terms are this with the slope of their own surrogate."""

    @staticmethod
    def forward(ctx, lp: torch.Tensor, value: torch.Tensor, slope: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(slope)
        return value.clone()

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (slope,) = ctx.saved_tensors
        return _times(g, slope), None, None


def _slope_plus_value(d: torch.Tensor, K: torch.Tensor, estimator: str, log_ratio_clamp: float | None,
                      clamp: float | None) -> torch.Tensor:
    """∂K/∂logp + K per token (no autograd): K where a clamp is active (a clipped K is a constant), else
    the estimator's slope plus K; for k3 that sum is exactly d (the e^(−d) terms cancel algebraically:
    summed in floating point they would lose d, or give inf − inf, for d ≪ 0)."""
    passes = torch.ones_like(d, dtype=torch.bool)
    if log_ratio_clamp is not None:
        passes = passes & (d.abs() <= log_ratio_clamp)
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    if clamp is not None:
        passes = passes & (kl_estimate(d, estimator, None, None).abs() <= clamp)
    if estimator == "k3":
        s = d
    else:
        slope = {"k1": torch.ones_like(d), "k2": d, "abs": torch.sign(d)}[estimator]
        s = slope + K
    return torch.where(passes, s, K)


def kl_loss_term(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    old_logp: torch.Tensor | None = None,
    *,
    estimator: str = "k3",
    gradient: str = "estimator",
    log_ratio_clamp: float | None = None,
    clamp: float | None = None,
    weight_cap: float | None = 10.0,
) -> torch.Tensor:
    """Spec: kl.loss. The value K (k1/k2/k3/abs of d = logp − ref_logp, with kl.estimator's clamps), or
    K·r for ``gradient="bias_corrected"`` (r = e^(logp − old_logp)); the gradient by autograd: of K
    ("estimator"), of ½d² ("straight_through": d), of sg(min(r, weight_cap))·½d² ("unbiased") or of K·r
    ("bias_corrected": r·(∂K/∂logp + K)). The last three are a custom autograd step (value and slope
    computed without autograd) so that 0·inf := 0 holds and k3's r·d is exact for d ≪ 0; the
    bias-corrected value and slope are formed in float64 (a product of two factors that may overflow
    float32 alone)."""
    fn = "kl_loss_term"
    m = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, m)
    ref_logp = check_token_array(fn, "ref_logp", ref_logp, m)
    estimator = check_choice(fn, "estimator", estimator, KL_LOSS_ESTIMATORS)
    gradient = check_choice(fn, "gradient", gradient, KL_GRADIENTS)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    clamp = check_optional_real(fn, "clamp", clamp, gt=0.0)
    weight_cap = check_optional_real(fn, "weight_cap", weight_cap, gt=0.0)
    arrays = [logp, ref_logp]
    if old_logp is not None:  # validated whenever given; read only by the two ratio forms
        old_logp = check_token_array(fn, "old_logp", old_logp, m)
        arrays.append(old_logp)
    elif gradient in ("unbiased", "bias_corrected"):
        raise ValueError(f"{fn}: old_logp: required for gradient={gradient!r} (the ratio pi/pi_old), got None")
    out_dtype, cdt = compute_dtypes(*arrays)
    lp, ref = masked(logp, m, cdt), masked(ref_logp, m, cdt).detach()
    items = [("logp", logp, m, lp), ("ref_logp", ref_logp, m, ref)]
    old = None
    if old_logp is not None:
        old = masked(old_logp, m, cdt).detach()
        items.append(("old_logp", old_logp, m, old))
    check_finite(fn, *items)
    if gradient == "estimator":
        return masked_output(kl_estimate(lp - ref, estimator, log_ratio_clamp, clamp), m, out_dtype)
    with torch.no_grad():
        if gradient == "bias_corrected":  # K·r, slope r·(∂K/∂logp + K), in float64: K = e^(−d) − 1 + d and
            # r = e^(logp − old_logp) may each overflow float32 where their product does not (d = log r = −100)
            d = lp.detach().double() - ref.double()
            K = kl_estimate(d, estimator, log_ratio_clamp, clamp)
            r = torch.exp(lp.detach().double() - old.double())
            value = _times(K, r).to(cdt)
            slope = _times(r, _slope_plus_value(d, K, estimator, log_ratio_clamp, clamp)).to(cdt)
        else:
            d = lp.detach() - ref
            value = kl_estimate(d, estimator, log_ratio_clamp, clamp)
            if gradient == "straight_through":  # ½d², unclipped: slope d
                slope = d
            else:  # unbiased: sg(w)·½d², w = min(r, weight_cap): slope w·d
                w = torch.exp(lp.detach() - old)
                slope = _times(w if weight_cap is None else w.clamp(max=weight_cap), d)
    return masked_output(_Surrogate.apply(lp, value, slope), m, out_dtype)
