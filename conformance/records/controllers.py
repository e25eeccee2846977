"""Records of the coefficient controllers of spec v1.1: the adaptive KL coefficient and the entropy
coefficient (ctrl.kl, ctrl.entropy)."""

from __future__ import annotations

import numpy as np

from conformance.records.builders import Catalogue, build, inf
from conformance.records.inputs import Inputs
from conformance.records.keywords import COEF_MAX, COEF_MIN, DELTA, HORIZON, TARGET
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# kl_controller_update (ctrl.kl)
# ---------------------------------------------------------------------------------------------------


def _kl_controller_update_inputs(rng: np.random.Generator) -> Inputs:
    """The measured KL near its target (inside the +-20% clip), far above or below it (clipped), or
    negative (a k1 estimate); n_steps from one sample to a horizon's worth."""
    target = float(rng.choice([0.1, 0.02, 6.0, 1.0]))
    kind = str(rng.choice(["near", "above", "below", "negative"]))
    ratio = {"near": rng.uniform(0.85, 1.15), "above": rng.uniform(1.3, 8.0), "below": rng.uniform(0.0, 0.7),
             "negative": -rng.uniform(0.0, 0.5)}[kind]
    return (
        {"kl_coef": float(rng.choice([0.001, 0.01, 0.05, 0.2])), "current_kl": float(ratio * target),
         "n_steps": int(rng.choice([1, 64, 256, 1024, 8192]))},
        {"target": target, "horizon": int(rng.choice([10000, 1000, 100]))},
    )


def _klc(beta, kl, n, **kw):
    return lambda: build("kl_controller_update", {"kl_coef": beta, "current_kl": kl, "n_steps": n}, kw)


KLC = {"target": 6.0, "horizon": 10000}
add("kl_controller_update/at-target",
    "KL = target: e = 0, beta unchanged", _klc(0.1, 6.0, 1000, **KLC), expect=0.1)
add("kl_controller_update/above-inside-clip",
    "KL 6.6: e = 0.1, beta * (1 + 0.1 * 1000/10000) = 0.101", _klc(0.1, 6.6, 1000, **KLC), expect=0.101)
add("kl_controller_update/below-inside-clip",
    "KL 5.4: e = -0.1, beta * (1 - 0.01) = 0.099", _klc(0.1, 5.4, 1000, **KLC), expect=0.099)
add("kl_controller_update/above-clipped",
    "KL 12: e = 1 clipped to 0.2, beta * 1.02 = 0.102", _klc(0.1, 12.0, 1000, **KLC), expect=0.102)
add("kl_controller_update/zero-kl-clipped",
    "KL 0: e = -1 clipped to -0.2, beta * 0.98 = 0.098", _klc(0.1, 0.0, 1000, **KLC), expect=0.098)
add("kl_controller_update/negative-kl-estimate",
    "KL -1 (a k1 estimate): e clipped to -0.2, 0.098", _klc(0.1, -1.0, 1000, **KLC), expect=0.098)
add("kl_controller_update/no-steps",
    "n_steps 0: beta unchanged whatever the KL", _klc(0.1, 60.0, 0, **KLC), expect=0.1)
add("kl_controller_update/zero-beta-stays",
    "beta 0 stays 0", _klc(0.0, 60.0, 1000, **KLC), expect=0.0)
add("kl_controller_update/factor-below-zero",
    "n = 6 horizons with KL below target: 1 - 0.2 * 6 = -0.2, beta -0.02 (literal, no floor)",
    _klc(0.1, 0.0, 60000, **KLC), expect=-0.02)


