"""Vocabulary-parallel token log-probs and entropies (the LM head split over ranks by vocabulary,
as in Megatron's tensor parallelism; ``perf-anchors.md`` §3).

Each rank of ``group`` holds the logits (or the LM-head weight rows) of one contiguous vocabulary
range ``[vocab_start, vocab_start + V_shard)``; the ranges of the group tile ``[0, V)``, in any
order and of any sizes. Every rank holds the same ``input_ids``, ``mask`` (and ``hidden``), and
every rank returns the same ``[B, T]`` outputs. With ``y = z / τ`` on the valid rows only:

1. local pass: per row the shard's max ``m_r``, ``s_r = Σ e^(y−m_r)``, and for the entropy
   ``t_r = Σ e^(y−m_r)(y−m_r)``; the target's ``y`` on the rank whose range holds it, else 0;
2. **all-reduce MAX** of ``m_r`` → ``m`` (one ``[N + 1]`` tensor; the extra element says whether
   a rank rejected its own inputs, so a bad shard never leaves the other ranks hanging);
3. rescale to ``m`` (``s_r·e^(m_r−m)``, ``e^(m_r−m)(t_r + (m_r−m)s_r)``) and **all-reduce SUM** of
   ``[Σexp, Σp·z terms, target logit, target hits, non-finite flags]`` (one float64 tensor of at most 4N + 3
   elements);
4. ``lp = y_x − m − log s``, ``H = log s − t/s``.

Communication is two all-reduces per call, independent of V. The backward pass is local: each rank
recomputes its shard's softmax from the saved ``(m, log s)`` and writes
``dz = g_lp/τ·(onehot − p) − g_H/τ·p·(log p + H)`` for its own vocabulary columns only.

Where the ``d hidden`` all-reduce happens. The logits ``z_shard = hidden @ W_shardᵀ`` of a
column-parallel LM head give each rank a *partial* ``d hidden = dz_shard @ W_shard``; the true
gradient is the sum over the group. With the logits-shard functions that sum is the LM head's job
(Megatron's ``ColumnParallelLinear`` all-reduces its input gradient: ``copy_to_tensor_model_parallel_region``).
The fused functions (``*_from_hidden``) *are* the LM head, so their backward all-reduces
``d hidden`` (only the N rows that predict a valid token: one ``[N, D]`` all-reduce) unless
``reduce_hidden_grad=False`` (for a ``hidden`` that already went through such a copy region).
``d weight_shard`` stays local: each rank owns its rows of the weight.

The fused functions follow the chunked path of :mod:`refimpl.fused_head` (token chunks ×
vocabulary tiles, online log-sum-exp, recompute in the backward; ``hidden @ weight.T`` never
exists) with the cross-rank merge in between, and equal it on one rank. Without
``torch.distributed`` initialised (or with a one-rank group) every function is the
single-device quantity (``vocab_start = 0``, the whole vocabulary).

Half-precision inputs are computed in float32 and float64 stays float64; the collectives carry float64
(N-sized tensors: negligible next to the logits).
"""

from __future__ import annotations

import torch

from refimpl.logprobs import finish_stats, merge_stats, scatter_rows, tile_grad_, tile_stats_, valid_positions
from refimpl.validation import (
    check_float,
    check_int,
    check_mask,
    check_real,
    check_same_device,
    compute_dtypes,
)

__all__ = [
    "vocab_parallel_token_logprobs", "vocab_parallel_token_entropy",
    "vocab_parallel_token_logprobs_from_hidden", "vocab_parallel_token_entropy_from_hidden",
    "vocab_parallel_token_logprobs_and_entropy_from_hidden",
]

_LOGITS_TILE_ELEMENTS = 1 << 23
_TILE_ELEMENTS = 1 << 25
_MAX_CHUNK_TOKENS = 1024
_MAX_VOCAB_TILE = 65536
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


