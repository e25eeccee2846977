"""Reward shaping before the advantage: the DAPO overlong penalty (``reward.overlong``) and the
truncation and clipping rules on sequence rewards (``reward.shaping``), spec v1.1.

Both are sequence-level ([B] in, [B] out) and constant: no gradient is defined (the rewards are
computed under stop-gradient before any update, as ``reward.rlhf``'s).
"""

from __future__ import annotations

import numpy as np

from oracle.validation import (
    as_array,
    check_choice,
    check_int,
    check_optional_real,
    check_real,
    check_sequence_array,
    to_float64,
)

__all__ = ["overlong_penalty", "shaped_rewards"]

# What the penalty does for a completion longer than max_length: "floor" stays at -factor (DAPO
# eq. 13, TRL, OpenRLHF), "linear" continues the line (verl, AReaL, ms-swift).
OVERLONG_BEYOND = ("floor", "linear")


def _check_lengths(fn, lengths):
    """``lengths`` [B]: an integer array (not bool), every entry >= 0. Returns an int64 copy."""
    arr = as_array(fn, "lengths", lengths)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{fn}: lengths: expected an integer array [B] (tokens per completion), got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{fn}: lengths: expected 1-D [B], got shape {arr.shape}")
    negative = np.flatnonzero(arr < 0)
    if negative.size:
        b = int(negative[0])
        raise ValueError(f"{fn}: lengths: expected completion lengths >= 0, got {int(arr[b])} at ({b},)")
    return np.array(arr, dtype=np.int64, copy=True)


def _check_flags(fn, truncated, batch):
    """``truncated`` [B]: bool, or an int/float array whose every element is exactly 0 or 1."""
    arr = as_array(fn, "truncated", truncated)
    if arr.dtype != np.bool_ and arr.dtype.kind not in "iuf":
        raise TypeError(f"{fn}: truncated: expected a bool (or exactly 0/1 int or float) array [B], got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{fn}: truncated: expected 1-D [B], got shape {arr.shape}")
    if arr.shape[0] != batch:
        raise ValueError(f"{fn}: truncated: expected shape ({batch},) ([B] of rewards), got {arr.shape}")
    if arr.dtype == np.bool_:
        return arr.copy()
    binary = (arr == 0) | (arr == 1)  # NaN compares False: non-binary
    if not binary.all():
        b = int(np.flatnonzero(~binary)[0])
        raise ValueError(
            f"{fn}: truncated: expected binary flags (bool, or every element exactly 0 or 1), "
            f"got non-binary value {arr[b].item()!r} at ({b},)"
        )
    return arr == 1


def overlong_penalty(lengths, *, max_length, buffer, factor=1.0, beyond="floor"):
    """The DAPO soft overlong penalty of each completion.

    Spec: reward.overlong (v1), added by spec v1.1
    Equation (row b, L = lengths[b], L_start = max_length − buffer):
        R_b = 0                                   L ≤ L_start
        R_b = −factor · (L − L_start) / buffer    L_start < L ≤ max_length
        R_b = −factor                             L > max_length, beyond="floor"
        R_b = −factor · (L − L_start) / buffer    L > max_length, beyond="linear" (no floor)
    Source: DAPO, Yu et al. 2025, arXiv:2503.14476, eq. 13 ("soft overlong punishment", L_cache =
        buffer, factor 1); the factor and the line without a floor as verl's DAPORewardManager
        (``verl/workers/reward_manager/dapo.py:121-127``, 0.9.1).
    Shapes: lengths [B] int (generated tokens of each completion, EOS included) -> [B] float64, ≤ 0.
    Edge cases: exactly 0 at L = L_start and −factor at L = max_length (both boundaries inclusive,
        as eq. 13); an empty completion (L = 0) is 0; buffer = 0 is a hard step: 0 up to max_length,
        −factor beyond (beyond="floor"; "linear" needs buffer > 0: ValueError); buffer = max_length
        starts the penalty at the first token; factor = 0 gives 0 everywhere.
    """
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
    B = L.shape[0]
    R = np.zeros(B, dtype=np.float64)
    for b in range(B):
        L_b = int(L[b])
        if L_b <= L_start:
            R[b] = 0.0
        elif L_b <= L_max or beyond == "linear":
            exceed = L_b - L_start
            R[b] = -f * (exceed / L_buf)
        else:
            R[b] = -f
    return R + 0.0  # -0.0 (factor 0) as +0.0


def shaped_rewards(rewards, truncated, *, truncated_scale=1.0, truncated_value=None, truncated_shift=0.0,
                   clip_low=None, clip_high=None):
    """Sequence rewards after the truncation rule, then the reward clip.

    Spec: reward.shaping (v1), added by spec v1.1
    Equation (row b, r = rewards[b], τ_b = truncated[b]: the completion did not end with EOS):
        r'_b  = truncated_value          τ_b and truncated_value is set   (replace)
        r'_b  = truncated_scale · r      τ_b otherwise                    (scale)
        r'_b  = r                        not τ_b
        r''_b = r'_b + truncated_shift   τ_b                              (add)
        R_b   = min(max(r''_b, clip_low), clip_high)                      (a bound left None is not applied)
    Source: ProRL's stop-properly penalty as OpenRLHF's ``stop_properly_penalty_coef`` (scale for a
        coefficient in [0, 1], replace for a negative one, ``trainer/ppo_utils/length_penalty.py:61-106``,
        0.11.2); OAT's ``non_stop_fixed_reward`` and ``non_stop_penalty`` (replace, then add,
        ``oat/algorithms/ppo.py`` ``PPOActor.step``); AReaL's ``mask_no_eos_with_zero`` (replace by 0,
        ``areal/trainer/ppo/actor.py:207-210``, 1.0.4); reward clipping ±10 (OpenRLHF
        ``reward.clip_range``) and ±20 (AReaL ``reward_clip``).
    Shapes: rewards [B] float, truncated [B] bool -> [B] float64.
    Edge cases: canonical keywords are the identity; a row that is not truncated is only clipped;
        truncated_value and truncated_scale ≠ 1 together are a ValueError (the value replaces the
        reward the scale would multiply); clip_low > clip_high is a ValueError; B = 0 gives [].
    """
    fn = "shaped_rewards"
    r = check_sequence_array(fn, "rewards", rewards)
    tau = _check_flags(fn, truncated, r.shape[0])
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
    r = to_float64(r)
    B = r.shape[0]
    R = np.zeros(B, dtype=np.float64)
    for b in range(B):
        r_b = float(r[b])
        if tau[b]:
            r_b = value if value is not None else scale * r_b
            r_b = r_b + shift
        if lo is not None:
            r_b = max(r_b, lo)
        if hi is not None:
            r_b = min(r_b, hi)
        R[b] = r_b
    return R
