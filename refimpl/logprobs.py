"""Token log-probabilities and entropies from logits (spec ids ``logprob.token``, ``logprob.entropy``).

Only the rows that predict a valid token are read: row ``t-1`` of ``logits`` for every ``t`` with
``mask[b, t]``. They are gathered in chunks into one reused float32 buffer (float64 for float64
input), so neither a full float32 copy of bfloat16 logits nor a log-softmax output is ever
materialised. A custom autograd function saves the logits (already alive) and the log-sum-exp terms per
token, and recomputes the softmax chunk by chunk in the backward.

The tile helpers (:func:`tile_stats_`, :func:`merge_stats`, :func:`tile_grad_`) are shared with the
fused LM-head path in :mod:`refimpl.fused_head`.
"""

from __future__ import annotations

import torch

from refimpl.validation import (
    check_finite_flag,
    check_int,
    check_logits,
    check_mask,
    check_real,
    check_token_ids,
    compute_dtypes,
)

__all__ = ["token_logprobs", "token_entropy"]

# Elements of one [rows, V] float buffer in the logits path (32 MB in float32).
_LOGITS_TILE_ELEMENTS = 1 << 23


# ----------------------------------------------------------------------------------------------
# tile math (shared with refimpl.fused_head)
# ----------------------------------------------------------------------------------------------


