"""Distributed-exact training math: one step's batch split over data-parallel (DP) ranks and
gradient-accumulation micro-batches gives exactly the gradient of the whole batch on one device.

A trainer calls two functions per optimizer step (bug-catalogue classes 1, 12 and 26):

1. ``counts = step_counts([mb.mask for mb in my_micro_batches], group=dp_group)`` once, before the
   first micro-batch: this rank's valid-token and sequence counts over all of its micro-batches,
   summed over the DP ranks by **one** ``all_reduce`` (SUM) of a 2-element tensor;
2. ``loss = micro_batch_loss(token_loss, mask, counts, mode=...)`` for each micro-batch, then
   ``loss.backward()`` (under ``ddp.no_sync()`` for all but the last micro-batch, as usual).

The formula. For micro-batch ``i`` of rank ``r`` with ``N`` = global valid tokens and ``S`` = global
sequences of the step (from ``step_counts``) and ``W`` = the DP world size::

    loss_{r,i} = aggregate(token_loss_{r,i}, mask_{r,i}, mode=mode, norm_length=norm_length,
                           num_tokens=N, num_seqs=S) · W

Gradient accumulation sums the micro-batches' gradients on a rank, and DDP (or FSDP) averages the
ranks' gradients (÷ W), so the gradient applied is ``Σ_{r,i} ∇aggregate(part_{r,i}; N, S)``, which by
the spec's partition rule (``agg.md``) is the gradient of ``aggregate(whole batch)`` in every mode:
``token_mean`` ``Σ l·m / N``; ``seq_mean_token_mean`` ``Σ_b (Σ_t l·m / n_b) / S`` (a sequence's
``n_b`` is local to its row, rows are never split); ``seq_mean_token_sum`` ``Σ l·m / S``;
``seq_mean_token_sum_norm`` ``Σ l·m / (S · norm_length)``; ``token_sum`` ``Σ l·m``. A micro-batch or
a rank with no valid token contributes an exact 0 (and a zero gradient, never NaN) but still runs
its backward pass, which DDP requires; empty micro-batches never enter a divisor. The step's loss
value is ``Σ_{r,i} loss_{r,i} / W`` (all-reduce the rank's sum of ``loss.detach()`` and divide by W).

Groups. With tensor parallelism, ``group`` must be the DP group (the ranks that see *different*
data) and ``dp_world_size`` its size: ranks that hold the same tokens must not be counted twice.
Context parallelism shards the tokens themselves, so its counts run over DP × CP: see
:mod:`refimpl.context_parallel`. Without ``torch.distributed`` initialised both functions work on one process
(no communication, ``W = 1``), so the same trainer code runs single-device.

The vocabulary-parallel log-probs and entropies (Megatron-style tensor parallelism of the LM head)
are in :mod:`refimpl.vocab_parallel`; packed sequences in :mod:`refimpl.packed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from refimpl.aggregation import AGGREGATION_MODES, aggregate
from refimpl.validation import check_choice, check_int, check_mask, errors_as
from refimpl.vocab_parallel import comm_device, group_size

__all__ = ["StepCounts", "step_counts", "micro_batch_loss"]


@dataclass(frozen=True)
class StepCounts:
    """The global counts of one optimizer step, identical on every DP rank.

    ``num_tokens``: valid (mask=True) tokens of the whole step, all ranks and micro-batches;
    ``num_seqs``: sequences of the whole step (rows, or packed sequences when ``seqs_per_mask`` was
    given), fully masked ones included (the spec counts them in ``S``).
    """

    num_tokens: float
    num_seqs: float


def step_counts(
    masks: Sequence[torch.Tensor],
    *,
    group: object = None,
    seqs_per_mask: Sequence[int] | None = None,
) -> StepCounts:
    """Global (num_tokens, num_seqs) of a step: local sums over this rank's micro-batch ``masks``,
    then one ``all_reduce`` (SUM) of a 2-element float64 tensor over ``group`` (no communication
    when ``torch.distributed`` is not initialised or the group has one rank).

    ``masks``: every micro-batch mask of this rank for the step (``[b_i, T_i]``; a rank may hold
    none, or only fully masked ones: it still takes part in the all-reduce). ``seqs_per_mask``:
    the number of sequences in each mask when rows are packed (e.g. ``len(cu_seqlens) - 1``);
    default: each mask's row count. Every rank of ``group`` must call this once per step.
    """
    fn = "step_counts"
    if isinstance(masks, (torch.Tensor, str, bytes)) or not isinstance(masks, Sequence):
        raise TypeError(f"{fn}: masks: expected a sequence of [B, T] mask tensors (one per micro-batch), "
                        f"got {type(masks).__name__}")
    checked = [check_mask(fn, m, name=f"masks[{i}]") for i, m in enumerate(masks)]
    if seqs_per_mask is not None:
        if isinstance(seqs_per_mask, (str, bytes)) or not isinstance(seqs_per_mask, Sequence):
            raise TypeError(f"{fn}: seqs_per_mask: expected a sequence of ints (one per mask), "
                            f"got {type(seqs_per_mask).__name__}")
        if len(seqs_per_mask) != len(checked):
            raise ValueError(f"{fn}: seqs_per_mask: expected {len(checked)} counts (one per mask), got {len(seqs_per_mask)}")
        seqs = [check_int(fn, "seqs_per_mask", s, ge=0) for s in seqs_per_mask]
    else:
        seqs = [m.shape[0] for m in checked]
    device = checked[0].device if checked else None
    size = group_size(group)
    if size > 1:
        device = comm_device(group, device)
    local = torch.zeros(2, dtype=torch.float64, device=device)
    for m in checked:
        local[0] += m.sum(dtype=torch.float64).to(local.device)
    local[1] = float(sum(seqs))
    if size > 1:
        import torch.distributed as dist

        dist.all_reduce(local, op=dist.ReduceOp.SUM, group=group)
    num_tokens, num_seqs = local.tolist()
    return StepCounts(num_tokens=num_tokens, num_seqs=num_seqs)


def micro_batch_loss(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    counts: StepCounts,
    *,
    mode: str,
    norm_length: float | None = None,
    dp_world_size: int | None = None,
    cu_seqlens: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """The loss to backpropagate for one micro-batch:
    ``aggregate(token_loss, mask, mode=mode, norm_length=norm_length, num_tokens=counts.num_tokens,
    num_seqs=counts.num_seqs) · dp_world_size``.

    ``dp_world_size`` (default: the size of the default process group, 1 when ``torch.distributed``
    is not initialised) undoes DDP's gradient averaging, so that summing the micro-batches'
    backward passes and averaging over ranks gives the whole step's gradient (module docstring).
    Packed rows (``cu_seqlens`` or ``position_ids``): :func:`refimpl.packed.packed_aggregate`, with
    ``counts`` from ``step_counts(..., seqs_per_mask=...)``.
    """
    fn = "micro_batch_loss"
    if not isinstance(counts, StepCounts):
        raise TypeError(f"{fn}: counts: expected a StepCounts (from step_counts), got {type(counts).__name__}")
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    W = group_size(None) if dp_world_size is None else check_int(fn, "dp_world_size", dp_world_size, ge=1)
    with errors_as(fn):
        if cu_seqlens is None and position_ids is None:
            loss = aggregate(token_loss, mask, mode=mode, norm_length=norm_length,
                             num_tokens=counts.num_tokens, num_seqs=counts.num_seqs)
        else:
            from refimpl.packed import packed_aggregate

            loss = packed_aggregate(token_loss, mask, mode=mode, norm_length=norm_length, cu_seqlens=cu_seqlens,
                                    position_ids=position_ids, num_tokens=counts.num_tokens, num_seqs=counts.num_seqs)
    return loss * W if W != 1 else loss
