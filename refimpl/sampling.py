"""Log-probs under the sampling distribution of an inference engine (spec id ``logprob.sampling``).

Vectorised over the rows that predict a valid token (row ``t-1`` for every valid ``t``), in the engine's
order: temperature, min-p, top-k (ties kept), top-p on the top-k-renormalised distribution. The support is
a piecewise-constant function of the logits and carries no gradient; the log-probs and the kept mass are
differentiated by autograd through a masked log-sum-exp. Softmax statistics in float32 for half inputs
(float64 for float64). Not the fused chunked path of :mod:`refimpl.logprobs`: the rows are gathered whole
([N, V] for N valid tokens), which is what an engine-side check or a trainer's per-batch correction needs.
"""

from __future__ import annotations

import torch

from refimpl.logprobs import scatter_rows, valid_positions
from refimpl.validation import (
    check_finite_flag,
    check_int,
    check_logits,
    check_mask,
    check_real,
    check_support,
    check_token_ids,
    compute_dtypes,
)

__all__ = ["sampling_logprobs", "sampling_log_mass", "support_logprobs"]


def kept_support(a: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """Bool [N, V]: the tokens kept by min-p, top-k and top-p from tempered logits ``a`` [N, V]."""
    N, V = a.shape
    keep = torch.ones_like(a, dtype=torch.bool)
    if min_p > 0.0:  # p_v >= min_p * max p  <=>  a_v - max a >= log(min_p)
        keep = (a - a.amax(dim=1, keepdim=True)) >= torch.log(torch.tensor(min_p, dtype=a.dtype))
    if 0 < top_k < V:
        kept = a.masked_fill(~keep, float("-inf"))
        kth = kept.topk(top_k, dim=1).values[:, -1:]
        keep &= kept >= kth
    if top_p < 1.0:
        q = torch.softmax(a.masked_fill(~keep, float("-inf")), dim=1)
        q_desc, order = q.sort(dim=1, descending=True)
        above = torch.cumsum(q_desc, dim=1) - q_desc  # mass of the tokens sorted before each one
        # ties: the mass of the *strictly* more probable tokens is the exclusive sum at the tie's first index
        first = torch.searchsorted(-q_desc.contiguous(), -q_desc.contiguous(), right=False)
        above = above.gather(1, first)
        keep_sorted = above < top_p
        keep &= torch.zeros_like(keep).scatter_(1, order, keep_sorted)
    return keep


def _prepare(fn: str, logits: object, mask: object, temperature: object, top_k: object, top_p: object, min_p: object):
    m = check_mask(fn, mask)
    z = check_logits(fn, logits, m)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    k = check_int(fn, "top_k", top_k, ge=0)
    p = check_real(fn, "top_p", top_p, gt=0.0, le=1.0)
    mp = check_real(fn, "min_p", min_p, ge=0.0, le=1.0)
    out_pos, pred_rows = valid_positions(m)
    _, cdt = compute_dtypes(z)
    a = z.reshape(-1, z.shape[2]).index_select(0, pred_rows).to(cdt) / tau
    with torch.no_grad():
        check_finite_flag(fn, "logits", torch.isfinite(a).all(), "at positions t-1 that predict a valid token t")
        keep = kept_support(a.detach(), k, p, mp)
    return m, z, out_pos, a, keep


def sampling_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
) -> torch.Tensor:
    """Spec: logprob.sampling. ls = a_x − logsumexp_{K} a with a = z[b,t-1]/τ and K the min-p/top-k/top-p
    support; −inf for a token outside K; 0 at masked positions."""
    fn = "sampling_logprobs"
    m, z, out_pos, a, keep = _prepare(fn, logits, mask, temperature, top_k, top_p, min_p)
    ids = check_token_ids(fn, input_ids, m, z.shape[2])
    targets = ids.reshape(-1).index_select(0, out_pos).long().unsqueeze(1)
    lse = a.masked_fill(~keep, float("-inf")).logsumexp(dim=1)
    lp = a.gather(1, targets).squeeze(1) - lse
    lp = torch.where(keep.gather(1, targets).squeeze(1), lp, torch.full_like(lp, float("-inf")))
    return scatter_rows(lp, out_pos, m.shape, z.dtype)


def sampling_log_mass(
    logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
) -> torch.Tensor:
    """Spec: logprob.sampling (kept mass). logS = logsumexp_{K} a − logsumexp a ≤ 0 at valid t, 0 elsewhere."""
    fn = "sampling_log_mass"
    m, z, out_pos, a, keep = _prepare(fn, logits, mask, temperature, top_k, top_p, min_p)
    log_s = a.masked_fill(~keep, float("-inf")).logsumexp(dim=1) - a.logsumexp(dim=1)
    return scatter_rows(log_s, out_pos, m.shape, z.dtype)


def support_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    support: torch.Tensor,
    *,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Spec: logprob.sampling (under a given support). sls = a_x − logsumexp_{K} a with a = z[b,t-1]/τ and
    K = support[b, t] (the engine's kept set, re-applied: DeepSeek-V3.2's keep sampling mask); −inf for a token
    outside K; 0 at masked positions."""
    fn = "support_logprobs"
    m = check_mask(fn, mask)
    z = check_logits(fn, logits, m)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    ids = check_token_ids(fn, input_ids, m, z.shape[2])
    s = check_support(fn, support, m, z.shape[2])
    out_pos, pred_rows = valid_positions(m)
    _, cdt = compute_dtypes(z)
    a = z.reshape(-1, z.shape[2]).index_select(0, pred_rows).to(cdt) / tau
    with torch.no_grad():
        check_finite_flag(fn, "logits", torch.isfinite(a).all(), "at positions t-1 that predict a valid token t")
    keep = s.reshape(-1, s.shape[2]).index_select(0, out_pos)
    targets = ids.reshape(-1).index_select(0, out_pos).long().unsqueeze(1)
    lse = a.masked_fill(~keep, float("-inf")).logsumexp(dim=1)
    lp = a.gather(1, targets).squeeze(1) - lse
    lp = torch.where(keep.gather(1, targets).squeeze(1), lp, torch.full_like(lp, float("-inf")))
    return scatter_rows(lp, out_pos, m.shape, z.dtype)
