"""Record of the PPO clip indicator (metric.clip)."""

from __future__ import annotations

import numpy as np

from conformance.records.builders import Catalogue, M5, M6, build, f64, inf, mask, nan, policy_case, where
from conformance.records.conditioning import ppo_conditioned
from conformance.records.inputs import Inputs, advantages_like, batch_dims, logprobs_like, ragged_mask
from conformance.records.keywords import DUAL_CLIP, EPS_HIGH, EPS_LOW, LOG_RATIO_CLAMP
from conformance.records.record import Arg, Extremes, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# ppo_clipped_mask (metric.clip)
# ---------------------------------------------------------------------------------------------------


def _ppo_clipped_mask_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    # log-ratios on both sides of every clip boundary, up to ratios beyond a dual clip of 3
    old_logp = logp + rng.normal(0.0, float(rng.choice([0.1, 0.3, 0.8, 1.5])), size=(B, T))
    args = {"logp": logp, "old_logp": old_logp, "advantages": advantages_like(rng, B, T), "mask": mask}
    eps_low = float(rng.choice([0.2, 0.1]))
    return (
        args,
        {
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
            "dual_clip": rng.choice([None, 3.0]),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
    )


def _clipmask(d, adv, m, **kw):
    return policy_case("ppo_clipped_mask", d, adv, m, **kw)


LN = float(np.log(1.5))
add("ppo_clipped_mask/sign-aware",
    "(ratio, A) = (1.5, +1), (0.5, +1), (0.5, -1), (1.5, -1) with eps 0.2: only the first and third "
    "are clipped (clip fraction 0.5; a sign-agnostic count gives 1.0)",
    _clipmask([[0.0, LN, -np.log(2.0), -np.log(2.0), LN]], [[0.0, 1.0, 1.0, -1.0, -1.0]], M5),
    expect=where(M5, [[0.0, 1.0, 0.0, 1.0, 0.0]]))
add("ppo_clipped_mask/dual-clip-region",
    "dual_clip 3 and A < 0: ratio 10 is capped (clipped), ratio 2.5 is not, ratio 0.5 is clipped below",
    _clipmask([[0.0, np.log(10.0), np.log(2.5), -np.log(2.0), np.log(10.0)]], [[0.0, -1.0, -1.0, -1.0, 1.0]],
              M5, dual_clip=3.0),
    expect=where(M5, [[0.0, 1.0, 0.0, 1.0, 1.0]]))
add("ppo_clipped_mask/on-policy",
    "old == current log-probs: ratio 1, nothing is clipped",
    _clipmask([[0.0] * 6], [[0.0, 1.0, -1.0, 2.0, -0.5, 0.3]], M6),
    expect=np.zeros((1, 6)))
add("ppo_clipped_mask/zero-advantage",
    "A = 0: never clipped, whatever the ratio",
    _clipmask([[0.0, 1.0, -1.0, 2.0, -2.0, 0.0]], [0.0], M6),
    expect=np.zeros((1, 6)))
add("ppo_clipped_mask/inside-range",
    "ratios inside [0.8, 1.28] (clip-higher) for both signs: nothing is clipped; 1.35 with A > 0 is",
    _clipmask([[0.0, 0.1, -0.1, 0.2, 0.3, -0.15]], [1.0], M6, eps_high=0.28),
    expect=where(M6, [[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]]))
add("ppo_clipped_mask/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logp, old_logp and advantages at masked positions change nothing",
    lambda: build("ppo_clipped_mask", {
        "logp": f64([[nan, -0.5, -1.5, inf, -0.7, 1e30]]),
        "old_logp": f64([[-inf, -1.0, -1.0, nan, -1.0, -1.0]]),
        "advantages": f64([[1e30, 1.0, -1.0, -inf, 0.5, nan]]),
        "mask": mask(".xx.x."),
    }, {}),
    expect=f64([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]]))
add("ppo_clipped_mask/empty-mask-row",
    "a row with no valid token is 0",
    _clipmask([[0.0, 1.0, -1.0, 0.5, 0.0, 0.5]] * 2, [1.0, -1.0], mask(".xxxxx", "......")),
    expect=where(mask(".xxxxx", "......"), [[0.0, 1.0, 0.0, 1.0, 0.0, 1.0], [0.0] * 6]))


PPO_CLIPPED_MASK = Quantity(
    "ppo_clipped_mask",
    "metric.clip",
    returns="`[B,T]` 0/1: the token's PPO loss is on a clipped (or dual-clip) branch; no gradient",
    args=(
        Arg("logp", "[B, T]", "token"), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(EPS_LOW(0.2), EPS_HIGH(0.2), DUAL_CLIP(None), LOG_RATIO_CLAMP(None)),
    inputs=_ppo_clipped_mask_inputs,
    invariants=("mask", "on_policy"),
    question=("eps_low", "eps_high", "dual_clip"),
    variants={"log_ratio_clamp": (None, 20.0)},
    well_conditioned=ppo_conditioned,
    golden=entries("ppo_clipped_mask"),
    golden_seeds=(1, 2, 3),
    # a 0/1 indicator: finite whatever the ratio
    extremes=Extremes(log_ratio_keywords=({}, {"dual_clip": 3.0}, {"log_ratio_clamp": 20.0}),
                      log_ratio_bounded=lambda keywords, advantage_kind, dtype: True),
)


RECORDS = (PPO_CLIPPED_MASK,)