# ----------------------------------------------------------------------------------------------
# communication
# ----------------------------------------------------------------------------------------------


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def group_size(group: object = None) -> int:
    """Ranks in ``group`` (the default group for None); 1 when ``torch.distributed`` is not initialised."""
    dist = _dist()
    return 1 if dist is None else dist.get_world_size(group)


def comm_device(group: object = None, device: torch.device | None = None) -> torch.device:
    """The device a collective over ``group`` needs: the current CUDA device for NCCL, else
    ``device`` (CPU when None)."""
    dist = _dist()
    if dist is not None and dist.get_backend(group) == "nccl":
        if device is not None and device.type == "cuda":
            return device
        return torch.device("cuda", torch.cuda.current_device())
    return device if device is not None else torch.device("cpu")


def _all_reduce(t: torch.Tensor, op: str, group: object) -> torch.Tensor:
    dist = _dist()
    if dist is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=group)
    return t


class _Rejected(Exception):
    """A rank's own inputs failed validation after the replicated checks passed."""


def _merge_over_ranks(
    fn: str,
    stats: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None],
    tgt: torch.Tensor | None,
    hits: torch.Tensor | None,
    flags: torch.Tensor,
    local_error: Exception | None,
    group: object,
    what: tuple[str, ...],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The two all-reduces: ``(m, log s, H or None, target y or None)`` of the whole vocabulary.

    ``flags``: per-rank non-finite indicators (named by ``what``), summed over the group; ``hits``:
    1 where the target lies in this rank's range (the sum must be exactly 1 per row)."""
    cdt = stats[0].dtype
    m_r, s_r, t_r = (None if x is None else x.double() for x in stats)  # collectives in float64 on
    n = m_r.numel()  # every rank, whatever a (possibly rejected) shard's dtype
    payload = torch.cat([m_r, m_r.new_full((1,), 1.0 if local_error is not None else 0.0)])
    _all_reduce(payload, "MAX", group)
    if local_error is not None:
        raise local_error
    if bool(payload[n] > 0):
        raise ValueError(f"{fn}: group: another rank of the process group rejected its inputs (see its error)")
    m = payload[:n]
    delta = m_r - m
    c = torch.exp(delta)
    parts = [s_r * c]
    if t_r is not None:
        parts.append(c * (t_r + delta * s_r))
    if tgt is not None:
        parts += [tgt.double(), hits.double()]
    parts.append(flags.double())
    summed = _all_reduce(torch.cat(parts), "SUM", group)
    bad = summed[-flags.numel():]
    if bool((bad > 0).any()):
        name, where = what[int((bad > 0).nonzero()[0])].split("|")
        raise ValueError(f"{fn}: {name}: expected finite values {where} (on some rank of the group), got NaN or +-inf")
    s = summed[:n]
    k = 1
    t = None
    if t_r is not None:
        t = summed[n * k : n * (k + 1)]
        k += 1
    tgt_all = hits_all = None
    if tgt is not None:
        tgt_all = summed[n * k : n * (k + 1)]
        hits_all = summed[n * (k + 1) : n * (k + 2)]
    m, log_s, ent = finish_stats((m, s, t))
    if hits_all is not None and n:
        wrong = hits_all != 1
        if bool(wrong.any()):
            raise _Rejected(int(wrong.nonzero()[0]))
    return tuple(None if x is None else x.to(cdt) for x in (m, log_s, ent, tgt_all))


# ----------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------


