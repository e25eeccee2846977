"""Reward shaping before the advantage (spec v1.1): the DAPO overlong penalty (spec id
``reward.overlong``) and the truncation and clipping rules on sequence rewards (``reward.shaping``).

Both act on ``[B]`` vectors, elementwise, under ``torch.no_grad`` (the spec defines no gradient):
the arithmetic is done in float64 and rounded once to the output dtype, so the result is the exact
value of the equation, rounded (a ``[B]`` vector costs nothing in float64, even on a GPU).
"""

from __future__ import annotations

import torch

from refimpl.validation import (
    FLOAT_DTYPES,
    check_choice,
    check_int,
    check_optional_real,
    check_real,
    check_same_device,
    check_sequence_array,
)

__all__ = ["overlong_penalty", "shaped_rewards"]

_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
OVERLONG_BEYOND = ("floor", "linear")


def _check_lengths(fn: str, lengths: object) -> torch.Tensor:
    """``lengths`` [B]: an integer tensor (not bool) with every entry >= 0."""
    if not isinstance(lengths, torch.Tensor):
        raise TypeError(f"{fn}: lengths: expected a torch.Tensor [B], got {type(lengths).__name__}")
    if lengths.dtype not in _INT_DTYPES:
        raise TypeError(f"{fn}: lengths: expected an integer tensor [B] (tokens per completion), got dtype {lengths.dtype}")
    if lengths.dim() != 1:
        raise ValueError(f"{fn}: lengths: expected 1-D [B], got shape {tuple(lengths.shape)}")
    negative = lengths < 0
    if bool(negative.any()):
        b = int(negative.nonzero()[0, 0])
        raise ValueError(f"{fn}: lengths: expected completion lengths >= 0, got {int(lengths[b])} at ({b},)")
    return lengths


def _check_flags(fn: str, truncated: object, rewards: torch.Tensor) -> torch.Tensor:
    """``truncated`` [B]: bool, or an int/float tensor whose every element is exactly 0 or 1."""
    if not isinstance(truncated, torch.Tensor):
        raise TypeError(f"{fn}: truncated: expected a torch.Tensor [B], got {type(truncated).__name__}")
    if truncated.dtype != torch.bool and truncated.dtype not in _INT_DTYPES and truncated.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{fn}: truncated: expected a bool (or exactly 0/1 int or float) tensor [B], got dtype {truncated.dtype}")
    if truncated.dim() != 1:
        raise ValueError(f"{fn}: truncated: expected 1-D [B], got shape {tuple(truncated.shape)}")
    if truncated.shape[0] != rewards.shape[0]:
        raise ValueError(f"{fn}: truncated: expected shape ({rewards.shape[0]},) ([B] of rewards), got {tuple(truncated.shape)}")
    check_same_device(fn, "truncated", truncated, rewards)
    if truncated.dtype == torch.bool:
        return truncated
    binary = (truncated == 0) | (truncated == 1)  # NaN compares False: non-binary
    if not bool(binary.all()):
        b = int((~binary).nonzero()[0, 0])
        raise ValueError(f"{fn}: truncated: expected binary flags (bool, or every element exactly 0 or 1), "
                         f"got non-binary value {truncated[b].item()!r} at ({b},)")
    return truncated == 1


@torch.no_grad()
def overlong_penalty(
    lengths: torch.Tensor,
    *,
    max_length: int,
    buffer: int,
    factor: float = 1.0,
    beyond: str = "floor",
) -> torch.Tensor:
    """Spec: reward.overlong. 0 up to L_start = max_length − buffer, −factor·(L − L_start)/buffer up to
    max_length, then −factor (``beyond="floor"``) or the same line (``"linear"``). Returns float64 [B]:
    the inputs hold no float to take a dtype from, and the value is exact (cast it to the rewards' dtype
    where it is added)."""
    fn = "overlong_penalty"
    L = _check_lengths(fn, lengths)
    L_max = check_int(fn, "max_length", max_length, ge=1)
    L_buf = check_int(fn, "buffer", buffer, ge=0)
    if L_buf > L_max:
        raise ValueError(f"{fn}: buffer: expected an int <= max_length={L_max}, got {L_buf}")
    f = check_real(fn, "factor", factor, ge=0.0)
    beyond = check_choice(fn, "beyond", beyond, OVERLONG_BEYOND)
    if beyond == "linear" and L_buf == 0:
        raise ValueError(f"{fn}: buffer: expected an int >= 1 with beyond='linear' (the line's slope is factor / buffer), got 0")
    L_start = L_max - L_buf
    L = L.to(torch.float64)
    if L_buf == 0:  # a hard step at max_length (the line has no width)
        penalty = torch.where(L > L_max, torch.full_like(L, -f), 0.0)  # a tensor: where(scalar, scalar) is float32
    else:
        line = -f * ((L - L_start) / L_buf)
        on_line = L <= L_max if beyond == "floor" else torch.ones_like(L, dtype=torch.bool)
        penalty = torch.where(L <= L_start, 0.0, torch.where(on_line, line, -f))
    return penalty + 0.0  # -0.0 (factor 0) as +0.0


@torch.no_grad()
def shaped_rewards(
    rewards: torch.Tensor,
    truncated: torch.Tensor,
    *,
    truncated_scale: float = 1.0,
    truncated_value: float | None = None,
    truncated_shift: float = 0.0,
    clip_low: float | None = None,
    clip_high: float | None = None,
) -> torch.Tensor:
    """Spec: reward.shaping. Truncated rows: r -> truncated_value (if set) else truncated_scale·r, then
    + truncated_shift; every row: clipped to [clip_low, clip_high] (a bound left None is not applied).
    Output in the rewards' dtype."""
    fn = "shaped_rewards"
    r = check_sequence_array(fn, "rewards", rewards)
    tau = _check_flags(fn, truncated, r)
    scale = check_real(fn, "truncated_scale", truncated_scale)
    value = check_optional_real(fn, "truncated_value", truncated_value)
    shift = check_real(fn, "truncated_shift", truncated_shift)
    lo = check_optional_real(fn, "clip_low", clip_low)
    hi = check_optional_real(fn, "clip_high", clip_high)
    if value is not None and scale != 1.0:
        raise ValueError(f"{fn}: truncated_scale: expected 1.0 when truncated_value is set (the value replaces the "
                         f"reward the scale would multiply), got {scale!r}")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{fn}: clip_high: expected clip_high >= clip_low={lo!r}, got {hi!r}")
    x = r.to(torch.float64)
    replaced = torch.full_like(x, value) if value is not None else scale * x
    x = torch.where(tau, replaced + shift, x)
    if lo is not None or hi is not None:
        x = x.clamp(min=lo, max=hi)
    return x.to(r.dtype)
