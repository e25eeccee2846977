"""Input checks for every public oracle function (spec v1, api.md "Errors").

Every check raises with a message that starts with ``<function>: <argument>:`` and says what was
expected and what was given, e.g. ``grpo_advantages: rewards: expected 1-D [B], got shape (2, 3)``.

- ``TypeError``: wrong dtype or Python type (int logits, float ``input_ids``, a string where a number
  is expected, a bool where a float is expected).
- ``ValueError``: everything else (rank, shape, mismatched dims, non-binary mask, ``mask[:, 0]`` set,
  group size, non-positive temperature, negative eps, non-finite values where they are read, unknown
  names, invalid clip parameters).

Checks read masked positions only to skip them: a NaN, inf or 1e30 where ``mask`` is False is
accepted and never reaches the math. The array checks return the caller's array *uncast*; the
public functions cast to float64 with :func:`to_float64` after every check has passed.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "as_array",
    "float_array",
    "to_float64",
    "check_mask",
    "check_token_array",
    "check_token_ids",
    "check_support",
    "check_logits",
    "check_hidden_and_weight",
    "check_sequence_array",
    "check_advantages",
    "check_token_upstream",
    "check_real",
    "check_optional_real",
    "check_int",
    "check_bool",
    "check_choice",
    "check_group_size",
]


# ----------------------------------------------------------------------------------------------
# arrays
# ----------------------------------------------------------------------------------------------


def _is_float_dtype(dtype: np.dtype) -> bool:
    """float16/float32/float64/longdouble, or a ``bfloat16`` extension dtype (ml_dtypes)."""
    return bool(np.issubdtype(dtype, np.floating)) or dtype.name == "bfloat16"


def _is_int_dtype(dtype: np.dtype) -> bool:
    """Signed or unsigned integer; bool is *not* an integer here."""
    return dtype.kind in "iu"


def as_array(fn: str, name: str, value) -> np.ndarray:
    """``np.asarray(value)``; a ragged nested list is a ValueError naming the argument."""
    if isinstance(value, np.ndarray):
        return value
    if value is None or isinstance(value, (str, bytes, dict, set)):
        raise TypeError(f"{fn}: {name}: expected an array, got {type(value).__name__}")
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"{fn}: {name}: expected a rectangular array, got a {type(value).__name__} "
            f"that NumPy cannot convert ({exc})"
        ) from None


def float_array(fn: str, name: str, value, ndim: int, layout: str) -> np.ndarray:
    """A float array of rank ``ndim`` (``layout`` such as ``"[B, T]"`` is used in messages)."""
    arr = as_array(fn, name, value)
    if not _is_float_dtype(arr.dtype):
        raise TypeError(f"{fn}: {name}: expected a float array {layout}, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{fn}: {name}: expected {ndim}-D {layout}, got shape {arr.shape}")
    return arr


def to_float64(arr: np.ndarray) -> np.ndarray:
    """Cast a validated float array to float64 (a fresh array; the caller's array is not touched)."""
    return np.array(arr, dtype=np.float64, copy=True)


def _first_index(flags: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(flags)[0])


def check_mask(fn: str, mask, name: str = "mask", *, first_column: bool = True) -> np.ndarray:
    """``mask`` [B, T]: bool, or an int/float array whose every element is exactly 0 or 1.

    Returns a bool array. ``mask[:, 0]`` must be False (the first token has no prediction), unless
    ``first_column=False`` (a keep mask, read only where the completion mask is True).
    """
    arr = as_array(fn, name, mask)
    if arr.dtype != np.bool_ and not (_is_int_dtype(arr.dtype) or _is_float_dtype(arr.dtype)):
        raise TypeError(
            f"{fn}: {name}: expected a bool (or exactly 0/1 int or float) array [B, T], "
            f"got dtype {arr.dtype}"
        )
    if arr.ndim != 2:
        raise ValueError(f"{fn}: {name}: expected 2-D [B, T], got shape {arr.shape}")
    if arr.dtype == np.bool_:
        m = arr.copy()
    else:
        binary = (arr == 0) | (arr == 1)  # NaN compares False: non-binary
        if not binary.all():
            where = _first_index(~binary)
            raise ValueError(
                f"{fn}: {name}: expected a binary mask (bool, or every element exactly 0 or 1), "
                f"got non-binary value {arr[where].item()!r} at {where}"
            )
        m = arr == 1
    if first_column and m.shape[1] > 0 and m[:, 0].any():
        rows = [int(b) for b in np.flatnonzero(m[:, 0])]
        raise ValueError(
            f"{fn}: {name}: expected mask[:, 0] False (the first token has no prediction), "
            f"got True in row(s) {rows}"
        )
    return m


def check_support(fn: str, support, mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """``support`` [B, T, V] (the logits' shape): bool, or an int/float array whose every element is exactly 0
    or 1, with at least one kept token at every valid position. Returns a bool array."""
    arr = as_array(fn, "support", support)
    if arr.dtype != np.bool_ and not (_is_int_dtype(arr.dtype) or _is_float_dtype(arr.dtype)):
        raise TypeError(f"{fn}: support: expected a bool (or exactly 0/1 int or float) array [B, T, V], got dtype {arr.dtype}")
    B, T = mask.shape
    if arr.shape != (B, T, vocab_size):
        raise ValueError(f"{fn}: support: expected [B, T, V] = [{B}, {T}, {vocab_size}] like the logits, got shape {arr.shape}")
    if arr.dtype == np.bool_:
        s = arr.copy()
    else:
        binary = (arr == 0) | (arr == 1)  # NaN compares False: non-binary
        if not binary.all():
            where = _first_index(~binary)
            raise ValueError(f"{fn}: support: expected bool, or every element exactly 0 or 1, got non-binary value "
                             f"{arr[where].item()!r} at {where}")
        s = arr == 1
    empty = mask & ~s.any(axis=2)
    if empty.any():
        where = _first_index(empty)
        raise ValueError(f"{fn}: support: no kept token at valid position {where} (the sampler drew from an empty set)")
    return s


def _check_finite_where(fn: str, name: str, arr: np.ndarray, where: np.ndarray, what: str) -> None:
    """Every element of ``arr`` selected by the bool array ``where`` must be finite."""
    bad = where & ~np.isfinite(arr)
    if bad.any():
        idx = _first_index(bad)
        raise ValueError(f"{fn}: {name}: expected finite values {what}, got {arr[idx].item()!r} at {idx}")


def check_token_array(fn: str, name: str, value, mask: np.ndarray) -> np.ndarray:
    """A per-token float array [B, T] with the shape of ``mask``, finite at valid positions."""
    arr = float_array(fn, name, value, 2, "[B, T]")
    if arr.shape != mask.shape:
        raise ValueError(f"{fn}: {name}: expected shape {mask.shape} ([B, T] of mask), got {arr.shape}")
    _check_finite_where(fn, name, arr, mask, "at valid (mask=True) positions")
    return arr


def check_token_upstream(fn: str, upstream, mask: np.ndarray) -> np.ndarray:
    """``upstream`` = dL/d(output) for a [B, T] output; finite at valid positions."""
    return check_token_array(fn, "upstream", upstream, mask)


def check_sequence_array(fn: str, name: str, value, batch: int | None = None) -> np.ndarray:
    """A per-sequence float array [B] (rewards, scores), finite everywhere."""
    arr = float_array(fn, name, value, 1, "[B]")
    if batch is not None and arr.shape[0] != batch:
        raise ValueError(f"{fn}: {name}: expected shape ({batch},) ([B] of mask), got {arr.shape}")
    _check_finite_where(fn, name, arr, np.ones(arr.shape, dtype=bool), "everywhere in a [B] array")
    return arr


def check_advantages(fn: str, advantages, mask: np.ndarray, name: str = "advantages") -> np.ndarray:
    """Advantages [B] (finite everywhere, broadcast over valid tokens) or [B, T] (finite where valid)."""
    arr = as_array(fn, name, advantages)
    if not _is_float_dtype(arr.dtype):
        raise TypeError(f"{fn}: {name}: expected a float array [B] or [B, T], got dtype {arr.dtype}")
    if arr.ndim == 1:
        return check_sequence_array(fn, name, arr, batch=mask.shape[0])
    if arr.ndim == 2:
        return check_token_array(fn, name, arr, mask)
    raise ValueError(f"{fn}: {name}: expected 1-D [B] or 2-D [B, T], got shape {arr.shape}")


def _rows_read_by_mask(mask: np.ndarray) -> np.ndarray:
    """read[b, s] is True when position s predicts a valid token, i.e. mask[b, s + 1] is True."""
    read = np.zeros(mask.shape, dtype=bool)
    read[:, :-1] = mask[:, 1:]
    return read


def check_token_ids(fn: str, input_ids, mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """``input_ids`` [B, T] integers, shape of ``mask``, in [0, V) at valid positions (cast to int64)."""
    arr = as_array(fn, "input_ids", input_ids)
    if not _is_int_dtype(arr.dtype):
        raise TypeError(f"{fn}: input_ids: expected an integer array [B, T], got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{fn}: input_ids: expected 2-D [B, T], got shape {arr.shape}")
    if arr.shape != mask.shape:
        raise ValueError(f"{fn}: input_ids: expected shape {mask.shape} ([B, T] of mask), got {arr.shape}")
    out_of_range = mask & ((arr < 0) | (arr >= vocab_size))
    if out_of_range.any():
        idx = _first_index(out_of_range)
        raise ValueError(
            f"{fn}: input_ids: expected token ids in [0, V={vocab_size}) at valid positions, "
            f"got {int(arr[idx])} at {idx}"
        )
    return np.array(arr, dtype=np.int64, copy=True)


def check_logits(fn: str, logits, mask: np.ndarray) -> np.ndarray:
    """``logits`` [B, T, V] float; row ``t-1`` must be finite for every valid ``t``."""
    arr = float_array(fn, "logits", logits, 3, "[B, T, V]")
    if arr.shape[:2] != mask.shape:
        raise ValueError(
            f"{fn}: logits: expected leading dims {mask.shape} ([B, T] of mask), got shape {arr.shape}"
        )
    if arr.shape[2] < 1:
        raise ValueError(f"{fn}: logits: expected V >= 1, got shape {arr.shape}")
    read = _rows_read_by_mask(mask)
    _check_finite_where(
        fn, "logits", arr, np.repeat(read[:, :, None], arr.shape[2], axis=2),
        "at positions t-1 that predict a valid token t",
    )
    return arr


def check_hidden_and_weight(fn: str, hidden, weight, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``hidden`` [B, T, D] (finite where read), ``weight`` [V, D] (finite everywhere)."""
    h = float_array(fn, "hidden", hidden, 3, "[B, T, D]")
    w = float_array(fn, "weight", weight, 2, "[V, D]")
    if h.shape[:2] != mask.shape:
        raise ValueError(
            f"{fn}: hidden: expected leading dims {mask.shape} ([B, T] of mask), got shape {h.shape}"
        )
    if h.shape[2] < 1:
        raise ValueError(f"{fn}: hidden: expected hidden size D >= 1, got shape {h.shape}")
    if w.shape[1] != h.shape[2]:
        raise ValueError(
            f"{fn}: weight: expected shape (V, {h.shape[2]}) ([V, D] with D of hidden), got {w.shape}"
        )
    if w.shape[0] < 1:
        raise ValueError(f"{fn}: weight: expected V >= 1, got shape {w.shape}")
    read = _rows_read_by_mask(mask)
    _check_finite_where(
        fn, "hidden", h, np.repeat(read[:, :, None], h.shape[2], axis=2),
        "at positions t-1 that predict a valid token t",
    )
    _check_finite_where(fn, "weight", w, np.ones(w.shape, dtype=bool), "everywhere")
    return h, w


# ----------------------------------------------------------------------------------------------
# scalars and names
# ----------------------------------------------------------------------------------------------


def _scalar_value(value):
    """Unwrap a 0-d NumPy array; leave everything else as is."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def check_real(
    fn: str,
    name: str,
    value,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> float:
    """A finite real number (not bool), optionally with bounds; returned as a Python float."""
    value = _scalar_value(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: {name}: expected a real number, got {type(value).__name__} {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{fn}: {name}: expected a finite number, got {x!r}")
    if gt is not None and not x > gt:
        raise ValueError(f"{fn}: {name}: expected a number > {gt}, got {x!r}")
    if ge is not None and not x >= ge:
        raise ValueError(f"{fn}: {name}: expected a number >= {ge}, got {x!r}")
    if le is not None and not x <= le:
        raise ValueError(f"{fn}: {name}: expected a number <= {le}, got {x!r}")
    return x


def check_optional_real(fn: str, name: str, value, **bounds) -> float | None:
    """``None`` (feature off) or a real number checked like :func:`check_real`."""
    if value is None:
        return None
    return check_real(fn, name, value, **bounds)


def check_int(fn: str, name: str, value, *, ge: int | None = None) -> int:
    """An integer (Python or NumPy, not bool), optionally ``>= ge``."""
    value = _scalar_value(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name}: expected an int, got {type(value).__name__} {value!r}")
    k = int(value)
    if ge is not None and k < ge:
        raise ValueError(f"{fn}: {name}: expected an int >= {ge}, got {k}")
    return k


def check_bool(fn: str, name: str, value) -> bool:
    """A Python or NumPy bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: {name}: expected a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_choice(fn: str, name: str, value, allowed: tuple[str, ...]) -> str:
    """One of the names in ``allowed``."""
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name}: expected one of {allowed} (a str), got {type(value).__name__} {value!r}")
    if value not in allowed:
        raise ValueError(f"{fn}: {name}: expected one of {allowed}, got {value!r}")
    return value


def check_group_size(fn: str, group_size, batch: int) -> int:
    """``group_size`` G: an int >= 1 that divides B (groups are contiguous blocks of G rows)."""
    G = check_int(fn, "group_size", group_size)
    if G < 1:
        raise ValueError(f"{fn}: group_size: expected an int >= 1, got {G}")
    if batch % G != 0:
        raise ValueError(
            f"{fn}: group_size: expected a divisor of B={batch} (contiguous groups of G rows), got {G}"
        )
    return G
