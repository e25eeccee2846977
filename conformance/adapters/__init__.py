"""Adapters: how the suite calls an implementation.

An adapter is any object (or module) that exposes a subset of the core-API functions under their
spec names (`grpo_advantages`, `ppo_token_loss`, ...), plus:

- `name: str`, `version: str`, `spec_version: str` (`"v1"`);
- `array_api: str`: `"torch"` (called with torch tensors; gradients by autograd) or `"numpy"`
  (called with NumPy arrays; gradients through optional `<function>_grad` attributes);
- optionally `dtypes: tuple[str, ...]` (default: all of float64, float32, bfloat16 for torch,
  float64 and float32 for numpy) and `supports_grad: bool` (default True);
- optionally `micro_batched_loss(token_loss_chunks, mask_chunks, *, mode, norm_length=None,
  dp_world_size=1)`: the framework's per-micro-batch loss over data-parallel ranks, for the
  partition-invariance rows `agg.partition[<mode>]` (contract in `conformance/partition.py`).

The adapter converts between the spec's array conventions and its framework's; the checks never
do. A function the adapter lacks is reported as `not_implemented`, never as a pass.
"""

from conformance.adapters.loading import BUILTIN_ADAPTERS, AdapterLoadError, load_adapter

__all__ = ["BUILTIN_ADAPTERS", "AdapterLoadError", "load_adapter"]
