"""Records of the covariance-selected tokens of spec v1.1: Clip-Cov's keep mask and the KL-Cov loss
(select.clip_cov, loss.kl_cov)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, build, f64, inf, mask, nan, where
from conformance.records.conditioning import MARGIN, far, ppo_conditioned
from conformance.records.inputs import Inputs, policy_args
from conformance.records.keywords import COV_HIGH, COV_LOW, EPS_HIGH, EPS_LOW, FRACTION, KL_COV_COEF
from conformance.records.record import Arg, Extremes, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# clip_cov_mask (select.clip_cov)
# ---------------------------------------------------------------------------------------------------


def _covariance_args(rng: np.random.Generator) -> dict[str, Any]:
    args = policy_args(rng)
    args["advantages"] = args["advantages"] * float(rng.choice([1.0, 3.0]))
    return args


def _clip_cov_mask_inputs(rng: np.random.Generator) -> Inputs:
    args = _covariance_args(rng)
    args["draws"] = rng.random(args["mask"].shape)
    cov_low, cov_high = [(1.0, 5.0), (0.05, 2.0), (-1.0, 1.0), (0.2, 50.0)][int(rng.integers(0, 4))]
    eps_low = float(rng.choice([0.2, 0.1]))
    return (
        args,
        {
            "fraction": float(rng.choice([2e-4, 0.2, 0.5, 1.0])),
            "cov_low": cov_low,
            "cov_high": cov_high,
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
        },
    )


def _covariance(args: dict[str, Any]) -> np.ndarray:
    """(A − Ā)·(logp − l̄) at the valid tokens (row-major), the means over the valid tokens of the batch."""
    mask = args["mask"]
    A = np.broadcast_to(args["advantages"][:, None], mask.shape) if args["advantages"].ndim == 1 else args["advantages"]
    a, lp = A[mask], args["logp"][mask]
    return (a - a.mean()) * (lp - lp.mean())


def _clip_cov_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Clip-Cov's candidates: every ratio off PPO's clip bounds and every covariance off the covariance
    bounds (the draws are exact inputs: their ties are the spec's row-major rule, never rounding)."""
    if not args["mask"].any():
        return True
    return (ppo_conditioned(args, {"eps_low": kw.get("eps_low", 0.2), "eps_high": kw.get("eps_high", 0.2)})
            and far(_covariance(args), [kw.get("cov_low", 1.0), kw.get("cov_high", 5.0)]))


def _cov(function, logp, d, adv, m, draws=None, **kw):
    logp, d = f64(logp), f64(d)
    args = {"logp": logp, "old_logp": logp - d, "advantages": f64(adv), "mask": m}
    if draws is not None:
        args["draws"] = f64(draws)
    return lambda: build(function, args, kw)


# A = 2, 2, -2, -2, 0 and logp = -1, -3, -1, -3, -2 (means 0 and -2): covariances 2, -2, -2, 2, 0
CC_M = mask(".xxxxx")
CC_A = [[0.0, 2.0, 2.0, -2.0, -2.0, 0.0]]
CC_LP = [[-4.0, -1.0, -3.0, -1.0, -3.0, -2.0]]
CC_D0 = [[0.0] * 6]
CC_DRAWS = [[0.0, 0.7, 0.1, 0.3, 0.5, 0.9]]
# four candidates: A = 1, -1, 1, -1, 0 and logp = -4 + 2A: covariances 2, 2, 2, 2, 0
CC4_A = [[0.0, 1.0, -1.0, 1.0, -1.0, 0.0]]
CC4_LP = [[-4.0, -2.0, -6.0, -2.0, -6.0, -4.0]]
CC4_DRAWS = [[0.0, 0.4, 0.3, 0.2, 0.1, 0.05]]
# 4 rows of 25 valid tokens (N = 100), A = +-1 alternating, logp = -4 + 2A: every covariance is 2;
# draws (37 k mod 100 + 1/2) / 100 for the k-th valid token: a permutation of the 100 ranks
N100_M = np.tile(mask(".xxxxxxxxxxxxxxxxxxxxxxxxx"), (4, 1))
N100_A = np.zeros(N100_M.shape)
N100_A[N100_M] = np.resize([1.0, -1.0], 100)
N100_RANK = np.zeros(N100_M.shape)
N100_RANK[N100_M] = (37 * np.arange(100)) % 100
N100_DRAWS = (N100_RANK + 0.5) / 100