def _targets(fn: str, input_ids: object, m: torch.Tensor, out_pos: torch.Tensor) -> torch.Tensor:
    """Global target ids at the valid positions; ``>= 0`` here, ``< V`` checked after the merge."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"{fn}: input_ids: expected a torch.Tensor [B, T], got {type(input_ids).__name__}")
    if input_ids.dtype not in _INT_DTYPES:
        raise TypeError(f"{fn}: input_ids: expected an integer tensor [B, T], got dtype {input_ids.dtype}")
    if input_ids.shape != m.shape:
        raise ValueError(f"{fn}: input_ids: expected shape {tuple(m.shape)} ([B, T] of mask), got {tuple(input_ids.shape)}")
    check_same_device(fn, "input_ids", input_ids, m)
    targets = input_ids.reshape(-1).index_select(0, out_pos).long()
    if bool((targets < 0).any()):
        i = int((targets < 0).nonzero()[0])
        b, t = divmod(int(out_pos[i]), m.shape[1])
        raise ValueError(f"{fn}: input_ids: expected token ids in [0, V) at valid positions, got {int(targets[i])} at {(b, t)}")
    return targets


def _id_error(fn: str, targets: torch.Tensor, out_pos: torch.Tensor, T: int, i: int) -> ValueError:
    b, t = divmod(int(out_pos[i]), T)
    return ValueError(
        f"{fn}: input_ids: expected token ids in [0, V) at valid positions, V being the vocabulary the "
        f"group's shards cover once each (vocab_start + V_shard per rank), got {int(targets[i])} at {(b, t)}"
    )


def _local_range(
    fn: str, vocab_start: object, v_shard: int, targets: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(target index in the shard, clamped; True where the target lies in the shard)."""
    v0 = check_int(fn, "vocab_start", vocab_start, ge=0)
    if targets is None:
        return None, None
    local = targets - v0
    inside = (local >= 0) & (local < v_shard)
    return local.clamp(0, v_shard - 1), inside


