"""Input checks for every public refimpl function (spec v1, api.md "Errors").

Every check raises with a message that starts with ``<function>: <argument>:`` and says what was
expected and what was given, e.g. ``grpo_advantages: rewards: expected 1-D [B], got shape (2, 3)``.

- ``TypeError``: wrong dtype or Python type (int logits, float ``input_ids``, a string where a number
  is expected).
- ``ValueError``: wrong rank or shape, mismatched dims, non-binary mask, ``mask[:, 0]`` set, group
  size, temperature <= 0, eps < 0, non-finite values where they are read, unknown names, invalid
  clip parameters.

Value checks cost one reduction and one host sync; the failing index is only looked up once a
check has failed. Finiteness at valid positions is checked by :func:`check_finite` on the copies
with exact zeros at masked positions that the computation uses anyway: one ``sum`` per input, and a
sum that is finite proves every summand finite (an overflowing sum of huge finite values falls back
to the exact element test). Masked positions are read only to be skipped: NaN, inf or 1e30 where
``mask`` is False is accepted.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterator

import torch

__all__ = [
    "FLOAT_DTYPES",
    "check_float",
    "check_mask",
    "check_support",
    "check_token_array",
    "check_sequence_array",
    "check_advantages",
    "check_token_ids",
    "check_logits",
    "check_hidden_and_weight",
    "check_finite",
    "check_finite_flag",
    "check_real",
    "check_optional_real",
    "check_int",
    "check_bool",
    "check_choice",
    "check_clip_interval",
    "check_group_size",
    "check_same_device",
    "compute_dtypes",
    "errors_as",
]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


# ----------------------------------------------------------------------------------------------
# tensors
# ----------------------------------------------------------------------------------------------


def _tensor(fn: str, name: str, value: object, layout: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{fn}: {name}: expected a torch.Tensor {layout}, got {type(value).__name__}")
    return value


def _first_index(flags: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in flags.nonzero()[0])


def check_float(fn: str, name: str, value: object, ndim: int, layout: str) -> torch.Tensor:
    """A float16/bfloat16/float32/float64 tensor of rank ``ndim`` (``layout`` e.g. ``"[B, T]"``)."""
    x = _tensor(fn, name, value, layout)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{fn}: {name}: expected a float16/bfloat16/float32/float64 tensor {layout}, got dtype {x.dtype}"
        )
    if x.dim() != ndim:
        raise ValueError(f"{fn}: {name}: expected {ndim}-D {layout}, got shape {tuple(x.shape)}")
    return x


def check_mask(fn: str, mask: object, name: str = "mask", *, first_column: bool = True) -> torch.Tensor:
    """``mask`` [B, T]: bool, or int/float with every element exactly 0 or 1. Returns a bool tensor.

    ``mask[:, 0]`` must be False (the first token has no prediction), unless ``first_column=False``
    (a keep mask, read only where the completion mask is True).
    """
    m = _tensor(fn, name, mask, "[B, T]")
    if m.dtype != torch.bool and m.dtype not in _INT_DTYPES and m.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{fn}: {name}: expected a bool (or exactly 0/1 int or float) tensor [B, T], got dtype {m.dtype}"
        )
    if m.dim() != 2:
        raise ValueError(f"{fn}: {name}: expected 2-D [B, T], got shape {tuple(m.shape)}")
    if m.dtype != torch.bool:
        binary = (m == 0) | (m == 1)  # NaN compares False: non-binary
        if not bool(binary.all()):
            where = _first_index(~binary)
            raise ValueError(
                f"{fn}: {name}: expected a binary mask (bool, or every element exactly 0 or 1), "
                f"got non-binary value {m[where].item()!r} at {where}"
            )
        m = m == 1
    if first_column and m.shape[1] > 0 and bool(m[:, 0].any()):
        rows = m[:, 0].nonzero().flatten().tolist()
        raise ValueError(
            f"{fn}: {name}: expected mask[:, 0] False (the first token has no prediction), "
            f"got True in row(s) {rows}"
        )
    return m


def check_support(fn: str, support: object, mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``support`` [B, T, V] (the logits' shape): bool, or int/float with every element exactly 0 or 1, with
    at least one kept token at every valid position. Returns a bool tensor."""
    s = _tensor(fn, "support", support, "[B, T, V]")
    if s.dtype != torch.bool and s.dtype not in _INT_DTYPES and s.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{fn}: support: expected a bool (or exactly 0/1 int or float) tensor [B, T, V], got dtype {s.dtype}")
    B, T = mask.shape
    if tuple(s.shape) != (B, T, vocab_size):
        raise ValueError(f"{fn}: support: expected [B, T, V] = [{B}, {T}, {vocab_size}] like the logits, "
                         f"got shape {tuple(s.shape)}")
    if s.dtype != torch.bool:
        binary = (s == 0) | (s == 1)  # NaN compares False: non-binary
        if not bool(binary.all()):
            where = _first_index(~binary)
            raise ValueError(f"{fn}: support: expected bool, or every element exactly 0 or 1, got non-binary value "
                             f"{s[where].item()!r} at {where}")
        s = s == 1
    empty = mask.to(s.device) & ~s.any(dim=2)
    if bool(empty.any()):
        where = _first_index(empty)
        raise ValueError(f"{fn}: support: no kept token at valid position {where} (the sampler drew from an empty set)")
    return s


