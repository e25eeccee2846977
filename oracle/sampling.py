"""Log-probabilities under the distribution an inference engine samples from (spec id ``logprob.sampling``).

An engine does not sample from softmax(z) but from a truncated, tempered distribution: the logits are
divided by the temperature τ, then min-p, top-k and top-p remove tokens, and the kept ones are
renormalised. Token alignment as in :mod:`oracle.logprobs`: position ``t`` is about token ``input_ids[b, t]``,
predicted from ``logits[b, t-1]``.

Literal transcription: a loop over rows ``b`` and positions ``t``; the kept support of one position is
built token by token from the definitions, in the engine's order (min-p, then top-k, then top-p).
"""

from __future__ import annotations

import math

import numpy as np

from oracle.validation import (
    check_int,
    check_logits,
    check_mask,
    check_real,
    check_support,
    check_token_ids,
    check_token_upstream,
    to_float64,
)

__all__ = ["sampling_logprobs", "sampling_logprobs_grad", "sampling_log_mass", "sampling_log_mass_grad", "support_logprobs",
           "support_logprobs_grad"]


def _softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - np.max(a))
    return e / np.sum(e)


def kept_support(z: np.ndarray, tau: float, top_k: int, top_p: float, min_p: float) -> np.ndarray:
    """The support K ⊆ {0..V-1} of one position, as a bool vector [V].

        p_v  = softmax(z / τ)_v
        K0   = { v : p_v ≥ min_p · max_u p_u }                       (min-p; all of V when min_p = 0)
        K1   = { v ∈ K0 : z_v ≥ z_(k) }, z_(k) the k-th largest z over K0 (top-k, ties kept; K0 when
               k = 0 or k ≥ |K0|)
        q_v  = p_v / Σ_{u∈K1} p_u  for v ∈ K1                          (top-k renormalised)
        K    = { v ∈ K1 : Σ_{u∈K1, q_u > q_v} q_u < top_p }           (top-p: keep v while the mass of the
               strictly more probable kept tokens is below p; the most probable token is always kept;
               K = K1 when top_p = 1)
    """
    V = z.shape[0]
    p = _softmax(z / tau)
    K0 = [v for v in range(V) if p[v] >= min_p * np.max(p)]
    if 0 < top_k < len(K0):
        z_k = sorted((z[v] for v in K0), reverse=True)[top_k - 1]
        K1 = [v for v in K0 if z[v] >= z_k]
    else:
        K1 = K0
    S1 = sum(p[u] for u in K1)
    q = {v: p[v] / S1 for v in K1}
    if top_p < 1.0:
        K = [v for v in K1 if sum(q[u] for u in K1 if q[u] > q[v]) < top_p]
    else:  # top_p = 1 is no top-p (the mass above a token may round to 1)
        K = K1
    keep = np.zeros(V, dtype=bool)
    keep[K] = True
    return keep


def _inputs(fn, logits, mask, temperature, top_k, top_p, min_p):
    mask = check_mask(fn, mask)
    logits = check_logits(fn, logits, mask)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    k = check_int(fn, "top_k", top_k, ge=0)
    p = check_real(fn, "top_p", top_p, gt=0.0, le=1.0)
    m = check_real(fn, "min_p", min_p, ge=0.0, le=1.0)
    return to_float64(logits), mask, tau, k, p, m


def _logsumexp(a: np.ndarray) -> float:
    a_max = np.max(a)
    return float(a_max + np.log(np.sum(np.exp(a - a_max))))


