"""Records of the per-token log-probs and entropies from logits (logprob.token, logprob.entropy)."""

from __future__ import annotations

import numpy as np

from conformance.records.builders import Catalogue, EOS, PAD, build, f64, grid, i64, inf, mask, nan, where
from conformance.records.inputs import Inputs, batch_dims, logits_like, ragged_mask, temperature, token_ids
from conformance.records.keywords import TEMPERATURE
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# token_logprobs (logprob.token)
# ---------------------------------------------------------------------------------------------------


def _token_logprobs_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 13))
    mask = ragged_mask(rng, B, T)
    return (
        {"logits": logits_like(rng, (B, T, V)), "input_ids": token_ids(rng, mask, V), "mask": mask},
        {"temperature": temperature(rng)},
    )


def _lp(logits, ids, m, **kw):
    return lambda: build("token_logprobs", {"logits": f64(logits), "input_ids": i64(ids), "mask": m}, kw)


def _logits_with_nonfinite_rows() -> np.ndarray:
    z = grid((1, 6, 4), 1.5)
    z[0, 0, :] = nan  # predicts the prompt token at t=1 (masked)
    z[0, 3, :] = [inf, -inf, 1e30, nan]  # predicts t=4 (masked)
    z[0, 4, :] = 1e30
    z[0, 5, :] = -inf  # the last position predicts nothing
    return z


add("token_logprobs/right-padding",
    "right padding: prompt 0-1, completion 2-4 ending in EOS, one pad token after",
    _lp(grid((1, 6, 4)), [[1, 2, 2, 1, EOS, PAD]], mask("..xxx.")))
add("token_logprobs/left-padding",
    "left padding: pads 0-1, prompt 2-3, completion 4-5 ending in EOS",
    _lp(grid((1, 6, 4), phase=3), [[PAD, PAD, 1, 2, 2, EOS]], mask("....xx")))
add("token_logprobs/mixed-padding-batch",
    "one right-padded and one left-padded row in the same batch",
    _lp(grid((2, 6, 4), phase=5), [[1, 2, 2, 1, EOS, PAD], [PAD, PAD, 1, 2, 2, EOS]],
        mask("..xxx.", "....xx")))
add("token_logprobs/temperature-0.5",
    "temperature 0.5 sharpens: log-softmax of logits / 0.5",
    _lp(grid((1, 5, 4), 2.0), [[1, 2, 3, 1, EOS]], mask("..xxx"), temperature=0.5))
add("token_logprobs/temperature-2",
    "temperature 2 flattens: log-softmax of logits / 2",
    _lp(grid((1, 5, 4), 2.0), [[1, 2, 3, 1, EOS]], mask("..xxx"), temperature=2.0))
add("token_logprobs/t2-one-predictable-token",
    "T = 2: only position 1 can be valid; it is predicted by logits[:, 0]",
    _lp(grid((2, 2, 4), phase=2), [[1, 2], [3, EOS]], mask(".x", ".x")))
add("token_logprobs/empty-mask-row",
    "a row with no valid token (prompt only) is all 0 and gets no gradient",
    _lp(grid((2, 5, 4), phase=4), [[1, 2, 3, 1, EOS], [2, 1, 1, 3, 2]], mask("..xxx", ".....")))
add("token_logprobs/all-rows-masked",
    "no valid token in the batch: all outputs and gradients are 0",
    _lp(grid((2, 4, 4)), [[1, 2, 3, 1], [2, 1, 1, 3]], mask("....", "....")))
add("token_logprobs/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logits rows that predict no valid token change nothing",
    _lp(_logits_with_nonfinite_rows(), [[1, 2, 2, 1, EOS, PAD]], mask("..xx..")))
add("token_logprobs/pad-equals-eos",
    "padding holds the EOS id; the EOS at the last valid position is kept (the mask is positional)",
    _lp(grid((1, 6, 4), phase=1), [[1, 2, 1, EOS, EOS, EOS]], mask("..xx..")))
add("token_logprobs/no-eos-truncated",
    "a truncated completion that runs to the end of the row without an EOS",
    _lp(grid((1, 6, 4), phase=6), [[1, 2, 1, 2, PAD, 1]], mask("..xxxx")))
add("token_logprobs/masked-ids-out-of-vocab",
    "ids at masked positions may be -100 or >= V (label padding); they are never read",
    _lp(grid((1, 6, 4), phase=7), [[2, 1, 2, 1, -100, 999]], mask("..xx..")))
