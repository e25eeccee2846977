"""The learner's off-policy correction in asynchronous mode, built from the spec v1.1 refimpl functions.

The actors sample with weights up to ``max_staleness`` versions old, possibly in another precision, and
record the behaviour log-probs ``behav_logp`` at sampling time; the learner recomputes the old
(proximal) log-probs ``old_logp`` with its current weights. ``TrainConfig.correction`` chooses what the
loss does with ρ = π_old / π_behav:

=============== ================================================================================
"none"          PPO against ``old_logp``; the behaviour log-probs are only logged.
"tis_token"     w = min(max(ρ_t, low), high): ``rollout_is_weights(level="token", mode="truncate")``
"tis_sequence"  the same with one weight per row from the product of its ρ_t (``level="sequence"``)
"mis_token"     w = ρ_t inside [low, high], 0 outside (``mode="mask"``); the zeroed tokens still count
"rejection"     tokens (or rows: ``rejection_level``) with ρ outside [low, high] leave the loss and its
                denominator (``rollout_rejection_mask``); w = 1
"decoupled"     AReaL's decoupled PPO: ``decoupled_ppo_token_loss(logp, old_logp, behav_logp, ...)``,
                ratio against the proximal (recomputed) policy, weight π_prox / π_behav capped at
                ``behav_cap``
=============== ================================================================================

With weights or a rejection the policy term is ``corrected_policy_loss``'s (constant weights on the
clipped PPO term, the KL to the reference unweighted, rejected tokens dropped from the count), so the
loss is that composite, plus the entropy bonus aggregated over the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import refimpl
from refimpl.trainer.config import TrainConfig

# the corrections that produce constant weights / keep masks (the others need nothing per step)
WEIGHTED = ("tis_token", "tis_sequence", "mis_token", "rejection")


@dataclass
class Correction:
    """What the step's correction computed once per step from (old_logp, behav_logp, mask)."""

    is_weights: torch.Tensor  # [B, T] constant weights (1 where the correction has none), 0 off the mask
    keep: torch.Tensor  # [B, T] bool: the valid tokens the loss keeps


@torch.no_grad()
def rollout_correction(cfg: TrainConfig, old_logp: torch.Tensor, behav_logp: torch.Tensor,
                       mask: torch.Tensor) -> Correction | None:
    """The step's importance weights and keep mask (None for "none" and "decoupled", whose weight lives
    inside the loss)."""
    c = cfg.correction
    if c not in WEIGHTED:
        return None
    ones = torch.where(mask, torch.ones_like(old_logp), torch.zeros_like(old_logp))
    if c == "rejection":
        keep = refimpl.rollout_rejection_mask(old_logp, behav_logp, mask, statistic="ratio", level=cfg.rejection_level,
                                              lo=cfg.correction_low, hi=cfg.correction_high)
        return Correction(ones, keep)
    kw = {"tis_token": dict(level="token", mode="truncate"), "tis_sequence": dict(level="sequence", mode="truncate"),
          "mis_token": dict(level="token", mode="mask")}[c]
    w = refimpl.rollout_is_weights(old_logp, behav_logp, mask, lo=cfg.correction_low, hi=cfg.correction_high, **kw)
    return Correction(w, mask.clone())


