"""Token log-probs and entropies straight from LM-head inputs (spec id ``logprob.fused``).

``hidden @ weight.T`` is never materialised. Only the rows ``hidden[b, t-1]`` that predict a valid
token ``t`` are gathered; they are processed in chunks of ``chunk_size`` tokens, and the vocabulary in
tiles of ``vocab_chunk_size`` with an online log-sum-exp (running max ``m``, ``Σ e^(y-m)`` and, for
the entropy, ``Σ e^(y-m)(y-m)``). A custom autograd function saves the inputs and, per token, the
log-sum-exp as (row max, log Σ) plus the entropy and recomputes each tile in the backward:

    dz = g_lp/τ ⊙ (onehot − p) − g_H/τ ⊙ p ⊙ (log p + H),   dh = dz·W,   dW = Σ_chunks dzᵀ·h

The tiles carry only the dense part; the one-hot part (``g/τ ⊙ W[x]`` into dh, ``g/τ ⊙ h`` into the
rows ``x`` of dW) is added exactly per chunk. For log-probs alone the tile is ``p`` and the per-row
factor ``−g/τ`` moves onto the [n, D] side of the GEMMs (``dh = −g/τ ⊙ (p·W)``,
``dW = pᵀ·(−g/τ ⊙ h)``), so the tile pass is a single ``exp``. Tiles are small (by default 1024
tokens × 2048 vocabulary entries: 8 MB in float32), so the elementwise passes run from cache and
the memory beyond the gradients is a few tiles; they live in buffers allocated once per call, and
GEMMs write with ``out=`` / ``addmm_``. Forward + backward costs 8·N·D·V FLOPs (the logits GEMM is
recomputed), against 6·N·D·V for implementations that keep the [N, V] logits.

float32/float64 inputs: every GEMM and all the tile math run in the input dtype.

bfloat16 inputs (and float16 on CUDA; ``HALF_PRECISION_GEMMS = False`` computes them in float32
throughout): the GEMMs of the logits and of ``d weight`` run in the half dtype (float32
accumulation inside), at the half GEMM rate; the tile math (log-sum-exp, softmax, entropy) runs in
float32 and the gradients accumulate in float32 across tiles. Half GEMMs round their outputs to
the half dtype, up to 2^-9·|z| per logit, so:

- forward: a second GEMM recovers the rounding, ``lo = round(h·Wᵀ − hi)`` (``addmm`` with
  ``beta=−1``: the difference is formed in the float32 accumulator), and ``z = hi + lo`` in float32
  is within 2^-18·|z|: float32-accurate log-probs and entropies;
- backward: one GEMM shifted by the saved log-sum-exp, ``addmm`` with ``input = −s`` (``s`` the row's
  ``τ·lse`` rounded to the half dtype) gives ``round(z − s)``, so ``log p`` is off by at most
  2^-9·|log p|: exact where ``p`` is large and negligible where it is small (``p·|log p| <= 1/e``).
  The tile gradient (one-hot term included, so that a dominant target cancels inside the GEMM)
  is rounded to the half dtype once for ``d weight``; ``d hidden = dz·W`` is a float32 GEMM (the W
  tile upcast), because that sum over the vocabulary cancels when one token dominates and a half
  GEMM's rounding of its input or output (2^-8 of the large terms) breaks the spec's bfloat16
  tolerance for the small result (seeds 1070 and 1969 of `token_logprobs_from_hidden` did).

float16 on CPU (no fast half GEMM there) is computed in float32.
"""

from __future__ import annotations

import torch

from refimpl import fused_budget, fused_half
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
    "token_logprobs_from_hidden", "token_entropy_from_hidden", "token_logprobs_and_entropy_from_hidden",
]

# Default tiles: at most 1024 tokens × 2048 vocabulary entries, and the float tile buffers of one call
# together hold at most _TILE_ELEMENTS elements (8 MB in float32: the elementwise passes run from the
# CPU's caches). On CUDA, tiles 16x larger (4096 × 8192, 128 MB) keep the kernel launches few.
_TILE_ELEMENTS = 1 << 21
_MAX_CHUNK_TOKENS = 1024
_VOCAB_TILE = 2048
_CUDA_SCALE = 4


# Half inputs: GEMMs in the half dtype (see the module docstring). False computes them in float32
# throughout (slower; the same results within the spec's bfloat16 tolerance).
HALF_PRECISION_GEMMS = True