def valid_positions(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat indices ``b*T + t`` of the valid tokens, and of the rows ``b*T + t-1`` that predict them."""
    out_pos = mask.reshape(-1).nonzero().squeeze(1)
    return out_pos, out_pos - 1


def tile_stats_(
    y: torch.Tensor, scratch: torch.Tensor | None, work: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per row of a tile of scaled logits ``y`` [n, v] (overwritten, unless a ``work`` tile of the same
    shape is given): max ``m``, ``s = Σ e^(y-m)`` and, when ``scratch`` (same shape) is given for the
    entropy, ``t = Σ e^(y-m)·(y-m)``."""
    m = y.amax(dim=1)
    y = y.sub_(m.unsqueeze(1)) if work is None else torch.sub(y, m.unsqueeze(1), out=work)
    if scratch is None:
        y.exp_()
        return m, y.sum(dim=1), None
    e = torch.exp(y, out=scratch)
    s = e.sum(dim=1)
    t = y.mul_(e).sum(dim=1)
    return m, s, t


def merge_stats(
    a: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    b: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Online log-sum-exp: combine the stats of two vocabulary ranges of the same rows."""
    (ma, sa, ta), (mb, sb, tb) = a, b
    m = torch.maximum(ma, mb)
    da, db = ma - m, mb - m
    ca, cb = torch.exp(da), torch.exp(db)
    s = sa * ca + sb * cb
    t = None if ta is None else ca * (ta + da * sa) + cb * (tb + db * sb)
    return m, s, t


def finish_stats(
    stats: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(m, log s, H)``, with the entropy ``H = log s − t/s`` (None without ``t``).

    ``lse = m + log s`` is kept as two terms: ``log p = (y − m) − log s`` is then exact where
    ``y − lse`` would lose the rounding of a large ``lse`` (|y| ~ 50 costs 4e-6 in float32)."""
    m, s, t = stats
    log_s = torch.log(s)
    return m, log_s, (None if t is None else log_s - t / s)


def tile_grad_(
    logp: torch.Tensor,
    scratch: torch.Tensor,
    coef_logp: torch.Tensor,
    coef_one: torch.Tensor,
) -> torch.Tensor:
    """``p ⊙ (coef_logp·logp + coef_one)`` row-wise, with ``p = exp(logp)``; ``logp`` is overwritten
    with the result, ``scratch`` receives ``p``.

    With ``coef_logp = −g_H/τ`` and ``coef_one = −(g_H·H + g_lp)/τ`` this is dL/dz of the tile
    (``∂H/∂y = −p(log p + H)``, ``∂lp/∂y = onehot − p``), less the one-hot term ``g_lp/τ``.
    """
    p = torch.exp(logp, out=scratch)
    torch.addcmul(coef_one.unsqueeze(1), logp, coef_logp.unsqueeze(1), out=logp)
    return logp.mul_(p)


def scatter_rows(values: torch.Tensor, out_pos: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """A zero [B, T] tensor of ``dtype`` holding ``values`` at the flat positions ``out_pos``."""
    out = torch.zeros(shape[0] * shape[1], dtype=dtype, device=values.device)
    out.index_copy_(0, out_pos, values.to(dtype))
    return out.view(shape[0], shape[1])


def _rows_per_chunk(chunk_size: int | None, width: int) -> int:
    return chunk_size if chunk_size is not None else max(1, _LOGITS_TILE_ELEMENTS // width)


# ----------------------------------------------------------------------------------------------
# autograd function over logits
# ----------------------------------------------------------------------------------------------


class _LogitsSoftmax(torch.autograd.Function):
    """Log-probs of the targets and/or entropies of the rows ``pred_rows`` of ``logits`` [B*T, V]."""

    @staticmethod
    def forward(ctx, logits, out_pos, pred_rows, targets, inv_tau, entropy, chunk, fn):  # type: ignore[override]
        B, T, V = logits.shape
        _, cdt = compute_dtypes(logits)
        flat = logits.reshape(B * T, V)
        n_tok = pred_rows.numel()
        row_max = torch.empty(n_tok, dtype=cdt, device=logits.device)
        log_sum = torch.empty(n_tok, dtype=cdt, device=logits.device)
        ent = torch.empty(n_tok, dtype=cdt, device=logits.device) if entropy else None
        lp = torch.empty(n_tok, dtype=cdt, device=logits.device) if targets is not None else None
        ok = torch.ones((), dtype=torch.bool, device=logits.device)
        if n_tok:
            rows = min(chunk, n_tok)
            buf = torch.empty(rows * V, dtype=cdt, device=logits.device)
            raw = None if logits.dtype == cdt else torch.empty(rows * V, dtype=logits.dtype, device=logits.device)
            scratch = torch.empty(rows * V, dtype=cdt, device=logits.device) if entropy else None
            for chunk_start in range(0, n_tok, rows):
                chunk_rows = pred_rows[chunk_start : chunk_start + rows]
                n = chunk_rows.numel()
                y = _gather_rows(flat, chunk_rows, buf, raw, inv_tau)
                ok &= torch.isfinite(y.amin(dim=1)).all()
                if targets is not None:
                    tgt_logit = y.gather(1, targets[chunk_start : chunk_start + n].unsqueeze(1)).squeeze(1)
                stats = tile_stats_(y, None if scratch is None else scratch[: n * V].view(n, V))
                ok &= torch.isfinite(stats[0]).all()
                m_c, log_s_c, ent_c = finish_stats(stats)
                row_max[chunk_start : chunk_start + n] = m_c
                log_sum[chunk_start : chunk_start + n] = log_s_c
                if ent is not None:
                    ent[chunk_start : chunk_start + n] = ent_c
                if lp is not None:
                    lp[chunk_start : chunk_start + n] = (tgt_logit - m_c).sub_(log_s_c)
        check_finite_flag(fn, "logits", ok, "at positions t-1 that predict a valid token t")
        ctx.save_for_backward(logits, out_pos, pred_rows, targets, row_max, log_sum, ent)
        ctx.inv_tau, ctx.chunk = inv_tau, chunk
        shape = (B, T)
        lp_out = scatter_rows(lp, out_pos, shape, logits.dtype) if lp is not None else logits.new_zeros(0)
        ent_out = scatter_rows(ent, out_pos, shape, logits.dtype) if ent is not None else logits.new_zeros(0)
        if lp is None:
            ctx.mark_non_differentiable(lp_out)
        if ent is None:
            ctx.mark_non_differentiable(ent_out)
        return lp_out, ent_out

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):  # type: ignore[override]
        logits, out_pos, pred_rows, targets, row_max, log_sum, ent = ctx.saved_tensors
        inv_tau, chunk = ctx.inv_tau, ctx.chunk
        B, T, V = logits.shape
        _, cdt = compute_dtypes(logits)
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None, None, None
        grad = torch.zeros_like(logits, memory_format=torch.contiguous_format)
        n_tok = pred_rows.numel()
        if n_tok == 0:
            return grad, None, None, None, None, None, None, None
        g_lp = _upstream(grad_lp, out_pos, cdt, inv_tau) if targets is not None else None
        g_h = _upstream(grad_ent, out_pos, cdt, inv_tau) if ent is not None else None
        flat = logits.reshape(B * T, V)
        gflat = grad.view(B * T, V)
        rows = min(chunk, n_tok)
        buf = torch.empty(rows * V, dtype=cdt, device=logits.device)
        raw = None if logits.dtype == cdt else torch.empty(rows * V, dtype=logits.dtype, device=logits.device)
        scratch = torch.empty(rows * V, dtype=cdt, device=logits.device) if g_h is not None else None
        for chunk_start in range(0, n_tok, rows):
            sl = slice(chunk_start, chunk_start + rows)
            chunk_rows = pred_rows[sl]
            n = chunk_rows.numel()
            y = _gather_rows(flat, chunk_rows, buf, raw, inv_tau)
            y.sub_(row_max[sl].unsqueeze(1)).sub_(log_sum[sl].unsqueeze(1))  # log p
            if g_h is None:  # dz = g/τ ⊙ (onehot − p)
                dz = y.exp_().mul_(-g_lp[sl].unsqueeze(1))
            else:
                coef_one = -g_h[sl] * ent[sl]
                if g_lp is not None:
                    coef_one -= g_lp[sl]
                dz = tile_grad_(y, scratch[: n * V].view(n, V), -g_h[sl], coef_one)
            if g_lp is not None:
                dz.scatter_add_(1, targets[sl].unsqueeze(1), g_lp[sl].unsqueeze(1))
            gflat.index_copy_(0, chunk_rows, dz if dz.dtype == grad.dtype else dz.to(grad.dtype))
        return grad, None, None, None, None, None, None, None


def _gather_rows(
    flat: torch.Tensor, rows: torch.Tensor, buf: torch.Tensor, raw: torch.Tensor | None, inv_tau: float
) -> torch.Tensor:
    """Rows ``rows`` of ``flat`` as a scaled float tile [n, V] in (a view of) ``buf``."""
    n, V = rows.numel(), flat.shape[1]
    y = buf[: n * V].view(n, V)
    if raw is None:
        torch.index_select(flat, 0, rows, out=y)
    else:
        y.copy_(torch.index_select(flat, 0, rows, out=raw[: n * V].view(n, V)))
    if inv_tau != 1.0:
        y.mul_(inv_tau)
    return y


def _upstream(grad: torch.Tensor | None, out_pos: torch.Tensor, dtype: torch.dtype, inv_tau: float) -> torch.Tensor:
    """dL/d(output) at the valid positions, times 1/τ (the chain rule through z/τ)."""
    if grad is None:
        return torch.zeros(out_pos.numel(), dtype=dtype, device=out_pos.device)
    g = grad.reshape(-1).index_select(0, out_pos).to(dtype)
    return g.mul_(inv_tau) if inv_tau != 1.0 else g


def _prepare(fn: str, logits: object, mask: object, temperature: object, chunk_size: object):
    m = check_mask(fn, mask)
    z = check_logits(fn, logits, m)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    chunk = None if chunk_size is None else check_int(fn, "chunk_size", chunk_size, ge=1)
    return m, z, 1.0 / tau, _rows_per_chunk(chunk, z.shape[2])


# ----------------------------------------------------------------------------------------------
# public functions
# ----------------------------------------------------------------------------------------------


def token_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Spec: logprob.token. lp[b,t] = z[b,t-1,x_t]/τ − logsumexp(z[b,t-1]/τ) on valid rows only, in row chunks; float32 softmax for half inputs."""
    fn = "token_logprobs"
    m, z, inv_tau, chunk = _prepare(fn, logits, mask, temperature, chunk_size)
    ids = check_token_ids(fn, input_ids, m, z.shape[2])
    out_pos, pred_rows = valid_positions(m)
    targets = ids.reshape(-1).index_select(0, out_pos).long()
    lp, _ = _LogitsSoftmax.apply(z, out_pos, pred_rows, targets, inv_tau, False, chunk, fn)
    return lp


def token_entropy(
    logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Spec: logprob.entropy. H = log Σe^(y−m) − Σe^(y−m)(y−m)/Σe^(y−m) with y = z[b,t-1]/τ, valid rows only, in row chunks."""
    fn = "token_entropy"
    m, z, inv_tau, chunk = _prepare(fn, logits, mask, temperature, chunk_size)
    out_pos, pred_rows = valid_positions(m)
    _, ent = _LogitsSoftmax.apply(z, out_pos, pred_rows, None, inv_tau, True, chunk, fn)
    return ent
