"""Records of the per-token policy-gradient losses: PG, PPO, GSPO, CISPO (spec v1) and SAPO, GMPO,
DPPO, DRO, VESPO (spec v1.1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, M5, M6, build, f64, inf, mask, nan, policy_case, where
from conformance.records.conditioning import far, ppo_conditioned, ratio
from conformance.records.inputs import (
    Inputs, advantages_like, batch_dims, logprobs_like, policy_args, ragged_mask,
)
from conformance.records.keywords import (
    CISPO_BOUND, CISPO_SURROGATE, DELTA_HIGH, DELTA_LOW, DIVERGENCE, DRO_BETA, DUAL_CLIP, EPS_HIGH, EPS_LOW,
    GSPO_FORM, K_NEG, K_POS, LAMBDA_NEG, LAMBDA_POS, LOG_RATIO_CLAMP, RATIO_CAP, TAU_NEG, TAU_POS, W_MAX,
    W_MIN,
)
from conformance.records.record import Arg, Extremes, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


def _finite_with(*bounds: str) -> Callable[[dict[str, Any], str, str], bool]:
    """`Extremes.log_ratio_bounded` of a ratio objective whose clip bounds r only where A > 0 (the
    pessimistic min keeps the unclipped r A for A < 0): at log-ratios of +-100 it is finite with one of the
    keywords `bounds` set (a clamp, a dual clip, a cap), with A > 0, or in float64 (e^100 is representable);
    otherwise r = e^100 overflows float32 and bfloat16."""
    return lambda keywords, advantage_kind, dtype: (any(keywords.get(b) is not None for b in bounds)
                                                    or advantage_kind == "positive" or dtype == "float64")


def _always_finite(keywords: dict[str, Any], advantage_kind: str, dtype: str) -> bool:
    """`Extremes.log_ratio_bounded` of a loss whose weight or gate is bounded whatever the ratio: finite at
    log-ratios of +-100 for every keyword set, advantage and dtype."""
    return True


# ---------------------------------------------------------------------------------------------------
# pg_token_loss (loss.pg)
# ---------------------------------------------------------------------------------------------------


def _pg_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    return {"logp": logprobs_like(rng, (B, T)), "advantages": advantages_like(rng, B, T), "mask": mask}, {}


PG_LOGP = [[-1.0, -0.5, -1.25, -2.0, -0.1], [-1.0, -3.0, -0.25, -0.75, -1.5]]


def _pg(logp, adv, m):
    return lambda: build("pg_token_loss", {"logp": f64(logp), "advantages": f64(adv), "mask": m}, {})


add("pg_token_loss/sequence-advantages",
    "[B] advantages broadcast over valid tokens: -A * logp",
    _pg(PG_LOGP, [1.5, -0.5], mask(".xxx.", "..xxx")),
    expect=where(mask(".xxx.", "..xxx"), -f64([[1.5], [-0.5]]) * f64(PG_LOGP)),
    grad_factor=where(mask(".xxx.", "..xxx"), -f64([[1.5], [-0.5]])))
add("pg_token_loss/token-advantages",
    "[B, T] per-token advantages",
    _pg(PG_LOGP, [[0.0, 1.0, -2.0, 0.5, 0.0], [0.0, 0.0, 3.0, -1.0, 0.25]], mask(".xxx.", "..xxx")))
add("pg_token_loss/negative-advantage",
    "a negative advantage pushes the log-probs down: positive loss",
    _pg(PG_LOGP[:1], [-2.0], mask(".xxxx")),
    expect=where(mask(".xxxx"), 2.0 * f64(PG_LOGP[:1])), grad_factor=where(mask(".xxxx"), 2.0))
add("pg_token_loss/zero-advantage",
    "A = 0: zero loss and zero gradient",
    _pg(PG_LOGP[:1], [0.0], mask(".xxxx")),
    expect=np.zeros((1, 5)), grad_factor=np.zeros((1, 5)))
add("pg_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logp and [B, T] advantages at masked positions change nothing",
    _pg([[nan, -0.5, -1.25, inf, 1e30]], [[inf, 1.0, -2.0, nan, -inf]], mask(".xx..")))
add("pg_token_loss/empty-mask-row",
    "a row with no valid token is 0 with a zero gradient",
    _pg(PG_LOGP, [1.0, 2.0], mask(".xxx.", ".....")))
add("pg_token_loss/multi-turn-gap",
    "a masked tool token inside the completion is 0",
    _pg(PG_LOGP[:1], [1.0], mask(".x.xx")))


PG_TOKEN_LOSS = Quantity(
    "pg_token_loss",
    "loss.pg",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("advantages", "[B] or [B, T]", "adv"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(),
    inputs=_pg_token_loss_inputs,
    golden=entries("pg_token_loss"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# ppo_token_loss (loss.ppo)
# ---------------------------------------------------------------------------------------------------


def _ppo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    eps_low = float(rng.choice([0.2, 0.1]))
    return (
        policy_args(rng),
        {
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
            "dual_clip": rng.choice([None, 3.0]),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
    )


def _ppo(d, adv, m, **kw):
    return policy_case("ppo_token_loss", d, adv, m, **kw)


DPOS = [[0.0, 0.5, 0.3, 1.0, 0.25, 2.0]]  # every ratio above 1.2
DNEG = [[0.0, -0.5, -0.3, -1.0, -0.25, -2.0]]  # every ratio below 0.8
R_POS = np.exp(f64(DPOS))
R_NEG = np.exp(f64(DNEG))

add("ppo_token_loss/on-policy",
    "old == current log-probs: ratio 1, no clipping, loss -A",
    _ppo([[0.0] * 6], [1.5], M6),
    expect=where(M6, -1.5), grad_factor=where(M6, -1.5))
add("ppo_token_loss/inside-clip-range-both-signs",
    "ratios inside [0.8, 1.2] for A > 0 and A < 0: unclipped, gradient -A * r",
    _ppo([[0.0, 0.1, -0.1, 0.15, -0.15, 0.0], [0.0, -0.1, 0.1, -0.15, 0.15, 0.05]], [2.0, -1.0],
         mask(".xxxxx", ".xxxxx")))
add("ppo_token_loss/positive-adv-above-high-clipped",
    "A > 0 and ratio > 1 + eps_high: the clipped branch, loss -A * 1.2 and zero gradient",
    _ppo(DPOS, [1.0], M6),
    expect=where(M6, -1.2), grad_factor=np.zeros((1, 6)))
add("ppo_token_loss/positive-adv-below-low-unclipped",
    "A > 0 and ratio < 1 - eps_low: the unclipped branch is the max, gradient -A * r",
    _ppo(DNEG, [1.0], M6),
    expect=where(M6, -R_NEG), grad_factor=where(M6, -R_NEG))
add("ppo_token_loss/negative-adv-below-low-clipped",
    "A < 0 and ratio < 1 - eps_low: the clipped branch, loss -A * 0.8 and zero gradient",
    _ppo(DNEG, [-1.0], M6),
    expect=where(M6, 0.8), grad_factor=np.zeros((1, 6)))
add("ppo_token_loss/negative-adv-above-high-unclipped",
    "A < 0 and ratio > 1 + eps_high without dual clip: unclipped, loss -A * r",
    _ppo(DPOS, [-1.0], M6),
    expect=where(M6, R_POS), grad_factor=where(M6, R_POS))
add("ppo_token_loss/clip-higher-asymmetric",
    "eps_high 0.28 (DAPO clip-higher): ratios 1.22 and 1.25 stay unclipped, 1.35 is clipped",
    _ppo([[0.0, 0.2, 0.22, 0.3, 0.1, 0.0]], [1.0], M6, eps_high=0.28))
add("ppo_token_loss/dual-clip-active",
    "dual_clip 3 and A < 0: ratios above 3 give the capped loss -3 * A with zero gradient",
    _ppo([[0.0, 1.5, 2.0, 1.2, 3.0, 0.5]], [-1.0], M6, dual_clip=3.0),
    expect=where(M6, [3.0, 3.0, 3.0, 3.0, 3.0, np.exp(0.5)]),
    grad_factor=where(M6, [0.0, 0.0, 0.0, 0.0, 0.0, np.exp(0.5)]))
add("ppo_token_loss/dual-clip-ignores-positive-advantage",
    "dual_clip 3 and A > 0: the ordinary clip applies",
    _ppo([[0.0, 1.5, 2.0, 0.1, 3.0, -0.5]], [1.0], M6, dual_clip=3.0))
add("ppo_token_loss/dual-clip-below-c",
    "dual_clip 3 and A < 0 with every ratio below 3: identical to plain PPO",
    _ppo([[0.0, 0.5, 0.8, 1.0, -0.5, 0.0]], [-1.0], M6, dual_clip=3.0))
add("ppo_token_loss/log-ratio-clamp-active",
    "log_ratio_clamp 1: d = 3 and d = 1.5 use exp(1) and pass no gradient",
    _ppo([[0.0, 3.0, -2.0, 0.5, 1.5, -0.5]], [-1.0], M6, log_ratio_clamp=1.0),
    grad_factor=where(M6, [0.0, 0.0, 0.0, np.exp(0.5), 0.0, 0.0]))
add("ppo_token_loss/token-advantages",
    "[B, T] advantages with both signs in one row",
    _ppo([[0.0, 0.5, -0.5, 0.1, 0.5, -0.5]], [[0.0, 1.0, 1.0, -2.0, -0.5, -0.5]], M6))
add("ppo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logp, old_logp and advantages at masked positions change nothing",
    lambda: build("ppo_token_loss", {
        "logp": f64([[nan, -0.9, -1.5, inf, -0.7, 1e30]]),
        "old_logp": f64([[-inf, -1.0, -1.0, nan, -1.0, -1.0]]),
        "advantages": f64([[1e30, 1.0, -1.0, -inf, 0.5, nan]]),
        "mask": mask(".xx.x."),
    }, {}))
add("ppo_token_loss/empty-mask-row",
    "a row with no valid token is 0 with a zero gradient",
    _ppo([[0.0, 0.1, -0.2, 0.3, 0.0, 0.5]] * 2, [1.0, -1.0], mask(".xxxxx", "......")))
add("ppo_token_loss/tie-eps0-on-policy",
    "eps 0 and ratio exactly 1: both branches tie; the unclipped gradient -A * r is used",
    _ppo([[0.0] * 6], [-2.0], M6, eps_low=0.0, eps_high=0.0),
    expect=where(M6, 2.0), grad_factor=where(M6, 2.0))

add("ppo_token_loss/zero-advantage",
    "A = 0: loss 0 and gradient 0 whatever the ratio",
    _ppo([[0.0, 0.5, -0.5, 2.0, 0.0, -1.0]], [0.0], M6),
    expect=np.zeros((1, 6)), grad_factor=np.zeros((1, 6)))
add("ppo_token_loss/overflowing-ratio-zero-advantage",
    "a finite log-ratio of 800 overflows exp to inf; with A = 0 the token is 0, never NaN",
    _ppo([[0.0, 800.0, 0.1, -0.1, 0.0, 0.2]], [[0.0, 0.0, 1.0, 1.0, -1.0, 1.0]], M6, old=-801.0),
    grad_factor=where(M6, [[0.0, 0.0, -np.exp(0.1), -np.exp(-0.1), 1.0, 0.0]]))
add("ppo_token_loss/square-batch-sequence-advantages",
    "B == T with [B] advantages: row b's tokens all carry A_b (broadcast over time, not over rows)",
    _ppo([[0.0, 0.1, -0.1], [0.0, 0.05, 0.1], [0.0, -0.05, 0.0]], [1.0, -0.5, 2.0], mask(".xx", ".xx", ".xx")),
    expect=where(mask(".xx", ".xx", ".xx"), [[1.0], [-0.5], [2.0]]) * -np.exp(f64([[0.0, 0.1, -0.1], [0.0, 0.05, 0.1], [0.0, -0.05, 0.0]])))


PPO_TOKEN_LOSS = Quantity(
    "ppo_token_loss",
    "loss.ppo",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(EPS_LOW(0.2), EPS_HIGH(0.2), DUAL_CLIP(None), LOG_RATIO_CLAMP(None)),
    inputs=_ppo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("eps_low", "eps_high", "dual_clip"),
    variants={"dual_clip": (None, 3.0), "log_ratio_clamp": (None, 20.0)},
    well_conditioned=ppo_conditioned,
    golden=entries("ppo_token_loss"),
    golden_seeds=(1, 2, 4),
    # A > 0 row: d = 0.22 (inside open-instruct's 1.272); A < 0 row: d = 21 (log-ratio clamp 20,
    # dual clip 3) and d = 1.5 (ratio 4.5 > 3).
    preset_inputs=lambda preset, **kw: _ppo(
        [[0.0, 0.22, -0.5, 0.1, 1.0, 0.0], [0.0, 21.0, 1.5, -0.5, 0.1, 0.22]], [1.0, -1.0],
        mask(".xxxxx", ".xxxxx"), old=-25.0, **kw),
    extremes=Extremes(
        log_ratio_keywords=({}, {"dual_clip": 3.0}, {"log_ratio_clamp": 20.0}, {"eps_low": 0.1, "eps_high": 0.28}),
        log_ratio_bounded=_finite_with("dual_clip", "log_ratio_clamp")),
)


# ---------------------------------------------------------------------------------------------------
# gspo_token_loss (loss.gspo)
# ---------------------------------------------------------------------------------------------------


def _gspo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    eps = [(3e-4, 4e-4), (0.2, 0.2), (0.05, 0.1)][int(rng.integers(0, 3))]
    return (
        policy_args(rng),
        {"eps_low": eps[0], "eps_high": eps[1], "form": str(rng.choice(["sequence", "token_sg"]))},
    )


def _gspo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    mask = args["mask"]
    d = np.where(mask, args["logp"] - np.where(mask, args["old_logp"], 0.0), 0.0)
    n = mask.sum(axis=1)
    with np.errstate(over="ignore"):
        s = np.exp(d.sum(axis=1)[n > 0] / n[n > 0])
    return far(s, [1 - kw.get("eps_low", 3e-4), 1 + kw.get("eps_high", 4e-4)])


def _gspo(d, adv, m, **kw):
    return policy_case("gspo_token_loss", d, adv, m, **kw)


MG = mask(".xxxx", ".xxxx")
EPS2 = {"eps_low": 0.2, "eps_high": 0.2}

add("gspo_token_loss/sequence-unclipped",
    "sequence form, s inside [0.8, 1.2]: every valid token carries -A * s",
    _gspo([[0.0, 0.2, -0.1, 0.1, 0.0], [0.0, -0.3, 0.1, 0.0, 0.2]], [1.0, -0.5], MG, **EPS2),
    expect=where(MG, [[-np.exp(0.05)], [0.5]]))
add("gspo_token_loss/sequence-clipped-positive",
    "sequence form, A > 0 and s = exp(0.5) > 1.2: loss -1.2 * A and zero gradient on every token",
    _gspo([[0.0, 0.5, 0.25, 0.75, 0.5]], [1.0], M5, **EPS2),
    expect=where(M5, -1.2), grad_factor=np.zeros((1, 5)))
add("gspo_token_loss/sequence-clipped-negative",
    "sequence form, A < 0 and s = exp(-0.5) < 0.8: loss 0.8 and zero gradient",
    _gspo([[0.0, -0.5, -0.25, -0.75, -0.5]], [-1.0], M5, **EPS2),
    expect=where(M5, 0.8), grad_factor=np.zeros((1, 5)))
add("gspo_token_loss/sequence-outside-unclipped",
    "sequence form, A > 0 and s < 0.8: unclipped, the gradient -A * s / n reaches every token",
    _gspo([[0.0, -0.5, -0.25, -0.75, -0.5]], [1.0], M5, **EPS2),
    expect=where(M5, -np.exp(-0.5)))
add("gspo_token_loss/token-sg-unclipped",
    "token_sg form (verl): same values as the sequence form, per-token gradient -A * s",
    _gspo([[0.0, 0.2, -0.1, 0.1, 0.0], [0.0, -0.3, 0.1, 0.0, 0.2]], [1.0, -0.5], MG, form="token_sg",
          **EPS2),
    expect=where(MG, [[-np.exp(0.05)], [0.5]]),
    grad_factor=where(MG, [[-np.exp(0.05)], [0.5]]))
add("gspo_token_loss/token-sg-clipped",
    "token_sg form with s > 1 + eps_high and A > 0: zero gradient",
    _gspo([[0.0, 0.5, 0.25, 0.75, 0.5]], [1.0], M5, form="token_sg", **EPS2),
    expect=where(M5, -1.2), grad_factor=np.zeros((1, 5)))
add("gspo_token_loss/token-advantages-sequence",
    "[B, T] advantages in the sequence form: token u's gradient sums every token's term * s / n",
    _gspo([[0.0, 0.2, -0.1, 0.1, 0.0]], [[0.0, 1.0, -1.0, 0.5, 2.0]], M5, **EPS2))
add("gspo_token_loss/token-advantages-token-sg",
    "[B, T] advantages in the token_sg form: each token's gradient is its own -A_t * s",
    _gspo([[0.0, 0.2, -0.1, 0.1, 0.0]], [[0.0, 1.0, -1.0, 0.5, 2.0]], M5, form="token_sg", **EPS2))
add("gspo_token_loss/default-eps",
    "the paper's eps 3e-4 / 4e-4: s - 1 = 1e-4 is unclipped, s - 1 = 1e-3 is clipped",
    _gspo([[0.0, 2e-4, 0.0, 1e-4, 1e-4], [0.0, 1e-3, 2e-3, 0.0, 1e-3]], [1.0, 1.0], MG))
add("gspo_token_loss/ragged-rows",
    "rows of 2 and 4 valid tokens: each row's mean uses its own count",
    _gspo([[0.0, 0.0, 0.0, 0.2, 0.1], [0.0, 0.1, -0.1, 0.3, 0.1]], [1.0, 1.0],
          mask("...xx", ".xxxx"), **EPS2))
add("gspo_token_loss/empty-mask-row",
    "a row with no valid token has no sequence ratio: all 0, zero gradient",
    _gspo([[0.0, 0.2, -0.1, 0.1, 0.0]] * 2, [1.0, 1.0], mask(".xxxx", "....."), **EPS2))
add("gspo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions stay out of the sequence mean",
    lambda: build("gspo_token_loss", {
        "logp": f64([[nan, -0.9, -1.1, inf, -1.0]]),
        "old_logp": f64([[1e30, -1.0, -1.0, -inf, -1.05]]),
        "advantages": f64([[-inf, 1.0, 0.5, nan, 2.0]]),
        "mask": mask(".xx.x"),
    }, dict(EPS2)))
add("gspo_token_loss/on-policy",
    "old == current log-probs: s = 1, loss -A",
    _gspo([[0.0] * 5], [0.75], M5),
    expect=where(M5, -0.75))

add("gspo_token_loss/overflowing-ratio-zero-advantage",
    "a mean log-ratio of 800 overflows s to inf; with A = 0 the row is 0, never NaN",
    _gspo([[0.0, 800.0, 800.0, 800.0, 800.0], [0.0, 0.1, 0.0, -0.1, 0.2]], [0.0, 1.0], MG, old=-801.0,
          **EPS2))


GSPO_TOKEN_LOSS = Quantity(
    "gspo_token_loss",
    "loss.gspo",
    returns='`[B,T]`; form `"sequence"` (paper) or `"token_sg"` (verl)',
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(EPS_LOW(0.0003), EPS_HIGH(0.0004), GSPO_FORM("sequence")),
    inputs=_gspo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("eps_low", "eps_high"),
    variants={"form": ("sequence", "token_sg")},
    well_conditioned=_gspo_conditioned,
    golden=entries("gspo_token_loss"),
    golden_seeds=(1, 2, 4),
    preset_inputs=lambda preset, **kw: _gspo(
        [[0.0, 0.2, -0.1, 0.1, 0.0], [0.0, 0.5, 0.25, 0.75, 0.5], [0.0, -0.3, 0.1, 0.0, -0.2]],
        [1.0, 1.0, -0.5], mask(".xxxx", ".xxxx", ".xxxx"), **kw),
    extremes=Extremes(
        log_ratio_keywords=({"form": "sequence"}, {"form": "token_sg"}, {"eps_low": 0.2, "eps_high": 0.2}),
        log_ratio_bounded=_finite_with()),
)


# ---------------------------------------------------------------------------------------------------
# cispo_token_loss (loss.cispo)
# ---------------------------------------------------------------------------------------------------


def _cispo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    bound = str(rng.choice(["relative", "absolute"]))
    return (
        policy_args(rng),
        {
            "eps_low": rng.choice([None, 0.2]),
            "eps_high": float(rng.choice([0.28, 2.0])) if bound == "relative" else 5.0,
            "bound": bound,
        },
    )


def _cispo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The "logp" surrogate's gradient −clip(r)·A is continuous in r; the "ratio" surrogate's gradient
    jumps to 0 at the clip bounds, which the ratio must be off."""
    if kw.get("surrogate", "logp") != "ratio":
        return True
    eps_low, eps_high = kw.get("eps_low"), kw.get("eps_high", 0.28)
    high = 1 + eps_high if kw.get("bound", "relative") == "relative" else eps_high
    return far(ratio(args), [high] + ([] if eps_low is None else [1 - eps_low]))


