"""Adapters used by the conformance tests: a broken one, a partial one, misbehaving ones.

Loaded by `module:attribute` path (tests/ is on sys.path under pytest's rootdir conftest), like a
third-party adapter would be.
"""

from __future__ import annotations

import time
import types

import torch

import refimpl


def _base(name: str, **functions: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, version="0.0-test", spec_version="v1", array_api="torch", **functions)


def _logprobs_without_temperature(logits, input_ids, mask, *, temperature=1.0):
    """The classic bug: the sampler used softmax(z/T), the trainer scores softmax(z)."""
    return refimpl.token_logprobs(logits, input_ids, mask, temperature=1.0)


def broken() -> types.SimpleNamespace:
    """token_logprobs ignores the temperature; everything else is the refimpl."""
    functions = {fn: getattr(refimpl, fn) for fn in ("grpo_advantages", "rloo_advantages", "pg_token_loss")}
    return _base("broken", token_logprobs=_logprobs_without_temperature, **functions)


def partial() -> types.SimpleNamespace:
    """Only GRPO advantages."""
    return _base("partial", grpo_advantages=refimpl.grpo_advantages)


def _raises(*args, **kwargs):
    raise RuntimeError("adapter exploded")


def _hangs(*args, **kwargs):
    time.sleep(3600)


def _wrong_shape(rewards, group_size, **kwargs):
    return torch.zeros(rewards.shape[0] + 1, dtype=rewards.dtype)


def misbehaving() -> types.SimpleNamespace:
    """One function raises, one hangs, one returns the wrong shape."""
    return _base("misbehaving", rloo_advantages=_raises, reinforce_advantages=_hangs, grpo_advantages=_wrong_shape)