def _replicated(fn: str, mask: object, temperature: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    m = check_mask(fn, mask)
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    out_pos, pred_rows = valid_positions(m)
    return m, out_pos, pred_rows, 1.0 / tau


def _upstream(grad: torch.Tensor | None, out_pos: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor | None:
    if grad is None:
        return None
    g = grad.reshape(-1).index_select(0, out_pos).to(dtype)
    return g.mul_(scale) if scale != 1.0 else g


def _scaled_rows(flat: torch.Tensor, rows: torch.Tensor, cdt: torch.dtype, inv_tau: float) -> torch.Tensor:
    """``flat[rows] / τ`` in the compute dtype (a new tensor)."""
    h = flat.index_select(0, rows)
    h = h if h.dtype == cdt else h.to(cdt)
    return h.mul_(inv_tau) if inv_tau != 1.0 else h


def _tile_grad(logp: torch.Tensor, scratch: torch.Tensor | None, g_lp, g_h, ent) -> torch.Tensor:
    """dL/dy of a tile from its log-softmax (overwritten), less the one-hot term ``g_lp``."""
    if g_h is None:
        return logp.exp_().mul_(-g_lp.unsqueeze(1))
    coef_one = -g_h * ent
    if g_lp is not None:
        coef_one = coef_one - g_lp
    return tile_grad_(logp, scratch, -g_h, coef_one)


def _add_onehot(dz: torch.Tensor, local: torch.Tensor, inside: torch.Tensor, g_lp: torch.Tensor, offset: int = 0) -> None:
    """dz[r, local_r − offset] += g_lp[r] where the target lies in the columns of ``dz``."""
    v = dz.shape[1]
    idx = local - offset
    here = inside & (idx >= 0) & (idx < v)
    dz.scatter_add_(1, idx.clamp(0, v - 1).unsqueeze(1), torch.where(here, g_lp, 0.0).unsqueeze(1))


def _rows_grad(logp: torch.Tensor, scratch: torch.Tensor | None, g_lp, g_h, ent, local, inside, sl: slice,
               offset: int = 0) -> torch.Tensor:
    """dL/dy of the rows ``sl`` of a tile (columns ``offset`` on) from their log-softmax (overwritten)."""
    dz = _tile_grad(logp, scratch, None if g_lp is None else g_lp[sl], None if g_h is None else g_h[sl],
                    None if ent is None else ent[sl])
    if g_lp is not None:
        _add_onehot(dz, local[sl], inside[sl], g_lp[sl], offset)
    return dz


def _zero_stats(n: int, cdt: torch.dtype, dev: torch.device, want_ent: bool, want_tgt: bool):
    """This rank's per-row accumulators ``(m_r, s_r, t_r or None, target y or None)``, all 0."""
    m_r = torch.zeros(n, dtype=cdt, device=dev)
    s_r = torch.zeros(n, dtype=cdt, device=dev)
    t_r = torch.zeros(n, dtype=cdt, device=dev) if want_ent else None
    tgt = torch.zeros(n, dtype=cdt, device=dev) if want_tgt else None
    return m_r, s_r, t_r, tgt


def _merged(fn: str, stats, tgt, inside, flags, local_error, group, what, targets, out_pos, T: int):
    """``_merge_over_ranks`` with this rank's target hits; a target no rank holds is an ``input_ids`` error."""
    hits = None if inside is None else inside.to(stats[0].dtype)
    try:
        return _merge_over_ranks(fn, stats, tgt, hits, flags, local_error, group, what)
    except _Rejected as exc:
        raise _id_error(fn, targets, out_pos, T, exc.args[0]) from None


def _outputs(ctx, tgt_all, m, log_s, ent, out_pos, shape: tuple[int, int], like: torch.Tensor):
    """The ``[B, T]`` (log-probs, entropies) in ``like``'s dtype; an output not asked for is an empty,
    non-differentiable tensor."""
    lp_out = ent_out = like.new_zeros(0)
    if tgt_all is not None:
        lp_out = scatter_rows((tgt_all - m).sub_(log_s), out_pos, shape, like.dtype)
    else:
        ctx.mark_non_differentiable(lp_out)
    if ent is not None:
        ent_out = scatter_rows(ent, out_pos, shape, like.dtype)
    else:
        ctx.mark_non_differentiable(ent_out)
    return lp_out, ent_out


# ----------------------------------------------------------------------------------------------
# logits shards
# ----------------------------------------------------------------------------------------------


class _ShardSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, shard, out_pos, pred_rows, targets, local, inside, inv_tau, want_ent, chunk, group, local_error, fn):  # type: ignore[override]
        B, T = shard.shape[:2]
        _, cdt = compute_dtypes(shard)
        dev = shard.device
        V = shard.shape[2]
        n = pred_rows.numel()
        m_r, s_r, t_r, tgt = _zero_stats(n, cdt, dev, want_ent, targets is not None)
        bad = torch.zeros(1, dtype=torch.float64, device=dev)
        if local_error is None and n:
            flat = shard.reshape(B * T, V)
            rows = min(chunk, n)
            scratch = torch.empty(rows * V, dtype=cdt, device=dev) if want_ent else None
            for start in range(0, n, rows):
                sl = slice(start, start + rows)
                y = _scaled_rows(flat, pred_rows[sl], cdt, inv_tau)
                k = y.shape[0]
                bad += (~torch.isfinite(y.amin(dim=1))).sum()
                if tgt is not None:
                    tgt[sl] = torch.where(inside[sl], y.gather(1, local[sl].unsqueeze(1)).squeeze(1), 0.0)
                mm, ss, tt = tile_stats_(y, None if scratch is None else scratch[: k * V].view(k, V))
                bad += (~torch.isfinite(mm)).sum()
                m_r[sl], s_r[sl] = mm, ss
                if t_r is not None:
                    t_r[sl] = tt
        what = ("logits_shard|at positions t-1 that predict a valid token t",)
        m, log_s, ent, tgt_all = _merged(fn, (m_r, s_r, t_r), tgt, inside, bad, local_error, group, what, targets, out_pos, T)
        ctx.save_for_backward(shard, out_pos, pred_rows, local, inside, m, log_s, ent)
        ctx.inv_tau, ctx.chunk, ctx.want_lp = inv_tau, chunk, targets is not None
        return _outputs(ctx, tgt_all, m, log_s, ent, out_pos, (B, T), shard)

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):  # type: ignore[override]
        shard, out_pos, pred_rows, local, inside, m, log_s, ent = ctx.saved_tensors
        inv_tau, chunk = ctx.inv_tau, ctx.chunk
        none = (None,) * 11
        B, T, V = shard.shape
        _, cdt = compute_dtypes(shard)
        grad = torch.zeros_like(shard, memory_format=torch.contiguous_format)
        g_lp = _upstream(grad_lp, out_pos, cdt, inv_tau) if ctx.want_lp else None
        g_h = _upstream(grad_ent, out_pos, cdt, inv_tau) if ent is not None else None
        n = pred_rows.numel()
        if not ctx.needs_input_grad[0] or n == 0 or (g_lp is None and g_h is None):
            return (grad,) + none
        flat, gflat = shard.reshape(B * T, V), grad.view(B * T, V)
        rows = min(chunk, n)
        scratch = torch.empty(rows * V, dtype=cdt, device=shard.device) if g_h is not None else None
        for start in range(0, n, rows):
            sl = slice(start, start + rows)
            y = _scaled_rows(flat, pred_rows[sl], cdt, inv_tau)
            k = y.shape[0]
            y.sub_(m[sl].unsqueeze(1)).sub_(log_s[sl].unsqueeze(1))  # log p
            dz = _rows_grad(y, None if scratch is None else scratch[: k * V].view(k, V), g_lp, g_h, ent, local, inside, sl)
            gflat.index_copy_(0, pred_rows[sl], dz.to(grad.dtype))
        return (grad,) + none


