"""Context parallelism (CP): the sequence axis of every micro-batch sharded over the ranks of a CP group, on
the loss side: log-probs, token losses and their aggregation give, summed over the CP and data-parallel (DP)
ranks, exactly the loss and gradient of the unsharded step (bug-catalogue class 26, verl #6049).

Layout. A CP rank holds a set of *model columns* of each sequence (:func:`cp_columns`): a contiguous slice, or
``zigzag`` (the sequence cut into ``2·C`` chunks, rank ``r`` holding chunks ``r`` and ``2C-1-r``, which balances
causal attention). Its logits at column ``c`` predict the token at ``c + 1``, so the *token columns* of its
log-probs and losses are its model columns shifted by one (:func:`cp_token_columns`): labels are shifted before
sharding, and no logits cross a rank. A sequence's last model column predicts nothing; it is given the
sequence's first token column, which has no prediction either (its log-prob is 0 and the mask must be False
there, as ``mask[:, 0]`` must be in the spec). The token columns of the CP ranks therefore partition each
sequence's columns, the layout ``rlspec-trace`` records with ``cp_columns`` (conformance/spec/v1/trace.md).

Counts and normalisation. CP ranks hold *different* tokens of the same sequences, so a step's token count
``N`` is summed over DP × CP (:func:`cp_step_counts`; summed over DP only, it is short by the CP size: the
wiring mutant ``cp_count_dp_only``), while its sequence count ``S`` counts each sequence once (on CP rank 0).
``seq_mean_token_mean`` needs each sequence's whole token count ``n_s``, one all-reduce over the CP group
(:func:`cp_sequence_counts`). The gradient all-reduce averages over the DP × CP ranks, so each shard's loss is
multiplied by that world size ``W`` (:func:`cp_micro_batch_loss`), as :func:`refimpl.micro_batch_loss` does for
DP alone::

    loss_{r,i} = W · Σ_{(b,t) ∈ shard} w_{b,t} · l_{b,t} · m_{b,t}
    w = 1/N (token_mean), 1/(n_s·S) (seq_mean_token_mean), 1/S (seq_mean_token_sum),
        1/(S·L) (seq_mean_token_sum_norm), 1 (token_sum)

Token-level losses only: a sequence-level ratio (GSPO) needs its sequence's log-ratio sum over the CP group,
which these functions do not provide.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from refimpl.aggregation import AGGREGATION_MODES
from refimpl.distributed import StepCounts
from refimpl.validation import check_choice, check_int, check_mask, check_real, errors_as
from refimpl.vocab_parallel import comm_device, group_size

__all__ = ["cp_columns", "cp_token_columns", "cp_token_logprobs", "cp_step_counts", "cp_sequence_counts",
           "cp_micro_batch_loss"]


def _bounds(fn: str, length: int, cu_seqlens: object) -> list[tuple[int, int]]:
    """The [start, stop) of each sequence along the columns (unpacked: one, the whole row); a packed row's
    padding after its last sequence is one more span, so that every column has a shard."""
    length = check_int(fn, "length", length, ge=0)
    if cu_seqlens is None:
        return [(0, length)] if length else []
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype == torch.bool:
        raise TypeError(f"{fn}: cu_seqlens: expected a 1-D integer tensor of offsets, got "
                        f"{type(cu_seqlens).__name__ if not isinstance(cu_seqlens, torch.Tensor) else cu_seqlens.dtype}")
    cu = [int(v) for v in cu_seqlens.reshape(-1).tolist()]
    if cu_seqlens.dim() != 1 or not cu or cu[0] != 0:
        raise ValueError(f"{fn}: cu_seqlens: expected 1-D offsets starting at 0, got {cu_seqlens.tolist()}")
    if any(b <= a for a, b in zip(cu, cu[1:])) or cu[-1] > length:
        raise ValueError(f"{fn}: cu_seqlens: expected strictly increasing offsets within the {length} columns, got {cu}")
    spans = list(zip(cu, cu[1:]))
    return spans + ([(cu[-1], length)] if cu[-1] < length else [])


def cp_columns(length: int, cp_size: int, cp_rank: int, *, zigzag: bool = False,
               cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """The model columns CP rank ``cp_rank`` of ``cp_size`` holds of a row of ``length`` columns: every sequence
    (the row, or each packed sequence of ``cu_seqlens``) cut into ``cp_size`` chunks (``2·cp_size`` with
    ``zigzag``: chunks ``r`` and ``2·cp_size-1-r``), chunk sizes as ``torch.tensor_split``; int64 [T_local]."""
    fn = "cp_columns"
    size = check_int(fn, "cp_size", cp_size, ge=1)
    rank = check_int(fn, "cp_rank", cp_rank, ge=0)
    if rank >= size:
        raise ValueError(f"{fn}: cp_rank: expected 0 <= cp_rank < cp_size = {size}, got {rank}")
    if not isinstance(zigzag, bool):
        raise TypeError(f"{fn}: zigzag: expected a bool, got {type(zigzag).__name__}")
    parts = []
    for a, b in _bounds(fn, length, cu_seqlens):
        chunks = torch.arange(a, b).tensor_split(2 * size if zigzag else size)
        parts += [chunks[rank], chunks[2 * size - 1 - rank]] if zigzag else [chunks[rank]]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


def _check_columns(fn: str, columns: object, length: int | None, name: str = "columns") -> torch.Tensor:
    if not isinstance(columns, torch.Tensor) or columns.dtype.is_floating_point or columns.dtype == torch.bool:
        raise TypeError(f"{fn}: {name}: expected a 1-D integer tensor (from cp_columns), got "
                        f"{type(columns).__name__ if not isinstance(columns, torch.Tensor) else columns.dtype}")
    if columns.dim() != 1:
        raise ValueError(f"{fn}: {name}: expected a 1-D tensor, got shape {tuple(columns.shape)}")
    if columns.numel() and (int(columns.min()) < 0 or (length is not None and int(columns.max()) >= length)):
        raise ValueError(f"{fn}: {name}: expected columns in [0, {length if length is not None else 'T'}), got "
                         f"{int(columns.min())}..{int(columns.max())}")
    return columns.long()


def cp_token_columns(columns: torch.Tensor, length: int, *, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """The token column each model column's logits predict: ``c + 1``, and a sequence's first column for its
    last one (which predicts nothing). Over the CP ranks these partition the columns, as ``columns`` do."""
    fn = "cp_token_columns"
    spans = _bounds(fn, length, cu_seqlens)
    cols = _check_columns(fn, columns, length)
    start = torch.zeros(length, dtype=torch.long)
    stop = torch.zeros(length, dtype=torch.long)
    for a, b in spans:
        start[a:b], stop[a:b] = a, b
    c = cols.cpu()
    nxt = c + 1
    return torch.where(nxt < stop[c], nxt, start[c]).to(columns.device)


def cp_token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor, columns: torch.Tensor, *,
                      temperature: float = 1.0, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """This CP rank's token-aligned log-probs: ``logits`` [B, T_local, V] at its model ``columns``
    (:func:`cp_columns`), ``input_ids`` [B, T] the whole rows, ``mask`` [B, T_local] the loss mask at its token
    columns (:func:`cp_token_columns`): ``lp[b, k] = z[b, k, x]/τ − logsumexp(z[b, k]/τ)`` with ``x`` the token at
    token column ``k`` where the mask is True, 0 elsewhere (float32 softmax for half inputs). Equals
    ``token_logprobs`` of the whole rows at those columns. The mask must be False at a sequence's first token."""
    fn = "cp_token_logprobs"
    if not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point or logits.dim() != 3:
        raise TypeError(f"{fn}: logits: expected a floating [B, T_local, V] tensor, got "
                        f"{tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__}")
    m = check_mask(fn, mask, first_column=False)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype.is_floating_point or input_ids.dim() != 2:
        raise TypeError(f"{fn}: input_ids: expected an integer [B, T] tensor of the whole rows")
    B, T = input_ids.shape
    cols = _check_columns(fn, columns, T)
    if m.shape != (B, cols.numel()):
        raise ValueError(f"{fn}: mask: expected shape [B, T_local] = {(B, cols.numel())} (rows of input_ids, "
                         f"one column per model column), got {tuple(m.shape)}")
    if logits.shape[:2] != m.shape:
        raise ValueError(f"{fn}: logits: expected [B, T_local, V] with [B, T_local] = {tuple(m.shape)}, got "
                         f"{tuple(logits.shape)}")
    with errors_as(fn):
        token_cols = cp_token_columns(cols, T, cu_seqlens=cu_seqlens)
    starts = (token_cols != cols + 1).to(m.device)
    if bool((m & starts.unsqueeze(0)).any()):
        k = int((m & starts.unsqueeze(0)).any(0).nonzero()[0])
        raise ValueError(f"{fn}: mask: True at column {int(token_cols[k])}, the first token of a sequence (no prediction)")
    tau = check_real(fn, "temperature", temperature, gt=0.0)
    targets = input_ids.index_select(1, token_cols.to(input_ids.device)).long()
    V = logits.shape[2]
    if bool(((targets < 0) | (targets >= V))[m].any()):
        raise ValueError(f"{fn}: input_ids: token ids at valid positions must be in [0, {V})")
    z = (logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits) / tau
    # rows that predict no valid token are never read: zeroed, so NaN or inf there reach neither value nor gradient
    z = torch.where(m.to(z.device).unsqueeze(2), z, torch.zeros((), dtype=z.dtype, device=z.device))
    picked = z.gather(2, targets.clamp(0, V - 1).unsqueeze(2)).squeeze(2)
    lp = picked - torch.logsumexp(z, dim=2)
    return torch.where(m, lp, torch.zeros((), dtype=lp.dtype, device=lp.device)).to(logits.dtype)


