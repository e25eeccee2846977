"""Records of the reward shaping of spec v1.1 before the advantage (reward.overlong, reward.shaping)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, build, f64, i64
from conformance.records.inputs import Inputs
from conformance.records.keywords import (
    BEYOND, BUFFER, CLIP_HIGH, CLIP_LOW, FACTOR, MAX_LENGTH, TRUNCATED_SCALE, TRUNCATED_SHIFT,
    TRUNCATED_VALUE,
)
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# overlong_penalty (reward.overlong)
# ---------------------------------------------------------------------------------------------------


def _overlong_penalty_inputs(rng: np.random.Generator) -> Inputs:
    """Completion lengths on and next to both boundaries (L_start = max_length - buffer and
    max_length), empty completions and lengths beyond max_length (where the frameworks disagree);
    buffers of 0 (a hard step) up to max_length (the penalty from the first token)."""
    max_length = int(rng.choice([4, 8, 16, 100]))
    buffer = int(rng.choice([0, 1, max_length // 4, max_length // 2, max_length]))
    start = max_length - buffer
    near = [0, start - 1, start, start + 1, max_length - 1, max_length, max_length + 1, max_length + buffer + 2]
    B = int(rng.integers(1, 9))
    lengths = [int(rng.choice(near)) if rng.random() < 0.7 else int(rng.integers(0, max_length + buffer + 4)) for _ in range(B)]
    return (
        {"lengths": np.maximum(np.array(lengths, dtype=np.int64), 0)},
        {
            "max_length": max_length,
            "buffer": buffer,
            "factor": float(rng.choice([1.0, 0.5, 2.0, 0.3])),  # 0.3: not exact in float32
            "beyond": "linear" if buffer > 0 and rng.random() < 0.3 else "floor",
        },
    )


def _ol(lengths, **kw):
    return lambda: build("overlong_penalty", {"lengths": i64(lengths)}, kw)


add("overlong_penalty/dapo-boundaries",
    "max 20, buffer 4 (L_start 16): 0 up to and at 16, -1/4 per token after, exactly -1 at 20, -1 beyond (eq. 13)",
    _ol([0, 15, 16, 17, 18, 19, 20, 21, 30], max_length=20, buffer=4),
    expect=f64([0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]))
add("overlong_penalty/linear-beyond-max",
    "beyond='linear' (verl, AReaL): the line continues past max_length, -1/4 per token with no floor",
    _ol([16, 17, 20, 21, 30], max_length=20, buffer=4, beyond="linear"),
    expect=f64([0.0, -0.25, -1.0, -1.25, -3.5]))
add("overlong_penalty/factor-half",
    "factor 0.5, max 8, buffer 4: -0.125 per token past 4, -0.5 at and beyond 8",
    _ol([4, 5, 6, 8, 9], max_length=8, buffer=4, factor=0.5),
    expect=f64([0.0, -0.125, -0.25, -0.5, -0.5]))
add("overlong_penalty/buffer-zero-step",
    "buffer 0 (eq. 13 with L_cache = 0): a hard step, 0 up to and at max_length, -factor (0.3) from max_length + 1",
    _ol([0, 7, 8, 9, 100], max_length=8, buffer=0, factor=0.3),
    expect=f64([0.0, 0.0, 0.0, -0.3, -0.3]))
add("overlong_penalty/buffer-is-max-length",
    "buffer = max_length = 4: the ramp starts at the first token; an empty completion is 0",
    _ol([0, 1, 2, 4, 5], max_length=4, buffer=4),
    expect=f64([0.0, -0.25, -0.5, -1.0, -1.0]))
add("overlong_penalty/factor-zero",
    "factor 0: exactly 0 everywhere, before, on and beyond the ramp (never -0.0)",
    _ol([3, 6, 8, 50], max_length=8, buffer=4, factor=0.0),
    expect=f64([0.0, 0.0, 0.0, 0.0]))
add("overlong_penalty/trl-docstring",
    "TRL's get_soft_overlong_punishment docstring: max 100, cache 20, a 90-token completion gets -0.5",
    _ol([90, 80, 81, 100, 101], max_length=100, buffer=20),
    expect=f64([-0.5, 0.0, -0.05, -1.0, -1.0]))
add("overlong_penalty/linear-buffer-one",
    "beyond='linear' with buffer 1: -1 at max_length, then -1 per extra token",
    _ol([3, 4, 5, 7], max_length=4, buffer=1, beyond="linear"),
    expect=f64([0.0, -1.0, -2.0, -4.0]))


OVERLONG_PENALTY = Quantity(
    "overlong_penalty",
    "reward.overlong",
    returns="`[B]` float64 penalty `≤ 0`; lengths an integer array",
    args=(Arg("lengths", "[B] int", "lengths"),),
    keywords=(MAX_LENGTH(), BUFFER(), FACTOR(1.0), BEYOND("floor")),
    inputs=_overlong_penalty_inputs,
    invariants=(),
    question=("max_length", "buffer", "factor"),
    variants={"beyond": ("floor", "linear")},
    golden=entries("overlong_penalty"),
    golden_seeds=(1, 7, 16),  # the floor beyond max_length, the line beyond it, the ramp
    # a row whose summed log-ratio 25 exceeds TRL's clamps (token +-20, sequence [log 1e-8, 20])
    # lengths before, on and beyond the ramp of max 20 / buffer 4, up to 6 tokens past max_length (where
    # verl's, AReaL's and ms-swift's line has no floor)
    preset_inputs=lambda preset, **kw: _ol([0, 12, 16, 17, 20, 21, 26], max_length=20, buffer=4, **kw),
)


# ---------------------------------------------------------------------------------------------------
# shaped_rewards (reward.shaping)
# ---------------------------------------------------------------------------------------------------


def _shaped_rewards_inputs(rng: np.random.Generator) -> Inputs:
    """Rewards of several scales (some beyond the ±10 / ±20 clip ranges) or binary, truncated rows
    (no EOS: finish_reason 'length'), one truncation rule and one clip range per case."""
    B = int(rng.integers(1, 9))
    if rng.random() < 0.3:
        rewards = rng.integers(0, 2, size=B).astype(np.float64)
    else:
        rewards = rng.normal(0.0, float(rng.choice([1.0, 5.0, 25.0])), size=B)
    truncated = rng.random(B) < float(rng.choice([0.0, 0.3, 0.7, 1.0]))
    rule = str(rng.choice(["none", "scale", "value", "value_shift", "shift"]))
    kwargs: dict[str, Any] = {"truncated_scale": 1.0, "truncated_value": None, "truncated_shift": 0.0}
    if rule == "scale":
        kwargs["truncated_scale"] = float(rng.choice([0.0, 0.5]))
    if rule in ("value", "value_shift"):
        kwargs["truncated_value"] = float(rng.choice([-1.0, -0.5, 0.0]))
    if rule in ("value_shift", "shift"):
        kwargs["truncated_shift"] = float(rng.choice([-1.0, -0.5]))
    lo, hi = [(None, None), (-10.0, 10.0), (-20.0, 20.0), (-1.0, 1.0), (None, 1.0), (-1.0, None)][int(rng.integers(0, 6))]
    kwargs.update(clip_low=lo, clip_high=hi)
    return {"rewards": rewards, "truncated": truncated}, kwargs


def _sr(rewards, truncated, **kw):
    return lambda: build("shaped_rewards", {"rewards": f64(rewards), "truncated": np.array(truncated, dtype=bool)}, kw)


add("shaped_rewards/canonical-identity",
    "canonical keywords: every reward unchanged, truncated or not",
    _sr([1.5, -20.0, 0.0, 33.0], [True, False, True, False]),
    expect=f64([1.5, -20.0, 0.0, 33.0]))
add("shaped_rewards/truncated-scale",
    "truncated_scale 0.5 (OpenRLHF stop_properly_penalty_coef 0.5): only the truncated rows are halved",
    _sr([1.0, -2.0, 3.0, 4.0], [True, True, False, False], truncated_scale=0.5),
    expect=f64([0.5, -1.0, 3.0, 4.0]))
add("shaped_rewards/truncated-value",
    "truncated_value -0.5 (OpenRLHF coef < 0): truncated rows replaced by -0.5, the rest unchanged",
    _sr([1.0, -2.0, 3.0, 4.0], [True, True, False, False], truncated_value=-0.5),
    expect=f64([-0.5, -0.5, 3.0, 4.0]))
add("shaped_rewards/no-eos-zero",
    "truncated_value 0 (AReaL mask_no_eos_with_zero): a truncated row's score is exactly 0",
    _sr([1.0, -2.0, 0.7], [False, True, True], truncated_value=0.0),
    expect=f64([1.0, 0.0, 0.0]))
add("shaped_rewards/value-then-shift",
    "OAT: non_stop_fixed_reward -1 replaces, then non_stop_penalty -0.5 is added: -1.5",
    _sr([1.0, 2.0, 3.0], [True, False, True], truncated_value=-1.0, truncated_shift=-0.5),
    expect=f64([-1.5, 2.0, -1.5]))
add("shaped_rewards/shift-only",
    "OAT non_stop_penalty -1 alone: added to the truncated rows' own rewards",
    _sr([1.0, 2.0, -3.0], [True, False, True], truncated_shift=-1.0),
    expect=f64([0.0, 2.0, -4.0]))
add("shaped_rewards/clip-both-sides",
    "clip to [-10, 10]: 12.5 and -15 clipped, rewards exactly on a bound unchanged",
    _sr([12.5, -15.0, 10.0, -10.0, 3.0], [False] * 5, clip_low=-10.0, clip_high=10.0),
    expect=f64([10.0, -10.0, 10.0, -10.0, 3.0]))
add("shaped_rewards/clip-high-only",
    "clip_high 1 alone: only the upper side is clipped (-5 stays)",
    _sr([2.0, -5.0, 0.5], [False, False, False], clip_high=1.0),
    expect=f64([1.0, -5.0, 0.5]))
add("shaped_rewards/clip-low-only",
    "clip_low -1 alone: only the lower side is clipped (5 stays)",
    _sr([-2.0, 5.0, -0.5], [False, False, False], clip_low=-1.0),
    expect=f64([-1.0, 5.0, -0.5]))
add("shaped_rewards/replacement-clipped",
    "the clip acts after the rule: a replacement value -15 outside [-10, 10] becomes -10",
    _sr([3.0, 30.0], [True, False], truncated_value=-15.0, clip_low=-10.0, clip_high=10.0),
    expect=f64([-10.0, 10.0]))
add("shaped_rewards/int-flags",
    "truncated as exact 0/1 integers reads as bool",
    lambda: build("shaped_rewards", {"rewards": f64([1.0, 2.0, 3.0]), "truncated": i64([1, 0, 1])},
                  {"truncated_scale": 0.0}),
    expect=f64([0.0, 2.0, 0.0]))


SHAPED_REWARDS = Quantity(
    "shaped_rewards",
    "reward.shaping",
    returns="`[B]` in the rewards' dtype",
    args=(Arg("rewards", "[B]", "seq", constant=True), Arg("truncated", "[B] bool", "flags")),
    keywords=(
        TRUNCATED_SCALE(1.0), TRUNCATED_VALUE(None), TRUNCATED_SHIFT(0.0), CLIP_LOW(None), CLIP_HIGH(None),
    ),
    inputs=_shaped_rewards_inputs,
    invariants=(),
    question=("truncated_scale", "truncated_value", "truncated_shift", "clip_low", "clip_high"),
    golden=entries("shaped_rewards"),
    golden_seeds=(4, 7, 16),  # rewards beyond +-20 clipped after a shift; replace + shift; one-sided clip
    # rewards beyond OpenRLHF's +-10 and inside / beyond AReaL's +-20
    preset_inputs=lambda preset, **kw: _sr([25.0, -12.0, 3.0, -30.0, 15.0], [False, True, False, True, False], **kw),
)


RECORDS = (OVERLONG_PENALTY, SHAPED_REWARDS)
