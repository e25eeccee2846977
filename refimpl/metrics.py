"""Training metrics with a spec (``metric.clip``, ``metric.mismatch``), vectorized."""

from __future__ import annotations

import torch

from refimpl.policy_losses import _ppo_inputs
from refimpl.masking import capped_exp_arg, masked_output
from refimpl.offpolicy import _rollout_inputs
from refimpl.validation import check_choice, check_optional_real

__all__ = ["ppo_clipped_mask", "mismatch_metric", "sequence_mismatch_metric"]

TOKEN_METRICS = ("kl", "k3_kl", "chi2_token", "token_mult_prob_error", "logprob_abs_diff")
SEQUENCE_METRICS = ("log_ppl_diff", "log_ppl_abs_diff", "ppl_ratio", "chi2_seq")


@torch.no_grad()
def ppo_clipped_mask(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Spec: metric.clip. 1.0 where ppo_token_loss takes a clipped branch (A>0, r>1+ε_h; A<0, r<1−ε_l; dual: A<0, r>c), else 0; no gradient."""
    m, out_dtype, d, A, eps_low, eps_high, dual_clip = _ppo_inputs(
        "ppo_clipped_mask", logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, log_ratio_clamp
    )
    ratio = torch.exp(capped_exp_arg(d))
    # the same branch selection as ppo_token_loss (strict: ties stay unclipped)
    clipped = ((A > 0) & (ratio > 1.0 + eps_high)) | ((A < 0) & (ratio < 1.0 - eps_low))
    if dual_clip is not None:
        clipped |= (A < 0) & (ratio > dual_clip)
    return masked_output(clipped.to(d.dtype), m, out_dtype)



def _mismatch_inputs(fn: str, old_logp: object, rollout_logp: object, mask: object, log_ratio_clamp: object):
    """(mask, output dtype, δ in float64 with exact zeros at masked positions, the clamp): the inputs of the
    rollout corrections (refimpl.offpolicy), δ widened for the batch's one number."""
    m, out_dtype, d = _rollout_inputs(fn, old_logp, rollout_logp, mask)
    c = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    return m, out_dtype, d.to(torch.float64), c


@torch.no_grad()
def mismatch_metric(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    metric: str = "kl",
    agg: str = "token_mean",
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Spec: metric.mismatch (token metrics). A statistic of δ = old_logp − rollout_logp per valid token (kl −δ,
    k3_kl e^δ − δ − 1, chi2_token e^{2δ} then − 1, token_mult_prob_error e^{|δ|}, logprob_abs_diff |δ|),
    aggregated by ``agg``; 0 for a batch without a valid token. Computed in float64 (one number per batch),
    returned as a 0-d tensor in the inputs' promoted dtype."""
    fn = "mismatch_metric"
    m, out_dtype, d, c = _mismatch_inputs(fn, old_logp, rollout_logp, mask, log_ratio_clamp)
    metric = check_choice(fn, "metric", metric, TOKEN_METRICS)
    agg = check_choice(fn, "agg", agg, ("token_mean", "seq_mean_token_mean"))
    n = m.sum(dim=1)
    rows = n > 0
    if not bool(rows.any()):
        return torch.zeros((), dtype=out_dtype, device=m.device)
    if metric == "kl":
        s = -d
    elif metric == "k3_kl":
        s = torch.expm1(d) - d
    elif metric == "chi2_token":
        s = torch.exp(2.0 * (d if c is None else d.clamp(-c, c)))
    elif metric == "token_mult_prob_error":
        s = torch.exp(d.abs())
    else:
        s = d.abs()
    s = torch.where(m, s, 0.0)
    value = s.sum() / n.sum() if agg == "token_mean" else (s.sum(dim=1)[rows] / n[rows]).mean()
    return (value - 1.0 if metric == "chi2_token" else value).to(out_dtype)


@torch.no_grad()
def sequence_mismatch_metric(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    metric: str = "log_ppl_diff",
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Spec: metric.mismatch (sequence metrics). One value per row with a valid token (Δ_b = −mean_t δ:
    log_ppl_diff Δ_b, log_ppl_abs_diff |Δ_b|, ppl_ratio e^{Δ_b}, chi2_seq e^{2 Σ_t δ} then − 1), averaged over
    those rows; 0 for a batch without a valid token."""
    fn = "sequence_mismatch_metric"
    m, out_dtype, d, c = _mismatch_inputs(fn, old_logp, rollout_logp, mask, log_ratio_clamp)
    metric = check_choice(fn, "metric", metric, SEQUENCE_METRICS)
    n = m.sum(dim=1)
    rows = n > 0
    if not bool(rows.any()):
        return torch.zeros((), dtype=out_dtype, device=m.device)
    total = d.sum(dim=1)[rows]
    delta = -total / n[rows]
    if metric == "log_ppl_diff":
        value = delta.mean()
    elif metric == "log_ppl_abs_diff":
        value = delta.abs().mean()
    elif metric == "ppl_ratio":
        value = torch.exp(delta).mean()
    else:
        value = torch.exp(2.0 * (total if c is None else total.clamp(-c, c))).mean() - 1.0
    return value.to(out_dtype)
