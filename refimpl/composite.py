"""Composite objectives built from the refimpl pieces (spec id ``loss.policy``)."""

from __future__ import annotations

import torch

from refimpl.aggregation import AGGREGATION_MODES, aggregate
from refimpl.kl import KL_ESTIMATORS, kl_penalty
from refimpl.losses import ppo_token_loss
from refimpl.masking import masked
from refimpl.validation import check_choice, check_finite, check_mask, check_real, check_token_array, errors_as

__all__ = ["policy_loss"]


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