def sampling_logprobs(logits, input_ids, mask, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """Log-probability of each token under the tempered, truncated sampling distribution.

    Spec: logprob.sampling (v1), added in v1.2
    Equation (per valid position, z = logits[b, t-1], a = z / τ, K = kept support of z, see `kept_support`):
        ls[b, t] = a_{x_t} − logsumexp_{v∈K} a_v      if x_t ∈ K
                 = −inf                                if x_t ∉ K   (probability 0 under the sampler)
        with x_t = input_ids[b, t]; 0 at masked positions.
        Equivalently ls = lp − log S with lp = logprob.token and S = Σ_{v∈K} softmax(a)_v.
    Source: vLLM 0.32.0 v1 sampler (`vllm/v1/sample/sampler.py` Sampler.sample: temperature, then the
        argmax-invariant min-p processor `logits_processor/builtin.py` MinPLogitsProcessor.apply, then
        `ops/topk_topp_sampler.py` apply_top_k_top_p_pytorch), `logprobs_mode="processed_logprobs"`;
        top-p (nucleus) sampling arXiv:1904.09751 eq. 2, min-p arXiv:2407.01082.
    Shapes: logits [B, T, V], input_ids [B, T] int, mask [B, T] -> [B, T] float64.
    Edge cases: top_k = 0 and top_p = 1 and min_p = 0 give logprob.token exactly; a one-token support gives
        0.0; masked positions are 0 and never read.
    """
    fn = "sampling_logprobs"
    z, mask, tau, k, p, m = _inputs(fn, logits, mask, temperature, top_k, top_p, min_p)
    x = check_token_ids(fn, input_ids, mask, z.shape[2])
    B, T = mask.shape
    ls = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            keep = kept_support(z[b, t - 1], tau, k, p, m)
            a = z[b, t - 1] / tau
            ls[b, t] = a[x[b, t]] - _logsumexp(a[keep]) if keep[x[b, t]] else -math.inf
    return ls


def sampling_logprobs_grad(logits, input_ids, mask, upstream, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """Vector-Jacobian product of :func:`sampling_logprobs`: dL/d logits [B, T, V].

    Spec: logprob.sampling (v1), added in v1.2, gradient.
    Derivative (the support K is piecewise constant in z: no gradient flows through it;
    q̃ = softmax(a) restricted to K and renormalised, u = upstream):
        dL/dz[b, t-1, v] = u[b, t] · ( [v = x_t] − q̃_v ) / τ    for v ∈ K, 0 for v ∉ K,   if x_t ∈ K
        dL/dz[b, t-1, :] = 0                                                               if x_t ∉ K
    Every row that predicts no valid token gets exactly 0.
    """
    fn = "sampling_logprobs_grad"
    z, mask, tau, k, p, m = _inputs(fn, logits, mask, temperature, top_k, top_p, min_p)
    x = check_token_ids(fn, input_ids, mask, z.shape[2])
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros(z.shape, dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            keep = kept_support(z[b, t - 1], tau, k, p, m)
            if not keep[x[b, t]]:
                continue
            a = z[b, t - 1] / tau
            q = np.where(keep, np.exp(a - _logsumexp(a[keep])), 0.0)
            onehot = np.zeros_like(q)
            onehot[x[b, t]] = 1.0
            grad[b, t - 1] = u[b, t] * (onehot - q) / tau
    return grad


def sampling_log_mass(logits, mask, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """log S: the log of the tempered probability mass the sampler keeps at each position.

    Spec: logprob.sampling (v1), added in v1.2, the kept mass.
    Equation (a = z[b, t-1] / τ, K its kept support):
        logS[b, t] = logsumexp_{v∈K} a_v − logsumexp_v a_v  ≤ 0     at valid t, 0 elsewhere
    so that sampling_logprobs = token_logprobs − logS for every kept token: an importance ratio between
    full-support trainer log-probs and truncated engine log-probs carries exp(−logS).
    Source: as :func:`sampling_logprobs`; the log S of TRL #6789 and vLLM #42259.
    """
    fn = "sampling_log_mass"
    z, mask, tau, k, p, m = _inputs(fn, logits, mask, temperature, top_k, top_p, min_p)
    B, T = mask.shape
    out = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if mask[b, t]:
                keep = kept_support(z[b, t - 1], tau, k, p, m)
                a = z[b, t - 1] / tau
                out[b, t] = _logsumexp(a[keep]) - _logsumexp(a)
    return out


def sampling_log_mass_grad(logits, mask, upstream, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """Vector-Jacobian product of :func:`sampling_log_mass`: dL/d logits [B, T, V].

    Spec: logprob.sampling (v1), added in v1.2, gradient of the kept mass.
    Derivative (p = softmax(a), q̃ = p restricted to K and renormalised; K piecewise constant):
        dL/dz[b, t-1, v] = u[b, t] · ( q̃_v − p_v ) / τ
    """
    fn = "sampling_log_mass_grad"
    z, mask, tau, k, p, m = _inputs(fn, logits, mask, temperature, top_k, top_p, min_p)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros(z.shape, dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if mask[b, t]:
                keep = kept_support(z[b, t - 1], tau, k, p, m)
                a = z[b, t - 1] / tau
                q = np.where(keep, np.exp(a - _logsumexp(a[keep])), 0.0)
                grad[b, t - 1] = u[b, t] * (q - _softmax(a)) / tau
    return grad


def _support_inputs(fn, logits, input_ids, mask, support, temperature):
    mask = check_mask(fn, mask)
    logits = check_logits(fn, logits, mask)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    x = check_token_ids(fn, input_ids, mask, logits.shape[2])
    K = check_support(fn, support, mask, logits.shape[2])
    return to_float64(logits), x, mask, K, tau


def support_logprobs(logits, input_ids, mask, support, *, temperature=1.0):
    """Log-probability of each token renormalised over a given support: the engine's kept set, re-applied.

    Spec: logprob.sampling (v1), added in v1.2, under a given support (DeepSeek-V3.2's "keep sampling mask").
    Equation (per valid position, a = logits[b, t-1] / τ, K = { v : support[b, t, v] }, the set the token
    x_t = input_ids[b, t] was drawn from):
        sls[b, t] = a_{x_t} − logsumexp_{v∈K} a_v      if x_t ∈ K
                  = −inf                                if x_t ∉ K
        0 at masked positions.
        With K the kept support of logits[b, t-1] itself (min-p, top-k, top-p), sls = sampling_logprobs.
    Source: DeepSeek-V3.2 technical report (arXiv:2512.02556) §3.1 "Keep Sampling Mask": the truncation mask
        recorded when sampling from π_old is applied to π_θ in training, so both share one action subspace.
    Shapes: logits [B, T, V], input_ids [B, T] int, mask [B, T], support [B, T, V] bool -> [B, T] float64.
    Edge cases: an all-True support row gives logprob.token; a one-token support gives 0.0; masked
        positions are 0 and their logits, ids and support rows are never read.
    """
    fn = "support_logprobs"
    z, x, mask, K, tau = _support_inputs(fn, logits, input_ids, mask, support, temperature)
    B, T = mask.shape
    sls = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t]:
                continue
            a = z[b, t - 1] / tau
            keep = K[b, t]
            sls[b, t] = a[x[b, t]] - _logsumexp(a[keep]) if keep[x[b, t]] else -math.inf
    return sls


def support_logprobs_grad(logits, input_ids, mask, support, upstream, *, temperature=1.0):
    """Vector-Jacobian product of :func:`support_logprobs`: dL/d logits [B, T, V].

    Spec: logprob.sampling (v1), added in v1.2, under a given support, gradient.
    Derivative (K = support[b, t] is an input: no gradient reaches it; q̃ = softmax(a) restricted to K and
    renormalised, u = upstream):
        dL/dz[b, t-1, v] = u[b, t] · ( [v = x_t] − q̃_v ) / τ    for v ∈ K, 0 for v ∉ K,   if x_t ∈ K
        dL/dz[b, t-1, :] = 0                                                               if x_t ∉ K
    """
    fn = "support_logprobs_grad"
    z, x, mask, K, tau = _support_inputs(fn, logits, input_ids, mask, support, temperature)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros(z.shape, dtype=np.float64)
    for b in range(B):
        for t in range(1, T):
            if not mask[b, t] or not K[b, t, x[b, t]]:
                continue
            a = z[b, t - 1] / tau
            keep = K[b, t]
            q = np.where(keep, np.exp(a - _logsumexp(a[keep])), 0.0)
            onehot = np.zeros_like(q)
            onehot[x[b, t]] = 1.0
            grad[b, t - 1] = u[b, t] * (onehot - q) / tau
    return grad
