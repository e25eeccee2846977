"""Per-token RLHF rewards: KL penalty plus the sequence score on the last valid token (spec id ``reward.rlhf``)."""

from __future__ import annotations

import torch

from refimpl.kl import KL_ESTIMATORS, kl_estimate
from refimpl.masking import masked, masked_output
from refimpl.validation import (
    check_choice,
    check_finite,
    check_mask,
    check_optional_real,
    check_real,
    check_same_device,
    check_sequence_array,
    check_token_array,
    compute_dtypes,
)

__all__ = ["rlhf_token_rewards"]


def last_valid_positions(mask: torch.Tensor) -> torch.Tensor:
    """[B, T] bool, True exactly at each row's last valid position t_n (no True in an empty row)."""
    T = mask.shape[1]
    positions = torch.arange(T, device=mask.device).expand(mask.shape)
    last = torch.where(mask, positions, -1).amax(dim=1, keepdim=True) if T else positions[:, :0]
    return positions == last


@torch.no_grad()
def rlhf_token_rewards(
    scores: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_coef: float,
    estimator: str = "k1",
    log_ratio_clamp: float | None = None,
    clamp: float | None = None,
) -> torch.Tensor:
    """Spec: reward.rlhf. R = −kl_coef·KL_t at valid t, plus scores[b] at the row's last valid position (one vectorized select)."""
    fn = "rlhf_token_rewards"
    m = check_mask(fn, mask)
    scores = check_sequence_array(fn, "scores", scores, batch=m.shape[0])
    check_same_device(fn, "scores", scores, m)
    logp = check_token_array(fn, "logp", logp, m)
    ref_logp = check_token_array(fn, "ref_logp", ref_logp, m)
    beta = check_real(fn, "kl_coef", kl_coef)
    estimator = check_choice(fn, "estimator", estimator, KL_ESTIMATORS)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    clamp = check_optional_real(fn, "clamp", clamp, gt=0.0)
    out_dtype, cdt = compute_dtypes(scores, logp, ref_logp)
    lp, ref = masked(logp, m, cdt), masked(ref_logp, m, cdt)
    check_finite(fn, ("logp", logp, m, lp), ("ref_logp", ref_logp, m, ref))
    # kl_coef = 0 adds exactly 0, even where the KL overflows (0·inf := 0, api.md "Numerical extremes")
    R = -beta * kl_estimate(lp - ref, estimator, log_ratio_clamp, clamp) if beta != 0.0 else torch.zeros_like(lp)
    R = R + torch.where(last_valid_positions(m), scores.to(cdt).unsqueeze(1), 0.0)
    return masked_output(R, m, out_dtype)
