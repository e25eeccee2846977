"""Covariance-selected tokens (spec v1.1): Clip-Cov's keep mask (``select.clip_cov``) and the KL-Cov
token loss (``loss.kl_cov``).

Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
arXiv:2505.22617: the entropy of the policy falls with the covariance between a token's log-prob and
its advantage, so the few tokens of highest covariance are restrained. Both methods rank the valid
tokens of the batch passed in by

    cov_t = (A_t − Ā) · (logp_t − l̄),   Ā = (1/N) Σ_valid A,   l̄ = (1/N) Σ_valid logp,

N the number of valid tokens of the whole batch (every row together, a ``[B]`` advantage counted once
per valid token of its row). Clip-Cov drops ``n`` tokens drawn at random among the unclipped ones whose
covariance lies strictly between two bounds; KL-Cov adds ``coef·|logp − old_logp|`` on the ``n`` tokens
of largest covariance. ``n = max(1, ⌊fraction·N⌋)`` (the product one float64 multiplication, as Python
computes it) when N ≥ 1.

The selection reads ``logp`` as a constant (no gradient flows through it). The random draw of the
frameworks (``torch.randperm`` over the candidates) is an input here: ``draws`` [B, T], one number per
token; the candidates with the smallest draws are cut. Ties (equal draws, equal covariances) go to
the token earlier in row-major order (smaller b, then smaller t).
"""

from __future__ import annotations

import math

import numpy as np

from oracle.policy_losses import _advantage_at, _exp, _policy_inputs, _product
from oracle.validation import (
    check_real,
    check_token_array,
    check_token_upstream,
    to_float64,
)

__all__ = ["clip_cov_mask", "kl_cov_token_loss", "kl_cov_token_loss_grad"]


def _valid_tokens(mask: np.ndarray) -> list[tuple[int, int]]:
    """The valid positions (b, t) in row-major order: b first, then t."""
    B, T = mask.shape
    return [(b, t) for b in range(B) for t in range(T) if mask[b, t]]


def _covariances(logp: np.ndarray, A: np.ndarray, valid: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """cov_t = (A_t − Ā)·(logp_t − l̄) for every valid token, the means over all valid tokens."""
    N = len(valid)
    A_bar = 0.0
    l_bar = 0.0
    for b, t in valid:
        A_bar += _advantage_at(A, b, t)
        l_bar += float(logp[b, t])
    A_bar /= N
    l_bar /= N
    return {(b, t): _product(_advantage_at(A, b, t) - A_bar, float(logp[b, t]) - l_bar) for b, t in valid}


def _count(fraction: float, N: int) -> int:
    """n = max(1, ⌊fraction·N⌋), fraction·N one float64 product (0.29·100 = 28.999999999999996 -> 28)."""
    return max(1, math.floor(fraction * N))


def _fraction(fn: str, fraction) -> float:
    return check_real(fn, "fraction", fraction, gt=0.0, le=1.0)


def clip_cov_mask(logp, old_logp, advantages, mask, draws, *, fraction=2e-4, cov_low=1.0, cov_high=5.0,
                  eps_low=0.2, eps_high=0.2):
    """Clip-Cov: the keep mask that drops n randomly drawn high-covariance tokens.

    Spec: select.clip_cov (v1), added by spec v1.1
    Equation (valid tokens of the whole batch, N of them):
        cov_t = (A_t − Ā)·(logp_t − l̄),  Ā, l̄ the means over the N valid tokens
        r_t = exp(logp_t − old_logp_t)
        clipped_t: A_t > 0 and r_t > 1 + ε_high, or A_t < 0 and r_t < 1 − ε_low (PPO's clipped branch)
        C = { valid t : not clipped_t and cov_low < cov_t < cov_high }   (both bounds exclusive)
        n = max(1, ⌊fraction·N⌋)
        cut = the min(n, |C|) members of C with the smallest draws (ties: earlier in row-major order)
        keep_t = valid_t and t ∉ cut
    Source: arXiv:2505.22617 (Clip-Cov); verl ``compute_policy_loss_clip_cov`` (core_algos.py:1743-1845,
        0.9.1), which draws the cut tokens with ``torch.randperm`` over C: sorting C by i.i.d. draws is
        that uniform permutation, made an input.
    Shapes: logp, old_logp, draws [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] bool.
    Edge cases: no valid token: all False; no candidate: keep = mask; masked positions never read.
    The Clip-Cov loss is ``ppo_token_loss(..., dual_clip=None) · keep``.
    """
    fn = "clip_cov_mask"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    draws = to_float64(check_token_array(fn, "draws", draws, mask))
    fraction = _fraction(fn, fraction)
    cov_low = check_real(fn, "cov_low", cov_low)
    cov_high = check_real(fn, "cov_high", cov_high)
    if not cov_low < cov_high:
        raise ValueError(f"{fn}: cov_high: expected a number > cov_low = {cov_low!r}, got {cov_high!r}")
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)

    keep = mask.copy()
    valid = _valid_tokens(mask)
    if not valid:
        return keep
    cov = _covariances(logp, A, valid)

    # candidates: unclipped valid tokens whose covariance lies strictly inside (cov_low, cov_high)
    candidates = []
    for b, t in valid:
        A_t = _advantage_at(A, b, t)
        r_t = _exp(float(logp[b, t]) - float(old_logp[b, t]))
        clipped = (A_t > 0 and r_t > 1.0 + eps_high) or (A_t < 0 and r_t < 1.0 - eps_low)
        if not clipped and cov_low < cov[(b, t)] < cov_high:
            candidates.append((b, t))

    # the n candidates with the smallest draws are cut (a stable sort: equal draws keep row-major order)
    n = _count(fraction, len(valid))
    ordered = sorted(candidates, key=lambda bt: float(draws[bt]))
    for b, t in ordered[:n]:
        keep[b, t] = False
    return keep