add("clip_cov_mask/on-policy-one-token-cut",
    "defaults: n = max(1, floor(2e-4 * 5)) = 1; covariances 2, -2, -2, 2, 0: t = 1 and 4 lie in (1, 5), the "
    "smaller draw (t = 4: 0.5 < 0.7) is cut; t = 2 has the smallest draw but is no candidate",
    _cov("clip_cov_mask", CC_LP, CC_D0, CC_A, CC_M, CC_DRAWS), expect=mask(".xxx.x"))
add("clip_cov_mask/no-candidate",
    "cov_low 3: no covariance lies in (3, 5): nothing is cut",
    _cov("clip_cov_mask", CC_LP, CC_D0, CC_A, CC_M, CC_DRAWS, cov_low=3.0), expect=CC_M)
add("clip_cov_mask/already-clipped-excluded",
    "the two in-window tokens are on PPO's clipped branch (A = 2, r = 1.5 > 1.2; A = -2, r = 0.5 < 0.8): "
    "no candidate, nothing is cut",
    _cov("clip_cov_mask", CC_LP, [[0.0, np.log(1.5), 0.0, 0.0, np.log(0.5), 0.0]], CC_A, CC_M, CC_DRAWS), expect=CC_M)
add("clip_cov_mask/clip-is-sign-aware",
    "A = 2 with r = 0.5 and A = -2 with r = 1.5 are not clipped (PPO clips A > 0 above 1 + eps only, A < 0 "
    "below 1 - eps): both stay candidates and the smaller draw (t = 1) is cut",
    _cov("clip_cov_mask", CC_LP, [[0.0, np.log(0.5), 0.0, 0.0, np.log(1.5), 0.0]], CC_A, CC_M,
         [[0.0, 0.2, 0.1, 0.3, 0.6, 0.9]]), expect=mask("..xxxx"))
add("clip_cov_mask/bounds-exclusive",
    "covariances 1, 5, 2, 0, 0: only 2 lies strictly inside (1, 5) (cov = 1 and cov = 5 are not candidates "
    "although their draws are smaller): t = 3 is cut",
    _cov("clip_cov_mask", [[-4.0, -3.5, -1.5, -5.0, -4.0, -6.0]], CC_D0, CC_A, CC_M, [[0.0, 0.1, 0.2, 0.3, 0.4, 0.5]]),
    expect=mask(".xx.xx"))
add("clip_cov_mask/n-floor",
    "fraction 0.5, N = 5: n = floor(2.5) = 2 of the four candidates (covariance 2), those with the smallest "
    "draws (t = 3, 4); t = 5 (covariance 0) has the smallest draw but is no candidate",
    _cov("clip_cov_mask", CC4_LP, CC_D0, CC4_A, CC_M, CC4_DRAWS, fraction=0.5), expect=mask(".xx..x"))
add("clip_cov_mask/n-float64-product",
    "fraction 0.29, N = 100: 0.29 * 100 = 28.999999999999996 in float64, so n = 28 (not 29) of the 100 "
    "candidates (every covariance is 2): those of draw rank 0-27 are cut",
    _cov("clip_cov_mask", -4.0 + 2.0 * N100_A, np.zeros(N100_M.shape), N100_A, N100_M, N100_DRAWS, fraction=0.29),
    expect=N100_M & (N100_RANK >= 28))
add("clip_cov_mask/equal-draws-row-major",
    "two candidates (row 0 t = 3, row 1 t = 1, covariance 4) with the same draw: the earlier in row-major "
    "order (row 0) is cut",
    _cov("clip_cov_mask", [[-4.0, -4.0, -4.0, -2.0], [-4.0, -2.0, -4.0, -8.0]], [[0.0] * 4] * 2,
         [[0.0, -2.0, 0.0, 2.0], [0.0, 2.0, 0.0, -2.0]], mask(".xxx", ".xxx"), [[0.0, 0.1, 0.1, 0.5], [0.0, 0.5, 0.1, 0.1]]),
    expect=mask(".xx.", ".xxx"))
