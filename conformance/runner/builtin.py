"""The two adapters rlspec ships for its own implementations, and their side of the `agg.partition`
contract (`micro_batched_loss`, conformance/runner/partition.py)."""

from __future__ import annotations

import types

import numpy as np

import oracle
import refimpl
from conformance import SPEC_VERSION, SUITE_VERSION


def _module_adapter(module: types.ModuleType, name: str, array_api: str, dtypes: tuple[str, ...]) -> types.SimpleNamespace:
    functions = {fn: getattr(module, fn) for fn in module.__all__ if callable(getattr(module, fn))}
    return types.SimpleNamespace(
        name=name,
        version=SUITE_VERSION,
        spec_version=SPEC_VERSION,
        array_api=array_api,
        dtypes=dtypes,
        supports_grad=True,
        accepts_variants=True,  # every spec keyword: the preset checks run too
        **functions,
    )


def oracle_adapter() -> types.SimpleNamespace:
    """The NumPy float64 oracle, checked against itself (a sanity row: it must always pass)."""
    adapter = _module_adapter(oracle, "oracle", "numpy", ("float64", "float32"))
    adapter.micro_batched_loss = oracle_micro_batched_loss  # the agg.partition rows
    adapter.micro_batched_loss_grad = oracle_micro_batched_loss_grad
    return adapter


def refimpl_adapter() -> types.SimpleNamespace:
    """The PyTorch reference implementation (autograd gradients)."""
    adapter = _module_adapter(refimpl, "refimpl", "torch", ("float64", "float32", "bfloat16"))
    adapter.micro_batched_loss = refimpl_micro_batched_loss  # step_counts + micro_batch_loss
    return adapter



def refimpl_micro_batched_loss(token_loss_chunks, mask_chunks, *, mode, norm_length=None, dp_world_size=1):
    """refimpl: ``step_counts`` over every rank's chunks (the all-reduce, simulated in one process),
    then ``micro_batch_loss`` per chunk with ``dp_world_size``."""
    counts = refimpl.step_counts(list(mask_chunks))
    return [refimpl.micro_batch_loss(x, m, counts, mode=mode, norm_length=norm_length, dp_world_size=dp_world_size)
            for x, m in zip(token_loss_chunks, mask_chunks)]


def _oracle_counts(mask_chunks) -> dict[str, float]:
    return {"num_tokens": float(sum(np.asarray(m).sum() for m in mask_chunks)),
            "num_seqs": float(sum(np.asarray(m).shape[0] for m in mask_chunks))}


def oracle_micro_batched_loss(token_loss_chunks, mask_chunks, *, mode, norm_length=None, dp_world_size=1):
    """The oracle: ``aggregate`` of each chunk with the step's global counts, times ``dp_world_size``."""
    counts = _oracle_counts(mask_chunks)
    return [dp_world_size * oracle.aggregate(x, m, mode=mode, norm_length=norm_length, **counts)
            for x, m in zip(token_loss_chunks, mask_chunks)]


def oracle_micro_batched_loss_grad(token_loss_chunks, mask_chunks, upstream, *, mode, norm_length=None, dp_world_size=1):
    counts = _oracle_counts(mask_chunks)
    return [dp_world_size * oracle.aggregate_grad(x, m, upstream, mode=mode, norm_length=norm_length, **counts)
            for x, m in zip(token_loss_chunks, mask_chunks)]


__all__ = ["oracle_adapter", "refimpl_adapter", "oracle_micro_batched_loss", "oracle_micro_batched_loss_grad",
           "refimpl_micro_batched_loss"]
