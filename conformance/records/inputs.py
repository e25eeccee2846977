"""The building blocks of the records' case generators: realistic RL batches drawn from a NumPy generator.

Every generator of a record (`Quantity.inputs`) takes a `numpy.random.Generator` and returns the positional
arguments (in the order of the spec function) and the keyword arguments; the blocks here draw the pieces
several quantities share: ragged masks (left and right padding, prompts, empty rows, multi-turn gaps), token
ids (pad == eos rows, truncated rows), logits, log-probs near and far from each other, advantages, group
rewards (ties, all-equal groups, offsets).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.cases import EOS_ID
from conformance.records.keywords import AGG_MODE

# What a generator returns: (positional arguments in order, keyword arguments).
Inputs = tuple[dict[str, Any], dict[str, Any]]
AGG_MODES = AGG_MODE.choices


def ragged_mask(rng: np.random.Generator, B: int, T: int, *, empty_rows: bool = True) -> np.ndarray:
    """[B, T] completion mask: per row a left- or right-padded [prompt | completion] span."""
    mask = np.zeros((B, T), dtype=bool)
    for b in range(B):
        length = int(rng.integers(2, T + 1)) if T >= 2 else 1
        start = T - length if rng.random() < 0.5 else 0  # left padding puts content at the end
        prompt = int(rng.integers(1, length)) if length >= 2 else 1
        completion = length - prompt
        if empty_rows and rng.random() < 0.08:
            completion = 0
        mask[b, start + prompt : start + prompt + completion] = True
        span = np.flatnonzero(mask[b])
        if span.size >= 3 and rng.random() < 0.2:  # a masked tool token inside the completion
            mask[b, int(rng.choice(span[1:-1]))] = False
    if not empty_rows and not mask.any():
        mask[:, -1] = True
    return mask


def token_ids(rng: np.random.Generator, mask: np.ndarray, V: int) -> np.ndarray:
    """Token ids; some rows end with EOS and pad with EOS (pad == eos), others are truncated."""
    ids = rng.integers(0, V, size=mask.shape).astype(np.int64)
    for b in range(mask.shape[0]):
        valid = np.flatnonzero(mask[b])
        if valid.size and rng.random() < 0.5:
            last = int(valid[-1])
            ids[b, last] = EOS_ID
            ids[b, last + 1 :] = EOS_ID  # right padding with the EOS id
    return ids


def logits_like(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    scale = float(rng.choice([0.5, 2.0, 6.0, 15.0]))
    z = rng.normal(0.0, scale, size=shape)
    if rng.random() < 0.3:  # one very confident prediction per row
        z[..., int(rng.integers(0, shape[-1]))] += float(rng.choice([-30.0, 30.0]))
    return np.clip(z, -30.0, 30.0)


def logprobs_like(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return -np.abs(rng.normal(0.0, float(rng.choice([0.3, 1.5, 4.0])), size=shape)) - 1e-3


def nearby(rng: np.random.Generator, logp: np.ndarray) -> np.ndarray:
    """Old or reference log-probs near (on-policy noise) or far from `logp`."""
    scale = float(rng.choice([0.0, 0.02, 0.1, 0.4, 2.0]))
    return logp + rng.normal(0.0, scale, size=logp.shape)


def advantages_like(rng: np.random.Generator, B: int, T: int) -> np.ndarray:
    if rng.random() < 0.5:
        return rng.normal(0.0, 1.0, size=B)
    return rng.normal(0.0, 1.0, size=(B, T))


def group_rewards(rng: np.random.Generator, B: int, G: int) -> np.ndarray:
    kind = rng.choice(["binary", "integer", "continuous", "offset"])
    if kind == "binary":
        r = rng.integers(0, 2, size=B).astype(np.float64)
    elif kind == "integer":
        r = rng.integers(0, 4, size=B).astype(np.float64)
    elif kind == "continuous":
        r = rng.normal(0.0, 1.0, size=B)
    else:
        r = 10.0 + rng.integers(0, 4, size=B)
    for g in range(B // G):
        if rng.random() < 0.25:  # an all-equal group
            r[g * G : (g + 1) * G] = r[g * G]
    return r


def batch_dims(rng: np.random.Generator, max_B: int = 5, max_T: int = 10) -> tuple[int, int]:
    return int(rng.integers(1, max_B + 1)), int(rng.integers(2, max_T + 1))


def group_dims(rng: np.random.Generator) -> tuple[int, int]:
    G = int(rng.choice([1, 2, 3, 4, 8]))
    return G * int(rng.integers(1, 4)), G


def temperature(rng: np.random.Generator) -> float:
    return float(rng.choice([1.0, 1.0, 0.5, 0.7, 1.3]))


def policy_args(rng: np.random.Generator) -> dict[str, Any]:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return {
        "logp": logp,
        "old_logp": nearby(rng, logp),
        "advantages": advantages_like(rng, B, T),
        "mask": mask,
    }