def _cispo(d, adv, m, **kw):
    return policy_case("cispo_token_loss", d, adv, m, **kw)


DC = [[0.0, 0.5, 1.0, 0.3, 0.26]]  # ratios 1.65, 2.72, 1.35, 1.297: all above 1.28

add("cispo_token_loss/relative-above-high",
    "canonical eps_high 0.28: ratios above 1.28 use w = 1.28; the gradient -w * A stays nonzero",
    _cispo(DC, [1.0], M5),
    expect=where(M5, 1.28 * (4.0 - f64(DC))), grad_factor=where(M5, -1.28))
add("cispo_token_loss/relative-inside",
    "ratios below 1 + eps_high: w = r",
    _cispo([[0.0, 0.1, -0.1, 0.2, 0.0]], [1.0], M5),
    grad_factor=where(M5, -np.exp(f64([[0.0, 0.1, -0.1, 0.2, 0.0]]))))
add("cispo_token_loss/eps-low-none",
    "eps_low None (canonical): no lower bound, small ratios keep w = r",
    _cispo([[0.0, -1.5, -0.7, -3.0, -0.1]], [1.0], M5),
    grad_factor=where(M5, -np.exp(f64([[0.0, -1.5, -0.7, -3.0, -0.1]]))))
add("cispo_token_loss/eps-low-lower-bound",
    "eps_low 0.2: ratios below 0.8 use w = 0.8",
    _cispo([[0.0, -1.5, -0.7, -3.0, -0.1]], [1.0], M5, eps_low=0.2),
    grad_factor=where(M5, [[0.0, -0.8, -0.8, -0.8, -np.exp(-0.1)]]))
