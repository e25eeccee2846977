"""Token log-probs and entropies straight from LM-head inputs (spec id ``logprob.fused``).

``hidden @ weight.T`` is never materialised. Only the rows ``hidden[b, t-1]`` that predict a valid
token ``t`` are gathered; they are processed in chunks of ``chunk_size`` tokens, and the vocabulary in
tiles of ``vocab_chunk_size`` with an online log-sum-exp (running max ``m``, ``Σ e^(y-m)`` and, for
the entropy, ``Σ e^(y-m)(y-m)``). A custom autograd function saves the inputs and, per token, the
log-sum-exp as (row max, log Σ) plus the entropy and recomputes each tile in the backward:

    dz = g_lp/τ ⊙ (onehot − p) − g_H/τ ⊙ p ⊙ (log p + H),   dh = dz·W,   dW = Σ_chunks dzᵀ·h

For log-probs alone the tile pass is a single ``exp`` (plus a one-hot scatter): with
``q = p − onehot``, ``dh = −g/τ ⊙ (q·W)`` and ``dW = qᵀ·(−g/τ ⊙ h)`` (the per-row factor moves onto
the small [n, D] side).
All tiles live in buffers allocated once per call; GEMMs write with ``out=`` / ``addmm_``.

bfloat16/float16 inputs are computed in float32 throughout: the hidden rows of a chunk and the
weight (one float32 copy per call, or one vocabulary tile at a time) are upcast, so logits, softmax,
GEMM accumulation and the weight gradient are float32; outputs and gradients return in the input
dtype. (CPU half GEMMs round their outputs to the half dtype: bf16 logits cost up to 2^-9·|z| per
logit, far outside float32-softmax accuracy, and recovering it takes extra GEMMs and conversions
that cost more than the float32 GEMMs themselves.)
"""

from __future__ import annotations

import torch

from refimpl.logprobs import finish_stats, merge_stats, scatter_rows, tile_grad_, tile_stats_, valid_positions
from refimpl.validation import (
    check_hidden_and_weight,
    check_int,
    check_mask,
    check_real,
    check_token_ids,
    compute_dtypes,
)

__all__ = [
    "token_logprobs_from_hidden",
    "token_entropy_from_hidden",
    "token_logprobs_and_entropy_from_hidden",
]

# Default tile size: a float [chunk, vocab tile] buffer holds at most this many elements (64 MB in
# float32; one buffer, two with the entropy), with at most 1024 tokens and 65536 vocabulary entries.
_TILE_ELEMENTS = 1 << 24
_MAX_CHUNK_TOKENS = 1024
_MAX_VOCAB_TILE = 65536