KL_CONTROLLER_UPDATE = Quantity(
    "kl_controller_update",
    "ctrl.kl",
    returns="scalar: the new β",
    args=(
        # beta >= 0 and n_steps >= 0; the measured KL is any real (a k1 estimate may be negative)
        Arg("kl_coef", "float", "real", invalid=(-0.1,)), Arg("current_kl", "float", "real"),
        Arg("n_steps", "int", "count", invalid=(-1,)),
    ),
    keywords=(TARGET(), HORIZON()),
    inputs=_kl_controller_update_inputs,
    output="scalar",
    dtypes=("float64", "float32"),
    invariants=(),
    question=("target", "horizon"),
    golden=entries("kl_controller_update"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# entropy_coef_update (ctrl.entropy)
# ---------------------------------------------------------------------------------------------------


def _entropy_control(rng: np.random.Generator) -> tuple[float, float]:
    """(target, measured entropy): the entropy below, above or exactly at the target."""
    target = float(rng.choice([0.2, 2.0, 5.0]))
    kind = str(rng.choice(["below", "above", "equal"]))
    H = {"below": target * rng.uniform(0.0, 0.95), "above": target * rng.uniform(1.05, 20.0), "equal": target}[kind]
    return target, float(H)


def _entropy_coef_update_inputs(rng: np.random.Generator) -> Inputs:
    target, H = _entropy_control(rng)
    coef_min, coef_max = [(0.0, 1.0), (0.001, 0.05), (0.0, 0.01)][int(rng.integers(0, 3))]
    # inside the bounds, at a bound, or outside them (the clamp is one-sided)
    coef = float(rng.choice([0.0, coef_min, coef_max, 0.5 * (coef_min + coef_max), coef_max + 0.1, 0.003]))
    return (
        {"coef": coef, "current_entropy": H},
        {"target": target, "delta": float(rng.choice([0.005, 0.001, 0.05])), "coef_min": coef_min,
         "coef_max": coef_max},
    )


def _ecu(c, H, **kw):
    return lambda: build("entropy_coef_update", {"coef": c, "current_entropy": H}, kw)


add("entropy_coef_update/below-target-rises",
    "defaults (target 0.2, delta 0.005): H 0.15 <= 0.2: 0.01 + 0.005", _ecu(0.01, 0.15), expect=0.015)
add("entropy_coef_update/above-target-falls",
    "H 0.3 > 0.2: 0.01 - 0.005", _ecu(0.01, 0.3), expect=0.005)
add("entropy_coef_update/at-target-rises",
    "H = target counts as low (<=): rises", _ecu(0.25, 0.5, target=0.5, delta=0.25), expect=0.5)
add("entropy_coef_update/clamped-at-max",
    "0.998 + 0.005 clamped to coef_max 1", _ecu(0.998, 0.1), expect=1.0)
add("entropy_coef_update/clamped-at-min",
    "0.002 - 0.005 clamped to coef_min 0", _ecu(0.002, 3.0), expect=0.0)
add("entropy_coef_update/above-max-falls-by-delta",
    "a coefficient above coef_max that must fall moves by delta (one-sided clamp): 1.5 - 0.25",
    _ecu(1.5, 3.0, delta=0.25), expect=1.25)
add("entropy_coef_update/above-max-rises-to-max",
    "a coefficient above coef_max that must rise is set to coef_max", _ecu(1.5, 0.0, delta=0.25), expect=1.0)
add("entropy_coef_update/custom-bounds",
    "target 2, delta 0.125, [0.25, 0.5]: H 1 rises 0.375 -> 0.5",
    _ecu(0.375, 1.0, target=2.0, delta=0.125, coef_min=0.25, coef_max=0.5), expect=0.5)


ENTROPY_COEF_UPDATE = Quantity(
    "entropy_coef_update",
    "ctrl.entropy",
    returns="scalar: the new coefficient",
    args=(Arg("coef", "float", "real"), Arg("current_entropy", "float", "real")),
    keywords=(TARGET(0.2), DELTA(0.005), COEF_MIN(0.0), COEF_MAX(1.0)),
    inputs=_entropy_coef_update_inputs,
    output="scalar",
    dtypes=("float64", "float32"),
    invariants=(),
    question=("target", "delta", "coef_min", "coef_max"),
    golden=entries("entropy_coef_update"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# entropy_coef_applied (ctrl.entropy)
# ---------------------------------------------------------------------------------------------------


def _entropy_coef_applied_inputs(rng: np.random.Generator) -> Inputs:
    target, H = _entropy_control(rng)
    if rng.random() < 0.2:  # the first step: nothing measured yet
        H = float("inf")
    return {"coef": float(rng.choice([0.0, 0.005, 0.1, 1.0])), "last_entropy": H}, {"target": target}


def _eca(c, H, **kw):
    return lambda: build("entropy_coef_applied", {"coef": c, "last_entropy": H}, kw)


add("entropy_coef_applied/below-target-applied",
    "previous H 0.1 <= 0.2: the coefficient applies", _eca(0.05, 0.1), expect=0.05)
add("entropy_coef_applied/above-target-off",
    "previous H 3 > 0.2: 0", _eca(0.05, 3.0), expect=0.0)
add("entropy_coef_applied/at-target-applied",
    "previous H = target: applies (<=)", _eca(0.05, 0.5, target=0.5), expect=0.05)
add("entropy_coef_applied/first-step-off",
    "nothing measured yet (last_entropy = +inf, TRL's initial state): 0", _eca(0.05, inf), expect=0.0)
add("entropy_coef_applied/zero-coef",
    "a zero coefficient applies as 0", _eca(0.0, 0.1), expect=0.0)


ENTROPY_COEF_APPLIED = Quantity(
    "entropy_coef_applied",
    "ctrl.entropy",
    returns="scalar: the coefficient a step applies",
    args=(Arg("coef", "float", "real"), Arg("last_entropy", "float", "state")),
    keywords=(TARGET(0.2),),
    inputs=_entropy_coef_applied_inputs,
    output="scalar",
    dtypes=("float64", "float32"),
    invariants=(),
    question=("target",),
    golden=entries("entropy_coef_applied"),
    golden_seeds=(1, 2, 3),
)


RECORDS = (KL_CONTROLLER_UPDATE, ENTROPY_COEF_UPDATE, ENTROPY_COEF_APPLIED)
