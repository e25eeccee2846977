"""Per-token KL estimators to a reference policy (spec id ``kl.estimator``)."""

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

__all__ = ["kl_penalty", "KL_ESTIMATORS"]

KL_ESTIMATORS = ("k1", "k2", "k3")


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