add("clip_cov_mask/fraction-one",
    "fraction 1: n = N = 5 exceeds the four candidates: every candidate is cut",
    _cov("clip_cov_mask", CC4_LP, CC_D0, CC4_A, CC_M, CC4_DRAWS, fraction=1.0), expect=mask(".....x"))
add("clip_cov_mask/advantages-per-sequence",
    "[B] advantages 1 and -3 on rows of 3 and 1 valid tokens: the mean is over tokens, (3 - 3) / 4 = 0 (not "
    "the row mean -1): covariances 3, 1, -1 and 9, only row 0 t = 1 is a candidate",
    _cov("clip_cov_mask", [[-4.0, -1.0, -3.0, -5.0], [-4.0, -7.0, -4.0, -4.0]], [[0.0] * 4] * 2, [1.0, -3.0],
         mask(".xxx", ".x.."), [[0.0, 0.9, 0.1, 0.2], [0.0, 0.3, 0.0, 0.0]]),
    expect=mask("..xx", ".x.."))
add("clip_cov_mask/empty-mask-row",
    "a row with no valid token (finite values there) keeps nothing and adds nothing to N or the means",
    _cov("clip_cov_mask", CC_LP + [[-0.5, -9.0, -0.5, -9.0, -0.5, -9.0]], CC_D0 * 2, CC_A + [[5.0, -5.0, 5.0, -5.0, 5.0, -5.0]],
         mask(".xxxxx", "......"), CC_DRAWS + [[0.0] * 6]),
    expect=mask(".xxx.x", "......"))
add("clip_cov_mask/no-valid-token",
    "no valid token in the batch: all False",
    _cov("clip_cov_mask", CC_LP, CC_D0, CC_A, mask("......"), CC_DRAWS), expect=mask("......"))
add("clip_cov_mask/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logp, old_logp, advantages and draws at masked positions change nothing",
    lambda: build("clip_cov_mask", {
        "logp": f64([[nan, -1.0, -3.0, inf, -1.0, -3.0, -2.0]]),
        "old_logp": f64([[-inf, -1.0, -3.0, nan, -1.0, -3.0, -2.0]]),
        "advantages": f64([[1e30, 2.0, 2.0, nan, -2.0, -2.0, 0.0]]),
        "mask": mask(".xx.xxx"),
        "draws": f64([[nan, 0.7, 0.1, -inf, 0.3, 0.5, 0.9]]),
    }, {}),
    expect=mask(".xx.x.x"))


CLIP_COV_MASK = Quantity(
    "clip_cov_mask",
    "select.clip_cov",
    returns="`[B,T]` bool (True = kept; no `_grad`)",
    args=(
        Arg("logp", "[B, T]", "token"), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
        Arg("draws", "[B, T]", "token"),
    ),
    keywords=(FRACTION(0.0002), COV_LOW(1.0), COV_HIGH(5.0), EPS_LOW(0.2), EPS_HIGH(0.2)),
    inputs=_clip_cov_mask_inputs,
    output="mask",
    invariants=("mask", "on_policy"),
    question=("fraction", "cov_low", "cov_high", "eps_low", "eps_high"),
    well_conditioned=_clip_cov_conditioned,
    golden=entries("clip_cov_mask"),
    golden_seeds=(2, 4, 8),  # seeds whose draws cut a token (most seeds of 3-8 valid tokens cut none)
)


# ---------------------------------------------------------------------------------------------------
# kl_cov_token_loss (loss.kl_cov)
# ---------------------------------------------------------------------------------------------------


def _kl_cov_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    return (
        _covariance_args(rng),
        {"fraction": float(rng.choice([2e-4, 0.1, 0.25, 0.5, 1.0])), "coef": float(rng.choice([0.1, 1.0, 2.5]))},
    )


def _kl_cov_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """KL-Cov's top n: the n-th and (n+1)-th largest covariances apart (no near tie at the cut). The
    |log-ratio| kink at 0 needs none: the sign of a difference of two rounded inputs is exact."""
    if not args["mask"].any():
        return True
    cov = np.sort(_covariance(args))[::-1]
    n = max(1, int(kw.get("fraction", 2e-4) * cov.size))
    return n >= cov.size or cov[n - 1] - cov[n] > MARGIN * max(1.0, abs(cov[n - 1]))