def corrected_objective(cfg: TrainConfig, logp: torch.Tensor, entropy: torch.Tensor, old_logp: torch.Tensor,
                        behav_logp: torch.Tensor | None, ref_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, correction: Correction | None, counts: refimpl.StepCounts,
                        world: int) -> torch.Tensor:
    """The micro-batch loss to backpropagate (global counts ``counts`` of the tokens the loss keeps,
    times ``world``) for a correction other than "none"."""
    kw = dict(mode=cfg.agg, norm_length=cfg.norm_length)
    if cfg.correction == "decoupled":
        ell = refimpl.decoupled_ppo_token_loss(logp, old_logp, behav_logp, advantages, mask, eps_low=cfg.eps_low,
                                               eps_high=cfg.eps_high, dual_clip=cfg.dual_clip, behav_cap=cfg.behav_cap)
        if cfg.kl_coef != 0.0:
            ell = ell + cfg.kl_coef * refimpl.kl_penalty(logp, ref_logp, mask, estimator=cfg.kl_estimator)
        if cfg.entropy_coef != 0.0:
            ell = ell - cfg.entropy_coef * entropy
        return refimpl.micro_batch_loss(ell, mask, counts, dp_world_size=world, **kw)
    assert correction is not None
    loss = refimpl.corrected_policy_loss(
        logp, old_logp, ref_logp, advantages, correction.is_weights, correction.keep, mask, eps_low=cfg.eps_low,
        eps_high=cfg.eps_high, dual_clip=cfg.dual_clip, kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator,
        num_tokens=counts.num_tokens, num_seqs=counts.num_seqs, rejected="drop", **kw,
    ) * world
    if cfg.entropy_coef != 0.0:
        loss = loss + refimpl.micro_batch_loss(-cfg.entropy_coef * entropy, mask & correction.keep, counts,
                                               dp_world_size=world, **kw)
    return loss


@torch.no_grad()
def correction_stats(cfg: TrainConfig, old_logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor,
                     correction: Correction | None) -> dict[str, float]:
    """Per-step statistics of ρ = π_old/π_behav over the valid tokens, and what the correction did:
    ``is_weight_mean``, ``is_clipped_frac`` (tokens whose weight differs from their unclipped ρ statistic),
    ``rejected_frac`` (valid tokens a rejection dropped), ``behav_capped_frac`` (decoupled: tokens whose
    behaviour weight is above ``behav_cap``), and the ``metric.mismatch`` metrics ``mismatch_<name>`` (kl, k3_kl,
    chi2_token, token_mult_prob_error, log_ppl_abs_diff, chi2_seq)."""
    m = mask.bool()
    n = max(int(m.sum()), 1)
    d = torch.where(m, old_logp.double() - behav_logp.double(), torch.zeros((), dtype=torch.float64))
    rho = torch.exp(d)
    out = {
        "rho_mean": float(rho[m].mean()) if m.any() else 1.0,
        "rho_min": float(rho[m].min()) if m.any() else 1.0,
        "rho_max": float(rho[m].max()) if m.any() else 1.0,
        "log_rho_abs_mean": float(d.abs()[m].mean()) if m.any() else 0.0,
        "is_weight_mean": 1.0, "is_clipped_frac": 0.0, "rejected_frac": 0.0, "behav_capped_frac": 0.0,
    }
    # the engine-trainer mismatch metrics of spec metric.mismatch (verl's rollout_corr/*, NeMo-RL's
    # token_mult_prob_error), of the recomputed old log-probs against the behaviour ones
    for name in ("kl", "k3_kl", "chi2_token", "token_mult_prob_error"):
        out[f"mismatch_{name}"] = float(refimpl.mismatch_metric(old_logp, behav_logp, m, metric=name))
    for name in ("log_ppl_abs_diff", "chi2_seq"):
        out[f"mismatch_{name}"] = float(refimpl.sequence_mismatch_metric(old_logp, behav_logp, m, metric=name))
    if correction is not None:
        w = correction.is_weights
        out["is_weight_mean"] = float(w[m].double().mean()) if m.any() else 1.0
        out["rejected_frac"] = float((m & ~correction.keep).sum()) / n
        if cfg.correction != "rejection":
            level = "sequence" if cfg.correction == "tis_sequence" else "token"
            raw = refimpl.rollout_is_weights(old_logp, behav_logp, mask, level=level, mode="none")
            out["is_clipped_frac"] = float((m & (w != raw)).sum()) / n
    elif cfg.correction == "decoupled" and cfg.behav_cap is not None:
        out["behav_capped_frac"] = float((m & (rho > cfg.behav_cap)).sum()) / n
    return out


__all__ = ["Correction", "WEIGHTED", "rollout_correction", "corrected_objective", "correction_stats"]