class _HiddenSoftmax(torch.autograd.Function):
    """Log-probs and/or entropies of softmax(hidden[pred_rows] @ weight.T / τ)."""

    @staticmethod
    def forward(ctx, hidden, weight, out_pos, pred_rows, targets, inv_tau, entropy, chunk, vchunk):  # type: ignore[override]
        B, T, D = hidden.shape
        V = weight.shape[0]
        _, cdt = compute_dtypes(hidden)
        dev = hidden.device
        n_tok = pred_rows.numel()
        row_max = torch.empty(n_tok, dtype=cdt, device=dev)
        log_sum = torch.empty(n_tok, dtype=cdt, device=dev)
        ent = torch.empty(n_tok, dtype=cdt, device=dev) if entropy else None
        lp = torch.empty(n_tok, dtype=cdt, device=dev) if targets is not None else None
        if n_tok:
            rows, tiles = min(chunk, n_tok), _WeightTiles(weight, cdt, vchunk)
            buf = torch.empty(rows * tiles.width, dtype=cdt, device=dev)
            scratch = torch.empty(rows * tiles.width, dtype=cdt, device=dev) if entropy else None
            h_flat = hidden.reshape(B * T, D)
            for chunk_start in range(0, n_tok, rows):
                sl = slice(chunk_start, chunk_start + rows)
                hs = _scaled_rows(h_flat, pred_rows[sl], cdt, inv_tau)
                n = hs.shape[0]
                stats = tgt_logit = None
                for vocab_chunk_start in range(0, V, vchunk):
                    w_tile = tiles.get(vocab_chunk_start)
                    y = torch.mm(hs, w_tile.t(), out=_view(buf, n, w_tile.shape[0]))
                    if targets is not None:
                        tgt_logit = _target_logits(y, targets[sl], vocab_chunk_start, vchunk >= V, tgt_logit)
                    tile = tile_stats_(y, None if scratch is None else _view(scratch, n, w_tile.shape[0]))
                    stats = tile if stats is None else merge_stats(stats, tile)
                row_max[sl], log_sum[sl], ent_chunk = finish_stats(stats)
                if ent is not None:
                    ent[sl] = ent_chunk
                if lp is not None:
                    lp[sl] = (tgt_logit - row_max[sl]).sub_(log_sum[sl])
        ctx.save_for_backward(hidden, weight, out_pos, pred_rows, targets, row_max, log_sum, ent)
        ctx.inv_tau, ctx.chunk, ctx.vchunk = inv_tau, chunk, vchunk
        shape = (B, T)
        lp_out = scatter_rows(lp, out_pos, shape, hidden.dtype) if lp is not None else hidden.new_zeros(0)
        ent_out = scatter_rows(ent, out_pos, shape, hidden.dtype) if ent is not None else hidden.new_zeros(0)
        if lp is None:
            ctx.mark_non_differentiable(lp_out)
        if ent is None:
            ctx.mark_non_differentiable(ent_out)
        return lp_out, ent_out

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):  # type: ignore[override]
        hidden, weight, out_pos, pred_rows, targets, row_max, log_sum, ent = ctx.saved_tensors
        inv_tau, chunk, vchunk = ctx.inv_tau, ctx.chunk, ctx.vchunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        B, T, D = hidden.shape
        V = weight.shape[0]
        _, cdt = compute_dtypes(hidden)
        dev = hidden.device
        n_tok = pred_rows.numel()
        g_lp = _upstream(grad_lp, out_pos, cdt) if targets is not None and grad_lp is not None else None
        g_h = _upstream(grad_ent, out_pos, cdt) if ent is not None and grad_ent is not None else None
        d_hidden = torch.zeros(B * T, D, dtype=hidden.dtype, device=dev) if need_h else None
        d_weight = torch.zeros(V, D, dtype=cdt, device=dev) if need_w else None
        if n_tok and (g_lp is not None or g_h is not None) and (need_h or need_w):
            rows, tiles = min(chunk, n_tok), _WeightTiles(weight, cdt, vchunk)
            buf = torch.empty(rows * tiles.width, dtype=cdt, device=dev)
            scratch = torch.empty(rows * tiles.width, dtype=cdt, device=dev) if g_h is not None else None
            h_flat = hidden.reshape(B * T, D)
            for chunk_start in range(0, n_tok, rows):
                sl = slice(chunk_start, chunk_start + rows)
                chunk_rows = pred_rows[sl]
                hs = _scaled_rows(h_flat, chunk_rows, cdt, inv_tau)  # h/τ: dW = dzᵀ·(h/τ)
                n = hs.shape[0]
                m_chunk, log_s_chunk = row_max[sl].unsqueeze(1), log_sum[sl].unsqueeze(1)
                tgt = None if g_lp is None else targets[sl]
                # The tile gradient dL/dz: log-probs only, −g/τ ⊙ (p − onehot); with the entropy,
                # −(g_H ⊙ p ⊙ (log p + H) + g ⊙ p)/τ + g/τ ⊙ onehot. For log-probs alone the per-row
                # factor −g moves onto the [n, D] side of the GEMMs (dW = qᵀ·(−g ⊙ h/τ),
                # dh = −g ⊙ (q·W)/τ), so the tile pass is one exp.
                if g_h is None:
                    rhs, onehot = hs * (-g_lp[sl]).unsqueeze(1), torch.full((n,), -1.0, dtype=cdt, device=dev)
                else:
                    rhs, coef_logp = hs, -g_h[sl]
                    coef_one = coef_logp * ent[sl]
                    if tgt is not None:
                        coef_one -= g_lp[sl]
                        onehot = g_lp[sl]
                acc = torch.zeros(n, D, dtype=cdt, device=dev) if need_h else None
                for vocab_chunk_start in range(0, V, vchunk):
                    w_tile = tiles.get(vocab_chunk_start)
                    y = torch.mm(hs, w_tile.t(), out=_view(buf, n, w_tile.shape[0]))
                    y.sub_(m_chunk).sub_(log_s_chunk)  # log p
                    if g_h is None:
                        q = y.exp_()
                    else:
                        q = tile_grad_(y, _view(scratch, n, w_tile.shape[0]), coef_logp, coef_one)
                    if tgt is not None:
                        _add_at_targets(q, tgt, vocab_chunk_start, vchunk >= V, onehot)
                    if acc is not None:
                        acc.addmm_(q, w_tile)
                    if d_weight is not None:
                        d_weight[vocab_chunk_start : vocab_chunk_start + vchunk].addmm_(q.t(), rhs)
                if acc is not None:
                    if g_h is None:
                        acc.mul_(-g_lp[sl].unsqueeze(1))
                    d_hidden.index_copy_(0, chunk_rows, acc.mul_(inv_tau).to(hidden.dtype))
        grad_hidden = None if d_hidden is None else d_hidden.view(B, T, D)
        grad_weight = None if d_weight is None else d_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None, None


class _WeightTiles:
    """Vocabulary tiles of ``weight`` in the compute dtype: views of a float32/float64 weight; for
    a half weight, one float copy of the whole weight when it is a single tile, else one tile at a
    time in a reused buffer."""

    def __init__(self, weight: torch.Tensor, cdt: torch.dtype, vchunk: int):
        self.weight, self.vchunk = weight, vchunk
        self.width = min(vchunk, weight.shape[0])
        self.whole = weight.dtype == cdt or vchunk >= weight.shape[0]
        self.buf = weight.to(cdt) if self.whole else torch.empty(self.width, weight.shape[1], dtype=cdt, device=weight.device)

    def get(self, start: int) -> torch.Tensor:
        if self.whole:
            return self.buf[start : start + self.vchunk]
        tile = self.weight[start : start + self.vchunk]
        return self.buf[: tile.shape[0]].copy_(tile)


