"""Composite objectives built from the spec'd pieces (``loss.policy``).

``policy_loss`` is the GRPO/DAPO policy objective as TRL's GRPOTrainer and verl's actor
(``use_kl_loss``) compute it: PPO-clip against the sampling policy plus a KL penalty against the
reference policy in the loss, aggregated to a scalar. It takes the old *and* the reference log-probs,
so an implementation that confuses them (bug-catalogue class 14) or adds the KL with the wrong sign
(class 7) is visible in one call.
"""

from __future__ import annotations

import numpy as np

from oracle.aggregation import AGGREGATION_MODES, aggregate, aggregate_grad
from oracle.kl import KL_ESTIMATORS, kl_penalty, kl_penalty_grad
from oracle.policy_losses import ppo_token_loss, ppo_token_loss_grad
from oracle.validation import (
    check_advantages,
    check_bool,
    check_choice,
    check_mask,
    check_optional_real,
    check_real,
    check_token_array,
    to_float64,
)

__all__ = ["policy_loss", "policy_loss_grad", "corrected_policy_loss", "corrected_policy_loss_grad"]


def _inputs(fn, logp, old_logp, ref_logp, advantages, mask, kl_coef, kl_estimator, mode, *, eps_low, eps_high,
            dual_clip, norm_length, num_tokens, num_seqs):
    """Validate every argument under the composite's own name (the pieces validate again), so an
    error names `policy_loss`, not the piece that would have found it."""
    mask = check_mask(fn, mask)
    check_token_array(fn, "logp", logp, mask)
    check_token_array(fn, "old_logp", old_logp, mask)
    check_token_array(fn, "ref_logp", ref_logp, mask)
    check_advantages(fn, advantages, mask)
    check_real(fn, "kl_coef", kl_coef)
    check_choice(fn, "kl_estimator", kl_estimator, KL_ESTIMATORS)
    check_choice(fn, "mode", mode, AGGREGATION_MODES)
    check_real(fn, "eps_low", eps_low, ge=0.0)
    check_real(fn, "eps_high", eps_high, ge=0.0)
    check_optional_real(fn, "dual_clip", dual_clip, gt=1.0)
    check_optional_real(fn, "norm_length", norm_length, gt=0.0)
    check_optional_real(fn, "num_tokens", num_tokens, ge=0.0)
    check_optional_real(fn, "num_seqs", num_seqs, ge=0.0)


def _token_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, kl_coef, kl_estimator):
    ppo = ppo_token_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
    if kl_coef == 0.0:
        return ppo
    kl = kl_penalty(logp, ref_logp, mask, estimator=kl_estimator)
    return ppo + kl_coef * kl


def policy_loss(logp, old_logp, ref_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None,
                kl_coef=0.0, kl_estimator="k3", mode="token_mean", norm_length=None, num_tokens=None,
                num_seqs=None):
    """The clipped policy objective with an in-loss KL penalty, reduced to a scalar.

    Spec: loss.policy (v1)
    Equation:
        ℓ_t = ppo_token_loss(logp, old_logp, A; ε_low, ε_high, dual_clip)_t
              + kl_coef · kl_penalty(logp, ref_logp; kl_estimator)_t          (valid t)
        L   = aggregate(ℓ, mask; mode, norm_length, num_tokens, num_seqs)
    The ratio is taken against the *sampling* policy (old_logp), the KL against the *reference*
    policy (ref_logp), and the KL is *added* (the loss is minimised, so divergence is penalised).
    Source: GRPO, DeepSeekMath arXiv:2402.03300 eq. (3) (clipped surrogate − β·D_KL with the k3
        estimator, eq. (4), as a loss); DAPO arXiv:2503.14476 eq. (8) (token-level mean); TRL
        GRPOTrainer (``beta``) and verl ``use_kl_loss`` / ``kl_loss_type``.
    Shapes: logp, old_logp, ref_logp [B, T], advantages [B] or [B, T], mask [B, T] -> float64 scalar.
    Edge cases: kl_coef = 0 ignores ref_logp; on-policy (old = ref = logp) gives aggregate(−A);
        masked positions never read; the parts of a partition sum to the whole with global counts.
    """
    fn = "policy_loss"
    _inputs(fn, logp, old_logp, ref_logp, advantages, mask, kl_coef, kl_estimator, mode, eps_low=eps_low,
            eps_high=eps_high, dual_clip=dual_clip, norm_length=norm_length, num_tokens=num_tokens,
            num_seqs=num_seqs)
    token_loss = _token_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip,
                             kl_coef, kl_estimator)
    return aggregate(token_loss, mask, mode=mode, norm_length=norm_length, num_tokens=num_tokens,
                     num_seqs=num_seqs)