add("cispo_token_loss/absolute-bound-clipped",
    "bound 'absolute' (TRL) with eps_high 5: the bound is 5 itself",
    _cispo([[0.0, 2.0, 2.5, 1.0, 0.0]], [1.0], M5, bound="absolute", eps_high=5.0),
    grad_factor=where(M5, [[0.0, -5.0, -5.0, -np.e, -1.0]]))
add("cispo_token_loss/absolute-bound-inside",
    "bound 'absolute' with eps_high 5: ratios 1.65-4.48 are unclipped (relative would cap at 1.28)",
    _cispo([[0.0, 0.5, 1.2, 1.5, -0.3]], [1.0], M5, bound="absolute", eps_high=5.0),
    grad_factor=where(M5, -np.exp(f64([[0.0, 0.5, 1.2, 1.5, -0.3]]))))
add("cispo_token_loss/absolute-bound-with-eps-low",
    "bound 'absolute' with eps_low 0.2: w = clip(r, 1 - 0.2, 5)",
    _cispo([[0.0, 2.0, -1.0, 0.5, -0.1]], [1.0], M5, bound="absolute", eps_high=5.0, eps_low=0.2),
    grad_factor=where(M5, [[0.0, -5.0, -0.8, -np.exp(0.5), -np.exp(-0.1)]]))
