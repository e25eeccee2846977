"""Spec-side argument handling shared by the subprocess adapters (every framework run through the
worker): the checks of the spec functions' arguments (arrays, masks, finiteness, numbers, fractions,
choices, clip and rollout-correction settings, lengths), the masked-position policy and the
conversions to response tensors. A check has one name and one error text here, ``"<function>:
<argument>: <what was expected>, got ..."``, whichever adapter calls it.

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

from conformance.records import BY_FUNCTION
from refimpl import validation


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


def token_arrays(fn: str, mask: Any, *, finite: bool = False, **arrays: Any) -> tuple[np.ndarray, ...]:
    """Token-aligned ``[B, T]`` float arrays named by the keywords, in that order, and the mask: each
    array as :func:`float_array` (2-D), the ones after the first in the first's dtype and of its shape,
    then the mask (:func:`check_mask`) of that shape; with ``finite`` every array finite at the valid
    positions. Returns ``(*arrays, mask)``."""
    items = list(arrays.items())
    first_name, first = items[0]
    x0 = float_array(fn, first_name, first, 2)
    out = [x0]
    for name, value in items[1:]:
        x = float_array(fn, name, value, 2).astype(x0.dtype)
        if x.shape != x0.shape:
            raise fail(fn, name, f"expected [B, T] = {list(x0.shape)}, got shape {x.shape}")
        out.append(x)
    m = check_mask(fn, mask, x0.shape)
    if finite:
        for (name, _), x in zip(items, out):
            check_finite(fn, name, x, m)
    return (*out, m)


def rollout_inputs(fn: str, old_logp: Any, rollout_logp: Any, mask: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(old, rollout, mask)`` of the rollout-correction functions (``rollout_is_weights``,
    ``rollout_rejection_mask``): rollout in old's dtype and shape, both finite at valid positions."""
    return token_arrays(fn, mask, finite=True, old_logp=old_logp, rollout_logp=rollout_logp)


def chunk_arrays(fn: str, chunks: Any, masks: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``micro_batched_loss``'s token-loss chunks (each 2-D) and their masks (each of its chunk's shape)."""
    xs = [float_array(fn, "token_loss_chunks", x, 2) for x in chunks]
    return xs, [check_mask(fn, m, x.shape) for x, m in zip(xs, masks)]


def row_scores(fn: str, scores: Any, B: int) -> np.ndarray:
    """``rlhf_token_rewards``' ``scores``: ``[B]``, finite."""
    s = float_array(fn, "scores", scores, 1)
    if s.shape[0] != B:
        raise fail(fn, "scores", f"expected [B] = [{B}], got shape {s.shape}")
    check_finite(fn, "scores", s)
    return s


# ---------------------------------------------------------------------------------------------
# Keyword arguments: numbers, fractions, flags, choices
# ---------------------------------------------------------------------------------------------


def number(fn: str, name: str, value: Any, *, low: float | None = 0.0, strict: bool = False) -> float:
    """A finite real number (not a bool) as a float, ``>= low`` (``> low`` with ``strict``; no bound when
    ``low`` is None): refimpl's own check, so an adapter rejects a number exactly as the refimpl does."""
    bound = {} if low is None else {"gt" if strict else "ge": low}
    return validation.check_real(fn, name, value, **bound)


def unit_interval(fn: str, name: str, value: Any, *, strict: bool = False) -> float:
    """A number in ``[0, 1]`` (``(0, 1]`` with ``strict``): a discount, a quantile, a fraction of tokens."""
    v = number(fn, name, value, strict=strict)
    if v > 1.0:
        raise fail(fn, name, f"expected {'0 <' if strict else '0 <='} {name} <= 1, got {value!r}")
    return v


def bounds(fn: str, lo: Any, hi: Any, *, ratio: bool) -> tuple[float | None, float | None]:
    """The optional bounds ``lo``/``hi`` of a rollout-correction statistic: each None or a finite number
    (``> 0`` for a ``ratio``), ``lo <= hi`` when both are given."""
    low = 0.0 if ratio else None
    lo = None if lo is None else number(fn, "lo", lo, low=low, strict=ratio)
    hi = None if hi is None else number(fn, "hi", hi, low=low, strict=ratio)
    if lo is not None and hi is not None and lo > hi:
        raise fail(fn, "lo", f"expected lo <= hi, got lo={lo!r} > hi={hi!r}")
    return lo, hi


def boolean(fn: str, name: str, value: Any) -> bool:
    return validation.check_bool(fn, name, value)


def choice(fn: str, name: str, value: Any, allowed: tuple[str, ...] | None = None) -> str:
    """One of the names the record of ``fn`` declares for its keyword ``name`` (``allowed``: a framework's
    own list, for a keyword that is not the spec's), checked as the refimpl checks it."""
    if allowed is None:
        if fn not in BY_FUNCTION:
            raise LookupError(f"spec_io.choice: {fn!r} has no record to read {name!r}'s choices from; pass `allowed`")
        allowed = tuple(BY_FUNCTION[fn].keyword(name).choices)
    return validation.check_choice(fn, name, value, allowed)


