"""Records of the entropy terms of spec v1.1: the high-entropy token mask and the entropy bonus
(entropy.top_mask, loss.entropy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, build, f64, inf, mask, nan, where
from conformance.records.conditioning import far
from conformance.records.inputs import AGG_MODES, Inputs, batch_dims, ragged_mask
from conformance.records.keywords import (
    AGG_MODE, ENTROPY_COEF, NORM_LENGTH, NUM_SEQS, NUM_TOKENS, POOLED_ENTROPY, RHO,
)
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# entropy_top_mask (entropy.top_mask)
# ---------------------------------------------------------------------------------------------------


def token_entropies(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Per-token entropies as a policy gives them: mostly near 0 (confident tokens), a few high ones,
    capped at log V; half the time on a grid of 1/16 nat (ties, exact in every dtype)."""
    H = np.minimum(rng.exponential(float(rng.choice([0.1, 0.5, 2.0])), size=shape), np.log(32000.0))
    if rng.random() < 0.5:
        H = np.round(H * 16.0) / 16.0
    return H


def _entropy_top_mask_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    return (
        {"entropy": token_entropies(rng, (B, T)), "mask": mask},
        {"rho": float(rng.choice([0.2, 0.5, 0.8, 0.05, 0.35, 1.0, 0.0]))},
    )