def _half_gemms(hidden: torch.Tensor) -> bool:
    """Whether the GEMMs run in the (half) input dtype, the tile math in float32."""
    dt = hidden.dtype
    if not HALF_PRECISION_GEMMS:
        return False
    return dt == torch.bfloat16 or (dt == torch.float16 and hidden.device.type == "cuda")


class _Tiles:
    """The reused buffers of one forward or backward call and the tile GEMMs on them."""

    def __init__(self, rows: int, width: int, D: int, dtype: torch.dtype, cdt: torch.dtype, dev: torch.device, half: bool, scratch: bool, backward: bool):
        self.half = half
        self.y = torch.empty(rows * width, dtype=cdt, device=dev)  # the float tile
        self.scratch = torch.empty(rows * width, dtype=cdt, device=dev) if scratch else None
        # half: the GEMM outputs (hi, lo) in the forward, the half tile gradient in the backward
        self.hi = torch.empty(rows * width, dtype=dtype, device=dev) if half else None
        self.lo = torch.empty(rows * width, dtype=dtype, device=dev) if half and not backward else None
        self.w_float = torch.empty(width, D, dtype=cdt, device=dev) if half and backward else None
        self.part_w = torch.empty(width, D, dtype=dtype, device=dev) if half and backward else None

    @staticmethod
    def view(buf: torch.Tensor, n: int, v: int) -> torch.Tensor:
        return buf[: n * v].view(n, v)

    def logits(self, h_chunk: torch.Tensor, w_tile: torch.Tensor, inv_tau: float, kept: torch.Tensor | None = None) -> torch.Tensor:
        """The float tile y = z/τ [n, v], written into ``kept`` when given (native: ``h_chunk`` is already
        h/τ; half: hi + lo)."""
        n, v = h_chunk.shape[0], w_tile.shape[0]
        y = self.view(self.y, n, v) if kept is None else kept
        if not self.half:
            return torch.mm(h_chunk, w_tile.t(), out=y)
        hi = torch.mm(h_chunk, w_tile.t(), out=self.view(self.hi, n, v))
        lo = torch.addmm(hi, h_chunk, w_tile.t(), beta=-1.0, out=self.view(self.lo, n, v))
        y.copy_(hi).add_(lo)
        return y.mul_(inv_tau) if inv_tau != 1.0 else y

    def log_probs(
        self, h_chunk: torch.Tensor, w_tile: torch.Tensor, shift: tuple[torch.Tensor, ...], inv_tau: float, kept: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The float tile log p = y − m − log s [n, v] (backward), from the ``kept`` tile y of the forward
        or a GEMM (``shift`` = (m, log s) then). Half, recomputed: ``round(z − s_half)`` from one shifted
        GEMM, then the float32 remainder ``(s − s_half)`` and 1/τ (``shift`` = (−s_half, s − s_half))."""
        n, v = h_chunk.shape[0], w_tile.shape[0]
        y = self.view(self.y, n, v)
        if kept is not None or not self.half:  # y − m − log s (− m alone when log s is None)
            m, log_s = shift
            y = torch.sub(kept, m, out=y) if kept is not None else torch.mm(h_chunk, w_tile.t(), out=y).sub_(m)
            return y if log_s is None else y.sub_(log_s)
        neg_s_half, rest = shift
        raw = torch.addmm(neg_s_half, h_chunk, w_tile.t(), out=self.view(self.hi, n, v))
        torch.sub(raw, rest, out=y)
        return y.mul_(inv_tau) if inv_tau != 1.0 else y

    def probs(
        self, h_chunk: torch.Tensor, w_tile: torch.Tensor, shift: tuple[torch.Tensor, ...], inv_tau: float, kept: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The float tile p = exp(log p) [n, v] (backward, log-probs alone)."""
        return self.log_probs(h_chunk, w_tile, shift, inv_tau, kept).exp_()

    def accumulate(self, q: torch.Tensor, w_tile: torch.Tensor, rhs: torch.Tensor, acc: torch.Tensor | None, d_w: torch.Tensor | None) -> None:
        """``acc += q·W_tile`` and ``d_w += qᵀ·rhs`` (native dtype)."""
        if acc is not None:
            acc.addmm_(q, w_tile)
        if d_w is not None:
            d_w.addmm_(q.t(), rhs)


class _HiddenSoftmax(torch.autograd.Function):
    """Log-probs and/or entropies of softmax(hidden[pred_rows] @ weight.T / τ)."""

    @staticmethod
    def forward(ctx, hidden, weight, out_pos, pred_rows, targets, inv_tau, entropy, chunk, vchunk, budget):  # type: ignore[override]
        B, T, D = hidden.shape
        V = weight.shape[0]
        _, cdt = compute_dtypes(hidden)
        half = _half_gemms(hidden)
        fast = half and hidden.dtype == torch.bfloat16 and hidden.device.type == "cpu" and targets is not None and not entropy
        gdt = hidden.dtype if half else cdt  # GEMM dtype
        dev = hidden.device
        n_tok = pred_rows.numel()
        grad = any(ctx.needs_input_grad[:2])
        n_kept = 0
        if grad and budget is not None:  # kept tiles: bfloat16 e (fast path), else the float tile y
            working = fused_budget.working_bytes(n_tok, B * T, D, V, hidden.dtype, fast, chunk, vchunk, entropy)
            n_kept = fused_budget.kept_tokens(budget, working, n_tok, V, torch.empty((), dtype=gdt if fast else cdt).element_size())
        ctx.inv_tau, ctx.chunk, ctx.vchunk, ctx.fast = inv_tau, chunk, vchunk, fast
        shape = (B, T)
        if fast:
            kept = fused_half.KeptTiles(n_kept, V, vchunk, gdt, dev) if n_kept else None
            h_rows = hidden.reshape(B * T, D).index_select(0, pred_rows)
            lp, lse, top = fused_half.forward(h_rows, weight, targets, inv_tau, min(chunk, max(n_tok, 1)), vchunk, kept, grad)
            ctx.kept = kept
            ctx.save_for_backward(hidden, weight, out_pos, pred_rows, targets, top, lse)
            ent_out = hidden.new_zeros(0)
            ctx.mark_non_differentiable(ent_out)
            return scatter_rows(lp, out_pos, shape, hidden.dtype), ent_out
        row_max = torch.empty(n_tok, dtype=cdt, device=dev)
        log_sum = torch.empty(n_tok, dtype=cdt, device=dev)
        ent = torch.empty(n_tok, dtype=cdt, device=dev) if entropy else None
        lp = torch.empty(n_tok, dtype=cdt, device=dev) if targets is not None else None
        kept = [torch.empty(n_kept, min(vchunk, V - v0), dtype=cdt, device=dev) for v0 in range(0, V, vchunk)] if n_kept else None
        if n_tok:
            rows, width = min(chunk, n_tok), min(vchunk, V)
            tiles = _Tiles(rows, width, D, gdt, cdt, dev, half, entropy, backward=False)
            w_tiles = _WeightTiles(weight, gdt, vchunk)
            h_flat = hidden.reshape(B * T, D)
            for sl in _chunks(n_tok, rows, n_kept):
                h_chunk = _chunk_rows(h_flat, pred_rows[sl], gdt, 1.0 if half else inv_tau)
                n = h_chunk.shape[0]
                stats = tgt_logit = None
                for ti, vocab_start in enumerate(range(0, V, vchunk)):
                    w_tile = w_tiles.get(vocab_start)
                    keep = None if sl.start >= n_kept else kept[ti][sl]
                    y = tiles.logits(h_chunk, w_tile, inv_tau, keep)
                    if targets is not None:
                        tgt_logit = _target_logits(y, targets[sl], vocab_start, vchunk >= V, tgt_logit)
                    scratch = None if tiles.scratch is None else tiles.view(tiles.scratch, n, y.shape[1])
                    tile = tile_stats_(y, scratch, None if keep is None else tiles.view(tiles.y, n, y.shape[1]))
                    stats = tile if stats is None else merge_stats(stats, tile)
                row_max[sl], log_sum[sl], ent_chunk = finish_stats(stats)
                if ent is not None:
                    ent[sl] = ent_chunk
                if lp is not None:
                    lp[sl] = (tgt_logit - row_max[sl]).sub_(log_sum[sl])
        ctx.kept = kept
        ctx.save_for_backward(hidden, weight, out_pos, pred_rows, targets, row_max, log_sum, ent)
        lp_out = scatter_rows(lp, out_pos, shape, hidden.dtype) if lp is not None else hidden.new_zeros(0)
        ent_out = scatter_rows(ent, out_pos, shape, hidden.dtype) if ent is not None else hidden.new_zeros(0)
        if lp is None:
            ctx.mark_non_differentiable(lp_out)
        if ent is None:
            ctx.mark_non_differentiable(ent_out)
        return lp_out, ent_out

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):  # type: ignore[override]
        if ctx.fast:
            return _backward_fast(ctx, grad_lp)
        hidden, weight, out_pos, pred_rows, targets, row_max, log_sum, ent = ctx.saved_tensors
        inv_tau, chunk, vchunk = ctx.inv_tau, ctx.chunk, ctx.vchunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        B, T, D = hidden.shape
        V = weight.shape[0]
        _, cdt = compute_dtypes(hidden)
        half = _half_gemms(hidden)
        dev = hidden.device
        n_tok = pred_rows.numel()
        g_lp = _upstream(grad_lp, out_pos, cdt) if targets is not None and grad_lp is not None else None
        g_h = _upstream(grad_ent, out_pos, cdt) if ent is not None and grad_ent is not None else None
        d_hidden = torch.zeros(B * T, D, dtype=hidden.dtype, device=dev) if need_h else None
        live = n_tok and (g_lp is not None or g_h is not None) and (need_h or need_w)
        if half:
            d_weight = None
            if need_w:  # written tile by tile in the weight dtype, float32 accumulation per tile
                d_weight = (torch.empty_like if live else torch.zeros_like)(weight, memory_format=torch.contiguous_format)
            if live:
                _backward_half(hidden, weight, pred_rows, targets, row_max, log_sum, ent, g_lp, g_h,
                               inv_tau, chunk, vchunk, d_hidden, d_weight, ctx.kept)
        else:
            d_weight = torch.zeros(V, D, dtype=cdt, device=dev) if need_w else None
            if live:
                _backward_native(hidden, weight, pred_rows, targets, row_max, log_sum, ent, g_lp, g_h,
                                 inv_tau, chunk, vchunk, d_hidden, d_weight, ctx.kept)
        grad_hidden = None if d_hidden is None else d_hidden.view(B, T, D)
        grad_weight = None if d_weight is None else d_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None, None, None


