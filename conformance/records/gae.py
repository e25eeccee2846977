"""Record of generalised advantage estimation over token rewards and values (adv.gae)."""

from __future__ import annotations

import numpy as np

from conformance.records.builders import Catalogue, build, f64, inf, mask, nan
from conformance.records.inputs import Inputs, batch_dims, ragged_mask
from conformance.records.keywords import GAMMA, LAM
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# gae (adv.gae)
# ---------------------------------------------------------------------------------------------------


def _gae_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng, max_T=16)
    mask = ragged_mask(rng, B, T)
    return (
        {
            "token_rewards": rng.normal(0.0, 1.0, size=(B, T)),
            "values": rng.normal(0.0, 2.0, size=(B, T)),
            "mask": mask,
        },
        {
            "gamma": float(rng.choice([1.0, 0.99, 0.9])),
            "lam": float(rng.choice([1.0, 0.95, 0.5, 0.0])),
        },
    )


REW6 = [0.0, 0.0, 1.0, -0.5, 0.25, 2.0]
VAL6 = [0.3, -0.2, 0.8, 0.1, 0.6, -0.4]


def _gae(rewards, values, m, **kw):
    return lambda: build(
        "gae", {"token_rewards": f64(rewards), "values": f64(values), "mask": m}, kw
    )


add("gae/gamma1-lam1",
    "gamma = lam = 1: the advantage is the sum of the remaining rewards minus V",
    _gae([REW6], [VAL6], mask("..xxxx")),
    expect=(f64([[0.0, 0.0, 2.75 - 0.8, 1.75 - 0.1, 2.25 - 0.6, 2.0 + 0.4]]),
            f64([[0.0, 0.0, 2.75, 1.75, 2.25, 2.0]])))
add("gae/lam0-td-error",
    "lam = 0: the advantage is the one-step TD error r + gamma * V_next - V",
    _gae([REW6], [VAL6], mask("..xxxx"), gamma=0.9, lam=0.0),
    expect=(f64([[0.0, 0.0, 1.0 + 0.9 * 0.1 - 0.8, -0.5 + 0.9 * 0.6 - 0.1, 0.25 - 0.9 * 0.4 - 0.6,
                  2.0 + 0.4]]),
            f64([[0.0, 0.0, 1.0 + 0.9 * 0.1, -0.5 + 0.9 * 0.6, 0.25 - 0.9 * 0.4, 2.0]])))
add("gae/gamma-0.99-lam-0.95",
    "gamma 0.99, lam 0.95: the general recursion",
    _gae([REW6], [VAL6], mask("..xxxx"), gamma=0.99, lam=0.95))
add("gae/multi-turn-gap",
    "a masked tool token is skipped: the valid token before it bootstraps from the one after",
    _gae([REW6], [VAL6], mask("..xx.x"), gamma=0.9, lam=0.95))
add("gae/multi-turn-gap-discount",
    "the discount counts valid steps only: a gap adds no extra factor of gamma",
    _gae([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]], [[0.0] * 6], mask("..x..x"), gamma=0.5, lam=1.0),
    expect=(f64([[0.0, 0.0, 0.5, 0.0, 0.0, 1.0]]), f64([[0.0, 0.0, 0.5, 0.0, 0.0, 1.0]])))
add("gae/left-and-right-padding",
    "a right-padded and a left-padded row: each recursion stays inside its own valid span",
    _gae([REW6, REW6[::-1]], [VAL6, VAL6[::-1]], mask("..xxx.", "...xxx"), gamma=0.95, lam=0.9))
add("gae/empty-mask-row",
    "a row with no valid token is 0 in both outputs",
    _gae([REW6, REW6], [VAL6, VAL6], mask("..xxxx", "......"), gamma=0.9, lam=0.95))
add("gae/all-rows-masked",
    "no valid token: both outputs all 0",
    _gae([REW6, REW6], [VAL6, VAL6], mask("......", "......")),
    expect=(np.zeros((2, 6)), np.zeros((2, 6))))
add("gae/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in rewards and values at masked positions (even right after the last "
    "valid token) change nothing",
    _gae([[nan, inf, 1.0, -0.5, 0.25, 1e30]], [[1e30, -inf, 0.8, 0.1, 0.6, nan]], mask("..xxx."),
         gamma=0.9, lam=0.95))
add("gae/single-valid-token",
    "one valid token: the advantage is r - V (nothing to bootstrap)",
    _gae([REW6], [VAL6], mask("....x."), gamma=0.9, lam=0.95),
    expect=(f64([[0.0, 0.0, 0.0, 0.0, 0.25 - 0.6, 0.0]]), f64([[0.0, 0.0, 0.0, 0.0, 0.25, 0.0]])))
add("gae/value-after-last-token-ignored",
    "V after a row's last valid token is 0: a large value at the next (masked) position is unused",
    _gae([REW6], [[0.3, -0.2, 0.8, 0.1, 0.6, 100.0]], mask("..xxx."), gamma=0.9, lam=0.95))


GAE = Quantity(
    "gae",
    "adv.gae",
    returns="`(advantages, returns)` `[B,T]` each",
    args=(
        Arg("token_rewards", "[B, T]", "token", constant=True),
        Arg("values", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(GAMMA(1.0), LAM(1.0)),
    inputs=_gae_inputs,
    output="pair",
    question=("gamma", "lam"),
    golden=entries("gae"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _gae([REW6], [VAL6], mask("..xx.x"), **kw),
)


RECORDS = (GAE,)
