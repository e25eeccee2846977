"""Data- and context-parallel helpers of the trainer: the distributed-exact aggregation of ``refimpl.distributed``
(``StepCounts``, ``step_counts``, ``micro_batch_loss``) and ``refimpl.context_parallel`` (``cp_step_counts``,
``cp_micro_batch_loss``), and the few collectives the trainer needs (rank, world size, the CP groups, all-gather
of equal-shape tensors, all-reduce, barrier); all no-ops on one process. The trainer calls the aggregation
through this module, where a wiring mutant replaces it."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from refimpl.context_parallel import cp_micro_batch_loss, cp_step_counts
from refimpl.distributed import StepCounts, micro_batch_loss, step_counts


def initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if initialized() else 1


def all_gather_rows(x: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``x`` (same shape on every rank) along dim 0, in rank order."""
    if not initialized() or world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)


def all_reduce_(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    if initialized() and world_size() > 1:
        dist.all_reduce(x, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return x


def cp_group(cp_size: int) -> object:
    """This rank's context-parallel group: ranks ``[k·cp_size, (k+1)·cp_size)`` (every rank creates every group,
    as ``new_group`` requires); None without CP."""
    if cp_size == 1 or not initialized():
        return None
    mine = None
    for k in range(world_size() // cp_size):
        group = dist.new_group(list(range(k * cp_size, (k + 1) * cp_size)))
        if k == rank() // cp_size:
            mine = group
    return mine


def all_gather_dp_rows(x: torch.Tensor, cp_size: int) -> torch.Tensor:
    """Every data-parallel rank's ``x`` in DP-rank order: the world's all-gather, one copy per CP group (the CP
    ranks of a group hold the same rows)."""
    rows = all_gather_rows(x)
    if cp_size == 1:
        return rows
    return torch.cat(rows.split(x.shape[0])[::cp_size], dim=0)


def barrier() -> None:
    if initialized() and world_size() > 1:
        dist.barrier()


def exit_skipping_finalization(code: int) -> None:
    """End a rank whose process group is destroyed: flush its output and leave without interpreter
    finalization. There, gloo's C++ threads can still be joinable or hold tensors while static destructors run,
    and a rank that succeeded aborts ("terminate called without an active exception", SIGABRT; seen in CI with
    ``rlspec train --trace`` under torchrun, after the closing barrier and destroy_process_group)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


__all__ = ["StepCounts", "step_counts", "micro_batch_loss", "cp_step_counts", "cp_micro_batch_loss", "cp_group",
           "all_gather_dp_rows", "rank", "world_size", "all_gather_rows", "all_reduce_", "barrier", "initialized",
           "exit_skipping_finalization"]
