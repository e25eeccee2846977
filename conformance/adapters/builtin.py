"""The two adapters rlspec ships for its own implementations."""

from __future__ import annotations

import types


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
        framework_available=True,
        accepts_variants=True,  # every spec keyword: the preset checks run too
        **functions,
    )


def oracle_adapter() -> types.SimpleNamespace:
    """The NumPy float64 oracle, checked against itself (a sanity row: it must always pass)."""
    from conformance.partition import oracle_micro_batched_loss, oracle_micro_batched_loss_grad

    adapter = _module_adapter(oracle, "oracle", "numpy", ("float64", "float32"))
    adapter.micro_batched_loss = oracle_micro_batched_loss  # the agg.partition rows (conformance/partition.py)
    adapter.micro_batched_loss_grad = oracle_micro_batched_loss_grad
    return adapter


def refimpl_adapter() -> types.SimpleNamespace:
    """The PyTorch reference implementation (autograd gradients)."""
    from conformance.partition import refimpl_micro_batched_loss

    adapter = _module_adapter(refimpl, "refimpl", "torch", ("float64", "float32", "bfloat16"))
    adapter.micro_batched_loss = refimpl_micro_batched_loss  # step_counts + micro_batch_loss
    return adapter


__all__ = ["oracle_adapter", "refimpl_adapter"]