add("token_logprobs/multi-turn-gap",
    "a masked tool token inside the completion is 0; the tokens after it are scored",
    _lp(grid((1, 6, 4), phase=8), [[1, 2, 1, PAD, 2, EOS]], mask("..x.xx")))
add("token_logprobs/extreme-logits",
    "logits at +-30: a log-prob near -60 and a near-tie of logits 30 and 29.5, without overflow",
    _lp([[[30.0, -30.0, 0.0, -30.0], [-30.0, 30.0, -30.0, 29.5], [0.0, 0.0, 0.0, 0.0]]],
        [[2, 1, 1]], mask(".xx")))
add("token_logprobs/vocab-size-1",
    "V = 1: every valid log-prob is 0 and so is the gradient",
    _lp(grid((1, 4, 1)), [[0, 0, 0, 0]], mask(".xxx")),
    expect=np.zeros((1, 4)))


TOKEN_LOGPROBS = Quantity(
    "token_logprobs",
    "logprob.token",
    returns="`[B,T]`",
    args=(
        Arg("logits", "[B, T, V]", "logits", grad=True), Arg("input_ids", "[B, T] int", "ids"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(TEMPERATURE(1.0),),
    inputs=_token_logprobs_inputs,
    question=("temperature",),
    golden=entries("token_logprobs"),
    golden_seeds=(2, 3, 5),
)


# ---------------------------------------------------------------------------------------------------
# token_entropy (logprob.entropy)
# ---------------------------------------------------------------------------------------------------


def _token_entropy_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 13))
    mask = ragged_mask(rng, B, T)
    return {"logits": logits_like(rng, (B, T, V)), "mask": mask}, {"temperature": temperature(rng)}


def _ent(logits, m, **kw):
    return lambda: build("token_entropy", {"logits": f64(logits), "mask": m}, kw)


add("token_entropy/right-padding",
    "right padding: entropy of the distribution that predicted each completion token",
    _ent(grid((1, 6, 4)), mask("..xxx.")))
add("token_entropy/left-padding",
    "left padding: the valid positions sit at the end of the row",
    _ent(grid((1, 6, 4), phase=3), mask("....xx")))
add("token_entropy/temperature-0.5",
    "temperature 0.5: entropy of softmax(logits / 0.5)",
    _ent(grid((1, 5, 4), 2.0), mask("..xxx"), temperature=0.5))
add("token_entropy/temperature-3",
    "temperature 3: entropy of softmax(logits / 3), closer to log V",
    _ent(grid((1, 5, 4), 2.0), mask("..xxx"), temperature=3.0))
add("token_entropy/t2-one-predictable-token",
    "T = 2: the only valid position 1 takes the entropy of logits[:, 0]",
    _ent(grid((2, 2, 4), phase=2), mask(".x", ".x")))
add("token_entropy/empty-mask-row",
    "a row with no valid token is all 0 and gets no gradient",
    _ent(grid((2, 5, 4), phase=4), mask("..xxx", ".....")))
add("token_entropy/all-rows-masked",
    "no valid token in the batch: all outputs and gradients are 0",
    _ent(grid((2, 4, 4)), mask("....", "....")),
    expect=np.zeros((2, 4)))
add("token_entropy/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logits rows that predict no valid token change nothing",
    _ent(_logits_with_nonfinite_rows(), mask("..xx..")))
add("token_entropy/uniform-logits",
    "equal logits give the maximum entropy log V and a zero gradient",
    _ent(np.full((1, 4, 4), 1.5), mask(".xx.")),
    expect=where(mask(".xx."), np.log(4.0)))
add("token_entropy/extreme-logits",
    "logits at +-30: a near-deterministic prediction (entropy near 0) and a near-tie, no overflow",
    _ent([[[30.0, -30.0, 0.0, -30.0], [-30.0, 30.0, -30.0, 29.5], [0.0, 0.0, 0.0, 0.0]]],
         mask(".xx")))
add("token_entropy/multi-turn-gap",
    "a masked tool token inside the completion is 0",
    _ent(grid((1, 6, 4), phase=8), mask("..x.xx")))


TOKEN_ENTROPY = Quantity(
    "token_entropy",
    "logprob.entropy",
    returns="`[B,T]` (entropy of softmax(logits[:, t-1]/temperature))",
    args=(Arg("logits", "[B, T, V]", "logits", grad=True), Arg("mask", "[B, T] bool", "mask")),
    keywords=(TEMPERATURE(1.0),),
    inputs=_token_entropy_inputs,
    question=("temperature",),
    golden=entries("token_entropy"),
    golden_seeds=(2, 5, 8),
)


RECORDS = (TOKEN_LOGPROBS, TOKEN_ENTROPY)