def _backward_fast(ctx, grad_lp):
    """The backward of the bfloat16 log-prob path (:mod:`refimpl.fused_half`)."""
    hidden, weight, out_pos, pred_rows, targets, top, lse = ctx.saved_tensors
    need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    B, T, D = hidden.shape
    n_tok = pred_rows.numel()
    d_hidden = torch.zeros(B * T, D, dtype=hidden.dtype, device=hidden.device) if need_h else None
    live = n_tok and grad_lp is not None
    d_weight = None
    if need_w:
        d_weight = (torch.empty_like if live else torch.zeros_like)(weight, memory_format=torch.contiguous_format)
    if live and (need_h or need_w):
        g = _upstream(grad_lp, out_pos, torch.float32)
        h_rows = hidden.reshape(B * T, D).index_select(0, pred_rows)
        rows = min(ctx.chunk, n_tok)
        acc = fused_half.backward(h_rows, weight, targets, top, lse, g, ctx.inv_tau, rows, ctx.vchunk, ctx.kept, need_h, d_weight)
        if acc is not None:
            d_hidden.index_copy_(0, pred_rows, acc.to(hidden.dtype))
    grad_hidden = None if d_hidden is None else d_hidden.view(B, T, D)
    return grad_hidden, d_weight, None, None, None, None, None, None, None, None


