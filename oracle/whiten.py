"""Masked whitening of a per-token array over the whole batch (spec id ``adv.whiten``)."""

from __future__ import annotations

import math

import numpy as np

from oracle.validation import check_bool, check_int, check_mask, check_real, check_token_array, to_float64

__all__ = ["whiten"]


def whiten(x, mask, *, shift_mean=True, std_ddof=1, eps=1e-8):
    """Normalise ``x`` to zero mean and unit variance over all valid positions of the batch.

    Spec: adv.whiten (v1)
    Equation (n valid positions of the whole batch, k = std_ddof):
        μ   = (1/n) Σ_valid x
        var = Σ_valid (x − μ)² / (n − k),   0 when n − k <= 0
        out = (x − μ) / sqrt(var + eps)            shift_mean=True  (advantage whitening)
        out = (x − μ) / sqrt(var + eps) + μ        shift_mean=False (reward whitening, TRL/OpenAI)
    Source: advantage normalisation of PPO implementations ("The 37 implementation details of PPO",
        ICLR blog track 2022; "The N+ implementation details of RLHF with PPO", arXiv:2403.17031).
    Shapes: x [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: no valid position -> all 0; all-equal valid values -> exactly 0 (or μ), however many
        (the summation's rounding residue in μ would otherwise be divided by a std of the same size); a zero denominator (var + eps = 0) makes the normalised
        term 0 (never NaN); masked positions are exactly 0 and never enter μ or var.
    """
    fn = "whiten"
    mask = check_mask(fn, mask)
    x = check_token_array(fn, "x", x, mask)
    shift_mean = check_bool(fn, "shift_mean", shift_mean)
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    x = to_float64(x)
    B, T = mask.shape
    out = np.zeros((B, T), dtype=np.float64)

    valid = [(b, t) for b in range(B) for t in range(T) if mask[b, t]]
    n = len(valid)
    if n == 0:
        return out

    mu = 0.0
    for b, t in valid:
        mu += x[b, t]
    mu /= n
    if all(x[b, t] == x[valid[0]] for b, t in valid):
        mu = x[valid[0]]  # all equal: μ is the common value exactly (no summation residue, so x − μ = 0)

    sum_sq = 0.0
    for b, t in valid:
        sum_sq += (x[b, t] - mu) ** 2
    var = sum_sq / (n - std_ddof) if n - std_ddof > 0 else 0.0

    denominator = math.sqrt(var + eps)
    for b, t in valid:
        normalised = (x[b, t] - mu) / denominator if denominator > 0 else 0.0
        out[b, t] = normalised if shift_mean else normalised + mu
    return out