# KL-Cov: A = 2, 2, -2, -2, 0 and logp = -1, -3, -2, -4, -5 (means 0 and -3): covariances 4, 0, -2, 2, 0
KC_LP = [[-4.0, -1.0, -3.0, -2.0, -4.0, -5.0]]
KC_D = f64([[0.0, 0.5, -0.25, 0.25, -0.5, 1.0]])
KC_PG = where(CC_M, -f64(CC_A) * np.exp(KC_D))  # -A e^d at every valid token


def _kl_cov_expect(selected: np.ndarray, coef: float, d: np.ndarray = KC_D, pg: np.ndarray = KC_PG):
    """(loss, gradient factor) of KL-Cov on the design above: -A e^d plus coef |d| (gradient coef sign d) on
    the selected tokens."""
    return pg + np.where(selected, coef * np.abs(d), 0.0), pg + np.where(selected, coef * np.sign(d), 0.0)


add("kl_cov_token_loss/default-one-token",
    "defaults (fraction 2e-4, coef 0.1): n = 1, the largest covariance (4, t = 1) carries 0.1 |d|; every "
    "token carries the unclipped -A e^d",
    _cov("kl_cov_token_loss", KC_LP, KC_D, CC_A, CC_M),
    expect=_kl_cov_expect(mask(".x...."), 0.1)[0], grad_factor=_kl_cov_expect(mask(".x...."), 0.1)[1])
add("kl_cov_token_loss/two-of-five",
    "fraction 0.4, N = 5: n = 2, covariances 4 and 2 (t = 1, 4) carry coef |d| (coef 1)",
    _cov("kl_cov_token_loss", KC_LP, KC_D, CC_A, CC_M, fraction=0.4, coef=1.0),
    expect=_kl_cov_expect(mask(".x..x."), 1.0)[0], grad_factor=_kl_cov_expect(mask(".x..x."), 1.0)[1])
add("kl_cov_token_loss/tie-at-the-cut",
    "fraction 0.6: n = 3: covariances 4 and 2, then 0 at t = 2 and t = 5 (a tie): the earlier, t = 2",
    _cov("kl_cov_token_loss", KC_LP, KC_D, CC_A, CC_M, fraction=0.6, coef=1.0),
    expect=_kl_cov_expect(mask(".xx.x."), 1.0)[0], grad_factor=_kl_cov_expect(mask(".xx.x."), 1.0)[1])
add("kl_cov_token_loss/fraction-one",
    "fraction 1: every valid token is penalised, negative covariances included",
    _cov("kl_cov_token_loss", KC_LP, KC_D, CC_A, CC_M, fraction=1.0, coef=0.5),
    expect=_kl_cov_expect(CC_M, 0.5)[0], grad_factor=_kl_cov_expect(CC_M, 0.5)[1])