add("cispo_token_loss/negative-advantages",
    "A < 0: the same weights, loss and gradient change sign",
    _cispo([[0.0, 0.5, -0.5, 0.1, 1.0]], [-1.5], M5),
    grad_factor=where(M5, 1.5 * f64([[0.0, 1.28, np.exp(-0.5), np.exp(0.1), 1.28]])))
add("cispo_token_loss/token-advantages",
    "[B, T] advantages with both signs",
    _cispo([[0.0, 0.5, -0.5, 0.1, 1.0]], [[0.0, 1.0, -1.0, 2.0, -0.5]], M5))
add("cispo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    lambda: build("cispo_token_loss", {
        "logp": f64([[nan, -0.9, -1.5, inf, -0.7]]),
        "old_logp": f64([[-inf, -1.0, -1.0, nan, -1.0]]),
        "advantages": f64([[1e30, 1.0, -1.0, -inf, 0.5]]),
        "mask": mask(".xx.x"),
    }, {}))
add("cispo_token_loss/empty-mask-row",
    "a row with no valid token is 0 with a zero gradient",
    _cispo([[0.0, 0.5, -0.5, 0.1, 1.0]] * 2, [1.0, -1.0], mask(".xxxx", ".....")))
add("cispo_token_loss/on-policy",
    "ratio 1: w = 1 and the loss is the plain policy-gradient loss -A * logp",
    _cispo([[0.0] * 5], [2.0], M5),
    expect=where(M5, 8.0), grad_factor=where(M5, -2.0))