def _chunks(n_tok: int, rows: int, n_kept: int) -> list[slice]:
    return [slice(a, b) for a, b in fused_half.token_chunks(n_tok, rows, n_kept)]


def _backward_native(hidden, weight, pred_rows, targets, row_max, log_sum, ent, g_lp, g_h, inv_tau, chunk, vchunk, d_hidden, d_weight, kept):
    """The backward in the compute dtype (float32/float64; float16 on CPU upcast tile by tile): token
    chunks outside, vocabulary tiles inside; d_hidden / d_weight (compute dtype) filled in place. The
    first tokens' tiles come from ``kept`` (the forward's y, per vocabulary tile) when given."""
    B, T, D = hidden.shape
    V = weight.shape[0]
    _, cdt = compute_dtypes(hidden)
    dev = hidden.device
    n_tok = pred_rows.numel()
    need_h = d_hidden is not None
    rows, width = min(chunk, n_tok), min(vchunk, V)
    tiles = _Tiles(rows, width, D, cdt, cdt, dev, False, g_h is not None, backward=True)
    w_tiles = _WeightTiles(weight, cdt, vchunk)
    h_flat = hidden.reshape(B * T, D)
    n_kept = 0 if kept is None else kept[0].shape[0]
    for sl in _chunks(n_tok, rows, n_kept):
        chunk_rows = pred_rows[sl]
        h_chunk = _chunk_rows(h_flat, chunk_rows, cdt, inv_tau)  # h/τ: dW = dzᵀ·(h/τ)
        n = h_chunk.shape[0]
        shift = (row_max[sl].unsqueeze(1), log_sum[sl].unsqueeze(1))
        tgt = None if g_lp is None else targets[sl]
        # dL/dy (y = z/τ) = g ⊙ (onehot − p) − g_H ⊙ p ⊙ (log p + H). The tiles carry only the
        # dense part; the one-hot part g ⊙ W[x] (dh) and g ⊙ h at rows x (dW) is added exactly
        # per chunk. Log-probs alone: the tile is e^(y − m) = s·p, and the per-row factor −g/s
        # moves onto the [n, D] side (dh = −g/s ⊙ (e·W), dW = eᵀ·(−g/s ⊙ h)), so the tile pass is
        # one subtraction and one exp.
        if g_h is None:
            row_factor = -g_lp[sl] * torch.exp(-log_sum[sl])
            shift = (shift[0], None)
        else:
            row_factor, coef_logp = None, -g_h[sl]
            coef_one = coef_logp * ent[sl]
            if tgt is not None:
                coef_one -= g_lp[sl]
        rhs = None
        if d_weight is not None:  # the right operand of dW += qᵀ·rhs
            rhs = h_chunk if row_factor is None else h_chunk * row_factor.unsqueeze(1)
        acc = torch.zeros(n, D, dtype=cdt, device=dev) if need_h else None
        for ti, vocab_start in enumerate(range(0, V, vchunk)):
            w_tile = w_tiles.get(vocab_start)
            keep = None if sl.start >= n_kept else kept[ti][sl]
            if g_h is None:
                q = tiles.probs(h_chunk, w_tile, shift, inv_tau, keep)
            else:
                y = tiles.log_probs(h_chunk, w_tile, shift, inv_tau, keep)
                q = tile_grad_(y, tiles.view(tiles.scratch, n, y.shape[1]), coef_logp, coef_one)
            d_w = None if d_weight is None else d_weight[vocab_start : vocab_start + vchunk]
            tiles.accumulate(q, w_tile, rhs, acc, d_w)
        if acc is not None:
            if row_factor is not None:
                acc.mul_(row_factor.unsqueeze(1))
            if tgt is not None:  # + g ⊙ W[x]
                acc.addcmul_(weight.index_select(0, tgt).to(cdt), g_lp[sl].unsqueeze(1))
            d_hidden.index_copy_(0, chunk_rows, acc.mul_(inv_tau).to(hidden.dtype))
        if d_weight is not None and tgt is not None:  # + g ⊙ h/τ at rows x
            d_weight.index_add_(0, tgt, h_chunk * g_lp[sl].unsqueeze(1))