def cp_step_counts(masks: Sequence[torch.Tensor], *, cp_rank: int, group: object = None,
                   seqs_per_mask: Sequence[int] | None = None) -> StepCounts:
    """A step's global counts under CP: ``N`` the valid tokens of every micro-batch shard of every rank of
    ``group`` (the DP × CP ranks: default the whole world), ``S`` its sequences counted once (on CP rank 0
    only). ``masks``: this rank's token-column masks, one per micro-batch; ``seqs_per_mask``: sequences per
    mask when packed (default: rows)."""
    fn = "cp_step_counts"
    rank = check_int(fn, "cp_rank", cp_rank, ge=0)
    if isinstance(masks, (torch.Tensor, str, bytes)) or not isinstance(masks, Sequence):
        raise TypeError(f"{fn}: masks: expected a sequence of [B, T_local] mask tensors (one per micro-batch), "
                        f"got {type(masks).__name__}")
    checked = [check_mask(fn, m, name=f"masks[{i}]", first_column=False) for i, m in enumerate(masks)]
    if seqs_per_mask is None:
        seqs = [m.shape[0] for m in checked]
    elif isinstance(seqs_per_mask, (str, bytes)) or not isinstance(seqs_per_mask, Sequence) or len(seqs_per_mask) != len(checked):
        raise ValueError(f"{fn}: seqs_per_mask: expected {len(checked)} sequence counts (one per mask), got {seqs_per_mask!r}")
    else:
        seqs = [check_int(fn, "seqs_per_mask", s, ge=0) for s in seqs_per_mask]
    device = checked[0].device if checked else None
    size = group_size(group)
    if size > 1:
        device = comm_device(group, device)
    local = torch.zeros(2, dtype=torch.float64, device=device)
    for m in checked:
        local[0] += m.sum(dtype=torch.float64).to(local.device)
    local[1] = float(sum(seqs)) if rank == 0 else 0.0
    if size > 1:
        import torch.distributed as dist

        dist.all_reduce(local, op=dist.ReduceOp.SUM, group=group)
    num_tokens, num_seqs = local.tolist()
    return StepCounts(num_tokens=num_tokens, num_seqs=num_seqs)