def _check_finite_where(fn: str, name: str, x: torch.Tensor, where: torch.Tensor | None, what: str) -> None:
    finite = torch.isfinite(x)
    bad = ~finite if where is None else where & ~finite
    if bool(bad.any()):
        idx = _first_index(bad)
        raise ValueError(f"{fn}: {name}: expected finite values {what}, got {x[idx].item()!r} at {idx}")


def check_token_array(fn: str, name: str, value: object, mask: torch.Tensor) -> torch.Tensor:
    """A per-token float tensor with the shape (and device) of ``mask``.

    Finiteness at valid positions: :func:`check_finite` on its masked copy.
    """
    x = check_float(fn, name, value, 2, "[B, T]")
    if x.shape != mask.shape:
        raise ValueError(
            f"{fn}: {name}: expected shape {tuple(mask.shape)} ([B, T] of mask), got {tuple(x.shape)}"
        )
    check_same_device(fn, name, x, mask)
    return x


def check_finite(fn: str, *items: tuple[str, torch.Tensor, torch.Tensor | None, torch.Tensor]) -> None:
    """Every ``(name, x, where, x_safe)``: ``x`` finite where ``where`` is True (everywhere for None),
    given ``x_safe``, a copy of ``x`` that is exactly 0 where ``where`` is False. One sync for all."""
    if not items:
        return
    total = sum(safe.sum() for _, _, _, safe in items)
    if bool(torch.isfinite(total)):
        return
    for name, x, where, _ in items:  # rare: locate the culprit (or find only an overflowing sum)
        what = "everywhere" if where is None else "at valid (mask=True) positions"
        _check_finite_where(fn, name, x, None if where is None else where.expand(x.shape), what)


def check_sequence_array(fn: str, name: str, value: object, batch: int | None = None) -> torch.Tensor:
    """A per-sequence float tensor [B] (rewards, scores), finite everywhere."""
    x = check_float(fn, name, value, 1, "[B]")
    if batch is not None and x.shape[0] != batch:
        raise ValueError(f"{fn}: {name}: expected shape ({batch},) ([B] of mask), got {tuple(x.shape)}")
    _check_finite_where(fn, name, x, None, "everywhere in a [B] tensor")
    return x


def check_advantages(fn: str, value: object, mask: torch.Tensor, name: str = "advantages") -> torch.Tensor:
    """Advantages [B] (finite everywhere, checked here) or [B, T] (finite at valid positions:
    :func:`check_finite` on the masked copy); returned as given."""
    x = _tensor(fn, name, value, "[B] or [B, T]")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{fn}: {name}: expected a float tensor [B] or [B, T], got dtype {x.dtype}")
    if x.dim() == 1:
        check_same_device(fn, name, x, mask)
        return check_sequence_array(fn, name, x, batch=mask.shape[0])
    if x.dim() == 2:
        return check_token_array(fn, name, x, mask)
    raise ValueError(f"{fn}: {name}: expected 1-D [B] or 2-D [B, T], got shape {tuple(x.shape)}")


