"""Record of the aggregation of per-token losses into the step's loss (agg.*)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, build, f64, inf, mask, nan
from conformance.records.inputs import AGG_MODES, Inputs, batch_dims, ragged_mask
from conformance.records.keywords import AGG_MODE, NORM_LENGTH, NUM_SEQS, NUM_TOKENS
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# aggregate (agg)
# ---------------------------------------------------------------------------------------------------


def _aggregate_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    mode = str(rng.choice(AGG_MODES))
    kwargs: dict[str, Any] = {"mode": mode}
    if mode == "seq_mean_token_sum_norm":
        kwargs["norm_length"] = float(rng.choice([T, 16, 4096]))
    return {"token_loss": rng.normal(0.0, 1.0, size=(B, T)), "mask": mask}, kwargs


# The 2-and-6 example: row 0 has 2 valid tokens, row 1 has 6.
L26 = [[0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.5, -1.0, 3.0, 0.25, 1.5, -2.0]]
M26 = mask(".xx.....", "..xxxxxx")


def _agg(loss, m, **kw):
    return lambda: build("aggregate", {"token_loss": f64(loss), "mask": m}, kw)


def _weights(w0: float, w1: float) -> np.ndarray:
    return np.where(M26, f64([[w0], [w1]]), 0.0)


add("aggregate/token-mean-2-and-6",
    "token_mean over rows of 2 and 6 valid tokens: every token weighs 1/8",
    _agg(L26, M26, mode="token_mean"),
    expect=5.25 / 8, grad_factor=_weights(1 / 8, 1 / 8))
add("aggregate/seq-mean-token-mean-2-and-6",
    "seq_mean_token_mean over rows of 2 and 6 tokens: weights 1/4 and 1/12",
    _agg(L26, M26, mode="seq_mean_token_mean"),
    expect=(3.0 / 2 + 2.25 / 6) / 2, grad_factor=_weights(1 / 4, 1 / 12))
add("aggregate/seq-mean-token-sum-2-and-6",
    "seq_mean_token_sum over rows of 2 and 6 tokens: every token weighs 1/2",
    _agg(L26, M26, mode="seq_mean_token_sum"),
    expect=5.25 / 2, grad_factor=_weights(1 / 2, 1 / 2))
add("aggregate/seq-mean-token-sum-norm-2-and-6",
    "seq_mean_token_sum_norm (Dr. GRPO) with norm_length 6: every token weighs 1/12",
    _agg(L26, M26, mode="seq_mean_token_sum_norm", norm_length=6),
    expect=5.25 / 12, grad_factor=_weights(1 / 12, 1 / 12))
add("aggregate/token-sum-2-and-6",
    "token_sum: every token weighs 1",
    _agg(L26, M26, mode="token_sum"),
    expect=5.25, grad_factor=_weights(1.0, 1.0))
add("aggregate/seq-mean-token-sum-norm-4096",
    "Dr. GRPO with norm_length 4096 (a max generation length)",
    _agg(L26, M26, mode="seq_mean_token_sum_norm", norm_length=4096),
    expect=5.25 / 8192, grad_factor=_weights(1 / 8192, 1 / 8192))
add("aggregate/empty-row-counts-in-num-seqs",
    "seq_mean_token_mean with an empty row: it adds 0 but still counts in S = 3",
    _agg(L26 + [[0.0] * 8], mask(".xx.....", "..xxxxxx", "........"), mode="seq_mean_token_mean"),
    expect=(3.0 / 2 + 2.25 / 6) / 3)
add("aggregate/all-masked-token-mean",
    "token_mean with no valid token: 0 (not NaN) and a zero gradient",
    _agg(L26, mask("........", "........"), mode="token_mean"),
    expect=0.0, grad_factor=np.zeros((2, 8)))
add("aggregate/all-masked-seq-mean-token-mean",
    "seq_mean_token_mean with no valid token: 0 (not NaN)",
    _agg(L26, mask("........", "........"), mode="seq_mean_token_mean"),
    expect=0.0, grad_factor=np.zeros((2, 8)))
add("aggregate/global-num-tokens",
    "token_mean with num_tokens 16 (global count of a data-parallel step): the local sum / 16",
    _agg(L26, M26, mode="token_mean", num_tokens=16),
    expect=5.25 / 16, grad_factor=_weights(1 / 16, 1 / 16))
add("aggregate/global-num-seqs",
    "seq_mean_token_mean with num_seqs 4 (global count): the sum of row means / 4",
    _agg(L26, M26, mode="seq_mean_token_mean", num_seqs=4),
    expect=(3.0 / 2 + 2.25 / 6) / 4, grad_factor=_weights(1 / 8, 1 / 24))
add("aggregate/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change neither the value nor the gradient",
    _agg([[nan, 1.0, 2.0, inf, -inf, 1e30, nan, 0.0], [1e30, nan, 0.5, -1.0, 3.0, 0.25, 1.5, -2.0]],
         M26, mode="seq_mean_token_mean"),
    expect=(3.0 / 2 + 2.25 / 6) / 2, grad_factor=_weights(1 / 4, 1 / 12))


AGGREGATE = Quantity(
    "aggregate",
    "agg",
    returns="scalar",
    args=(Arg("token_loss", "[B, T]", "token", grad=True), Arg("mask", "[B, T] bool", "mask")),
    keywords=(AGG_MODE(), NORM_LENGTH(None), NUM_TOKENS(None), NUM_SEQS(None)),
    inputs=_aggregate_inputs,
    output="scalar",
    invariants=("mask", "partition"),
    question=("mode", "norm_length"),
    golden=entries("aggregate"),
    golden_seeds=(1, 2, 5),
)


RECORDS = (AGGREGATE,)