def _entropy_mask_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The keep decision flips where a valid entropy lies within rounding distance of the threshold τ
    (quantile(P, 1 − ρ) by linear interpolation, P the batch's valid entropies). A tie at τ (ρ = 0 or 1,
    an order statistic, equal neighbours) is one too: its decision (kept, ≥) is pinned by golden
    vectors of exact dyadic values, not compared across precisions."""
    mask = args["mask"]
    H = args["entropy"][mask]
    pooled = kw.get("pooled_entropy")
    P = np.sort(H if pooled is None else np.asarray(pooled, dtype=np.float64))
    if P.size == 0 or H.size == 0:
        return True
    p = (1.0 - kw.get("rho", 1.0)) * (P.size - 1)
    i = min(int(np.floor(p)), P.size - 1)
    tau = P[i] if p == i else P[i] + (p - i) * (P[i + 1] - P[i])
    return far(H, [float(tau)])


def _etm(H, m, **kw):
    return lambda: build("entropy_top_mask", {"entropy": f64(H), "mask": m}, kw)


# valid entropies 0.5, 1.0, 1.5, 2.0, 2.5 (n = 5) at positions 1..5; position 0 is the prompt
E5 = [[9.0, 1.0, 2.5, 0.5, 2.0, 1.5]]
M5 = mask(".xxxxx")
add("entropy_top_mask/rho-0.5-tie-kept",
    "rho 0.5: p = 0.5*4 = 2, tau = 1.5 (an order statistic); the token at tau is kept (>=)",
    _etm(E5, M5, rho=0.5), expect=mask("..x.xx"))
add("entropy_top_mask/rho-0.3-interpolated",
    "rho 0.3: p = 0.7*4 = 2.8, tau = 1.5 + 0.8*(2.0 - 1.5) = 1.9: 2.0 and 2.5 kept",
    _etm(E5, M5, rho=0.3), expect=mask("..x.x."))
add("entropy_top_mask/rho-0.2-paper",
    "rho 0.2 (the paper's): p = 0.8*4 = 3.2, tau = 2.0 + 0.2*0.5 = 2.1: only 2.5 kept",
    _etm(E5, M5, rho=0.2), expect=mask("..x..."))
add("entropy_top_mask/rho-1-keeps-all",
    "rho 1: tau = the minimum, every valid token kept (the masked prompt position stays False)",
    _etm(E5, M5, rho=1.0), expect=M5)
add("entropy_top_mask/rho-0-keeps-tied-maximum",
    "rho 0: tau = the maximum 2.5, held by two tokens: both kept",
    _etm([[0.0, 2.5, 1.0, 2.5, 0.25]], mask(".xxxx"), rho=0.0), expect=mask(".x.x."))
add("entropy_top_mask/batch-wide-not-per-row",
    "the quantile spans the batch, not each row: n = 6, p = 2.5, tau = 0.75 + 0.5*0.75 = 1.125: row 0 is "
    "kept whole and row 1's low entropies are all dropped",
    _etm([[0.0, 2.0, 3.0, 1.5], [0.0, 0.25, 0.5, 0.75]], mask(".xxx", ".xxx"), rho=0.5),
    expect=mask(".xxx", "...."))
add("entropy_top_mask/single-token",
    "n = 1: tau is that token's entropy, kept for any rho",
    _etm([[0.0, 0.0, 0.75, 0.0]], mask("..x."), rho=0.2), expect=mask("..x."))
add("entropy_top_mask/empty-batch",
    "no valid token: nothing kept",
    _etm([[1.0, 2.0, 3.0]], mask("..."), rho=0.2), expect=mask("..."))
add("entropy_top_mask/pooled-confident-rank-keeps-nothing",
    "a rank holding 0.25, 0.5, 0.75 of a batch pooled with another rank's 1.0..3.0: rho 0.5, n = 8, "
    "p = 3.5, tau = 1.0 + 0.5*0.5 = 1.25: this rank keeps nothing (its own quantile would keep 0.5, 0.75)",
    _etm([[0.0, 0.5, 0.25, 0.75]], mask(".xxx"), rho=0.5,
         pooled_entropy=[0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0]), expect=mask("...."))
add("entropy_top_mask/pooled-uncertain-rank-keeps-all",
    "a rank holding 2.0, 3.0 pooled with 0.25, 0.5: rho 0.5, p = 1.5, tau = 1.25: both kept "
    "(its own quantile, 2.5, would keep only 3.0)",
    _etm([[0.0, 2.0, 3.0]], mask(".xx"), rho=0.5, pooled_entropy=[0.25, 2.0, 0.5, 3.0]), expect=mask(".xx"))
add("entropy_top_mask/pooled-empty-rank",
    "a rank without valid tokens keeps nothing whatever the pool",
    _etm([[0.0, 2.0, 3.0]], mask("..."), rho=0.5, pooled_entropy=[0.25, 0.5]), expect=mask("..."))
add("entropy_top_mask/pooled-empty",
    "an empty pool (no valid token in the batch): nothing kept",
    _etm([[0.0, 2.0]], mask(".."), rho=0.2, pooled_entropy=[]), expect=mask(".."))
add("entropy_top_mask/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions are never read (nor pooled)",
    _etm([[nan, 1.0, inf, 2.0, 1e30, 0.5, -inf]], mask(".x.x.x."), rho=0.5), expect=mask(".x.x..."))


ENTROPY_TOP_MASK = Quantity(
    "entropy_top_mask",
    "entropy.top_mask",
    returns="`[B,T]` bool (True = kept); no gradient",
    args=(Arg("entropy", "[B, T]", "token"), Arg("mask", "[B, T] bool", "mask")),
    keywords=(RHO(1.0), POOLED_ENTROPY(None)),
    inputs=_entropy_top_mask_inputs,
    output="mask",
    invariants=("mask", "partition"),
    question=("rho",),
    well_conditioned=_entropy_mask_conditioned,
    partition_stats=("pooled_entropy",),
    golden=entries("entropy_top_mask"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# entropy_bonus (loss.entropy)
# ---------------------------------------------------------------------------------------------------


def _entropy_bonus_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    mode = str(rng.choice(AGG_MODES))
    kwargs: dict[str, Any] = {"entropy_coef": float(rng.choice([0.01, 0.001, 0.1, 1.0, -0.01])), "mode": mode}
    if mode == "seq_mean_token_sum_norm":
        kwargs["norm_length"] = float(rng.choice([T, 16]))
    return {"entropy": token_entropies(rng, (B, T)), "mask": mask}, kwargs


def _ebo(H, m, **kw):
    return lambda: build("entropy_bonus", {"entropy": f64(H), "mask": m}, kw)


EB_H = [[0.0, 1.0, 2.0], [0.0, 3.0, 0.0]]
EB_M = mask(".xx", ".x.")
add("entropy_bonus/token-mean",
    "c 0.1, token_mean of 1, 2, 3 = 2: -0.2; each token's gradient -0.1/3",
    _ebo(EB_H, EB_M, entropy_coef=0.1, mode="token_mean"), expect=-0.2, grad_factor=where(EB_M, -0.1 / 3))
add("entropy_bonus/seq-mean-token-mean",
    "c 0.1, row means 1.5 and 3, their mean 2.25: -0.225; gradients -0.1/(2*2) and -0.1/(2*1)",
    _ebo(EB_H, EB_M, entropy_coef=0.1, mode="seq_mean_token_mean"), expect=-0.225,
    grad_factor=where(EB_M, [[-0.025], [-0.05]]))
add("entropy_bonus/token-sum",
    "c 0.5, token_sum 6: -3; each token's gradient -0.5",
    _ebo(EB_H, EB_M, entropy_coef=0.5, mode="token_sum"), expect=-3.0, grad_factor=where(EB_M, -0.5))
add("entropy_bonus/global-num-tokens",
    "a micro-batch with 3 of the step's 12 tokens (num_tokens 12): -0.1 * 6/12 = -0.05",
    _ebo(EB_H, EB_M, entropy_coef=0.1, mode="token_mean", num_tokens=12), expect=-0.05,
    grad_factor=where(EB_M, -0.1 / 12))
add("entropy_bonus/negative-coef-penalises",
    "c -0.2 (an entropy penalty): +0.2 * 2 = 0.4",
    _ebo(EB_H, EB_M, entropy_coef=-0.2, mode="token_mean"), expect=0.4, grad_factor=where(EB_M, 0.2 / 3))
add("entropy_bonus/zero-coef",
    "c 0: 0 and no gradient",
    _ebo(EB_H, EB_M, entropy_coef=0.0, mode="token_mean"), expect=0.0, grad_factor=where(EB_M, 0.0))
add("entropy_bonus/all-masked",
    "no valid token: 0",
    _ebo(EB_H, mask("...", "..."), entropy_coef=0.1, mode="token_mean"), expect=0.0)
add("entropy_bonus/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing: token_mean of 1 and 3",
    _ebo([[nan, 1.0, inf, 3.0, 1e30]], mask(".x.x."), entropy_coef=1.0, mode="token_mean"), expect=-2.0,
    grad_factor=where(mask(".x.x."), -0.5))


ENTROPY_BONUS = Quantity(
    "entropy_bonus",
    "loss.entropy",
    returns="scalar (gradient: `entropy_bonus_grad(entropy, mask, upstream, *, …)` = dL/d`entropy`)",
    args=(Arg("entropy", "[B, T]", "token", grad=True), Arg("mask", "[B, T] bool", "mask")),
    keywords=(ENTROPY_COEF(), AGG_MODE(), NORM_LENGTH(None), NUM_TOKENS(None), NUM_SEQS(None)),
    inputs=_entropy_bonus_inputs,
    output="scalar",
    invariants=("mask", "partition"),
    question=("entropy_coef", "mode", "norm_length"),
    golden=entries("entropy_bonus"),
    golden_seeds=(1, 2, 3),
)


RECORDS = (ENTROPY_TOP_MASK, ENTROPY_BONUS)