def clip_range(fn: str, low: Any, high: Any, names: tuple[str, str] = ("eps_low", "eps_high")) -> tuple[float, float]:
    """A clip range's two half-widths (``eps_low``/``eps_high``, DPPO's ``delta_low``/``delta_high``): numbers >= 0."""
    return number(fn, names[0], low), number(fn, names[1], high)


def clip_cov_settings(fn: str, fraction: Any, cov_low: Any, cov_high: Any) -> tuple[float, float, float]:
    """``clip_cov_mask``'s ``fraction`` (in ``(0, 1]``) and its covariance band ``cov_low < cov_high`` (finite)."""
    f = unit_interval(fn, "fraction", fraction, strict=True)
    lo, hi = number(fn, "cov_low", cov_low, low=None), number(fn, "cov_high", cov_high, low=None)
    if not lo < hi:
        raise fail(fn, "cov_high", f"expected a finite number > cov_low = {cov_low!r}, got {cov_high!r}")
    return f, lo, hi


def kl_loss_keywords(fn: str, estimator: Any, gradient: Any) -> None:
    """``kl_loss_term``'s ``estimator`` and ``gradient``."""
    choice(fn, "estimator", estimator)
    choice(fn, "gradient", gradient)


def is_keywords(fn: str, level: Any, seq_stat: Any, mode: Any, batch_normalize: Any) -> None:
    """``rollout_is_weights``' ``level``, ``seq_stat``, ``mode`` and ``batch_normalize``."""
    for name, value in (("level", level), ("seq_stat", seq_stat), ("mode", mode)):
        choice(fn, name, value)
    boolean(fn, "batch_normalize", batch_normalize)


def rejection_keywords(fn: str, statistic: Any, level: Any) -> None:
    """``rollout_rejection_mask``'s ``statistic`` and ``level`` (``kl_of``: ``choice(fn, "kl_of", kl_of)``)."""
    choice(fn, "statistic", statistic)
    choice(fn, "level", level)


def agg_mode(fn: str, mode: Any, *, norm_length: Any = None, needs_norm: bool = False) -> str:
    """A spec aggregation ``mode``; with ``needs_norm``, ``norm_length`` is required by
    ``seq_mean_token_sum_norm``."""
    choice(fn, "mode", mode, BY_FUNCTION["aggregate"].keyword("mode").choices)  # fn may be micro_batched_loss
    if needs_norm and mode == "seq_mean_token_sum_norm" and norm_length is None:
        raise fail(fn, "norm_length", "required for mode 'seq_mean_token_sum_norm'")
    return mode


# ---------------------------------------------------------------------------------------------
# reward.overlong and reward.shaping inputs
# ---------------------------------------------------------------------------------------------


def lengths_array(fn: str, lengths: Any) -> np.ndarray:
    """Completion lengths: an integer array ``[B]`` of values >= 0."""
    L = np.asarray(lengths)
    if L.dtype.kind not in "iu":
        raise fail(fn, "lengths", f"expected an integer array [B], got dtype {L.dtype}", TypeError)
    if L.ndim != 1 or (L < 0).any():
        raise fail(fn, "lengths", f"expected 1-D [B] lengths >= 0, got {L.tolist()!r}")
    return L


def overlong_limits(fn: str, max_length: Any, buffer: Any) -> tuple[int, int]:
    """``overlong_penalty``'s ``max_length`` and ``buffer``: ints, ``0 <= buffer <= max_length >= 1``."""
    for name, value in (("max_length", max_length), ("buffer", buffer)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise fail(fn, name, f"expected an int, got {type(value).__name__}", TypeError)
    if max_length < 1 or not 0 <= buffer <= max_length:
        raise fail(fn, "buffer", f"expected 0 <= buffer <= max_length >= 1, got {buffer!r}, {max_length!r}")
    return int(max_length), int(buffer)


def shaping_inputs(fn: str, rewards: Any, truncated: Any, truncated_scale: Any, truncated_value: Any, clip_low: Any,
                   clip_high: Any) -> tuple[np.ndarray, np.ndarray]:
    """``shaped_rewards``' finite ``[B]`` rewards and ``[B]`` truncation flags (bool or exactly 0/1), with
    its keyword rules: ``truncated_scale`` 1.0 when ``truncated_value`` is set, ``clip_low <= clip_high``."""
    r = float_array(fn, "rewards", rewards, 1)
    check_finite(fn, "rewards", r)
    t = np.asarray(truncated)
    if t.shape != r.shape or not np.isin(t, (0, 1)).all():
        raise fail(fn, "truncated", f"expected [B] = {list(r.shape)} flags (bool or exactly 0/1), got {t!r}")
    if truncated_value is not None and truncated_scale != 1.0:
        raise fail(fn, "truncated_scale", "expected 1.0 when truncated_value is set")
    if clip_low is not None and clip_high is not None and clip_low > clip_high:
        raise fail(fn, "clip_high", f"expected clip_high >= clip_low={clip_low!r}, got {clip_high!r}")
    return r, t


# ---------------------------------------------------------------------------------------------
# The masked-position policy and the conversions to response tensors
# ---------------------------------------------------------------------------------------------


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
    """Finite ``[B]`` rewards and a group size dividing B (the refimpl's check)."""
    r = float_array(fn, "rewards", rewards, 1)
    G = validation.check_group_size(fn, group_size, r.shape[0])
    check_finite(fn, "rewards", r)
    return r, G