def check_token_ids(fn: str, value: object, mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``input_ids`` [B, T] integers with the shape of ``mask``, in [0, V) at valid positions."""
    ids = _tensor(fn, "input_ids", value, "[B, T]")
    if ids.dtype not in _INT_DTYPES:
        raise TypeError(f"{fn}: input_ids: expected an integer tensor [B, T], got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{fn}: input_ids: expected 2-D [B, T], got shape {tuple(ids.shape)}")
    if ids.shape != mask.shape:
        raise ValueError(
            f"{fn}: input_ids: expected shape {tuple(mask.shape)} ([B, T] of mask), got {tuple(ids.shape)}"
        )
    check_same_device(fn, "input_ids", ids, mask)
    bad = mask & ((ids < 0) | (ids >= vocab_size))
    if bool(bad.any()):
        idx = _first_index(bad)
        raise ValueError(
            f"{fn}: input_ids: expected token ids in [0, V={vocab_size}) at valid positions, "
            f"got {int(ids[idx])} at {idx}"
        )
    return ids


def check_logits(fn: str, value: object, mask: torch.Tensor) -> torch.Tensor:
    """``logits`` [B, T, V] float with leading dims of ``mask``.

    Finiteness of the rows that are read is checked inside the log-softmax pass
    (:func:`check_finite_flag`), which reads them anyway.
    """
    z = check_float(fn, "logits", value, 3, "[B, T, V]")
    if z.shape[:2] != mask.shape:
        raise ValueError(
            f"{fn}: logits: expected leading dims {tuple(mask.shape)} ([B, T] of mask), got shape {tuple(z.shape)}"
        )
    if z.shape[2] < 1:
        raise ValueError(f"{fn}: logits: expected V >= 1, got shape {tuple(z.shape)}")
    check_same_device(fn, "logits", z, mask)
    return z


def check_hidden_and_weight(
    fn: str, hidden: object, weight: object, mask: torch.Tensor, read_rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``hidden`` [B, T, D] (finite at the flat rows ``read_rows``), ``weight`` [V, D] (finite)."""
    h = check_float(fn, "hidden", hidden, 3, "[B, T, D]")
    w = check_float(fn, "weight", weight, 2, "[V, D]")
    if h.shape[:2] != mask.shape:
        raise ValueError(
            f"{fn}: hidden: expected leading dims {tuple(mask.shape)} ([B, T] of mask), got shape {tuple(h.shape)}"
        )
    if h.shape[2] < 1:
        raise ValueError(f"{fn}: hidden: expected hidden size D >= 1, got shape {tuple(h.shape)}")
    if w.shape[1] != h.shape[2]:
        raise ValueError(
            f"{fn}: weight: expected shape (V, {h.shape[2]}) ([V, D] with D of hidden), got {tuple(w.shape)}"
        )
    if w.shape[0] < 1:
        raise ValueError(f"{fn}: weight: expected V >= 1, got shape {tuple(w.shape)}")
    if w.dtype != h.dtype:
        raise TypeError(f"{fn}: weight: expected the dtype of hidden ({h.dtype}), got {w.dtype}")
    check_same_device(fn, "hidden", h, mask)
    check_same_device(fn, "weight", w, mask)
    rows = h.reshape(-1, h.shape[2]).index_select(0, read_rows)
    if not bool(torch.isfinite(rows.sum() + w.sum())):
        bad = (~torch.isfinite(rows)).any(dim=1)
        if bool(bad.any()):
            b, s = divmod(int(read_rows[bad][0]), h.shape[1])
            raise ValueError(
                f"{fn}: hidden: expected finite values at positions t-1 that predict a valid token t, "
                f"got a non-finite value in hidden[{b}, {s}]"
            )
        _check_finite_where(fn, "weight", w, None, "everywhere")
    return h, w


def check_finite_flag(fn: str, name: str, ok: torch.Tensor, what: str) -> None:
    """Raise for a non-finite input found by a fused pass (``ok``: a bool scalar tensor)."""
    if not bool(ok):
        raise ValueError(f"{fn}: {name}: expected finite values {what}, got NaN or +-inf")


def check_same_device(fn: str, name: str, x: torch.Tensor, ref: torch.Tensor) -> None:
    if x.device != ref.device:
        raise ValueError(f"{fn}: {name}: expected a tensor on {ref.device} (the device of mask), got {x.device}")


def compute_dtypes(*tensors: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(output dtype, compute dtype) of float inputs: the promoted input dtype, computed in at least float32."""
    out = tensors[0].dtype
    for t in tensors[1:]:
        out = torch.promote_types(out, t.dtype)
    return out, (torch.float64 if out == torch.float64 else torch.float32)


# ----------------------------------------------------------------------------------------------
# scalars and names
# ----------------------------------------------------------------------------------------------


def _scalar(value: object) -> object:
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        return value.item()
    if hasattr(value, "ndim") and getattr(value, "ndim") == 0 and hasattr(value, "item"):
        return value.item()  # 0-d NumPy array
    return value


def check_real(
    fn: str,
    name: str,
    value: object,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> float:
    """A finite real number (not bool), optionally bounded; returned as a Python float."""
    value = _scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
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


def check_optional_real(fn: str, name: str, value: object, **bounds: float) -> float | None:
    """``None`` (feature off) or a real number checked like :func:`check_real`."""
    return None if value is None else check_real(fn, name, value, **bounds)


def check_int(fn: str, name: str, value: object, *, ge: int | None = None) -> int:
    """An integer (not bool), optionally ``>= ge``."""
    value = _scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name}: expected an int, got {type(value).__name__} {value!r}")
    k = int(value)
    if ge is not None and k < ge:
        raise ValueError(f"{fn}: {name}: expected an int >= {ge}, got {k}")
    return k


def check_bool(fn: str, name: str, value: object) -> bool:
    """A bool (Python, NumPy or 0-d tensor)."""
    value = _scalar(value)
    if not isinstance(value, bool):
        raise TypeError(f"{fn}: {name}: expected a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_choice(fn: str, name: str, value: object, allowed: tuple[str, ...]) -> str:
    """One of the names in ``allowed``."""
    if not isinstance(value, str):
        raise TypeError(f"{fn}: {name}: expected one of {allowed} (a str), got {type(value).__name__} {value!r}")
    if value not in allowed:
        raise ValueError(f"{fn}: {name}: expected one of {allowed}, got {value!r}")
    return value


def check_clip_interval(fn: str, low: float | None, high: float, bound: str) -> None:
    """A clip interval [low, high] (``low`` None: no lower bound) must not be empty."""
    if low is not None and high < low:
        raise ValueError(
            f"{fn}: eps_high: expected an upper bound >= the lower bound 1 - eps_low = {low!r}, "
            f"got upper bound {high!r} (bound={bound!r})"
        )


def check_group_size(fn: str, group_size: object, batch: int) -> int:
    """``group_size`` G: an int >= 1 dividing B (groups are contiguous blocks of G rows)."""
    G = check_int(fn, "group_size", group_size)
    if G < 1:
        raise ValueError(f"{fn}: group_size: expected an int >= 1, got {G}")
    if batch % G != 0:
        raise ValueError(f"{fn}: group_size: expected a divisor of B={batch} (contiguous groups of G rows), got {G}")
    return G


@contextlib.contextmanager
def errors_as(fn: str) -> Iterator[None]:
    """Inside a composite (``policy_loss``): a ``TypeError`` / ``ValueError`` raised by a piece it
    delegates to, ``<piece>: <argument>: ...``, is re-raised as ``<fn>: <argument>: ...`` (same type),
    so the message names the function the caller called. Other errors pass unchanged."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        piece, sep, rest = str(exc).partition(": ")
        if not sep or piece == fn or not piece.isidentifier():
            raise
        raise type(exc)(f"{fn}: {rest}") from exc
