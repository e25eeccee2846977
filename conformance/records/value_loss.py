"""Record of the (clipped) value loss (loss.value)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, M5, M6, build, f64, inf, mask, nan, where
from conformance.records.conditioning import far
from conformance.records.inputs import Inputs, batch_dims, ragged_mask
from conformance.records.keywords import VALUE_CLIP
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# value_token_loss (loss.value)
# ---------------------------------------------------------------------------------------------------


def _value_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    values = rng.normal(0.0, 2.0, size=(B, T))
    return (
        {
            "values": values,
            "old_values": values + rng.normal(0.0, float(rng.choice([0.0, 0.1, 1.0])), size=(B, T)),
            "returns": rng.normal(0.0, 2.0, size=(B, T)),
            "mask": mask,
        },
        {"clip": rng.choice([None, 0.2, 0.5])},
    )


def _value_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    if kw.get("clip") is None:
        return True
    delta = (args["values"] - args["old_values"])[args["mask"]]
    return far(delta, [-kw["clip"], kw["clip"]])


def _vl(values, old, returns, m, **kw):
    return lambda: build(
        "value_token_loss",
        {"values": f64(values), "old_values": f64(old), "returns": f64(returns), "mask": m},
        kw,
    )


add("value_token_loss/no-clip",
    "clip None: 0.5 * (V - R)^2, gradient V - R",
    _vl([[0.0, 1.0, -0.5, 2.0, 0.25]], [[0.0, 0.5, 0.0, 0.0, 0.0]], [[0.0, 0.5, 0.5, -1.0, 0.25]], M5),
    expect=where(M5, [[0.0, 0.125, 0.5, 4.5, 0.0]]), grad_factor=where(M5, [[0.0, 0.5, -1.0, 3.0, 0.0]]))
add("value_token_loss/clip-inactive",
    "clip 0.5 with every |V - V_old| < 0.5: identical to the unclipped loss",
    _vl([[0.0, 1.0, -0.5, 2.0, 0.25]], [[0.0, 0.75, -0.25, 1.75, 0.0]], [[0.0, 0.5, 0.5, -1.0, 0.25]],
        M5, clip=0.5),
    expect=where(M5, [[0.0, 0.125, 0.5, 4.5, 0.0]]), grad_factor=where(M5, [[0.0, 0.5, -1.0, 3.0, 0.0]]))
add("value_token_loss/clipped-branch-wins",
    "clip 0.2, V moved past V_old + 0.2 and the clipped error is larger: loss from V_clipped, zero "
    "gradient",
    _vl([[0.0, 1.0, 1.0]], [[0.0, 0.0, 0.0]], [[0.0, 1.2, 2.0]], mask(".xx"), clip=0.2),
    expect=where(mask(".xx"), [[0.0, 0.5, 1.62]]), grad_factor=np.zeros((1, 3)))
add("value_token_loss/unclipped-branch-wins",
    "clip 0.2, V moved past V_old + 0.2 but the unclipped error is larger: gradient V - R",
    _vl([[0.0, 1.0, 1.0]], [[0.0, 0.0, 0.0]], [[0.0, 0.5, 0.0]], mask(".xx"), clip=0.2),
    expect=where(mask(".xx"), [[0.0, 0.125, 0.5]]), grad_factor=where(mask(".xx"), [[0.0, 0.5, 1.0]]))
add("value_token_loss/negative-delta-clipped",
    "V below V_old by more than clip: V_clipped = V_old - clip; both branch winners appear",
    _vl([[0.0, -1.0, -1.0]], [[0.0, 0.0, 0.0]], [[0.0, -1.5, 0.5]], mask(".xx"), clip=0.2))
add("value_token_loss/tie-at-clip-boundary",
    "V - V_old exactly = clip: V_clipped = V, the branches tie and the gradient is V - R",
    _vl([[0.0, 0.75, -0.25]], [[0.0, 0.25, 0.25]], [[0.0, 0.0, 1.0]], mask(".xx"), clip=0.5),
    expect=where(mask(".xx"), [[0.0, 0.28125, 0.78125]]),
    grad_factor=where(mask(".xx"), [[0.0, 0.75, -1.25]]))
add("value_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in values, old_values and returns at masked positions change nothing",
    _vl([[nan, 1.0, inf, 0.5]], [[1e30, 0.5, nan, 0.0]], [[-inf, 0.0, 1e30, 1.0]], mask(".x.x"),
        clip=0.2))
add("value_token_loss/empty-mask-row",
    "a row with no valid token is 0 with a zero gradient",
    _vl([[0.0, 1.0, 2.0]] * 2, [[0.0, 0.5, 1.5]] * 2, [[0.0, 0.0, 0.0]] * 2, mask(".xx", "..."),
        clip=0.2))

add("value_token_loss/values-equal-old-values-tie",
    "V = V_old with clip 0.2: V_clipped = V, the branches tie and the gradient is V - R",
    _vl([[0.0, 1.0, -0.5]], [[0.0, 1.0, -0.5]], [[0.0, 0.25, 0.5]], mask(".xx"), clip=0.2),
    expect=where(mask(".xx"), [[0.0, 0.28125, 0.5]]), grad_factor=where(mask(".xx"), [[0.0, 0.75, -1.0]]))


VALUE_TOKEN_LOSS = Quantity(
    "value_token_loss",
    "loss.value",
    returns="`[B,T]`",
    args=(
        Arg("values", "[B, T]", "token", grad=True), Arg("old_values", "[B, T]", "token"),
        Arg("returns", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(VALUE_CLIP(None),),
    inputs=_value_token_loss_inputs,
    question=("clip",),
    well_conditioned=_value_conditioned,
    golden=entries("value_token_loss"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _vl(
        [[0.0, 1.0, -1.0, 0.1, 0.7, 2.0]], [[0.0, 0.0, 0.0, 0.0, 0.35, 1.0]],
        [[0.0, 1.5, 0.5, 0.5, -1.0, 3.0]], M6, **kw),
)


RECORDS = (VALUE_TOKEN_LOSS,)