def _kl_cov_params(fn: str, fraction, coef) -> tuple[float, float]:
    return _fraction(fn, fraction), check_real(fn, "coef", coef, ge=0.0)


def _kl_cov_selected(logp: np.ndarray, A: np.ndarray, mask: np.ndarray, fraction: float) -> np.ndarray:
    """[B, T] bool: the n valid tokens of largest covariance (ties: earlier in row-major order)."""
    selected = np.zeros(mask.shape, dtype=bool)
    valid = _valid_tokens(mask)
    if not valid:
        return selected
    cov = _covariances(logp, A, valid)
    n = _count(fraction, len(valid))
    ordered = sorted(valid, key=lambda bt: -cov[bt])  # stable: equal covariances keep row-major order
    for b, t in ordered[:n]:
        selected[b, t] = True
    return selected


def kl_cov_token_loss(logp, old_logp, advantages, mask, *, fraction=2e-4, coef=0.1):
    """KL-Cov: the unclipped ratio loss with a |log-ratio| penalty on the n tokens of largest covariance.

    Spec: loss.kl_cov (v1), added by spec v1.1
    Equation (valid tokens of the whole batch, N of them):
        cov_t = (A_t − Ā)·(logp_t − l̄),  Ā, l̄ the means over the N valid tokens
        S = the n = max(1, ⌊fraction·N⌋) valid tokens of largest cov_t (ties: earlier in row-major order)
        Δ_t = logp_t − old_logp_t,  r_t = e^(Δ_t)
        L_t = −A_t·r_t + coef·|Δ_t|·[t ∈ S]
    Source: arXiv:2505.22617 (KL-Cov); verl ``compute_policy_loss_kl_cov`` (core_algos.py:1848-1925,
        0.9.1: kl_cov_ratio 2e-4, ppo_kl_coef 0.1 from ActorConfig).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: no clip; A = 0 with an overflowing ratio gives 0 (0·inf := 0); no valid token: all 0;
        masked positions 0 and never read.
    """
    fn = "kl_cov_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    fraction, coef = _kl_cov_params(fn, fraction, coef)
    S = _kl_cov_selected(logp, A, mask, fraction)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            delta_t = float(logp[b, t]) - float(old_logp[b, t])
            loss[b, t] = _product(-_advantage_at(A, b, t), _exp(delta_t))
            if S[b, t]:
                loss[b, t] += coef * abs(delta_t)
    return loss


def kl_cov_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, fraction=2e-4, coef=0.1):
    """Vector-Jacobian product of :func:`kl_cov_token_loss`: dL/d logp [B, T].

    Spec: loss.kl_cov (v1), gradient: the selection S is a constant (no gradient through the
    covariance); ∂L_t/∂logp_t = −A_t·r_t + coef·sign(Δ_t)·[t ∈ S], with sign(0) = 0 (the spec's rule
    for |Δ| at Δ = 0, as torch.abs's gradient).
    """
    fn = "kl_cov_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    fraction, coef = _kl_cov_params(fn, fraction, coef)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    S = _kl_cov_selected(logp, A, mask, fraction)
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            delta_t = float(logp[b, t]) - float(old_logp[b, t])
            dL = _product(-_advantage_at(A, b, t), _exp(delta_t))
            if S[b, t]:
                dL += coef * float(np.sign(delta_t))
            grad[b, t] = _product(float(u[b, t]), dL)
    return grad
