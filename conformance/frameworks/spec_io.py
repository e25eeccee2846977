"""Spec-side array handling shared by the subprocess adapters (verl, OpenRLHF): argument checks, the
masked-position policy and the conversions to response tensors.

The masked-position policy: a framework never receives the spec's masked positions as they are.
Token-aligned float inputs are sent with 0 where ``mask`` is False (``clean``), row-wise inputs
(logits) only at the positions that predict a valid token (``compact``), and outputs are 0 where
``mask`` is False (``masked_out``). This is the spec's convention (masked inputs never matter,
masked outputs are exactly 0); the frameworks' own handling of garbage at padding is checked
separately by the framework rows (``conformance/frameworks/*_checks.py``), whose batches hold
finite garbage at every masked position, as real padding does.

By the chain rule through ``clean`` and ``masked_out``, the gradient a framework returns is
multiplied by the mask, and the upstream it is given is 0 at masked positions.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def fail(fn: str, arg: str, message: str, exc: type[Exception] = ValueError) -> Exception:
    return exc(f"{fn}: {arg}: {message}")


def float_array(fn: str, name: str, x: Any, ndim: int | tuple[int, ...]) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise fail(fn, name, f"expected a floating dtype, got {a.dtype}", TypeError)
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if a.ndim not in ndims:
        raise fail(fn, name, f"expected {' or '.join(f'{n}-D' for n in ndims)}, got shape {a.shape}")
    if a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    return a


def check_mask(fn: str, mask: Any, shape: tuple[int, int]) -> np.ndarray:
    m = np.asarray(mask)
    if m.ndim != 2 or m.shape != tuple(shape):
        raise fail(fn, "mask", f"expected [B, T] = {list(shape)}, got shape {m.shape}")
    if m.dtype != bool:
        if not np.isin(m, (0, 1)).all():
            raise fail(fn, "mask", "non-binary values (expected bool or exactly 0/1)")
        m = m != 0
    if m.shape[1] and m[:, 0].any():
        raise fail(fn, "mask", "mask[:, 0] must be False (the first token has no prediction)")
    return m


def check_finite(fn: str, name: str, x: np.ndarray, where: np.ndarray | None = None) -> None:
    values = x if where is None else x[where]
    if not np.isfinite(values).all():
        raise fail(fn, name, "non-finite value at a valid position")


def clean(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``x`` with 0 at masked positions (same dtype)."""
    return np.where(mask, x, 0).astype(x.dtype)


def masked_out(x: np.ndarray, mask: np.ndarray, dtype: Any) -> np.ndarray:
    return np.where(mask, np.asarray(x, dtype=np.float64), 0.0).astype(dtype)


def per_token(advantages: Any, mask: np.ndarray, fn: str, dtype: Any) -> np.ndarray:
    """``[B]`` or ``[B, T]`` advantages as a cleaned ``[B, T]`` array."""
    a = float_array(fn, "advantages", advantages, (1, 2))
    if a.ndim == 1:
        if a.shape[0] != mask.shape[0]:
            raise fail(fn, "advantages", f"expected [B] = [{mask.shape[0]}] or [B, T], got shape {a.shape}")
        a = np.broadcast_to(a[:, None], mask.shape)
    elif a.shape != mask.shape:
        raise fail(fn, "advantages", f"expected [B, T] = {list(mask.shape)}, got shape {a.shape}")
    return clean(a.astype(dtype), mask)


def as_mask_of(mask: np.ndarray, dtype: Any) -> np.ndarray:
    """The mask as 0/1 floats of ``dtype`` (how the frameworks' response masks are typically held)."""
    return mask.astype(dtype)


def compact_rows(x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``x[:, :-1]`` that predict a valid token (``mask[:, 1:]``), ``[N, ...]``, and that selector."""
    valid = mask[:, 1:]
    return x[:, :-1][valid], valid


def scatter_rows(values: np.ndarray, valid: np.ndarray, B: int, T: int, dtype: Any) -> np.ndarray:
    """``[N]`` values at the valid positions of ``valid`` ``[B, T-1]`` -> token-aligned ``[B, T]``."""
    out = np.zeros((B, T), dtype=np.float64)
    out[:, 1:][valid] = values
    return out.astype(dtype)


def scatter_row_grads(grad: np.ndarray, valid: np.ndarray, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``[N, V]`` gradients of compacted rows -> ``[B, T, V]`` (rows that were not sent get 0)."""
    out = np.zeros(shape, dtype=np.float64)
    out[:, :-1][valid] = grad
    return out.astype(dtype)


def check_groups(fn: str, rewards: Any, group_size: Any) -> tuple[np.ndarray, int]:
    r = float_array(fn, "rewards", rewards, 1)
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise fail(fn, "group_size", f"expected an integer >= 1, got {group_size!r}")
    if r.shape[0] % int(group_size):
        raise fail(fn, "group_size", f"{group_size} does not divide B = {r.shape[0]}")
    check_finite(fn, "rewards", r)
    return r, int(group_size)


AGG_MODES = {  # spec mode -> the framework-neutral name verl uses
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum": "seq-mean-token-sum",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
    "token_sum": "token-sum",
}
