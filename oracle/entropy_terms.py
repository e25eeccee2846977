"""Entropy terms of the policy objective (spec v1.1): the high-entropy token mask (``entropy.top_mask``)
and the entropy bonus added to the loss (``loss.entropy``).

Both read per-token entropies ``H`` [B, T] as ``token_entropy`` returns them (the entropy of the
distribution that predicted token t, 0 where the mask is False). Literal: loops over b and t, one
equation per block.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from oracle.aggregation import AGGREGATION_MODES, aggregate, aggregate_grad
from oracle.validation import (
    check_choice,
    check_mask,
    check_optional_real,
    check_real,
    check_token_array,
    float_array,
    to_float64,
)

__all__ = ["entropy_top_mask", "entropy_bonus", "entropy_bonus_grad"]


# ----------------------------------------------------------------------------------------------
# entropy.top_mask (spec v1.1)
# ----------------------------------------------------------------------------------------------


def _pooled(fn, pooled_entropy):
    """``pooled_entropy``: a 1-D float array-like (list, tuple or array) of finite values, or None."""
    if pooled_entropy is None:
        return None
    if isinstance(pooled_entropy, (numbers.Number, np.generic)):
        raise TypeError(f"{fn}: pooled_entropy: expected a 1-D array of entropies, got a number {pooled_entropy!r}")
    arr = float_array(fn, "pooled_entropy", pooled_entropy, 1, "[N] (the valid entropies of every part of the batch)")
    values = to_float64(arr)
    for i in range(values.shape[0]):
        if not math.isfinite(values[i]):
            raise ValueError(f"{fn}: pooled_entropy: expected finite values, got {values[i]!r} at index {i}")
    return values


def entropy_quantile(values, q):
    """The q-quantile of ``values`` by linear interpolation between order statistics (Hyndman and
    Fan's type 7, the default of ``torch.quantile`` and ``numpy.quantile``).

    Equation: x_(0) <= ... <= x_(n-1) the sorted values, p = q·(n − 1), i = ⌊p⌋, f = p − i:
        quantile = x_(i)                              if f = 0 (then p is an order statistic)
                 = x_(i) + f·(x_(i+1) − x_(i))        otherwise
    Undefined (None) for an empty list. ``values`` must be finite, 0 <= q <= 1.
    """
    x = sorted(float(v) for v in values)
    n = len(x)
    if n == 0:
        return None
    p = q * (n - 1)
    i = math.floor(p)
    f = p - i
    if f == 0.0 or i >= n - 1:
        return x[min(i, n - 1)]
    return x[i] + f * (x[i + 1] - x[i])


def entropy_top_mask(entropy, mask, *, rho=1.0, pooled_entropy=None):
    """Keep the top-ρ fraction of the batch's tokens by entropy ("Beyond the 80/20 rule").

    Spec: entropy.top_mask (v1), added by spec v1.1
    Equation:
        P      = pooled_entropy if given, else {H[b, t] : mask[b, t]}   (every valid entropy of the batch)
        τ      = quantile(P, 1 − ρ), linear interpolation (entropy_quantile)
        keep[b, t] = mask[b, t] ∧ H[b, t] ≥ τ
    P is the batch's statistic: a rank that holds part of the batch passes the valid entropies of *all*
    parts as ``pooled_entropy`` (what an all-gather of each part's H[mask] gives), so that the parts'
    masks are the whole batch's mask (the invariant:partition check).
    Source: Wang et al. 2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective RL
        for LLM Reasoning", arXiv:2506.01939 (ρ = 0.2 recommended); TRL ``top_entropy_quantile``
        (``GRPOTrainer.get_high_entropy_mask``, quantile of the entropies gathered from every rank).
    Shapes: entropy [B, T] float, mask [B, T] -> bool [B, T]; pooled_entropy [N] or None.
    Edge cases: ρ = 1 keeps every valid token (τ = min); ρ = 0 keeps the tokens equal to the maximum
        (ties all kept); ties at τ are kept (≥); an empty pool (no valid token in the batch) keeps
        nothing; masked positions are never read and are False.
    """
    fn = "entropy_top_mask"
    mask = check_mask(fn, mask)
    H = to_float64(check_token_array(fn, "entropy", entropy, mask))
    rho = check_real(fn, "rho", rho, ge=0.0, le=1.0)
    pooled = _pooled(fn, pooled_entropy)
    B, T = mask.shape
    # P: the batch's valid entropies
    if pooled is None:
        P = [H[b, t] for b in range(B) for t in range(T) if mask[b, t]]
    else:
        P = [pooled[i] for i in range(pooled.shape[0])]
    # τ = quantile(P, 1 − ρ)
    tau = entropy_quantile(P, 1.0 - rho)
    keep = np.zeros((B, T), dtype=bool)
    if tau is None:  # an empty batch: nothing to keep
        return keep
    for b in range(B):
        for t in range(T):
            keep[b, t] = bool(mask[b, t]) and H[b, t] >= tau
    return keep


# ----------------------------------------------------------------------------------------------
# loss.entropy (spec v1.1)
# ----------------------------------------------------------------------------------------------


def _bonus_inputs(fn, entropy, mask, entropy_coef, mode, norm_length, num_tokens, num_seqs):
    mask = check_mask(fn, mask)
    H = to_float64(check_token_array(fn, "entropy", entropy, mask))
    c = check_real(fn, "entropy_coef", entropy_coef)
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    norm_length = check_optional_real(fn, "norm_length", norm_length, gt=0.0)
    if mode == "seq_mean_token_sum_norm" and norm_length is None:
        raise ValueError(f"{fn}: norm_length: expected a number > 0 for mode='seq_mean_token_sum_norm', got None")
    check_optional_real(fn, "num_tokens", num_tokens, ge=0.0)
    check_optional_real(fn, "num_seqs", num_seqs, ge=0.0)
    return H, mask, c, mode


def entropy_bonus(entropy, mask, *, entropy_coef, mode, norm_length=None, num_tokens=None, num_seqs=None):
    """The entropy bonus as the term it adds to the loss: −c·agg(H).

    Spec: loss.entropy (v1), added by spec v1.1
    Equation:
        L_H = −entropy_coef · aggregate(H, mask; mode, norm_length, num_tokens, num_seqs)
    The objective with an entropy bonus is ``policy_loss(...) + entropy_bonus(...)``: minimising it
    raises the entropy (exploration). ``mode`` is the bonus's own aggregation, which need not be the
    policy term's (TRL: always token_mean; verl: the actor's loss_agg_mode).
    Source: Williams and Peng 1991 (entropy regularisation); Mnih et al. 2016 arXiv:1602.01783 eq. (7)
        (−β·H added to the policy loss); verl ``workers/utils/losses.py`` (policy_loss −=
        entropy_coeff · agg_loss(entropy, loss_agg_mode)); TRL ``entropy_coef`` (grpo_trainer.py).
    Shapes: entropy [B, T], mask [B, T] -> float64 scalar.
    Edge cases: entropy_coef = 0 gives 0 (entropy still validated); an empty batch gives 0; masked
        positions are never read; with the step's num_tokens / num_seqs the parts of a partition sum to
        the whole.
    """
    fn = "entropy_bonus"
    H, mask, c, mode = _bonus_inputs(fn, entropy, mask, entropy_coef, mode, norm_length, num_tokens, num_seqs)
    agg_H = aggregate(H, mask, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)
    return -c * agg_H


def entropy_bonus_grad(entropy, mask, upstream, *, entropy_coef, mode, norm_length=None, num_tokens=None,
                       num_seqs=None):
    """Vector-Jacobian product of :func:`entropy_bonus`: dL/d entropy [B, T].

    Spec: loss.entropy (v1), gradient: the entropy is the input (its own gradient reaches the logits
    through token_entropy_grad): dL/dH[b, t] = −entropy_coef · u · w[b, t], with w the aggregate's
    token weights (1/N for token_mean, 1/(S·n_b) for seq_mean_token_mean, ...); 0 at masked positions.
    """
    fn = "entropy_bonus_grad"
    H, mask, c, mode = _bonus_inputs(fn, entropy, mask, entropy_coef, mode, norm_length, num_tokens, num_seqs)
    u = check_real(fn, "upstream", upstream)
    w = aggregate_grad(H, mask, 1.0, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                grad[b, t] = -c * u * w[b, t]
    return grad