add("kl_cov_token_loss/equal-covariances-row-major",
    "one advantage for the whole batch: every covariance is exactly 0; n = 2 of 4: the first two valid "
    "tokens in row-major order (row 0) carry |d|",
    _cov("kl_cov_token_loss", [[-4.0, -1.0, -2.0], [-4.0, -3.0, -5.0]], [[0.0, 0.5, -0.5], [0.0, 0.25, -0.25]],
         [1.0, 1.0], mask(".xx", ".xx"), fraction=0.5, coef=1.0),
    expect=where(mask(".xx", ".xx"), -np.exp(f64([[0.0, 0.5, -0.5], [0.0, 0.25, -0.25]]))
                 + f64([[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])),
    grad_factor=where(mask(".xx", ".xx"), -np.exp(f64([[0.0, 0.5, -0.5], [0.0, 0.25, -0.25]]))
                      + f64([[0.0, 1.0, -1.0], [0.0, 0.0, 0.0]])))
add("kl_cov_token_loss/on-policy",
    "d = 0: L = -A; the selected tokens' |d| is 0 and so is its gradient (sign(0) = 0): gradient -A",
    _cov("kl_cov_token_loss", KC_LP, CC_D0, CC_A, CC_M, fraction=0.4, coef=1.0),
    expect=where(CC_M, -f64(CC_A)), grad_factor=where(CC_M, -f64(CC_A)))
add("kl_cov_token_loss/advantages-per-sequence",
    "[B] advantages 1 and -3 on rows of 3 and 1 valid tokens: the mean is over tokens (0, not -1): "
    "covariances 3, 1, -1 and 9, the single penalised token is row 1's",
    _cov("kl_cov_token_loss", [[-4.0, -1.0, -3.0, -5.0], [-4.0, -7.0, -4.0, -4.0]],
         [[0.0, 0.1, 0.2, -0.3], [0.0, 0.4, 0.0, 0.0]], [1.0, -3.0], mask(".xxx", ".x.."), coef=1.0),
    grad_factor=where(mask(".xxx", ".x.."), [[0.0, -np.exp(0.1), -np.exp(0.2), -np.exp(-0.3)],
                                             [0.0, 3.0 * np.exp(0.4) + 1.0, 0.0, 0.0]]))
add("kl_cov_token_loss/zero-advantage-overflowing-ratio",
    "A = 0 with d = 800 (ratio inf), not selected: loss 0 and gradient 0, never NaN; covariances 2, 0, 3",
    _cov("kl_cov_token_loss", [[-4.0, -1.0, -2.0, -6.0]], [[0.0, 0.1, 800.0, -0.2]], [[0.0, 1.0, 0.0, -1.0]],
         mask(".xxx")),
    expect=where(mask(".xxx"), [[0.0, -np.exp(0.1), 0.0, np.exp(-0.2) + 0.1 * 0.2]]),
    grad_factor=where(mask(".xxx"), [[0.0, -np.exp(0.1), 0.0, np.exp(-0.2) - 0.1]]))
add("kl_cov_token_loss/empty-mask-row",
    "a row with no valid token (finite values there) is 0 with a zero gradient and adds nothing to N or the means",
    _cov("kl_cov_token_loss", KC_LP + [[-0.5, -9.0, -0.5, -9.0, -0.5, -9.0]], np.vstack([KC_D, KC_D]),
         CC_A + [[5.0, -5.0, 5.0, -5.0, 5.0, -5.0]], mask(".xxxxx", "......")),
    expect=np.vstack([_kl_cov_expect(mask(".x...."), 0.1)[0], np.zeros((1, 6))]))
add("kl_cov_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    lambda: build("kl_cov_token_loss", {"logp": f64([[nan, -1.0, inf, -1.5, -3.0]]),
                                        "old_logp": f64([[1e30, -1.1, nan, -1.5, -2.0]]),
                                        "advantages": f64([[nan, 1.0, 1e30, -1.0, 2.0]]), "mask": mask(".x.xx")},
                  {"fraction": 0.5, "coef": 1.0}))


KL_COV_TOKEN_LOSS = Quantity(
    "kl_cov_token_loss",
    "loss.kl_cov",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(FRACTION(0.0002), KL_COV_COEF(0.1)),
    inputs=_kl_cov_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("fraction", "coef"),
    well_conditioned=_kl_cov_conditioned,
    golden=entries("kl_cov_token_loss"),
    golden_seeds=(3, 6, 8),
    # N = 10: SkyRL's fraction 0.2 penalises the two largest covariances (3.6, 2.4), verl's 2e-4 only the first
    preset_inputs=lambda preset, **kw: _cov(
        "kl_cov_token_loss", [[-4.0, -1.0, -2.0, -3.0, -4.0, -5.0], [-4.0, -1.5, -2.5, -3.5, -4.5, -7.0]],
        [[0.0, 0.3, -0.2, 0.1, 0.2, -0.1], [0.0, 0.2, 0.1, -0.3, 0.4, -0.5]], [1.0, -1.0], mask(".xxxxx", ".xxxxx"), **kw),
    # -A r has no clip: e^100 overflows float32 and bfloat16 for either sign of A; with A = 0 only the
    # |d| penalty is left (not 0): finite
    extremes=Extremes(log_ratio_keywords=({}, {"fraction": 0.5, "coef": 1.0}),
                      log_ratio_bounded=lambda keywords, advantage_kind, dtype: (advantage_kind == "zero"
                                                                                 or dtype == "float64"),
                      zero_advantage_vanishes=False),
)


RECORDS = (CLIP_COV_MASK, KL_COV_TOKEN_LOSS)