def _backward_half(hidden, weight, pred_rows, targets, row_max, log_sum, ent, g_lp, g_h, inv_tau, chunk, vchunk, d_hidden, d_weight, kept):
    """The backward with half GEMMs: vocabulary tiles outside, token chunks inside, so that each
    tile of d_weight accumulates in float32 over all tokens and is written once in the half dtype
    (no float32 copy of d_weight); d_hidden accumulates in float32 for the valid rows. Per tile:
    log p from one GEMM shifted by the saved log-sum-exp, the tile gradient in float32 with its
    one-hot term (so that a dominant target cancels inside the GEMMs), d_hidden += q·W (float32
    GEMM, the W tile upcast), d_weight += half(q)ᵀ·rhs (half GEMM). See the module docstring. The
    first tokens' float tiles come from ``kept`` when given."""
    B, T, D = hidden.shape
    V = weight.shape[0]
    gdt, cdt = hidden.dtype, compute_dtypes(hidden)[1]
    dev = hidden.device
    n_tok = pred_rows.numel()
    need_h, need_w = d_hidden is not None, d_weight is not None
    rows, width = min(chunk, n_tok), min(vchunk, V)
    tiles = _Tiles(rows, width, D, gdt, cdt, dev, True, g_h is not None, backward=True)
    h_rows = hidden.reshape(B * T, D).index_select(0, pred_rows)  # [n_tok, D], half
    neg_s_half, rest = _half_shift(row_max, log_sum, inv_tau, gdt)
    # dL/dy (y = z/τ) = g ⊙ (onehot − p) − g_H ⊙ p ⊙ (log p + H). Log-probs alone: the tile is
    # p − onehot and the per-row factor −g moves onto the [n, D] side.
    if g_h is None:
        row_factor, coef_logp, coef_one = -g_lp, None, None
        onehot = torch.full_like(g_lp, -1.0)
    else:
        row_factor, coef_logp = None, -g_h
        coef_one = coef_logp * ent
        onehot = None
        if g_lp is not None:
            coef_one -= g_lp
            onehot = g_lp
    rhs = None
    if need_w:  # dW = qᵀ·(row_factor ⊙ h/τ), in the half dtype
        rhs = h_rows.to(cdt)
        if row_factor is not None:
            rhs.mul_(row_factor.unsqueeze(1))
        rhs = (rhs.mul_(inv_tau) if inv_tau != 1.0 else rhs).to(gdt)
    acc = torch.zeros(n_tok, D, dtype=cdt, device=dev) if need_h else None
    dw_tile = torch.empty(width, D, dtype=cdt, device=dev) if need_w else None
    n_kept = 0 if kept is None else kept[0].shape[0]
    for ti, vocab_start in enumerate(range(0, V, vchunk)):
        w_tile = weight[vocab_start : vocab_start + vchunk]
        v = w_tile.shape[0]
        w_float = tiles.w_float[:v].copy_(w_tile) if need_h else None
        if need_w:
            dw_tile[:v].zero_()
        for sl in _chunks(n_tok, rows, n_kept):
            h_chunk = h_rows[sl]
            n = h_chunk.shape[0]
            if sl.start < n_kept:
                y = tiles.log_probs(h_chunk, w_tile, (row_max[sl].unsqueeze(1), log_sum[sl].unsqueeze(1)), inv_tau, kept[ti][sl])
            else:
                y = tiles.log_probs(h_chunk, w_tile, (neg_s_half[sl], rest[sl]), inv_tau)
            if g_h is None:
                q = y.exp_()
            else:
                q = tile_grad_(y, tiles.view(tiles.scratch, n, v), coef_logp[sl], coef_one[sl])
            if onehot is not None:
                _add_at_targets(q, targets[sl], vocab_start, vchunk >= V, onehot[sl])
            if need_h:
                acc[sl].addmm_(q, w_float)
            if need_w:
                q_half = tiles.view(tiles.hi, n, v).copy_(q)
                dw_tile[:v].add_(torch.mm(q_half.t(), rhs[sl], out=tiles.part_w[:v]))
        if need_w:
            d_weight[vocab_start : vocab_start + v].copy_(dw_tile[:v])
    if need_h:
        if row_factor is not None:
            acc.mul_(row_factor.unsqueeze(1))
        d_hidden.index_copy_(0, pred_rows, acc.mul_(inv_tau).to(hidden.dtype))


