"""Packed sequences: several sequences in one row (padding-free batches), described by
``cu_seqlens`` or ``position_ids`` (bug-catalogue class 17).

Layouts:

- ``cu_seqlens``: 1-D integer offsets ``[0, e_1, ..., e_S]`` (strictly increasing) into the
  row-major flattened ``[B*T]`` positions, the flash-attention varlen convention; sequence ``s``
  is ``[e_{s-1}, e_s)``. A sequence may not cross a row boundary; positions ``>= e_S`` are padding
  (in no sequence). With ``B = 1`` this is the usual packed stream.
- ``position_ids``: ``[B, T]`` integers; a sequence starts at every position whose id is 0 (so a
  one-token sequence between two others, ids ``..., 2, 0, 0, 1, ...``, is its own sequence; a
  "strictly decreasing" rule would merge it) and at every row start; negative ids mark padding. Pad
  with -1 (or by continuing the last sequence's ids): padding written as 0s would count as
  one-token sequences in the ``seq_mean_*`` divisor ``S``.

The token-aligned spec already scores ``input_ids[:, t]`` with ``logits[:, t-1]`` of the same row,
so a packed row needs only one more rule: **the first token of every sequence has no prediction**
(the position before it belongs to another sequence), exactly as ``mask[:, 0]`` must be False. The
packed functions check that ``mask`` is False at those positions (:func:`pack_boundary_mask`) and at
padding, which guarantees that no label ever crosses a sequence boundary, and then equal the
unpacked computation: ``packed_token_logprobs`` / ``packed_token_entropy`` are ``token_logprobs`` /
``token_entropy`` on the packed row; ``packed_aggregate`` gives the ``seq_mean_*`` modes their
per-sequence token counts ``n_s`` and ``S`` = the number of sequences (the row-based
:func:`refimpl.aggregate` would treat the whole row as one sequence).
"""

from __future__ import annotations

import torch

from refimpl.aggregation import AGGREGATION_MODES, _count, _safe_div, aggregate
from refimpl.logprobs import token_entropy, token_logprobs
from refimpl.masking import masked
from refimpl.validation import (
    check_choice,
    check_finite,
    check_mask,
    check_real,
    check_same_device,
    check_token_array,
    compute_dtypes,
    errors_as,
)

__all__ = [
    "packed_segments", "pack_boundary_mask", "packed_token_logprobs", "packed_token_entropy",
    "packed_aggregate",
]