def _view(buf: torch.Tensor, n: int, v: int) -> torch.Tensor:
    """A contiguous [n, v] view of the front of a flat buffer."""
    return buf[: n * v].view(n, v)


def _scaled_rows(h_flat: torch.Tensor, rows: torch.Tensor, cdt: torch.dtype, inv_tau: float) -> torch.Tensor:
    """h[rows]/τ in the compute dtype (a fresh [n, D] tensor)."""
    h = h_flat.index_select(0, rows)
    h = h if h.dtype == cdt else h.to(cdt)
    return h.mul_(inv_tau) if inv_tau != 1.0 else h


def _target_logits(
    y: torch.Tensor, targets: torch.Tensor, vocab_start: int, whole_vocab: bool, prev: torch.Tensor | None
) -> torch.Tensor:
    """y[r, x_r − vocab_start] for the rows whose target lies in this vocabulary tile, else ``prev``."""
    if whole_vocab:
        return y.gather(1, targets.unsqueeze(1)).squeeze(1)
    v = y.shape[1]
    local = targets - vocab_start
    val = y.gather(1, local.clamp(0, v - 1).unsqueeze(1)).squeeze(1)
    inside = (local >= 0) & (local < v)
    return torch.where(inside, val, torch.zeros_like(val) if prev is None else prev)


def _add_at_targets(
    q: torch.Tensor, targets: torch.Tensor, vocab_start: int, whole_vocab: bool, values: torch.Tensor
) -> None:
    """q[r, x_r − vocab_start] += values[r] for the rows whose target lies in this vocabulary tile."""
    if whole_vocab:
        q.scatter_add_(1, targets.unsqueeze(1), values.unsqueeze(1))
        return
    v = q.shape[1]
    local = targets - vocab_start
    inside = (local >= 0) & (local < v)
    q.scatter_add_(1, local.clamp(0, v - 1).unsqueeze(1), torch.where(inside, values, 0.0).unsqueeze(1))


def _upstream(grad: torch.Tensor, out_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return grad.reshape(-1).index_select(0, out_pos).to(dtype)


def _tile_sizes(fn: str, V: int, chunk_size: object, vocab_chunk_size: object) -> tuple[int, int]:
    """(tokens per chunk, vocabulary entries per tile): as given, or sized to the tile budget."""
    vchunk = min(V, _MAX_VOCAB_TILE) if vocab_chunk_size is None else check_int(fn, "vocab_chunk_size", vocab_chunk_size, ge=1)
    if chunk_size is not None:
        return check_int(fn, "chunk_size", chunk_size, ge=1), vchunk
    return max(16, min(_MAX_CHUNK_TOKENS, _TILE_ELEMENTS // min(vchunk, V))), vchunk


def _run(
    fn: str,
    hidden: object,
    weight: object,
    input_ids: object | None,
    mask: object,
    temperature: object,
    want_lp: bool,
    want_entropy: bool,
    chunk_size: object,
    vocab_chunk_size: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    m = check_mask(fn, mask)
    out_pos, pred_rows = valid_positions(m)
    h, w = check_hidden_and_weight(fn, hidden, weight, m, pred_rows)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    targets = None
    if want_lp:
        ids = check_token_ids(fn, input_ids, m, w.shape[0])
        targets = ids.reshape(-1).index_select(0, out_pos).long()
    chunk, vchunk = _tile_sizes(fn, w.shape[0], chunk_size, vocab_chunk_size)
    return _HiddenSoftmax.apply(h, w, out_pos, pred_rows, targets, 1.0 / tau, want_entropy, chunk, vchunk)


def token_logprobs_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
) -> torch.Tensor:
    """Spec: logprob.fused. = token_logprobs(hidden @ weight.T, ...) via token chunks × vocab tiles, online log-sum-exp, recompute in backward."""
    fn = "token_logprobs_from_hidden"
    lp, _ = _run(fn, hidden, weight, input_ids, mask, temperature, True, False, chunk_size, vocab_chunk_size)
    return lp


def token_entropy_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
) -> torch.Tensor:
    """Spec: logprob.fused. = token_entropy(hidden @ weight.T, ...) via token chunks × vocab tiles, online entropy stats, recompute in backward."""
    fn = "token_entropy_from_hidden"
    _, ent = _run(fn, hidden, weight, None, mask, temperature, False, True, chunk_size, vocab_chunk_size)
    return ent


def token_logprobs_and_entropy_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spec: logprob.fused. (token_logprobs, token_entropy) of hidden @ weight.T in one tiled pass (one GEMM per tile forward, three backward)."""
    fn = "token_logprobs_and_entropy_from_hidden"
    return _run(fn, hidden, weight, input_ids, mask, temperature, True, True, chunk_size, vocab_chunk_size)