class _WeightTiles:
    """Vocabulary tiles of ``weight`` in the GEMM dtype: views, or (float16 on CPU, computed in
    float32) one tile at a time converted into a reused buffer."""

    def __init__(self, weight: torch.Tensor, gdt: torch.dtype, vchunk: int):
        self.weight, self.vchunk = weight, vchunk
        self.whole = weight.dtype == gdt
        self.buf = None if self.whole else torch.empty(min(vchunk, weight.shape[0]), weight.shape[1], dtype=gdt, device=weight.device)

    def get(self, start: int) -> torch.Tensor:
        tile = self.weight[start : start + self.vchunk]
        return tile if self.whole else self.buf[: tile.shape[0]].copy_(tile)


def _chunk_rows(h_flat: torch.Tensor, rows: torch.Tensor, gdt: torch.dtype, inv_tau: float) -> torch.Tensor:
    """h[rows] in the GEMM dtype, times 1/τ when given (a fresh [n, D] tensor)."""
    h = h_flat.index_select(0, rows)
    h = h if h.dtype == gdt else h.to(gdt)
    return h.mul_(inv_tau) if inv_tau != 1.0 else h


def _half_shift(m: torch.Tensor, log_s: torch.Tensor, inv_tau: float, gdt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """What the half backward subtracts from a tile to get log p: (−s_half, s − s_half) with
    s = τ·(m + log s) in logit units and s_half = s rounded to ``gdt``."""
    s = (m + log_s).div_(inv_tau).unsqueeze(1)
    s_half = s.to(gdt)
    return s_half.neg(), s - s_half.to(s.dtype)


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


def _tile_sizes(
    fn: str, V: int, entropy: bool, chunk_size: object, vocab_chunk_size: object, cuda: bool = False
) -> tuple[int, int]:
    """(tokens per chunk, vocabulary entries per tile): as given, or sized to the tile budget."""
    k = _CUDA_SCALE if cuda else 1
    vchunk = min(V, k * _VOCAB_TILE) if vocab_chunk_size is None else check_int(fn, "vocab_chunk_size", vocab_chunk_size, ge=1)
    if chunk_size is not None:
        return check_int(fn, "chunk_size", chunk_size, ge=1), vchunk
    n_buffers = 2 if entropy else 1
    return max(16, min(k * _MAX_CHUNK_TOKENS, k * k * _TILE_ELEMENTS // (n_buffers * min(vchunk, V)))), vchunk


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
    memory_budget: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    m = check_mask(fn, mask)
    out_pos, pred_rows = valid_positions(m)
    h, w = check_hidden_and_weight(fn, hidden, weight, m, pred_rows)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    budget = fused_budget.resolve(fn, memory_budget, h.device)
    targets = None
    if want_lp:
        ids = check_token_ids(fn, input_ids, m, w.shape[0])
        targets = ids.reshape(-1).index_select(0, out_pos).long()
    chunk, vchunk = _tile_sizes(fn, w.shape[0], want_entropy, chunk_size, vocab_chunk_size, h.device.type == "cuda")
    return _HiddenSoftmax.apply(h, w, out_pos, pred_rows, targets, 1.0 / tau, want_entropy, chunk, vchunk, budget)


_BUDGET_DOC = """``memory_budget``: None (the default) keeps no [N, V] state: the backward recomputes the logits
    (8·N·D·V FLOPs in all). A number of bytes, or ``"auto"`` (half the device's free memory), bounds
    the memory the call uses beyond its inputs, gradients included; what the working set leaves of
    it keeps the forward's softmax tiles of as many tokens as fit, whose backward then skips the
    logits GEMM (6·N·D·V FLOPs when all fit). See ``refimpl.fused_budget``."""


def token_logprobs_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
    memory_budget: int | str | None = None,
) -> torch.Tensor:
    """Spec: logprob.fused. = token_logprobs(hidden @ weight.T, ...) via token chunks × vocab tiles, online log-sum-exp, recompute in backward (within ``memory_budget``)."""
    fn = "token_logprobs_from_hidden"
    lp, _ = _run(fn, hidden, weight, input_ids, mask, temperature, True, False, chunk_size, vocab_chunk_size, memory_budget)
    return lp


def token_entropy_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
    memory_budget: int | str | None = None,
) -> torch.Tensor:
    """Spec: logprob.fused. = token_entropy(hidden @ weight.T, ...) via token chunks × vocab tiles, online entropy stats, recompute in backward (within ``memory_budget``)."""
    fn = "token_entropy_from_hidden"
    _, ent = _run(fn, hidden, weight, None, mask, temperature, False, True, chunk_size, vocab_chunk_size, memory_budget)
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
    memory_budget: int | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spec: logprob.fused. (token_logprobs, token_entropy) of hidden @ weight.T in one tiled pass (one GEMM per tile forward, three backward; within ``memory_budget``)."""
    fn = "token_logprobs_and_entropy_from_hidden"
    return _run(fn, hidden, weight, input_ids, mask, temperature, True, True, chunk_size, vocab_chunk_size, memory_budget)
