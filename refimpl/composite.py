"""Composite objectives built from the refimpl pieces (spec id ``loss.policy``)."""

from __future__ import annotations

import torch

from refimpl.aggregation import AGGREGATION_MODES, aggregate
from refimpl.kl import KL_ESTIMATORS, kl_penalty
from refimpl.policy_losses import ppo_token_loss
from refimpl.masking import masked
from refimpl.validation import (
    check_bool,
    check_choice,
    check_finite,
    check_mask,
    check_real,
    check_token_array,
    errors_as,
)

__all__ = ["policy_loss", "corrected_policy_loss"]

REJECTED = ("drop", "zero")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    mode: str = "token_mean",
    norm_length: float | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Spec: loss.policy. aggregate(ppo_token_loss(logp, old_logp, A) + kl_coef·kl_penalty(logp, ref_logp), mask, mode)."""
    fn = "policy_loss"
    m = check_mask(fn, mask)
    for name, value in (("logp", logp), ("old_logp", old_logp), ("ref_logp", ref_logp)):
        check_token_array(fn, name, value, m)
    kl_coef = check_real(fn, "kl_coef", kl_coef)
    kl_estimator = check_choice(fn, "kl_estimator", kl_estimator, KL_ESTIMATORS)
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    out_dtype = logp.dtype
    if out_dtype in (torch.float16, torch.bfloat16):  # half inputs: the composite in float32, one rounding
        logp, old_logp, ref_logp = logp.float(), old_logp.float(), ref_logp.float()
        if isinstance(advantages, torch.Tensor) and advantages.dtype in (torch.float16, torch.bfloat16):
            advantages = advantages.float()
    with errors_as(fn):  # the pieces validate the rest; their errors name policy_loss
        token_loss = ppo_token_loss(logp, old_logp, advantages, m, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
        if kl_coef != 0.0:
            token_loss = token_loss + kl_coef * kl_penalty(logp, ref_logp, m, estimator=kl_estimator)
        else:  # ref_logp is not read, but a NaN at a valid position is still an error (api.md)
            check_finite(fn, ("ref_logp", ref_logp, m, masked(ref_logp.detach(), m, ref_logp.dtype)))
        try:
            loss = aggregate(token_loss, m, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)
        except ValueError:
            if token_loss.dtype == torch.float64 or not _overflowed(token_loss, m):
                raise
            # A term overflowed the compute dtype (k3 or an unclipped ratio beyond e^88 in float32) on
            # validated finite inputs: the spec's value, computed in float64, rounds to ±inf in the
            # output dtype (api.md "Robustness and numerical extremes"); so do its gradients.
            return policy_loss(
                logp.double(), old_logp.double(), ref_logp.double(), advantages.double(), m, eps_low=eps_low,
                eps_high=eps_high, dual_clip=dual_clip, kl_coef=kl_coef, kl_estimator=kl_estimator, mode=mode,
                norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs,
            ).to(out_dtype)
    return loss.to(out_dtype)


def _overflowed(token_loss: torch.Tensor, m: torch.Tensor) -> bool:
    """True when the token loss is non-finite at a valid position (an overflow of the compute dtype)."""
    return not bool(torch.isfinite(torch.where(m, token_loss.detach(), 0.0)).all())


def corrected_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    is_weights: torch.Tensor,
    keep_mask: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    mode: str = "token_mean",
    norm_length: float | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
    weight_kl: bool = False,
    rejected: str = "drop",
) -> torch.Tensor:
    """Spec: offpolicy.loss. aggregate(keep·w·ppo_token_loss + kl_coef·(w if weight_kl else 1)·kl_penalty,
    mask ∧ keep ("drop") or mask ("zero"), mode); w and keep are constants."""
    fn = "corrected_policy_loss"
    m = check_mask(fn, mask)
    for name, value in (("logp", logp), ("old_logp", old_logp), ("ref_logp", ref_logp)):
        check_token_array(fn, name, value, m)
    w = check_token_array(fn, "is_weights", is_weights, m).detach()
    keep = check_mask(fn, keep_mask, "keep_mask", first_column=False)
    if keep.shape != m.shape:
        raise ValueError(f"{fn}: keep_mask: expected shape {tuple(m.shape)} (the mask's), got {tuple(keep.shape)}")
    kl_coef = check_real(fn, "kl_coef", kl_coef)
    kl_estimator = check_choice(fn, "kl_estimator", kl_estimator, KL_ESTIMATORS)
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    rejected = check_choice(fn, "rejected", rejected, REJECTED)
    weight_kl = check_bool(fn, "weight_kl", weight_kl)
    out_dtype = logp.dtype
    cdt = torch.float64 if out_dtype == torch.float64 else torch.float32
    w = masked(w, m, cdt)
    check_finite(fn, ("is_weights", is_weights, m, w))
    if bool((w < 0).any()):
        raise ValueError(f"{fn}: is_weights: expected weights >= 0 at valid positions, got {float(w.min())!r}")
    keep = keep & m
    counted = keep if rejected == "drop" else m
    coefficient = torch.where(keep, w, 0.0)
    lp = logp.to(cdt)  # one cast: a half-precision gradient is rounded once, after both terms are summed
    with errors_as(fn):  # the pieces validate the rest; their errors name corrected_policy_loss
        ppo = ppo_token_loss(lp, old_logp.to(cdt), _as(advantages, cdt), m, eps_low=eps_low,
                             eps_high=eps_high, dual_clip=dual_clip)
        token_loss = torch.where(coefficient == 0, 0.0, coefficient * ppo)  # 0 · inf := 0
        if kl_coef != 0.0:
            kl_weight = kl_coef * (w if weight_kl else torch.ones_like(w))
            kl = kl_penalty(lp, ref_logp.to(cdt), m, estimator=kl_estimator)
            token_loss = token_loss + torch.where(kl_weight == 0, 0.0, kl_weight * kl)
        else:  # ref_logp is not read, but a NaN at a valid position is still an error (api.md)
            check_finite(fn, ("ref_logp", ref_logp, m, masked(ref_logp.detach(), m, ref_logp.dtype)))
        try:
            loss = aggregate(token_loss, counted, mode=mode, norm_length=norm_length, num_tokens=num_tokens,
                             num_seqs=num_seqs)
        except ValueError:
            if cdt == torch.float64 or not _overflowed(token_loss, counted):
                raise
            # an overflow of float32 on finite inputs: the spec's value in float64, rounded once
            return corrected_policy_loss(
                logp.double(), old_logp.double(), ref_logp.double(), _as(advantages, torch.float64), is_weights.double(),
                keep_mask, m, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, kl_coef=kl_coef,
                kl_estimator=kl_estimator, mode=mode, norm_length=norm_length, num_tokens=num_tokens,
                num_seqs=num_seqs, weight_kl=weight_kl, rejected=rejected,
            ).to(out_dtype)
    return loss.to(out_dtype)


def _as(advantages: object, dtype: torch.dtype) -> object:
    """Float advantages in the compute dtype (anything else is left for the piece to reject)."""
    if isinstance(advantages, torch.Tensor) and advantages.is_floating_point():
        return advantages.to(dtype)
    return advantages