def _segments(fn: str, m: torch.Tensor, token_columns: torch.Tensor, cu_seqlens: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """The sequence of each local token ([B, T_local] ids into a flat per-sequence count, -1 for padding) and
    the number of sequences."""
    B, n = m.shape
    if cu_seqlens is None:
        return torch.arange(B, device=m.device).unsqueeze(1).expand(B, n), B
    if B != 1:
        raise ValueError(f"{fn}: mask: a packed micro-batch is one row ([1, T_local]), got {B} rows")
    ends = cu_seqlens.to(m.device).long()[1:]
    seg = torch.searchsorted(ends, token_columns.to(m.device), right=True)
    seg = torch.where(seg < ends.numel(), seg, torch.full_like(seg, -1))
    return seg.unsqueeze(0), int(ends.numel())


def cp_sequence_counts(mask: torch.Tensor, token_columns: torch.Tensor, *, cp_group: object = None,
                       cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """Each sequence's valid tokens over the CP group (one all-reduce SUM over ``cp_group``): [B] for rows,
    [S] for a packed row (``cu_seqlens`` of the whole row). ``mask`` [B, T_local] at ``token_columns``."""
    fn = "cp_sequence_counts"
    m = check_mask(fn, mask, first_column=False)
    cols = _check_columns(fn, token_columns, None, "token_columns")
    if cols.numel() != m.shape[1]:
        raise ValueError(f"{fn}: mask: {m.shape[1]} columns but token_columns has {cols.numel()}")
    seg, n_seq = _segments(fn, m, cols, cu_seqlens)
    device = comm_device(cp_group, m.device) if group_size(cp_group) > 1 else m.device
    counts = torch.zeros(n_seq, dtype=torch.float64, device=device)
    valid = m & (seg >= 0)
    counts.index_add_(0, seg[valid].to(device), torch.ones(int(valid.sum()), dtype=torch.float64, device=device))
    if group_size(cp_group) > 1:
        import torch.distributed as dist

        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=cp_group)
    return counts.to(m.device)


def cp_micro_batch_loss(token_loss: torch.Tensor, mask: torch.Tensor, counts: StepCounts, *, mode: str,
                        token_columns: torch.Tensor | None = None, sequence_counts: torch.Tensor | None = None,
                        cu_seqlens: torch.Tensor | None = None, norm_length: float | None = None,
                        world_size: int | None = None) -> torch.Tensor:
    """The loss one CP rank backpropagates for one micro-batch shard: ``W · Σ w · l · m`` (module docstring),
    ``counts`` from :func:`cp_step_counts`, ``world_size`` W the ranks the gradient all-reduce averages over (DP
    × CP; default the world). ``seq_mean_token_mean`` needs ``sequence_counts`` (:func:`cp_sequence_counts`) and
    ``token_columns`` (packed: with ``cu_seqlens``) to find each token's sequence."""
    fn = "cp_micro_batch_loss"
    if not isinstance(counts, StepCounts):
        raise TypeError(f"{fn}: counts: expected a StepCounts (from cp_step_counts), got {type(counts).__name__}")
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    m = check_mask(fn, mask, first_column=False)
    if not isinstance(token_loss, torch.Tensor) or not token_loss.dtype.is_floating_point or token_loss.shape != m.shape:
        raise ValueError(f"{fn}: token_loss: expected a floating tensor of the mask's shape {tuple(m.shape)}")
    W = group_size(None) if world_size is None else check_int(fn, "world_size", world_size, ge=1)
    acc = torch.float32 if token_loss.dtype in (torch.float16, torch.bfloat16) else token_loss.dtype
    lm = torch.where(m, token_loss.to(acc), torch.zeros((), dtype=acc, device=m.device))
    N, S = counts.num_tokens, counts.num_seqs
    if mode == "seq_mean_token_mean":
        if sequence_counts is None or token_columns is None:
            raise ValueError(f"{fn}: sequence_counts: seq_mean_token_mean needs sequence_counts (cp_sequence_counts) "
                             "and token_columns")
        cols = _check_columns(fn, token_columns, None, "token_columns")
        if cols.numel() != m.shape[1]:
            raise ValueError(f"{fn}: token_columns: {cols.numel()} columns but the mask has {m.shape[1]}")
        seg, n_seq = _segments(fn, m, cols, cu_seqlens)
        if sequence_counts.shape != (n_seq,):
            raise ValueError(f"{fn}: sequence_counts: expected shape ({n_seq},), got {tuple(sequence_counts.shape)}")
        n_s = sequence_counts.to(device=m.device, dtype=acc).clamp_min(1.0)
        per_token = torch.where(seg >= 0, 1.0 / n_s[seg.clamp_min(0)], torch.zeros((), dtype=acc, device=m.device))
        total = (lm * per_token).sum() / S if S else lm.sum() * 0.0
    else:
        L = None
        if mode == "seq_mean_token_sum_norm":
            L = check_real(fn, "norm_length", norm_length, gt=0.0)
        divisor = {"token_mean": N, "seq_mean_token_sum": S, "seq_mean_token_sum_norm": S * (L or 1.0),
                   "token_sum": 1.0}[mode]
        total = lm.sum() / divisor if divisor else lm.sum() * 0.0
    out = total * W if W != 1 else total
    return out.to(token_loss.dtype)