_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _segments(fn: str, mask: object, cu_seqlens: object, position_ids: object,
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(the checked mask, segment id per position [B, T] (-1 = padding), first-token flags [B, T], number of
    sequences)."""
    m = check_mask(fn, mask)
    (B, T), device = m.shape, m.device
    if (cu_seqlens is None) == (position_ids is None):
        raise ValueError(f"{fn}: cu_seqlens: expected exactly one of cu_seqlens and position_ids, got "
                         f"{'both' if cu_seqlens is not None else 'neither'}")
    if cu_seqlens is not None:
        cu = cu_seqlens
        if not isinstance(cu, torch.Tensor):
            raise TypeError(f"{fn}: cu_seqlens: expected an integer torch.Tensor [S+1], got {type(cu).__name__}")
        if cu.dtype not in _INT_DTYPES:
            raise TypeError(f"{fn}: cu_seqlens: expected an integer tensor [S+1], got dtype {cu.dtype}")
        if cu.dim() != 1 or cu.numel() < 1:
            raise ValueError(f"{fn}: cu_seqlens: expected 1-D [S+1] offsets, got shape {tuple(cu.shape)}")
        cu = cu.to(device=device, dtype=torch.long)
        if int(cu[0]) != 0:
            raise ValueError(f"{fn}: cu_seqlens: expected cu_seqlens[0] == 0, got {int(cu[0])}")
        lengths = cu[1:] - cu[:-1]
        if bool((lengths <= 0).any()):
            i = int((lengths <= 0).nonzero()[0])
            raise ValueError(f"{fn}: cu_seqlens: expected strictly increasing offsets (every sequence has a token), "
                             f"got {int(cu[i])} then {int(cu[i + 1])} at index {i}")
        if int(cu[-1]) > B * T:
            raise ValueError(f"{fn}: cu_seqlens: expected offsets <= B*T = {B * T} (positions of the flattened "
                             f"[B, T] rows), got {int(cu[-1])}")
        S = cu.numel() - 1
        if S and bool(((cu[:-1] // T) != ((cu[1:] - 1) // T)).any()):
            i = int(((cu[:-1] // T) != ((cu[1:] - 1) // T)).nonzero()[0])
            raise ValueError(f"{fn}: cu_seqlens: expected every sequence inside one row of T = {T} positions, "
                             f"got sequence {i} = [{int(cu[i])}, {int(cu[i + 1])}) crossing a row boundary")
        pos = torch.arange(B * T, device=device)
        seg = torch.searchsorted(cu, pos, right=True) - 1
        seg = torch.where(pos < cu[-1], seg, -1)
        first = torch.zeros(B * T, dtype=torch.bool, device=device)
        first[cu[:-1]] = True
        return m, seg.view(B, T), first.view(B, T), S
    pid = position_ids
    if not isinstance(pid, torch.Tensor):
        raise TypeError(f"{fn}: position_ids: expected an integer torch.Tensor [B, T], got {type(pid).__name__}")
    if pid.dtype not in _INT_DTYPES:
        raise TypeError(f"{fn}: position_ids: expected an integer tensor [B, T], got dtype {pid.dtype}")
    if tuple(pid.shape) != (B, T):
        raise ValueError(f"{fn}: position_ids: expected shape {(B, T)} ([B, T] of mask), got {tuple(pid.shape)}")
    pid = pid.to(device)
    pad = pid < 0
    first = (pid == 0) & ~pad
    if T:
        first[:, 0] = ~pad[:, 0]
    # a padding position ends the sequence before it; the next non-padding position starts one
    after_pad = torch.zeros_like(pad)
    after_pad[:, 1:] = pad[:, :-1]
    first |= after_pad & ~pad
    seg = torch.cumsum(first.reshape(-1).long(), 0) - 1
    seg = torch.where(pad.reshape(-1), -1, seg)
    return m, seg.view(B, T), first, int(first.sum())


def packed_segments(
    mask: torch.Tensor, *, cu_seqlens: torch.Tensor | None = None, position_ids: torch.Tensor | None = None
) -> tuple[torch.Tensor, int]:
    """(sequence index of every position ``[B, T]`` long, -1 on padding; number of sequences S).
    Sequences are numbered in row-major order."""
    _, seg, _, S = _segments("packed_segments", mask, cu_seqlens, position_ids)
    return seg, S


def pack_boundary_mask(
    mask: torch.Tensor, *, cu_seqlens: torch.Tensor | None = None, position_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """``[B, T]`` bool, True where a token has no prediction inside its sequence: the first token of
    every packed sequence, and padding. ``mask`` must be False there; ``mask & ~pack_boundary_mask(...)``
    drops such positions from a mask built without the packing."""
    _, seg, first, _ = _segments("pack_boundary_mask", mask, cu_seqlens, position_ids)
    return first | (seg < 0)


def _check_packed(fn: str, mask: object, cu_seqlens: object, position_ids: object) -> tuple[torch.Tensor, torch.Tensor, int]:
    m, seg, first, S = _segments(fn, mask, cu_seqlens, position_ids)
    bad = m & (first | (seg < 0))
    if bool(bad.any()):
        b, t = (int(i) for i in bad.nonzero()[0])
        what = "padding (in no sequence)" if int(seg[b, t]) < 0 else f"the first token of packed sequence {int(seg[b, t])}"
        raise ValueError(f"{fn}: mask: expected False at the first token of every packed sequence (its label would "
                         f"come from the previous sequence) and at padding, got True at {(b, t)}, {what}")
    return m, seg, S


def packed_token_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    cu_seqlens: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """``token_logprobs`` of packed rows ``[B, T]``: the same values as each sequence scored alone
    (checked: ``mask`` is False at every sequence's first token and at padding)."""
    fn = "packed_token_logprobs"
    m, _, _ = _check_packed(fn, mask, cu_seqlens, position_ids)
    with errors_as(fn):
        return token_logprobs(logits, input_ids, m, temperature=temperature, chunk_size=chunk_size)


def packed_token_entropy(
    logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    cu_seqlens: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """``token_entropy`` of packed rows (see :func:`packed_token_logprobs`)."""
    fn = "packed_token_entropy"
    m, _, _ = _check_packed(fn, mask, cu_seqlens, position_ids)
    with errors_as(fn):
        return token_entropy(logits, m, temperature=temperature, chunk_size=chunk_size)


def packed_aggregate(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    cu_seqlens: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    norm_length: float | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """``aggregate`` over the packed *sequences* (not rows): ``n_s`` = valid tokens of sequence s,
    ``S`` = ``num_seqs`` or the number of sequences. Equals ``aggregate`` of the unpacked batch
    (one row per sequence), in every mode; ``num_tokens``/``num_seqs`` as in ``aggregate``."""
    fn = "packed_aggregate"
    m, seg, S_local = _check_packed(fn, mask, cu_seqlens, position_ids)
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    if mode in ("token_mean", "token_sum"):
        with errors_as(fn):
            return aggregate(token_loss, m, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)
    loss = check_token_array(fn, "token_loss", token_loss, m)
    check_same_device(fn, "token_loss", loss, m)
    norm = None if norm_length is None else check_real(fn, "norm_length", norm_length, gt=0.0)
    if mode == "seq_mean_token_sum_norm" and norm is None:
        raise ValueError(f"{fn}: norm_length: expected a number > 0 for mode='seq_mean_token_sum_norm' "
                         f"(Dr. GRPO constant normaliser), got None")
    out_dtype, cdt = compute_dtypes(loss)
    _count(fn, "num_tokens", num_tokens, m.device, cdt)  # validated; not a divisor of these modes
    S = _count(fn, "num_seqs", num_seqs, m.device, cdt)
    lm = masked(loss, m, cdt)
    check_finite(fn, ("token_loss", loss, m, lm))
    index = seg.reshape(-1).clamp(min=0)  # padding is masked: adds 0 to sequence 0
    bins = max(S_local, 1)  # no sequence at all: every position is padding (masked)
    seq_sums = torch.zeros(bins, dtype=cdt, device=m.device).index_add(0, index, lm.reshape(-1))
    if mode == "seq_mean_token_mean":
        n = torch.zeros(bins, dtype=cdt, device=m.device).index_add(0, index, m.reshape(-1).to(cdt))
        seq_sums = torch.where(n > 0, seq_sums / n.clamp(min=1), 0.0)
    elif mode == "seq_mean_token_sum_norm":
        seq_sums = seq_sums / norm
    return _safe_div(seq_sums.sum(), float(S_local) if S is None else S).to(out_dtype)