def _shard_call(fn, logits_shard, input_ids, mask, vocab_start, temperature, group, chunk_size, want_lp, want_ent):
    m, out_pos, pred_rows, inv_tau = _replicated(fn, mask, temperature)
    chunk = None if chunk_size is None else check_int(fn, "chunk_size", chunk_size, ge=1)
    targets = _targets(fn, input_ids, m, out_pos) if want_lp else None
    local_error: Exception | None = None
    local = inside = None
    z = logits_shard
    try:  # per-rank inputs: a failure is shared with the group before raising (no rank hangs)
        z = check_float(fn, "logits_shard", logits_shard, 3, "[B, T, V_shard]")
        if z.shape[:2] != m.shape:
            raise ValueError(f"{fn}: logits_shard: expected leading dims {tuple(m.shape)} ([B, T] of mask), "
                             f"got shape {tuple(z.shape)}")
        if z.shape[2] < 1:
            raise ValueError(f"{fn}: logits_shard: expected V_shard >= 1, got shape {tuple(z.shape)}")
        check_same_device(fn, "logits_shard", z, m)
        local, inside = _local_range(fn, vocab_start, z.shape[2], targets)
    except (TypeError, ValueError) as exc:
        local_error = exc
    if local_error is not None:  # take part in the collectives with placeholders, then raise
        z = torch.zeros(*m.shape, 1, device=m.device)
        if targets is not None:
            local, inside = torch.zeros_like(targets), torch.zeros_like(targets, dtype=torch.bool)
    rows = chunk if chunk is not None else max(1, _LOGITS_TILE_ELEMENTS // z.shape[2])
    return _ShardSoftmax.apply(z, out_pos, pred_rows, targets, local, inside, inv_tau, want_ent, rows, group, local_error, fn)


def vocab_parallel_token_logprobs(
    logits_shard: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    vocab_start: int,
    temperature: float = 1.0,
    group: object = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """``token_logprobs`` of the full logits, from this rank's shard ``logits_shard`` [B, T, V_shard]
    (vocabulary ``[vocab_start, vocab_start + V_shard)``): all-reduce MAX of the row max, all-reduce
    SUM of Σexp and the target logit; local backward (d logits_shard only)."""
    fn = "vocab_parallel_token_logprobs"
    lp, _ = _shard_call(fn, logits_shard, input_ids, mask, vocab_start, temperature, group, chunk_size, True, False)
    return lp


def vocab_parallel_token_entropy(
    logits_shard: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    group: object = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """``token_entropy`` of the full logits from this rank's shard: all-reduce MAX of the row max,
    all-reduce SUM of Σexp and Σ e^(y−m)(y−m); ``H = log s − t/s``; local backward."""
    fn = "vocab_parallel_token_entropy"
    _, ent = _shard_call(fn, logits_shard, None, mask, 0, temperature, group, chunk_size, False, True)
    return ent


# ----------------------------------------------------------------------------------------------
# fused: hidden states and a weight shard (column-parallel LM head)
# ----------------------------------------------------------------------------------------------


class _ShardHeadSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, out_pos, pred_rows, targets, local, inside, inv_tau, want_ent, chunk, vchunk,
                group, reduce_grad, local_error, fn):  # type: ignore[override]
        B, T, D = hidden.shape
        V = weight.shape[0]
        _, cdt = compute_dtypes(hidden, weight)
        dev = hidden.device
        n = pred_rows.numel()
        m_r, s_r, t_r, tgt = _zero_stats(n, cdt, dev, want_ent, targets is not None)
        flags = torch.zeros(3, dtype=torch.float64, device=dev)  # hidden, weight_shard, logits
        if local_error is None:
            w = weight if weight.dtype == cdt else weight.to(cdt)
            if not bool(torch.isfinite(w.sum())) and not bool(torch.isfinite(w).all()):
                flags[1] = 1.0
        if local_error is None and n:
            h_flat = hidden.reshape(B * T, D)
            rows = min(chunk, n)
            width = min(vchunk, V)
            buf = torch.empty(rows * width, dtype=cdt, device=dev)
            scratch = torch.empty(rows * width, dtype=cdt, device=dev) if want_ent else None
            for start in range(0, n, rows):
                sl = slice(start, start + rows)
                hs = _scaled_rows(h_flat, pred_rows[sl], cdt, inv_tau)
                k = hs.shape[0]
                if not bool(torch.isfinite(hs.sum())) and not bool(torch.isfinite(hs).all()):
                    flags[0] = 1.0
                stats = None
                for v0 in range(0, V, vchunk):
                    w_tile = w[v0 : v0 + vchunk]
                    vw = w_tile.shape[0]
                    y = torch.mm(hs, w_tile.t(), out=buf[: k * vw].view(k, vw))
                    flags[2] += (~torch.isfinite(y.amin(dim=1))).sum()
                    if tgt is not None:
                        idx = local[sl] - v0
                        here = inside[sl] & (idx >= 0) & (idx < vw)
                        val = y.gather(1, idx.clamp(0, vw - 1).unsqueeze(1)).squeeze(1)
                        tgt[sl] = torch.where(here, val, tgt[sl])
                    tile = tile_stats_(y, None if scratch is None else scratch[: k * vw].view(k, vw))
                    flags[2] += (~torch.isfinite(tile[0])).sum()
                    stats = tile if stats is None else merge_stats(stats, tile)
                m_r[sl], s_r[sl] = stats[0], stats[1]
                if t_r is not None:
                    t_r[sl] = stats[2]
        what = ("hidden|at positions t-1 that predict a valid token t", "weight_shard|everywhere",
                "logits|(hidden @ weight_shard.T overflows)")
        m, log_s, ent, tgt_all = _merged(fn, (m_r, s_r, t_r), tgt, inside, flags, local_error, group, what, targets, out_pos, T)
        ctx.save_for_backward(hidden, weight, out_pos, pred_rows, local, inside, m, log_s, ent)
        ctx.inv_tau, ctx.chunk, ctx.vchunk = inv_tau, chunk, vchunk
        ctx.want_lp, ctx.group, ctx.reduce_grad = targets is not None, group, reduce_grad
        return _outputs(ctx, tgt_all, m, log_s, ent, out_pos, (B, T), hidden)

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):  # type: ignore[override]
        hidden, weight, out_pos, pred_rows, local, inside, m, log_s, ent = ctx.saved_tensors
        inv_tau, chunk, vchunk = ctx.inv_tau, ctx.chunk, ctx.vchunk
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        B, T, D = hidden.shape
        V = weight.shape[0]
        _, cdt = compute_dtypes(hidden, weight)
        dev = hidden.device
        n = pred_rows.numel()
        g_lp = _upstream(grad_lp, out_pos, cdt, 1.0) if ctx.want_lp else None
        g_h = _upstream(grad_ent, out_pos, cdt, 1.0) if ent is not None else None
        d_rows = torch.zeros(n, D, dtype=cdt, device=dev) if need_h else None
        d_w = torch.zeros(V, D, dtype=cdt, device=dev) if need_w else None
        if n and (g_lp is not None or g_h is not None) and (need_h or need_w):
            w = weight if weight.dtype == cdt else weight.to(cdt)
            h_flat = hidden.reshape(B * T, D)
            rows = min(chunk, n)
            width = min(vchunk, V)
            buf = torch.empty(rows * width, dtype=cdt, device=dev)
            scratch = torch.empty(rows * width, dtype=cdt, device=dev) if g_h is not None else None
            for start in range(0, n, rows):
                sl = slice(start, start + rows)
                hs = _scaled_rows(h_flat, pred_rows[sl], cdt, inv_tau)  # y = hs·Wᵀ: dW = dyᵀ·hs, dh = dy·W/τ
                k = hs.shape[0]
                acc = torch.zeros(k, D, dtype=cdt, device=dev) if need_h else None
                for v0 in range(0, V, vchunk):
                    w_tile = w[v0 : v0 + vchunk]
                    vw = w_tile.shape[0]
                    y = torch.mm(hs, w_tile.t(), out=buf[: k * vw].view(k, vw))
                    y.sub_(m[sl].unsqueeze(1)).sub_(log_s[sl].unsqueeze(1))
                    dz = _rows_grad(y, None if scratch is None else scratch[: k * vw].view(k, vw), g_lp, g_h, ent,
                                    local, inside, sl, v0)
                    if acc is not None:
                        acc.addmm_(dz, w_tile)
                    if d_w is not None:
                        d_w[v0 : v0 + vw].addmm_(dz.t(), hs)
                if acc is not None:
                    d_rows[sl] = acc.mul_(inv_tau)
        grad_hidden = grad_weight = None
        if need_h:
            if ctx.reduce_grad and d_rows.numel():  # the column-parallel head: d hidden sums the shards' parts
                _all_reduce(d_rows, "SUM", ctx.group)  # (N is the same on every rank: same mask)
            d_hidden = torch.zeros(B * T, D, dtype=hidden.dtype, device=dev)
            d_hidden.index_copy_(0, pred_rows, d_rows.to(hidden.dtype))
            grad_hidden = d_hidden.view(B, T, D)
        if need_w:
            grad_weight = d_w.to(weight.dtype)
        return (grad_hidden, grad_weight) + (None,) * 13


def _head_call(fn, hidden, weight_shard, input_ids, mask, vocab_start, temperature, group, chunk_size,
               vocab_chunk_size, reduce_hidden_grad, want_lp, want_ent):
    m, out_pos, pred_rows, inv_tau = _replicated(fn, mask, temperature)
    h = check_float(fn, "hidden", hidden, 3, "[B, T, D]")
    if h.shape[:2] != m.shape:
        raise ValueError(f"{fn}: hidden: expected leading dims {tuple(m.shape)} ([B, T] of mask), got shape {tuple(h.shape)}")
    if h.shape[2] < 1:
        raise ValueError(f"{fn}: hidden: expected hidden size D >= 1, got shape {tuple(h.shape)}")
    check_same_device(fn, "hidden", h, m)
    chunk = None if chunk_size is None else check_int(fn, "chunk_size", chunk_size, ge=1)
    vchunk = None if vocab_chunk_size is None else check_int(fn, "vocab_chunk_size", vocab_chunk_size, ge=1)
    if not isinstance(reduce_hidden_grad, bool):
        raise TypeError(f"{fn}: reduce_hidden_grad: expected a bool, got {type(reduce_hidden_grad).__name__}")
    targets = _targets(fn, input_ids, m, out_pos) if want_lp else None
    local_error: Exception | None = None
    local = inside = None
    w = weight_shard
    try:  # per-rank inputs
        w = check_float(fn, "weight_shard", weight_shard, 2, "[V_shard, D]")
        if w.shape[1] != h.shape[2]:
            raise ValueError(f"{fn}: weight_shard: expected shape (V_shard, {h.shape[2]}) (D of hidden), got {tuple(w.shape)}")
        if w.shape[0] < 1:
            raise ValueError(f"{fn}: weight_shard: expected V_shard >= 1, got shape {tuple(w.shape)}")
        if w.dtype != h.dtype:
            raise TypeError(f"{fn}: weight_shard: expected the dtype of hidden ({h.dtype}), got {w.dtype}")
        check_same_device(fn, "weight_shard", w, m)
        local, inside = _local_range(fn, vocab_start, w.shape[0], targets)
    except (TypeError, ValueError) as exc:
        local_error = exc
        w = torch.zeros(1, h.shape[2], dtype=h.dtype, device=m.device)
        if targets is not None:
            local, inside = torch.zeros_like(targets), torch.zeros_like(targets, dtype=torch.bool)
    V = w.shape[0]
    vchunk = vchunk if vchunk is not None else min(V, _MAX_VOCAB_TILE)
    if chunk is None:
        buffers = 2 if want_ent else 1
        chunk = max(16, min(_MAX_CHUNK_TOKENS, _TILE_ELEMENTS // (buffers * min(vchunk, V))))
    return _ShardHeadSoftmax.apply(h, w, out_pos, pred_rows, targets, local, inside, inv_tau, want_ent, chunk, vchunk,
                                   group, reduce_hidden_grad, local_error, fn)


def vocab_parallel_token_logprobs_from_hidden(
    hidden: torch.Tensor,
    weight_shard: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    vocab_start: int,
    temperature: float = 1.0,
    group: object = None,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
    reduce_hidden_grad: bool = True,
) -> torch.Tensor:
    """``token_logprobs_from_hidden(hidden, W)`` with this rank holding the rows
    ``W[vocab_start : vocab_start + V_shard]`` as ``weight_shard``: token chunks × vocabulary tiles
    locally, two all-reduces to merge; backward: local ``d weight_shard``, ``d hidden`` all-reduced
    over ``group`` unless ``reduce_hidden_grad=False``."""
    fn = "vocab_parallel_token_logprobs_from_hidden"
    lp, _ = _head_call(fn, hidden, weight_shard, input_ids, mask, vocab_start, temperature, group, chunk_size,
                       vocab_chunk_size, reduce_hidden_grad, True, False)
    return lp


def vocab_parallel_token_entropy_from_hidden(
    hidden: torch.Tensor,
    weight_shard: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    group: object = None,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
    reduce_hidden_grad: bool = True,
) -> torch.Tensor:
    """``token_entropy_from_hidden(hidden, W)`` from this rank's ``weight_shard`` (see
    :func:`vocab_parallel_token_logprobs_from_hidden`)."""
    fn = "vocab_parallel_token_entropy_from_hidden"
    _, ent = _head_call(fn, hidden, weight_shard, None, mask, 0, temperature, group, chunk_size,
                        vocab_chunk_size, reduce_hidden_grad, False, True)
    return ent


def vocab_parallel_token_logprobs_and_entropy_from_hidden(
    hidden: torch.Tensor,
    weight_shard: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    vocab_start: int,
    temperature: float = 1.0,
    group: object = None,
    chunk_size: int | None = None,
    vocab_chunk_size: int | None = None,
    reduce_hidden_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropies) in one pass and the same two all-reduces."""
    fn = "vocab_parallel_token_logprobs_and_entropy_from_hidden"
    return _head_call(fn, hidden, weight_shard, input_ids, mask, vocab_start, temperature, group, chunk_size,
                      vocab_chunk_size, reduce_hidden_grad, True, True)
