"""Record of masked whitening (adv.whiten)."""

from __future__ import annotations

import numpy as np

from conformance.records.builders import Catalogue, build, f64, inf, mask, nan
from conformance.records.inputs import Inputs, batch_dims, ragged_mask
from conformance.records.keywords import EPS, SHIFT_MEAN, STD_DDOF
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# whiten (adv.whiten)
# ---------------------------------------------------------------------------------------------------


def _whiten_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    return (
        {"x": rng.normal(float(rng.choice([0.0, 5.0])), 2.0, size=(B, T)), "mask": mask},
        {
            "shift_mean": bool(rng.random() < 0.7),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([1e-8, 1e-6])),
        },
    )


X25 = [[9.0, 1.0, 2.0, -1.0, 0.5], [9.0, 9.0, 3.0, 4.0, -2.0]]  # valid: 1, 2, -1, 0.5, 3, 4, -2
M25 = mask(".xxxx", "..xxx")


def _wh(x, m, **kw):
    return lambda: build("whiten", {"x": f64(x), "mask": m}, kw)


add("whiten/canonical",
    "shift_mean True, unbiased variance, eps 1e-8 over every valid position of the batch",
    _wh(X25, M25))
add("whiten/shift-mean-false",
    "shift_mean False (TRL/OpenAI reward whitening): the mean is added back",
    _wh(X25, M25, shift_mean=False))
add("whiten/biased-variance-ddof0",
    "std_ddof 0: the biased variance",
    _wh(X25, M25, std_ddof=0))
add("whiten/single-valid-position",
    "one valid position and std_ddof 1: variance defined as 0, the output is 0",
    _wh(X25, mask("..x..", ".....")),
    expect=np.zeros((2, 5)))
add("whiten/single-valid-position-keep-mean",
    "one valid position and shift_mean False: the output is the mean, i.e. the value itself",
    _wh(X25, mask("..x..", "....."), shift_mean=False),
    expect=f64([[0.0, 0.0, 2.0, 0.0, 0.0], [0.0] * 5]))
add("whiten/no-valid-positions",
    "no valid position: all 0",
    _wh(X25, mask(".....", ".....")),
    expect=np.zeros((2, 5)))
add("whiten/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions never enter the mean or the variance",
    _wh([[nan, 1.0, 2.0, -1.0, 0.5], [inf, -inf, 3.0, 4.0, 1e30]], mask(".xxxx", "..xx.")))
add("whiten/constant-x",
    "equal valid values: zero variance, the output is 0",
    _wh([[5.0, 2.5, 2.5, 2.5], [1.0, 2.5, 2.5, 7.0]], mask(".xxx", ".xx.")),
    expect=np.zeros((2, 4)))
add("whiten/constant-x-eps0",
    "equal valid values and eps 0: the zero denominator gives 0, never NaN",
    _wh([[5.0, 2.5, 2.5, 2.5], [1.0, 2.5, 2.5, 7.0]], mask(".xxx", ".xx."), eps=0.0),
    expect=np.zeros((2, 4)))
add("whiten/eps0",
    "eps 0 with a positive variance: the exact standardisation",
    _wh(X25, M25, eps=0.0))
add("whiten/large-offset",
    "values around 1e4 with unit spread: the mean is removed before squaring",
    _wh([[0.0, 1e4 + 1.0, 1e4 - 1.0, 1e4 + 0.5], [0.0, 0.0, 1e4, 1e4 - 0.5]], mask(".xxx", "..xx")))


WHITEN = Quantity(
    "whiten",
    "adv.whiten",
    returns="`[B,T]`",
    args=(Arg("x", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask")),
    keywords=(SHIFT_MEAN(True), STD_DDOF(1), EPS(1e-08)),
    inputs=_whiten_inputs,
    question=("shift_mean",),
    variants={"std_ddof": (1, 0), "eps": (1e-08, 1e-06, 0.0)},
    golden=entries("whiten"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _wh(X25, M25, **kw),
)


RECORDS = (WHITEN,)
