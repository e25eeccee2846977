"""Records of the log-probs and entropies from hidden states and the LM head (logprob.fused)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, EOS, build, f64, grid, i64, inf, mask, nan, where
from conformance.records.inputs import Inputs, batch_dims, ragged_mask, temperature, token_ids
from conformance.records.keywords import TEMPERATURE
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# token_logprobs_from_hidden (logprob.fused)
# ---------------------------------------------------------------------------------------------------


def _hidden_case(rng: np.random.Generator) -> tuple[dict[str, Any], np.ndarray]:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 40))
    D = int(rng.integers(1, 9))
    mask = ragged_mask(rng, B, T)
    hidden = rng.normal(0.0, 1.0, size=(B, T, D))
    weight = rng.normal(0.0, float(rng.choice([0.5, 2.0])), size=(V, D))
    return {"hidden": hidden, "weight": weight}, mask


def _token_logprobs_from_hidden_inputs(rng: np.random.Generator) -> Inputs:
    arrays, mask = _hidden_case(rng)
    V = arrays["weight"].shape[0]
    return {**arrays, "input_ids": token_ids(rng, mask, V), "mask": mask}, {"temperature": temperature(rng)}


def _lph(hidden, weight, ids, m, **kw):
    return lambda: build(
        "token_logprobs_from_hidden",
        {"hidden": f64(hidden), "weight": f64(weight), "input_ids": i64(ids), "mask": m},
        kw,
    )


W53 = grid((5, 3), 0.6, phase=3)  # V = 5, D = 3


def _hidden_with_nonfinite_rows(D: int = 3) -> np.ndarray:
    h = grid((1, 6, D), 0.8, phase=1)
    h[0, 0, :] = nan
    h[0, 3, :] = inf
    h[0, 4, :] = 1e30
    h[0, 5, :] = -inf
    return h


add("token_logprobs_from_hidden/right-padding",
    "right padding: log-probs of hidden @ weight.T for completion tokens 2-4",
    _lph(grid((1, 6, 3), 0.8, phase=1), W53, [[1, 2, 4, 3, EOS, 4]], mask("..xxx.")))
add("token_logprobs_from_hidden/left-padding",
    "left padding: pads 0-1, prompt 2-3, completion 4-5",
    _lph(grid((1, 6, 3), 0.8, phase=2), W53, [[4, 4, 1, 2, 3, EOS]], mask("....xx")))
add("token_logprobs_from_hidden/temperature-0.7",
    "temperature 0.7 divides the logits hidden @ weight.T",
    _lph(grid((1, 5, 3), 1.2, phase=4), W53, [[1, 2, 3, 1, EOS]], mask("..xxx"), temperature=0.7))
add("token_logprobs_from_hidden/t2-one-predictable-token",
    "T = 2: position 1 is predicted by hidden[:, 0]",
    _lph(grid((2, 2, 3), 0.8, phase=5), W53, [[1, 2], [3, EOS]], mask(".x", ".x")))
add("token_logprobs_from_hidden/empty-mask-row",
    "a row with no valid token is 0 and adds nothing to the weight gradient",
    _lph(grid((2, 5, 3), 0.8, phase=6), W53, [[1, 2, 3, 1, EOS], [2, 1, 1, 3, 2]],
         mask("..xxx", ".....")))
add("token_logprobs_from_hidden/all-rows-masked",
    "no valid token: all outputs and both gradients are 0",
    _lph(grid((2, 4, 3), 0.8), W53, [[1, 2, 3, 1], [2, 1, 1, 3]], mask("....", "....")),
    expect=np.zeros((2, 4)))
add("token_logprobs_from_hidden/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in hidden rows that predict no valid token change nothing",
    _lph(_hidden_with_nonfinite_rows(), W53, [[1, 2, 2, 1, EOS, 4]], mask("..xx..")))
add("token_logprobs_from_hidden/pad-equals-eos",
    "padding holds the EOS id; the EOS at the last valid position is kept",
    _lph(grid((1, 6, 3), 0.8, phase=7), W53, [[1, 2, 1, EOS, EOS, EOS]], mask("..xx..")))
add("token_logprobs_from_hidden/no-eos-truncated",
    "a truncated completion without an EOS",
    _lph(grid((1, 6, 3), 0.8, phase=8), W53, [[1, 2, 1, 2, 4, 1]], mask("..xxxx")))
add("token_logprobs_from_hidden/hidden-size-1",
    "D = 1: each logit is hidden * weight[v]",
    _lph(grid((1, 5, 1), 1.5, phase=9), grid((4, 1), 1.0, phase=2), [[1, 2, 3, 1, EOS]],
         mask("..xxx")))


TOKEN_LOGPROBS_FROM_HIDDEN = Quantity(
    "token_logprobs_from_hidden",
    "logprob.fused",
    returns="`[B,T]` = `token_logprobs(hidden @ weight.T, ...)`; hidden `[B,T,D]`, weight `[V,D]`",
    args=(
        Arg("hidden", "[B, T, D]", "hidden", grad=True), Arg("weight", "[V, D]", "weight", grad=True),
        Arg("input_ids", "[B, T] int", "ids"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(TEMPERATURE(1.0),),
    inputs=_token_logprobs_from_hidden_inputs,
    question=("temperature",),
    golden=entries("token_logprobs_from_hidden"),
    golden_seeds=(2, 3, 8),
)


# ---------------------------------------------------------------------------------------------------
# token_entropy_from_hidden (logprob.fused)
# ---------------------------------------------------------------------------------------------------


def _token_entropy_from_hidden_inputs(rng: np.random.Generator) -> Inputs:
    arrays, mask = _hidden_case(rng)
    return {**arrays, "mask": mask}, {"temperature": temperature(rng)}


def _enth(hidden, weight, m, **kw):
    return lambda: build(
        "token_entropy_from_hidden", {"hidden": f64(hidden), "weight": f64(weight), "mask": m}, kw
    )


add("token_entropy_from_hidden/right-padding",
    "right padding: entropy of softmax(hidden @ weight.T) for completion tokens 2-4",
    _enth(grid((1, 6, 3), 0.8, phase=1), W53, mask("..xxx.")))
add("token_entropy_from_hidden/left-padding",
    "left padding: pads 0-1, prompt 2-3, completion 4-5",
    _enth(grid((1, 6, 3), 0.8, phase=2), W53, mask("....xx")))
add("token_entropy_from_hidden/temperature-1.5",
    "temperature 1.5 divides the logits before the softmax",
    _enth(grid((1, 5, 3), 1.2, phase=4), W53, mask("..xxx"), temperature=1.5))
add("token_entropy_from_hidden/t2-one-predictable-token",
    "T = 2: position 1 takes the entropy predicted by hidden[:, 0]",
    _enth(grid((2, 2, 3), 0.8, phase=5), W53, mask(".x", ".x")))
add("token_entropy_from_hidden/empty-mask-row",
    "a row with no valid token is 0 and adds nothing to the weight gradient",
    _enth(grid((2, 5, 3), 0.8, phase=6), W53, mask("..xxx", ".....")))
add("token_entropy_from_hidden/all-rows-masked",
    "no valid token: all outputs and both gradients are 0",
    _enth(grid((2, 4, 3), 0.8), W53, mask("....", "....")),
    expect=np.zeros((2, 4)))
add("token_entropy_from_hidden/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in hidden rows that predict no valid token change nothing",
    _enth(_hidden_with_nonfinite_rows(), W53, mask("..xx..")))
add("token_entropy_from_hidden/zero-weight-uniform",
    "a zero weight gives uniform predictions: entropy log V and zero gradients",
    _enth(grid((1, 5, 3), 0.8, phase=3), np.zeros((5, 3)), mask("..xxx")),
    expect=where(mask("..xxx"), np.log(5.0)))


TOKEN_ENTROPY_FROM_HIDDEN = Quantity(
    "token_entropy_from_hidden",
    "logprob.fused",
    returns="`[B,T]`",
    args=(
        Arg("hidden", "[B, T, D]", "hidden", grad=True), Arg("weight", "[V, D]", "weight", grad=True),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(TEMPERATURE(1.0),),
    inputs=_token_entropy_from_hidden_inputs,
    question=("temperature",),
    golden=entries("token_entropy_from_hidden"),
    golden_seeds=(2, 3, 6),
)


RECORDS = (TOKEN_LOGPROBS_FROM_HIDDEN, TOKEN_ENTROPY_FROM_HIDDEN)