def policy_loss_grad(logp, old_logp, ref_logp, advantages, mask, upstream, *, eps_low=0.2, eps_high=0.2,
                     dual_clip=None, kl_coef=0.0, kl_estimator="k3", mode="token_mean", norm_length=None,
                     num_tokens=None, num_seqs=None):
    """Vector-Jacobian product of :func:`policy_loss`: dL/d logp [B, T].

    Spec: loss.policy (v1), gradient (old_logp, ref_logp and advantages are constants).
    Derivative (chain rule through the aggregate, u = upstream):
        g_t       = aggregate_grad(ℓ, mask, u)_t                       (u/N, u/(S·n_b), …)
        dL/dlogp  = ppo_token_loss_grad(…, g) + kl_coef · kl_penalty_grad(…, g)
    """
    fn = "policy_loss_grad"
    _inputs(fn, logp, old_logp, ref_logp, advantages, mask, kl_coef, kl_estimator, mode, eps_low=eps_low,
            eps_high=eps_high, dual_clip=dual_clip, norm_length=norm_length, num_tokens=num_tokens,
            num_seqs=num_seqs)
    u = check_real(fn, "upstream", upstream)
    token_loss = _token_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip,
                             kl_coef, kl_estimator)
    g = aggregate_grad(token_loss, mask, u, mode=mode, norm_length=norm_length, num_tokens=num_tokens,
                       num_seqs=num_seqs)
    grad = ppo_token_loss_grad(logp, old_logp, advantages, mask, g, eps_low=eps_low, eps_high=eps_high,
                               dual_clip=dual_clip)
    if kl_coef != 0.0:
        grad = grad + kl_coef * kl_penalty_grad(logp, ref_logp, mask, g, estimator=kl_estimator)
    return grad


# ----------------------------------------------------------------------------------------------
# offpolicy.loss (spec v1.1): the policy objective with the rollout correction applied
# ----------------------------------------------------------------------------------------------

REJECTED = ("drop", "zero")


def _corrected_inputs(fn, logp, old_logp, ref_logp, advantages, is_weights, keep_mask, mask, kl_coef, kl_estimator,
                      mode, rejected, weight_kl, **rest):
    _inputs(fn, logp, old_logp, ref_logp, advantages, mask, kl_coef, kl_estimator, mode, **rest)
    mask = check_mask(fn, mask)
    w = np.where(mask, to_float64(check_token_array(fn, "is_weights", is_weights, mask)), 0.0)  # read where valid
    for b, t in zip(*np.nonzero(mask)):
        if w[b, t] < 0:
            raise ValueError(f"{fn}: is_weights: expected weights >= 0 at valid positions, got {w[b, t]!r} at {(int(b), int(t))}")
    keep = check_mask(fn, keep_mask, "keep_mask", first_column=False)
    if keep.shape != mask.shape:
        raise ValueError(f"{fn}: keep_mask: expected shape {mask.shape} (the mask's), got {keep.shape}")
    keep = keep & mask  # read only at valid positions
    check_choice(fn, "rejected", rejected, REJECTED)
    check_bool(fn, "weight_kl", weight_kl)
    return mask, w, keep


def _corrected_token_loss(logp, old_logp, ref_logp, advantages, w, keep, mask, counted, eps_low, eps_high, dual_clip,
                          kl_coef, kl_estimator, weight_kl):
    """ℓ_t = keep_t·w_t·ppo_t + kl_coef·(w_t if weight_kl else 1)·kl_t at the counted positions."""
    ppo = ppo_token_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
    kl = kl_penalty(logp, ref_logp, mask, estimator=kl_estimator) if kl_coef != 0.0 else np.zeros(mask.shape)
    B, T = mask.shape
    loss = np.zeros((B, T))
    for b in range(B):
        for t in range(T):
            if not counted[b, t]:
                continue
            coefficient = w[b, t] if keep[b, t] else 0.0
            pg = 0.0 if coefficient == 0.0 else coefficient * ppo[b, t]  # 0 · inf := 0
            kl_weight = kl_coef * (w[b, t] if weight_kl else 1.0)
            loss[b, t] = pg + (0.0 if kl_weight == 0.0 else kl_weight * kl[b, t])
    return loss