add("cispo_token_loss/overflowing-ratio-capped",
    "a finite log-ratio of 800 overflows r to inf; w = 1 + eps_high stays finite",
    _cispo([[0.0, 800.0, 0.1, 0.0, -0.2]], [1.0], M5, old=-801.0),
    grad_factor=where(M5, [[0.0, -1.28, -np.exp(0.1), -1.0, -np.exp(-0.2)]]))

# spec v1.1: the four CISPO definitions in use (verl's two-sided 0.8/1.2, TRL's and ms-swift's absolute
# cap, SkyRL's [1, 6], torchrl's clipped ratio on the graph) are pinned by the preset vectors below
# (PRESET_INPUTS); these cases pin the keywords that tell them apart.
DR = [[0.0, 0.1, 0.5, -0.5, -0.1]]  # ratios 1.105, 1.65, 0.61, 0.905 against [0.8, 1.2]

add("cispo_token_loss/ratio-surrogate",
    "surrogate 'ratio' (torchrl): L = -clip(r, 0.8, 1.2) * A, no log-prob factor; a clipped token has no gradient",
    _cispo(DR, [1.0], M5, eps_low=0.2, eps_high=0.2, surrogate="ratio"),
    expect=where(M5, -f64([[1.0, np.exp(0.1), 1.2, 0.8, np.exp(-0.1)]])),
    grad_factor=where(M5, [[0.0, -np.exp(0.1), 0.0, 0.0, -np.exp(-0.1)]]))
add("cispo_token_loss/ratio-surrogate-on-policy",
    "surrogate 'ratio' on-policy: the value is -A (not -A * logp), the gradient -A as for 'logp'",
    _cispo([[0.0] * 5], [2.0], M5, surrogate="ratio"),
    expect=where(M5, -2.0), grad_factor=where(M5, -2.0))
add("cispo_token_loss/ratio-surrogate-overflow",
    "surrogate 'ratio' with a log-ratio of 800: w = 1 + eps_high, gradient 0, never NaN",
    _cispo([[0.0, 800.0, 0.1, 0.0, -0.2]], [1.0], M5, old=-801.0, surrogate="ratio"),
    grad_factor=where(M5, [[0.0, 0.0, -np.exp(0.1), -1.0, -np.exp(-0.2)]]))
add("cispo_token_loss/floor-at-one",
    "eps_low 0, eps_high 5 (SkyRL's [1, 6]): ratios below 1 are lifted to 1, above 6 capped",
    _cispo([[0.0, -1.0, -0.3, 1.0, 2.0]], [1.0], M5, eps_low=0.0, eps_high=5.0),
    grad_factor=where(M5, [[0.0, -1.0, -1.0, -np.e, -6.0]]))


CISPO_TOKEN_LOSS = Quantity(
    "cispo_token_loss",
    "loss.cispo",
    returns=('`[B,T]`; bound `"relative"` (1+eps) or `"absolute"` (eps_high is the bound itself, TRL); surrogate '
             '`"ratio"` (v1.1, torchrl)'),
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(EPS_LOW(None, optional=True), EPS_HIGH(0.28), CISPO_BOUND("relative"), CISPO_SURROGATE("logp")),
    inputs=_cispo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("eps_low", "eps_high", "bound"),
    variants={"surrogate": ("logp", "ratio")},
    well_conditioned=_cispo_conditioned,
    golden=entries("cispo_token_loss"),
    golden_seeds=(1, 2, 4),
    preset_inputs=lambda preset, **kw: _cispo(
        [[0.0, 2.0, 0.22, -0.5, 0.0, 1.75], [0.0, -1.0, 0.1, 0.3, -0.2, 1.8]], [1.0, -1.0],
        mask(".xxxxx", ".xxxxx"), **kw),
    # the stop-gradient weight is clipped (relative or absolute bound): finite whatever the ratio
    extremes=Extremes(
        log_ratio_keywords=({}, {"eps_low": 0.2}, {"eps_high": 5.0, "bound": "absolute"},
                            {"eps_low": 0.2, "eps_high": 0.2, "surrogate": "ratio"}),
        log_ratio_bounded=_always_finite),
)


# ---------------------------------------------------------------------------------------------------
# sapo_token_loss (loss.sapo)
# ---------------------------------------------------------------------------------------------------


