"""Per-token log-probabilities and entropies from logits (spec ids ``logprob.token``, ``logprob.entropy``).

Token alignment (design.md): position ``t`` of every [B, T] output is about token ``input_ids[b, t]``,
which the model predicted from ``logits[b, t-1]``. Position 0 never has a prediction, so
``mask[:, 0]`` must be False. Masks come from positions, never from token values: a row where the
pad id equals the EOS id keeps its EOS as long as ``mask`` says so.

Literal transcription: a loop over rows ``b`` and positions ``t``; only the vocabulary axis of one
position is a NumPy vector.
"""

from __future__ import annotations

import numpy as np

from oracle.validation import (
    check_logits,
    check_mask,
    check_real,
    check_token_ids,
    check_token_upstream,
    to_float64,
)

__all__ = ["token_logprobs", "token_logprobs_grad", "token_entropy", "token_entropy_grad"]


def log_softmax(z: np.ndarray, temperature: float) -> np.ndarray:
    """``log softmax(z / τ)`` over a vocabulary vector ``z`` [V] (float64).

        a_v      = z_v / τ
        log p_v  = a_v − logsumexp_u(a_u),   logsumexp(a) = max(a) + log Σ_u exp(a_u − max(a))
    """
    a = z / temperature
    a_max = np.max(a)
    logsumexp_a = a_max + np.log(np.sum(np.exp(a - a_max)))
    return a - logsumexp_a


def _inputs(fn, logits, input_ids, mask, temperature):
    mask = check_mask(fn, mask)
    logits = check_logits(fn, logits, mask)
    input_ids = check_token_ids(fn, input_ids, mask, logits.shape[2])
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    return to_float64(logits), input_ids, mask, tau


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    """Log-probability of each sampled token under the tempered policy.

    Spec: logprob.token (v1)
    Equation:
        lp[b, t] = z[b, t-1, x_t] / τ − logsumexp_v( z[b, t-1, v] / τ )   at valid t, 0 elsewhere
        with x_t = input_ids[b, t], τ = temperature
    Source: the policy π_θ(x_t | x_<t) = softmax(z/τ) of every policy-gradient objective
        (PPO arXiv:1707.06347 eq. 7; GRPO arXiv:2402.03300 eq. 3); temperature as used by the sampler.
    Shapes: logits [B, T, V] float, input_ids [B, T] int, mask [B, T] -> [B, T] float64.
    Edge cases: masked positions are exactly 0 and their logits/ids are never read (ids there may be
        anything, e.g. -100); left and right padding give the same valid values; temperature > 0.
    """
    fn = "token_logprobs"
    z, x, mask, tau = _inputs(fn, logits, input_ids, mask, temperature)
    B, T = mask.shape
    lp = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            log_p = log_softmax(z[b, t - 1], tau)  # distribution that predicted x_t
            lp[b, t] = log_p[x[b, t]]
    return lp


def token_logprobs_grad(logits, input_ids, mask, upstream, *, temperature=1.0):
    """Vector-Jacobian product of :func:`token_logprobs`: dL/d logits [B, T, V].

    Spec: logprob.token (v1), gradient.
    Derivative (p = softmax(z[b, t-1] / τ), u = upstream = dL/d lp):
        ∂lp[b, t] / ∂z[b, t-1, v] = ( [v = x_t] − p_v ) / τ
        dL/dz[b, t-1, v]          = u[b, t] · ( [v = x_t] − p_v ) / τ
    Every other logit (rows t-1 of masked t, and the last row z[b, T-1]) gets exactly 0.
    Shapes: upstream [B, T] (read at valid t only) -> [B, T, V] float64.
    """
    fn = "token_logprobs_grad"
    z, x, mask, tau = _inputs(fn, logits, input_ids, mask, temperature)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros(z.shape, dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            p = np.exp(log_softmax(z[b, t - 1], tau))
            onehot = np.zeros_like(p)
            onehot[x[b, t]] = 1.0
            grad[b, t - 1] = u[b, t] * (onehot - p) / tau
    return grad


def _entropy_inputs(fn, logits, mask, temperature):
    mask = check_mask(fn, mask)
    logits = check_logits(fn, logits, mask)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    return to_float64(logits), mask, tau


def token_entropy(logits, mask, *, temperature=1.0):
    """Entropy of the distribution that predicted each token.

    Spec: logprob.entropy (v1)
    Equation:
        p = softmax( z[b, t-1] / τ )
        H[b, t] = − Σ_v p_v · log p_v   at valid t, 0 elsewhere
    Source: Shannon entropy of the tempered policy (the entropy bonus/metric of PPO,
        arXiv:1707.06347 eq. 9); the same tempered distribution as :func:`token_logprobs`.
    Shapes: logits [B, T, V], mask [B, T] -> [B, T] float64.
    Edge cases: p_v = 0 (underflow) contributes 0 (log p_v is computed as a finite a_v − logsumexp);
        masked positions are exactly 0; uniform logits give log V.
    """
    fn = "token_entropy"
    z, mask, tau = _entropy_inputs(fn, logits, mask, temperature)
    B, T = mask.shape
    H = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            log_p = log_softmax(z[b, t - 1], tau)
            p = np.exp(log_p)
            H[b, t] = -np.sum(p * log_p)
    return H


def token_entropy_grad(logits, mask, upstream, *, temperature=1.0):
    """Vector-Jacobian product of :func:`token_entropy`: dL/d logits [B, T, V].

    Spec: logprob.entropy (v1), gradient.
    Derivative (a = z/τ, p = softmax(a), H = −Σ_v p_v log p_v, ∂p_v/∂a_k = p_v([v=k] − p_k)):
        ∂H/∂a_k = −Σ_v p_v([v=k] − p_k)(log p_v + 1) = −p_k (log p_k + H)
        ∂H/∂z[b, t-1, k] = −p_k (log p_k + H) / τ
        dL/dz[b, t-1, k] = u[b, t] · ( −p_k (log p_k + H) / τ )
    Every other logit gets exactly 0.
    Shapes: upstream [B, T] (read at valid t only) -> [B, T, V] float64.
    """
    fn = "token_entropy_grad"
    z, mask, tau = _entropy_inputs(fn, logits, mask, temperature)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros(z.shape, dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            log_p = log_softmax(z[b, t - 1], tau)
            p = np.exp(log_p)
            H = -np.sum(p * log_p)
            grad[b, t - 1] = u[b, t] * (-p * (log_p + H) / tau)
    return grad