def corrected_policy_loss(logp, old_logp, ref_logp, advantages, is_weights, keep_mask, mask, *, eps_low=0.2,
                          eps_high=0.2, dual_clip=None, kl_coef=0.0, kl_estimator="k3", mode="token_mean",
                          norm_length=None, num_tokens=None, num_seqs=None, weight_kl=False, rejected="drop"):
    """The policy objective with the rollout-engine correction applied, reduced to a scalar.

    Spec: offpolicy.loss (v1), added by spec v1.1
    Equation (w = is_weights, k = keep_mask, both constants; valid t):
        counted_t = mask_t ∧ k_t   (rejected="drop": a rejected token leaves the loss and the count)
                  = mask_t         (rejected="zero": its policy term is 0, it still counts)
        ℓ_t = k_t · w_t · ppo_token_loss(logp, old_logp, A)_t
              + kl_coef · (w_t if weight_kl else 1) · kl_penalty(logp, ref_logp; kl_estimator)_t
        L   = aggregate(ℓ, counted; mode, norm_length, num_tokens, num_seqs)
    The weights correct the policy-gradient term for the engine's sampling distribution; the KL
    regulariser is not weighted unless weight_kl (ms-swift). w and k come from rollout_is_weights /
    rollout_rejection_mask (or w = 1, k = off_policy_sequence_mask for OPSM).
    Source: TIS (Yao et al. 2025), IcePop (Ring-1T 2025), verl rollout_corr_helper.py
        (`modified_response_mask`: rejected tokens leave the loss), TRL grpo_trainer.py:3130-3150 (loss ×
        OPSM mask × ratio, then + β·KL over the original mask).
    Shapes: logp, old_logp, ref_logp, is_weights, keep_mask, mask [B, T]; advantages [B] or [B, T] -> scalar.
    Edge cases: w = 1 and k = mask gives policy_loss exactly; a zero weight times an overflowing ratio is 0;
        a fully rejected batch under "drop" is 0 (nothing counted).
    """
    fn = "corrected_policy_loss"
    rest = dict(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, norm_length=norm_length,
                num_tokens=num_tokens, num_seqs=num_seqs)
    mask, w, keep = _corrected_inputs(fn, logp, old_logp, ref_logp, advantages, is_weights, keep_mask, mask, kl_coef,
                                      kl_estimator, mode, rejected, weight_kl, **rest)
    counted = mask & keep if rejected == "drop" else mask
    token_loss = _corrected_token_loss(logp, old_logp, ref_logp, advantages, w, keep, mask, counted, eps_low, eps_high,
                                       dual_clip, kl_coef, kl_estimator, weight_kl)
    return aggregate(token_loss, counted, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)


def corrected_policy_loss_grad(logp, old_logp, ref_logp, advantages, is_weights, keep_mask, mask, upstream, *,
                               eps_low=0.2, eps_high=0.2, dual_clip=None, kl_coef=0.0, kl_estimator="k3",
                               mode="token_mean", norm_length=None, num_tokens=None, num_seqs=None, weight_kl=False,
                               rejected="drop"):
    """Vector-Jacobian product of :func:`corrected_policy_loss`: dL/d logp [B, T].

    Spec: offpolicy.loss (v1), gradient (is_weights, keep_mask, old_logp, ref_logp, A are constants).
        g_t      = aggregate_grad(ℓ, counted, u)_t
        dL/dlogp = ppo_token_loss_grad(…, k·w·g) + kl_coef · kl_penalty_grad(…, (w if weight_kl else 1)·g)
    """
    fn = "corrected_policy_loss_grad"
    rest = dict(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, norm_length=norm_length,
                num_tokens=num_tokens, num_seqs=num_seqs)
    mask, w, keep = _corrected_inputs(fn, logp, old_logp, ref_logp, advantages, is_weights, keep_mask, mask, kl_coef,
                                      kl_estimator, mode, rejected, weight_kl, **rest)
    u = check_real(fn, "upstream", upstream)
    counted = mask & keep if rejected == "drop" else mask
    token_loss = _corrected_token_loss(logp, old_logp, ref_logp, advantages, w, keep, mask, counted, eps_low, eps_high,
                                       dual_clip, kl_coef, kl_estimator, weight_kl)
    g = aggregate_grad(token_loss, counted, u, mode=mode, norm_length=norm_length, num_tokens=num_tokens,
                       num_seqs=num_seqs)
    pg_upstream = np.where(counted & keep, w * g, 0.0)
    grad = ppo_token_loss_grad(logp, old_logp, advantages, mask, pg_upstream, eps_low=eps_low, eps_high=eps_high,
                               dual_clip=dual_clip)
    if kl_coef != 0.0:
        kl_upstream = np.where(counted, (w if weight_kl else 1.0) * g, 0.0)
        grad = grad + kl_coef * kl_penalty_grad(logp, ref_logp, mask, kl_upstream, estimator=kl_estimator)
    return grad