def _sapo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    return (
        policy_args(rng),
        {
            "tau_pos": float(rng.choice([1.0, 0.5, 2.0])),
            "tau_neg": float(rng.choice([1.05, 1.0, 3.0])),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
    )


def _sapo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Only the optional log-ratio clamp has a kink (the gate is smooth)."""
    c = kw.get("log_ratio_clamp")
    return c is None or far((args["logp"] - args["old_logp"])[args["mask"]], [-c, c])


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


add("sapo_token_loss/on-policy",
    "r = 1: the gate is sigma(0) = 1/2, so L = -2A/tau and the gradient is -A (both signs)",
    policy_case("sapo_token_loss", [[0.0] * 4], [[0.0, 1.0, -1.0, 2.0]], mask(".xxx")),
    expect=where(mask(".xxx"), [[0.0, -2.0, 2.0 / 1.05, -4.0]]), grad_factor=where(mask(".xxx"), [[0.0, -1.0, 1.0, -2.0]]))
add("sapo_token_loss/ratio-three",
    "r = 3, A = 1, tau = 1: L = -4 sigma(2), gradient -4 sigma(2) (1 - sigma(2)) 3",
    policy_case("sapo_token_loss", [[0.0, np.log(3.0)]], [1.0], mask(".x")),
    expect=where(mask(".x"), -4 * _sig(2.0)), grad_factor=where(mask(".x"), -12 * _sig(2.0) * (1 - _sig(2.0))))
add("sapo_token_loss/negative-advantage-tau",
    "A < 0 uses tau_neg: tau_neg = 3, r = 2: L = (4/3) sigma(3)",
    policy_case("sapo_token_loss", [[0.0, np.log(2.0)]], [-1.0], mask(".x"), tau_neg=3.0),
    expect=where(mask(".x"), 4 / 3 * _sig(3.0)))
add("sapo_token_loss/overflowing-ratio",
    "d = 800 overflows r; the gate saturates: L = -A 4/tau with a zero gradient; A = 0 gives 0",
    policy_case("sapo_token_loss", [[0.0, 800.0, 800.0]], [[0.0, -1.0, 0.0]], mask(".xx"), old=-801.0),
    expect=where(mask(".xx"), [[0.0, 4 / 1.05, 0.0]]), grad_factor=np.zeros((1, 3)))
add("sapo_token_loss/log-ratio-clamp",
    "log_ratio_clamp 20 (verl): d = 25 is clamped, the gate saturates, no gradient",
    policy_case("sapo_token_loss", [[0.0, 25.0, 0.1]], [1.0], mask(".xx"), old=-30.0, log_ratio_clamp=20.0),
    expect=where(mask(".xx"), [[0.0, -4 * _sig(np.exp(20.0) - 1), -4 * _sig(np.exp(0.1) - 1)]]))
add("sapo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    lambda: build("sapo_token_loss", {"logp": f64([[nan, -1.0, inf, -1.5]]), "old_logp": f64([[1e30, -1.1, nan, -1.5]]),
                                      "advantages": f64([[nan, 1.0, 1e30, -1.0]]), "mask": mask(".x.x")}, {}))


SAPO_TOKEN_LOSS = Quantity(
    "sapo_token_loss",
    "loss.sapo",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(TAU_POS(1.0), TAU_NEG(1.05), LOG_RATIO_CLAMP(None)),
    inputs=_sapo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("tau_pos", "tau_neg"),
    variants={"log_ratio_clamp": (None, 20.0)},
    well_conditioned=_sapo_conditioned,
    golden=entries("sapo_token_loss"),
    golden_seeds=(1, 2, 3),
    # A < 0 with a PPO ratio e^1.5 = 4.5 > 3 (verl's dual clip) and behaviour weights e^1 = 2.7 and
    # e^2 = 7.4 (above verl's cap 2; the second also above AReaL's rejection bound 5).
    # d = -25 (beyond verl's +-20 log-ratio clamp: a change of ~1e-9 in the saturated gate) and ordinary ratios
    preset_inputs=lambda preset, **kw: policy_case(
        "sapo_token_loss", [[0.0, -25.0, 0.3, -0.2]], [[0.0, -1.0, 1.0, -1.0]], mask(".xxx"), **kw),
    # the soft gate of the ratio and its gradient saturate: finite whatever the ratio
    extremes=Extremes(
        log_ratio_keywords=({}, {"tau_pos": 2.0, "tau_neg": 0.5}, {"log_ratio_clamp": 20.0}),
        log_ratio_bounded=_always_finite),
)


# ---------------------------------------------------------------------------------------------------
# gmpo_token_loss (loss.gmpo)
# ---------------------------------------------------------------------------------------------------


def _gmpo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    eps = [(0.4, 0.4), (0.2, 0.2), (0.2, 0.3)][int(rng.integers(0, 3))]
    return policy_args(rng), {"eps_low": eps[0], "eps_high": eps[1]}


def _gmpo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The per-token log-ratio must be off GMPO's log-space clip bounds."""
    d = (args["logp"] - args["old_logp"])[args["mask"]]
    return far(d, [-kw.get("eps_low", 0.4), kw.get("eps_high", 0.4)])


add("gmpo_token_loss/on-policy",
    "r = 1 for every token: each valid token carries -mean(A) = -1.5 (the gradient couples the row's tokens)",
    policy_case("gmpo_token_loss", [[0.0] * 6], [1.5], M6), expect=where(M6, -1.5))
add("gmpo_token_loss/clipped-positive",
    "A > 0: d = 0.5 is clipped to 0.4 (no gradient through it), 0.1 and -0.1 are not: rho = e^(0.4/3)",
    policy_case("gmpo_token_loss", [[0.0, 0.5, 0.1, -0.1]], [1.0], mask(".xxx")),
    expect=where(mask(".xxx"), -np.exp(0.4 / 3)))
add("gmpo_token_loss/clipped-negative",
    "A < 0, sign-aware: d = -0.5 clips to -0.4, d = 0.5 stays: rho = e^((-0.4 + 0.5 + 0)/3), L = +rho",
    policy_case("gmpo_token_loss", [[0.0, -0.5, 0.5, 0.0]], [-1.0], mask(".xxx")),
    expect=where(mask(".xxx"), np.exp(0.1 / 3)))
add("gmpo_token_loss/token-advantages-mean",
    "[B, T] advantages: the row's loss uses their mean (1 + 3 + -1)/3 = 1 and each token's own sign for the clip",
    policy_case("gmpo_token_loss", [[0.0, 0.1, 0.2, 0.3]], [[0.0, 1.0, 3.0, -1.0]], mask(".xxx")),
    expect=where(mask(".xxx"), -np.exp(0.2)))
add("gmpo_token_loss/empty-mask-row",
    "a row with no valid token is 0 with a zero gradient",
    policy_case("gmpo_token_loss", [[0.0, 0.1, -0.1]] * 2, [1.0, -1.0], mask(".xx", "...")),
    expect=where(mask(".xx", "..."), [[-1.0], [0.0]]))
add("gmpo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    lambda: build("gmpo_token_loss", {"logp": f64([[nan, -1.0, inf, -1.5]]), "old_logp": f64([[1e30, -1.1, nan, -1.5]]),
                                      "advantages": f64([[nan, 1.0, 1e30, -1.0]]), "mask": mask(".x.x")}, {}))


GMPO_TOKEN_LOSS = Quantity(
    "gmpo_token_loss",
    "loss.gmpo",
    returns="`[B,T]` (every valid token carries its row's loss)",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(EPS_LOW(0.4), EPS_HIGH(0.4)),
    inputs=_gmpo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("eps_low", "eps_high"),
    well_conditioned=_gmpo_conditioned,
    golden=entries("gmpo_token_loss"),
    golden_seeds=(1, 2, 3),
    # log-ratios 0.3 and -0.3: inside the paper's +-0.4, outside verl's +-0.2
    preset_inputs=lambda preset, **kw: policy_case(
        "gmpo_token_loss", [[0.0, 0.3, -0.3, 0.1], [0.0, -0.3, 0.25, 0.0]], [1.0, -1.0], mask(".xxx", ".xxx"), **kw),
    extremes=Extremes(log_ratio_keywords=({}, {"eps_low": 0.2, "eps_high": 0.2}), log_ratio_bounded=_finite_with()),
)


# ---------------------------------------------------------------------------------------------------
# dppo_token_loss (loss.dppo)
# ---------------------------------------------------------------------------------------------------


