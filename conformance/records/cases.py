"""One input of one quantity (`Case`), the dtypes it is rounded to, and its metamorphic transformations.

A case holds the positional arguments in the order of the spec function, the keyword arguments, the seed
that generated it (None for a hand-built case) and the seed of the upstream gradient. Everything about a
generated case (shapes, padding side, ties, extremes) comes from the seed, so `(function, seed)`
reproduces it exactly: `Quantity.make_case(seed)`; Hypothesis drives the seeds (`strategy`).

What the generators of the records produce, on purpose:
- ragged masks with left and right padding, prompt tokens before the completion, rows with no valid
  token, single-token completions, multi-turn gaps (a masked tool token inside a completion);
- pad == eos rows (padding holds the EOS id; the mask still comes from positions) and rows with no EOS
  (truncated);
- logits up to +-30, temperatures other than 1;
- old / reference log-probs near (on-policy noise) and far (several nats) from the current ones;
- groups with ties, all-equal groups, size-1 groups, rewards with a large offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}
EOS_ID = 0


@dataclass
class Case:
    """One input of one quantity: positional args (in order), keyword args, where it came from."""

    function: str
    args: dict[str, Any]
    kwargs: dict[str, Any]
    seed: int | None = None
    note: str = ""
    upstream_seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def shapes(self) -> str:
        parts = []
        for name, value in self.args.items():
            if isinstance(value, np.ndarray):
                parts.append(f"{name}={list(value.shape)}")
            else:
                parts.append(f"{name}={value!r}")
        return ", ".join(parts)

    def derived(self, args: dict[str, Any], note: str) -> Case:
        """The same case (function, keywords, seeds) with other arguments."""
        return Case(self.function, args, dict(self.kwargs), self.seed, note, self.upstream_seed)


def is_float_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def round_to(value: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values that an array takes once stored in `dtype` (round to nearest even)."""
    array = np.asarray(value, dtype=np.float64)
    return torch.tensor(array).to(TORCH_DTYPES[dtype]).to(torch.float64).numpy().reshape(array.shape)


def rounded_args(case: Case, dtype: str) -> dict[str, Any]:
    """Float arrays rounded to `dtype` and held in float64: what the oracle sees."""
    return {k: round_to(v, dtype) if is_float_array(v) else v for k, v in case.args.items()}


def torch_args(rounded: dict[str, Any], dtype: str, grad_args: tuple[str, ...]) -> dict[str, Any]:
    """The same rounded values as torch tensors of `dtype` (what a torch implementation sees)."""
    out: dict[str, Any] = {}
    for name, value in rounded.items():
        if is_float_array(value):
            t = torch.tensor(value, dtype=TORCH_DTYPES[dtype])
            out[name] = t.requires_grad_(name in grad_args)
        elif isinstance(value, np.ndarray):
            out[name] = torch.from_numpy(value.copy())
        else:
            out[name] = value
    return out


def seeded_upstream(output: str, expected: tuple[Any, ...], seed: int, dtype: str) -> Any:
    """dL/d(output) for a gradient check: seeded normal noise with the shape of the (first) output, rounded
    to `dtype`; a float for a scalar output (`output` is the record's output kind)."""
    g = np.random.default_rng(seed).normal(0.0, 1.0, size=np.shape(expected[0]))
    upstream = round_to(g, dtype)
    # `round_to` returns a 1-element 1-D array for a 0-D shape; NumPy 2 refuses float() on it.
    return float(np.reshape(upstream, ())) if output == "scalar" else upstream


SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def strategy(make_case: Callable[[int], Case]) -> st.SearchStrategy[Case]:
    """Hypothesis strategy of the cases `make_case(seed)` gives (drawn through the seed)."""
    return SEEDS.map(make_case)


# ---------------------------------------------------------------------------------------------
# Metamorphic transformations of a case
# ---------------------------------------------------------------------------------------------

POISON = (np.nan, np.inf, -np.inf, 1e30, -1e30)


def unused_positions(name: str, mask: np.ndarray) -> np.ndarray:
    """[B, T] positions of argument `name` that the spec says never matter.

    Token-aligned arrays are unused where the mask is False; `logits` / `hidden` row t predicts
    token t+1, so it is unused where mask[:, t+1] is False (and at the last position).
    """
    if name in ("logits", "hidden"):
        used = np.zeros_like(mask)
        used[:, :-1] = mask[:, 1:]
        return ~used
    return ~mask


def plant_masked(case: Case, seed: int) -> Case:
    """The same case with NaN, +-inf and +-1e30 written at every position that must not matter."""
    rng = np.random.default_rng(seed)
    mask = case.args.get("mask")
    if mask is None:
        return case
    args = dict(case.args)
    for name, value in case.args.items():
        if not is_float_array(value) or value.shape[:2] != mask.shape:
            continue
        unused = unused_positions(name, mask)
        poisoned = value.copy()
        picks = rng.integers(0, len(POISON), size=poisoned.shape)
        poison = np.asarray(POISON)[picks]
        where = unused.reshape(unused.shape + (1,) * (value.ndim - 2))
        poisoned = np.where(np.broadcast_to(where, value.shape), poison, poisoned)
        args[name] = poisoned
    return case.derived(args, "masked positions poisoned")


def on_policy(case: Case) -> Case:
    """The same case with every other policy's log-probs equal to the current ones: old, reference,
    proximal and behaviour log-probs := logp; without a current policy, the rollout engine's :=
    the trainer's old log-probs (ratio 1: weight 1, nothing rejected)."""
    args = dict(case.args)
    current = "logp" if "logp" in args else "old_logp"
    for name in ("old_logp", "ref_logp", "prox_logp", "behav_logp", "rollout_logp"):
        if name in args and name != current:
            args[name] = args[current].copy()
    return case.derived(args, "on-policy")


__all__ = ["TORCH_DTYPES", "EOS_ID", "Case", "is_float_array", "round_to", "rounded_args", "torch_args", "seeded_upstream", "SEEDS",
           "strategy", "POISON", "unused_positions", "plant_masked", "on_policy"]
