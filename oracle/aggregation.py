"""Reduce a per-token loss [B, T] to the scalar objective (spec ids ``agg.*``).

``num_tokens`` / ``num_seqs`` replace the local counts by global ones (micro-batches, gradient
accumulation, data-parallel ranks): with the global counts, the results of the parts of a
partition of the batch sum to the result of the whole batch, for every mode.
"""

from __future__ import annotations

import numpy as np

from oracle.validation import check_choice, check_mask, check_optional_real, check_real, check_token_array, to_float64

__all__ = ["aggregate", "aggregate_grad", "AGGREGATION_MODES"]

AGGREGATION_MODES = (
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "token_sum",
)


def _inputs(fn, token_loss, mask, mode, norm_length, num_tokens, num_seqs):
    mask = check_mask(fn, mask)
    loss = check_token_array(fn, "token_loss", token_loss, mask)
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    norm_length = check_optional_real(fn, "norm_length", norm_length, gt=0.0)
    if mode == "seq_mean_token_sum_norm" and norm_length is None:
        raise ValueError(
            f"{fn}: norm_length: expected a number > 0 for mode='seq_mean_token_sum_norm' "
            f"(Dr. GRPO constant normaliser), got None"
        )
    num_tokens = check_optional_real(fn, "num_tokens", num_tokens, ge=0.0)
    num_seqs = check_optional_real(fn, "num_seqs", num_seqs, ge=0.0)
    return to_float64(loss), mask, mode, norm_length, num_tokens, num_seqs


def _token_weights(mask, mode, norm_length, num_tokens, num_seqs):
    """w[b, t] = ∂(aggregate)/∂l[b, t]; every mode is linear, aggregate = Σ_{b,t} w[b, t] · l[b, t].

        n_b = Σ_t m[b, t],   N = num_tokens or Σ_b n_b,   S = num_seqs or B
        token_mean:               w = 1/N                       (0 when N = 0)
        seq_mean_token_mean:      w = 1/(S · n_b)
        seq_mean_token_sum:       w = 1/S
        seq_mean_token_sum_norm:  w = 1/(S · norm_length)
        token_sum:                w = 1
    at valid (b, t); 0 at masked positions. S = 0 (an empty batch) gives w = 0.
    """
    B, T = mask.shape
    n = [sum(1 for t in range(T) if mask[b, t]) for b in range(B)]
    N = num_tokens if num_tokens is not None else float(sum(n))
    S = num_seqs if num_seqs is not None else float(B)
    w = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            if mode == "token_mean":
                w[b, t] = 1.0 / N if N > 0 else 0.0
            elif mode == "seq_mean_token_mean":
                w[b, t] = 1.0 / (S * n[b]) if S > 0 else 0.0
            elif mode == "seq_mean_token_sum":
                w[b, t] = 1.0 / S if S > 0 else 0.0
            elif mode == "seq_mean_token_sum_norm":
                w[b, t] = 1.0 / (S * norm_length) if S > 0 else 0.0
            else:  # token_sum
                w[b, t] = 1.0
    return w


def aggregate(token_loss, mask, *, mode, norm_length=None, num_tokens=None, num_seqs=None):
    """Aggregate a per-token loss into the scalar objective.

    Spec: agg.token_mean, agg.seq_mean_token_mean, agg.seq_mean_token_sum,
          agg.seq_mean_token_sum_norm, agg.token_sum (v1)
    Equation (l token loss, m mask, n_b = Σ_t m[b, t], N = num_tokens or Σ_b n_b, S = num_seqs or B):
        token_mean               = Σ_{b,t} l·m / N                       (0 when N = 0)
        seq_mean_token_mean      = (1/S) Σ_b ( Σ_t l·m / n_b )           (a row with n_b = 0 adds 0, counts in S)
        seq_mean_token_sum       = (1/S) Σ_b Σ_t l·m
        seq_mean_token_sum_norm  = (1/S) Σ_b Σ_t l·m / norm_length
        token_sum                = Σ_{b,t} l·m
    Source: GRPO's per-sequence mean, DeepSeekMath arXiv:2402.03300 eq. (3); token-level mean,
        DAPO arXiv:2503.14476 (token-level policy-gradient loss); constant normaliser, Dr. GRPO
        arXiv:2503.20783; mode names as in verl ``agg_loss``.
    Shapes: token_loss [B, T], mask [B, T] -> float64 scalar (``np.float64``).
    Edge cases: masked positions never read; empty counts give 0, never NaN; ``num_tokens``/``num_seqs``
        (>= 0) override the local counts so that the parts of a partition sum to the whole.
    """
    fn = "aggregate"
    l, mask, mode, norm_length, num_tokens, num_seqs = _inputs(
        fn, token_loss, mask, mode, norm_length, num_tokens, num_seqs
    )
    B, T = mask.shape
    n = [sum(1 for t in range(T) if mask[b, t]) for b in range(B)]
    N = num_tokens if num_tokens is not None else float(sum(n))
    S = num_seqs if num_seqs is not None else float(B)

    if mode == "token_mean":
        total = 0.0
        for b in range(B):
            for t in range(T):
                if mask[b, t]:
                    total += l[b, t]
        return np.float64(total / N if N > 0 else 0.0)

    if mode == "token_sum":
        total = 0.0
        for b in range(B):
            for t in range(T):
                if mask[b, t]:
                    total += l[b, t]
        return np.float64(total)

    # sequence modes: a per-row reduction, then the mean over S sequences
    sum_over_rows = 0.0
    for b in range(B):
        row_sum = 0.0
        for t in range(T):
            if mask[b, t]:
                row_sum += l[b, t]
        if mode == "seq_mean_token_mean":
            row_value = row_sum / n[b] if n[b] > 0 else 0.0
        elif mode == "seq_mean_token_sum":
            row_value = row_sum
        else:  # seq_mean_token_sum_norm
            row_value = row_sum / norm_length
        sum_over_rows += row_value
    return np.float64(sum_over_rows / S if S > 0 else 0.0)


def aggregate_grad(token_loss, mask, upstream, *, mode, norm_length=None, num_tokens=None, num_seqs=None):
    """Vector-Jacobian product of :func:`aggregate`: dL/d token_loss [B, T].

    Spec: agg.* (v1), gradient.
    Derivative: every mode is linear in l, aggregate = Σ_{b,t} w[b, t] · l[b, t], so
        dL/dl[b, t] = upstream · w[b, t]
        w = 1/N (token_mean), 1/(S·n_b) (seq_mean_token_mean), 1/S (seq_mean_token_sum),
            1/(S·norm_length) (seq_mean_token_sum_norm), 1 (token_sum); 0 at masked positions.
    Example: rows with 2 and 6 valid tokens: 1/8; 1/4 and 1/12; 1/2; 1/12 (norm_length 6); 1.
    Shapes: upstream a float -> [B, T] float64.
    """
    fn = "aggregate_grad"
    _, mask, mode, norm_length, num_tokens, num_seqs = _inputs(
        fn, token_loss, mask, mode, norm_length, num_tokens, num_seqs
    )
    u = check_real(fn, "upstream", upstream)
    w = _token_weights(mask, mode, norm_length, num_tokens, num_seqs)
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                grad[b, t] = u * w[b, t]
    return grad