def _dppo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    return (
        policy_args(rng),
        {
            "divergence": str(rng.choice(["tv", "kl"])),
            "delta_low": float(rng.choice([0.2, 0.05, 0.5])),
            "delta_high": float(rng.choice([0.2, 0.05, 0.5])),
            "ratio_cap": rng.choice([None, 3.0, 20.0]),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
    )


def _dppo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """DPPO's keep decision flips at its divergence bounds and at p = p_old; the ratio cap is a kink."""
    m = args["mask"]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        p, q = np.exp(args["logp"][m]), np.exp(args["old_logp"][m])
        d = args["logp"][m] - args["old_logp"][m]
        lo, hi = kw.get("delta_low", 0.2), kw.get("delta_high", 0.2)
        if kw.get("divergence", "tv") == "tv":
            ok = far(p - q, [-lo, hi])
        else:
            kl = q * (np.log(q) - np.log(p)) + (1 - q) * (np.log1p(-q) - np.log1p(-p))
            ok = far(kl, [lo, hi]) and far(d, [0.0])
        cap = kw.get("ratio_cap")
        return ok and (cap is None or far(np.exp(d), [cap]))


def _dppo(p, p_old, adv, m, **kw):
    """DPPO on probabilities: logp = log p, old_logp = log p_old (masked positions hold p = p_old = 0.5)."""
    return lambda: build("dppo_token_loss", {"logp": np.log(f64(p)), "old_logp": np.log(f64(p_old)), "advantages": f64(adv),
                                             "mask": m}, kw)


add("dppo_token_loss/tv-keep-and-drop",
    "TV: A > 0 keeps p - p_old = 0.1 (L = -A r log p, r = 1.2) and drops 0.3; A < 0 drops -0.3",
    _dppo([[0.5, 0.6, 0.8, 0.2]], [[0.5, 0.5, 0.5, 0.5]], [[0.0, 1.0, 1.0, -1.0]], mask(".xxx")),
    expect=where(mask(".xxx"), [[0.0, -1.2 * np.log(0.6), 0.0, 0.0]]), grad_factor=where(mask(".xxx"), [[0.0, -1.2, 0.0, 0.0]]))
add("dppo_token_loss/kl-keep-and-drop",
    "binary KL(0.5 || p): p = 0.6 gives 0.0204 (kept), p = 0.8 gives 0.223 > 0.2 (dropped, A > 0 and p > p_old); "
    "p = 0.2 with A > 0 is kept whatever its KL (p <= p_old)",
    _dppo([[0.5, 0.6, 0.8, 0.2]], [[0.5] * 4], [1.0], mask(".xxx"), divergence="kl"),
    expect=where(mask(".xxx"), [[0.0, -1.2 * np.log(0.6), 0.0, -0.4 * np.log(0.2)]]))
add("dppo_token_loss/ratio-cap",
    "ratio_cap 3: r = 4 is used as 3 (a constant); A < 0 and p - p_old = 0.6 >= -delta keeps the token",
    _dppo([[0.5, 0.8]], [[0.5, 0.2]], [-1.0], mask(".x"), ratio_cap=3.0),
    expect=where(mask(".x"), [[0.0, 3.0 * np.log(0.8)]]), grad_factor=where(mask(".x"), [[0.0, 3.0]]))
add("dppo_token_loss/asymmetric-deltas",
    "delta_low 0.05, delta_high 0.5: A > 0 keeps p - p_old = 0.3; A < 0 drops p - p_old = -0.1",
    _dppo([[0.5, 0.8, 0.4]], [[0.5, 0.5, 0.5]], [[0.0, 1.0, -1.0]], mask(".xx"), delta_low=0.05, delta_high=0.5),
    expect=where(mask(".xx"), [[0.0, -1.6 * np.log(0.8), 0.0]]))
add("dppo_token_loss/zero-advantage-overflowing-ratio",
    "A = 0 with a ratio that overflows: loss 0 and gradient 0, never NaN",
    policy_case("dppo_token_loss", [[0.0, 800.0, 0.0]], [[0.0, 0.0, 1.0]], mask(".xx"), old=-801.0),
    expect=where(mask(".xx"), [[0.0, 0.0, 801.0]]))
add("dppo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    lambda: build("dppo_token_loss", {"logp": f64([[nan, -1.0, inf, -1.5]]), "old_logp": f64([[1e30, -1.1, nan, -1.5]]),
                                      "advantages": f64([[nan, 1.0, 1e30, -1.0]]), "mask": mask(".x.x")}, {}))


DPPO_TOKEN_LOSS = Quantity(
    "dppo_token_loss",
    "loss.dppo",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(DIVERGENCE("tv"), DELTA_LOW(0.2), DELTA_HIGH(0.2), RATIO_CAP(None), LOG_RATIO_CLAMP(None)),
    inputs=_dppo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("divergence", "delta_low", "delta_high", "ratio_cap"),
    variants={"log_ratio_clamp": (None, 20.0)},
    well_conditioned=_dppo_conditioned,
    golden=entries("dppo_token_loss"),
    golden_seeds=(1, 2, 3),
    # a kept token with ratio 4 (verl caps the stop-gradient weight at 3)
    preset_inputs=lambda preset, **kw: _dppo(
        [[0.5, 0.8, 0.6]], [[0.5, 0.2, 0.5]], [[0.0, -1.0, 1.0]], mask(".xx"), **kw),
    extremes=Extremes(
        log_ratio_keywords=({}, {"divergence": "kl"}, {"ratio_cap": 3.0}, {"log_ratio_clamp": 20.0}),
        log_ratio_bounded=_finite_with("ratio_cap", "log_ratio_clamp")),
)


# ---------------------------------------------------------------------------------------------------
# dro_token_loss (loss.dro)
# ---------------------------------------------------------------------------------------------------


def _dro_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    return policy_args(rng), {"beta": float(rng.choice([0.01, 0.1, 1.0]))}


add("dro_token_loss/worked",
    "A = 1, logp = -1, d = 0.5, beta = 0.1: L = -(A logp - beta d^2 / 2) = 1.0125, gradient -A + beta d = -0.95",
    policy_case("dro_token_loss", [[0.0, 0.5]], [1.0], mask(".x"), old=-1.5, beta=0.1),
    expect=where(mask(".x"), 1.0125), grad_factor=where(mask(".x"), -0.95))
add("dro_token_loss/on-policy",
    "d = 0: REINFORCE, L = -A logp, gradient -A",
    policy_case("dro_token_loss", [[0.0] * 3], [[0.0, 2.0, -1.0]], mask(".xx"), old=-2.0, beta=1.0),
    expect=where(mask(".xx"), [[0.0, 4.0, -2.0]]), grad_factor=where(mask(".xx"), [[0.0, -2.0, 1.0]]))
