"""Log-probs and entropies straight from the last hidden state and the LM-head weight (spec ``logprob.fused``).

The fast implementations never materialise the [B, T, V] logits (chunked / fused LM head); the spec
value is simply the unfused one applied to ``z = hidden @ weight.T``:

    z[b, s, v] = Σ_d hidden[b, s, d] · weight[v, d]

The oracle computes ``z`` one position at a time (only for positions ``s = t-1`` that predict a
valid token ``t``), so hidden states at other positions are never read.
"""

from __future__ import annotations

import numpy as np

from oracle.logprobs import log_softmax
from oracle.validation import (
    check_hidden_and_weight,
    check_mask,
    check_real,
    check_token_ids,
    check_token_upstream,
    to_float64,
)

__all__ = [
    "token_logprobs_from_hidden", "token_logprobs_from_hidden_grad", "token_entropy_from_hidden",
    "token_entropy_from_hidden_grad",
]


def _inputs(fn, hidden, weight, mask, temperature):
    mask = check_mask(fn, mask)
    hidden, weight = check_hidden_and_weight(fn, hidden, weight, mask)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    return to_float64(hidden), to_float64(weight), mask, tau


def _logits_at(h_s: np.ndarray, W: np.ndarray) -> np.ndarray:
    """z_v = Σ_d W[v, d] · h_d for one position: [V]."""
    return W @ h_s


def token_logprobs_from_hidden(hidden, weight, input_ids, mask, *, temperature=1.0):
    """Per-token log-probabilities from hidden states and the LM-head weight.

    Spec: logprob.fused (v1)
    Equation:
        z[b, t-1] = weight · hidden[b, t-1]                      (z_v = Σ_d W_vd h_d)
        lp[b, t]  = z[b, t-1, x_t] / τ − logsumexp_v( z[b, t-1, v] / τ )   at valid t, 0 elsewhere
    i.e. exactly ``token_logprobs(hidden @ weight.T, input_ids, mask, temperature=τ)``.
    Source: as logprob.token (PPO arXiv:1707.06347 eq. 7; GRPO arXiv:2402.03300 eq. 3).
    Shapes: hidden [B, T, D], weight [V, D], input_ids [B, T] int, mask [B, T] -> [B, T] float64.
    Edge cases: hidden rows that predict no valid token are never read; masked positions are 0.
    """
    fn = "token_logprobs_from_hidden"
    h, W, mask, tau = _inputs(fn, hidden, weight, mask, temperature)
    x = check_token_ids(fn, input_ids, mask, W.shape[0])
    B, T = mask.shape
    lp = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            z = _logits_at(h[b, t - 1], W)
            lp[b, t] = log_softmax(z, tau)[x[b, t]]
    return lp


def token_logprobs_from_hidden_grad(hidden, weight, input_ids, mask, upstream, *, temperature=1.0):
    """Vector-Jacobian product of :func:`token_logprobs_from_hidden`: ``(dL/d hidden, dL/d weight)``.

    Spec: logprob.fused (v1), gradient.
    Derivative (u = upstream, p = softmax(z[b, t-1]/τ), g = dL/dz at row t-1):
        g_v                 = u[b, t] · ( [v = x_t] − p_v ) / τ
        dL/d hidden[b,t-1,d] = Σ_v g_v · W[v, d]              (= Wᵀ g)
        dL/d W[v, d]        += g_v · hidden[b, t-1, d]        (summed over every valid (b, t))
    Hidden rows that predict no valid token get exactly 0.
    Shapes: -> (d_hidden [B, T, D], d_weight [V, D]) float64.
    """
    fn = "token_logprobs_from_hidden_grad"
    h, W, mask, tau = _inputs(fn, hidden, weight, mask, temperature)
    x = check_token_ids(fn, input_ids, mask, W.shape[0])
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    d_hidden = np.zeros(h.shape, dtype=np.float64)
    d_weight = np.zeros(W.shape, dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            h_s = h[b, t - 1]
            p = np.exp(log_softmax(_logits_at(h_s, W), tau))
            onehot = np.zeros_like(p)
            onehot[x[b, t]] = 1.0
            g = u[b, t] * (onehot - p) / tau  # dL/dz at row t-1
            d_hidden[b, t - 1] = W.T @ g
            d_weight += np.outer(g, h_s)
    return d_hidden, d_weight


def token_entropy_from_hidden(hidden, weight, mask, *, temperature=1.0):
    """Per-token entropy from hidden states and the LM-head weight.

    Spec: logprob.fused (v1), entropy.
    Equation:
        z[b, t-1] = weight · hidden[b, t-1],   p = softmax(z[b, t-1] / τ)
        H[b, t]   = − Σ_v p_v log p_v   at valid t, 0 elsewhere
    i.e. exactly ``token_entropy(hidden @ weight.T, mask, temperature=τ)``.
    Source: as logprob.entropy (PPO arXiv:1707.06347 eq. 9).
    Shapes: hidden [B, T, D], weight [V, D], mask [B, T] -> [B, T] float64.
    """
    fn = "token_entropy_from_hidden"
    h, W, mask, tau = _inputs(fn, hidden, weight, mask, temperature)
    B, T = mask.shape
    H = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            log_p = log_softmax(_logits_at(h[b, t - 1], W), tau)
            p = np.exp(log_p)
            H[b, t] = -np.sum(p * log_p)
    return H


def token_entropy_from_hidden_grad(hidden, weight, mask, upstream, *, temperature=1.0):
    """Vector-Jacobian product of :func:`token_entropy_from_hidden`: ``(dL/d hidden, dL/d weight)``.

    Spec: logprob.fused (v1), entropy gradient.
    Derivative (u = upstream, p = softmax(z[b, t-1]/τ), H the entropy at (b, t)):
        g_k                  = u[b, t] · ( −p_k (log p_k + H) / τ )       (dL/dz, see token_entropy_grad)
        dL/d hidden[b,t-1,d] = Σ_k g_k · W[k, d]
        dL/d W[k, d]        += g_k · hidden[b, t-1, d]
    Shapes: -> (d_hidden [B, T, D], d_weight [V, D]) float64.
    """
    fn = "token_entropy_from_hidden_grad"
    h, W, mask, tau = _inputs(fn, hidden, weight, mask, temperature)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    d_hidden = np.zeros(h.shape, dtype=np.float64)
    d_weight = np.zeros(W.shape, dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            h_s = h[b, t - 1]
            log_p = log_softmax(_logits_at(h_s, W), tau)
            p = np.exp(log_p)
            H = -np.sum(p * log_p)
            g = u[b, t] * (-p * (log_p + H) / tau)
            d_hidden[b, t - 1] = W.T @ g
            d_weight += np.outer(g, h_s)
    return d_hidden, d_weight