add("dro_token_loss/penalty-both-signs",
    "the quadratic penalty pulls toward old_logp from either side: d = +-1, beta = 2, A = 0: L = d^2, gradient 2d",
    policy_case("dro_token_loss", [[0.0, 1.0, -1.0]], [0.0], mask(".xx"), old=-2.0, beta=2.0),
    expect=where(mask(".xx"), 1.0), grad_factor=where(mask(".xx"), [[0.0, 2.0, -2.0]]))
add("dro_token_loss/token-advantages",
    "[B, T] advantages, beta 0.5: each token its own A",
    policy_case("dro_token_loss", [[0.0, 0.2, -0.4]], [[0.0, 1.0, -3.0]], mask(".xx"), old=-1.0, beta=0.5),
    expect=where(mask(".xx"), [[0.0, 0.8 + 0.01, -4.2 + 0.04]]))
add("dro_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    lambda: build("dro_token_loss", {"logp": f64([[nan, -1.0, inf, -1.5]]), "old_logp": f64([[1e30, -1.1, nan, -1.5]]),
                                     "advantages": f64([[nan, 1.0, 1e30, -1.0]]), "mask": mask(".x.x")}, {"beta": 0.1}))


DRO_TOKEN_LOSS = Quantity(
    "dro_token_loss",
    "loss.dro",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(DRO_BETA(),),
    inputs=_dro_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("beta",),
    golden=entries("dro_token_loss"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# vespo_token_loss (loss.vespo)
# ---------------------------------------------------------------------------------------------------


def _vespo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    return (
        policy_args(rng),
        {
            "k_pos": float(rng.choice([2.0, 1.0])),
            "lambda_pos": float(rng.choice([3.0, 1.5])),
            "k_neg": float(rng.choice([3.0, 0.5])),
            "lambda_neg": float(rng.choice([2.0, 4.0])),
        },
    )


def _phi(S, k, lam):
    return np.exp(lam + k * S - lam * np.exp(S))


add("vespo_token_loss/on-policy",
    "S = 0: phi = 1 for every (k, lambda): REINFORCE, L = -A logp, gradient -A",
    policy_case("vespo_token_loss", [[0.0] * 3], [[0.0, 2.0, -1.0]], mask(".xx"), old=-2.0),
    expect=where(mask(".xx"), [[0.0, 4.0, -2.0]]), grad_factor=where(mask(".xx"), [[0.0, -2.0, 1.0]]))
add("vespo_token_loss/positive-advantage-weight",
    "A = 1, row log-ratio S = 0.5 (0.2 + 0.3): phi = exp(3 + 2 (0.5) - 3 e^0.5) on both tokens",
    policy_case("vespo_token_loss", [[0.0, 0.2, 0.3]], [1.0], mask(".xx"), old=-1.0),
    expect=where(mask(".xx"), [[0.0, 0.8, 0.7]]) * _phi(0.5, 2.0, 3.0),
    grad_factor=where(mask(".xx"), -_phi(0.5, 2.0, 3.0)))
add("vespo_token_loss/negative-advantage-weight",
    "A = -1 uses (k, lambda) = (3, 2): S = -0.4, phi = exp(2 - 1.2 - 2 e^-0.4)",
    policy_case("vespo_token_loss", [[0.0, -0.4]], [-1.0], mask(".x"), old=-1.0),
    expect=where(mask(".x"), [[0.0, -1.4 * _phi(-0.4, 3.0, 2.0)]]), grad_factor=where(mask(".x"), _phi(-0.4, 3.0, 2.0)))
add("vespo_token_loss/token-advantages-per-sign",
    "[B, T] advantages: one row ratio S = 0.3, each token's (k, lambda) by its own sign",
    policy_case("vespo_token_loss", [[0.0, 0.1, 0.2]], [[0.0, 1.0, -1.0]], mask(".xx"), old=-1.0),
    grad_factor=where(mask(".xx"), [[0.0, -_phi(0.3, 2.0, 3.0), _phi(0.3, 3.0, 2.0)]]))
add("vespo_token_loss/overflowing-sequence-ratio",
    "S = 800 overflows w: phi = 0, loss and gradient 0, never NaN; the other row is unaffected",
    policy_case("vespo_token_loss", [[0.0, 800.0], [0.0, 0.0]], [1.0, 1.0], mask(".x", ".x"), old=-801.0),
    expect=where(mask(".x", ".x"), [[0.0], [801.0]]), grad_factor=where(mask(".x", ".x"), [[0.0], [-1.0]]))
add("vespo_token_loss/sequence-ratio-clamp",
    "w_max = e^2: S = 3 is clipped to 2 before the gamma weight",
    policy_case("vespo_token_loss", [[0.0, 1.5, 1.5]], [1.0], mask(".xx"), old=-2.0, w_max=float(np.exp(2.0))),
    grad_factor=where(mask(".xx"), -_phi(2.0, 2.0, 3.0)))
add("vespo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    lambda: build("vespo_token_loss", {"logp": f64([[nan, -1.0, inf, -1.5]]), "old_logp": f64([[1e30, -1.1, nan, -1.5]]),
                                       "advantages": f64([[nan, 1.0, 1e30, -1.0]]), "mask": mask(".x.x")}, {}))


VESPO_TOKEN_LOSS = Quantity(
    "vespo_token_loss",
    "loss.vespo",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(
        K_POS(2.0), LAMBDA_POS(3.0), K_NEG(3.0), LAMBDA_NEG(2.0), LOG_RATIO_CLAMP(None), W_MIN(None),
        W_MAX(None),
    ),
    inputs=_vespo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("k_pos", "lambda_pos", "k_neg", "lambda_neg"),
    variants={"log_ratio_clamp": (None, 20.0), "w_min": (None, 1e-08), "w_max": (None, 485165195.4097903)},
    golden=entries("vespo_token_loss"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: policy_case(
        "vespo_token_loss", [[0.0, 25.0, 0.1], [0.0, -0.2, 0.3]], [1.0, -1.0], mask(".xx", ".xx"), old=-30.0, **kw),
    # the gamma weight e^lambda w^k e^(-lambda w) of the sequence ratio (a constant, in log space) vanishes at
    # both ends: finite whatever the ratio
    extremes=Extremes(
        log_ratio_keywords=({}, {"log_ratio_clamp": 20.0, "w_min": 1e-8, "w_max": 485165195.4097903}),
        log_ratio_bounded=_always_finite),
)


RECORDS = (PG_TOKEN_LOSS, PPO_TOKEN_LOSS, GSPO_TOKEN_LOSS, CISPO_TOKEN_LOSS, SAPO_TOKEN_LOSS, GMPO_TOKEN_LOSS, DPPO_TOKEN_LOSS, DRO_TOKEN_LOSS, VESPO_TOKEN_LOSS)
