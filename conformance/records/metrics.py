"""Records of the training metrics with a spec: the PPO clip indicator (metric.clip) and the engine-trainer
mismatch metrics (metric.mismatch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, M5, M6, build, f64, inf, mask, nan, policy_case, where
from conformance.records.conditioning import ppo_conditioned
from conformance.records.inputs import Inputs, advantages_like, batch_dims, logprobs_like, ragged_mask
from conformance.records.keywords import (
    DUAL_CLIP, EPS_HIGH, EPS_LOW, LOG_RATIO_CLAMP, MISMATCH, MISMATCH_AGG, SEQUENCE_MISMATCH,
)
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


# ---------------------------------------------------------------------------------------------------
# mismatch_metric (metric.mismatch)
# ---------------------------------------------------------------------------------------------------

def _mismatch_args(rng: np.random.Generator) -> dict[str, Any]:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    old_logp = logprobs_like(rng, (B, T))
    # an engine's log-probs of the same tokens: bf16-sized noise up to a stale policy's
    rollout_logp = old_logp + rng.normal(0.0, float(rng.choice([0.01, 0.1, 0.5])), size=(B, T))
    return {"old_logp": old_logp, "rollout_logp": rollout_logp, "mask": mask}


def _mismatch_inputs(rng: np.random.Generator) -> Inputs:
    return (_mismatch_args(rng), {"metric": str(rng.choice(MISMATCH.choices)),
                                  "agg": str(rng.choice(MISMATCH_AGG.choices)),
                                  "log_ratio_clamp": rng.choice([None, 20.0])})


def _sequence_mismatch_inputs(rng: np.random.Generator) -> Inputs:
    return (_mismatch_args(rng), {"metric": str(rng.choice(SEQUENCE_MISMATCH.choices)),
                                  "log_ratio_clamp": rng.choice([None, 20.0])})


def _mm(function, delta, m, old=-2.0, **kw):
    delta = f64(delta)
    old_logp = np.full(delta.shape, old)
    return lambda: build(function, {"old_logp": old_logp, "rollout_logp": old_logp - delta, "mask": m}, kw)


def _tok(delta, m, **kw):
    return _mm("mismatch_metric", delta, m, **kw)


def _seq(delta, m, **kw):
    return _mm("sequence_mismatch_metric", delta, m, **kw)


# δ = old − rollout: row 0 has (0.2, -0.4) on two tokens, row 1 has (0.6) on one, row 2 none
D3 = [[0.0, 0.2, -0.4, 0.0], [0.0, 0.6, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
M3 = mask(".xx.", ".x..", "....")
E = np.exp
add("mismatch_metric/kl-token-mean",
    "kl = token mean of rollout − old = −(0.2 − 0.4 + 0.6) / 3; the empty row counts nothing",
    _tok(D3, M3, metric="kl"), expect=-0.4 / 3)
add("mismatch_metric/kl-seq-mean-token-mean",
    "agg seq_mean_token_mean: rows (−(−0.2)/2 = 0.1, −0.6) averaged over the two rows with a token: −0.25",
    _tok(D3, M3, metric="kl", agg="seq_mean_token_mean"), expect=-0.25)
add("mismatch_metric/k3",
    "k3 = mean of e^δ − δ − 1 over the three tokens",
    _tok(D3, M3, metric="k3_kl"), expect=((E(0.2) - 1.2) + (E(-0.4) - 0.6) + (E(0.6) - 1.6)) / 3)
add("mismatch_metric/chi2-token",
    "χ² token: mean ρ² − 1 = (e^0.4 + e^−0.8 + e^1.2) / 3 − 1",
    _tok(D3, M3, metric="chi2_token"), expect=(E(0.4) + E(-0.8) + E(1.2)) / 3 - 1.0)
add("mismatch_metric/chi2-token-clamped",
    "log_ratio_clamp 20 (verl's SAFETY_BOUND) bounds δ = 30 and −50: (e^40 + e^−40) / 2 − 1",
    _tok([[0.0, 30.0, -50.0]], mask(".xx"), metric="chi2_token", log_ratio_clamp=20.0),
    expect=(E(40.0) + E(-40.0)) / 2 - 1.0)
add("mismatch_metric/token-mult-prob-error",
    "NeMo-RL: token mean of e^|δ| = (e^0.2 + e^0.4 + e^0.6) / 3",
    _tok(D3, M3, metric="token_mult_prob_error"), expect=(E(0.2) + E(0.4) + E(0.6)) / 3)
add("mismatch_metric/logprob-abs-diff-per-sample",
    "slime: per-sample mean of |δ| averaged over samples = ((0.2 + 0.4)/2 + 0.6) / 2 = 0.45 (token mean 0.4)",
    _tok(D3, M3, metric="logprob_abs_diff", agg="seq_mean_token_mean"), expect=0.45)
add("mismatch_metric/on-policy",
    "equal log-probs: k3 0 (and kl, χ², |δ| 0; token_mult_prob_error 1)",
    _tok([[0.0] * 4] * 2, mask(".xxx", ".x.."), metric="k3_kl"), expect=0.0)
add("mismatch_metric/no-valid-token",
    "a batch without a valid token is 0, also for χ² (not −1)",
    _tok([[0.0, 0.3], [0.0, -0.2]], mask("..", ".."), metric="chi2_token"), expect=0.0)
add("mismatch_metric/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in either log-prob at masked positions change nothing",
    lambda: build("mismatch_metric", {
        "old_logp": f64([[nan, -1.0, inf, -1.5, 1e30]]),
        "rollout_logp": f64([[-inf, -1.2, nan, -1.0, -2.0]]),
        "mask": mask(".x.x."),
    }, {"metric": "chi2_token"}),
    expect=float((E(0.4) + E(-1.0)) / 2 - 1.0))

add("sequence_mismatch_metric/chi2-seq",
    "χ² sequence: mean over rows of (Π ρ)² − 1 = (e^{2·(−0.2)} + e^{1.2}) / 2 − 1",
    _seq(D3, M3, metric="chi2_seq"), expect=(E(-0.4) + E(1.2)) / 2 - 1.0)
add("sequence_mismatch_metric/chi2-seq-clamped",
    "log_ratio_clamp 20 (verl's SAFETY_BOUND) bounds the rows' Σδ = 30 and −50: (e^40 + e^−40) / 2 − 1",
    _seq([[0.0, 30.0], [0.0, -50.0]], mask(".x", ".x"), metric="chi2_seq", log_ratio_clamp=20.0),
    expect=(E(40.0) + E(-40.0)) / 2 - 1.0)
add("sequence_mismatch_metric/log-ppl-diff",
    "log PPL_train − log PPL_rollout per row = −mean δ: (0.1, −0.6), mean −0.25; the empty row left out",
    _seq(D3, M3, metric="log_ppl_diff"), expect=-0.25)
add("sequence_mismatch_metric/log-ppl-abs-diff",
    "the rows' |−mean δ| = (0.1, 0.6) averaged: 0.35",
    _seq(D3, M3, metric="log_ppl_abs_diff"), expect=0.35)
add("sequence_mismatch_metric/ppl-ratio",
    "PPL_train / PPL_rollout per row = e^{−mean δ}: (e^0.1 + e^−0.6) / 2",
    _seq(D3, M3, metric="ppl_ratio"), expect=(E(0.1) + E(-0.6)) / 2)
add("sequence_mismatch_metric/on-policy",
    "equal log-probs: ppl_ratio 1",
    _seq([[0.0] * 4] * 2, mask(".xxx", ".x.."), metric="ppl_ratio"), expect=1.0)
add("sequence_mismatch_metric/no-valid-token",
    "a batch without a valid token is 0",
    _seq([[0.0, 0.3], [0.0, -0.2]], mask("..", ".."), metric="ppl_ratio"), expect=0.0)
add("sequence_mismatch_metric/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in either log-prob at masked positions change nothing",
    lambda: build("sequence_mismatch_metric", {
        "old_logp": f64([[nan, -1.0, inf, -1.5, 1e30]]),
        "rollout_logp": f64([[-inf, -1.2, nan, -1.0, -2.0]]),
        "mask": mask(".x.x."),
    }, {"metric": "chi2_seq"}),
    expect=float(E(2 * (0.2 - 0.5)) - 1.0))

_MISMATCH_ARGS = (
    Arg("old_logp", "[B, T]", "token", constant=True),
    Arg("rollout_logp", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask"),
)

MISMATCH_METRIC = Quantity(
    "mismatch_metric",
    "metric.mismatch",
    returns="scalar: a token statistic of δ = old_logp − rollout_logp aggregated over the batch (a constant)",
    args=_MISMATCH_ARGS,
    keywords=(MISMATCH("kl"), MISMATCH_AGG("token_mean"), LOG_RATIO_CLAMP(None)),
    inputs=_mismatch_inputs,
    output="scalar",
    question=("metric", "agg"),
    variants={"log_ratio_clamp": (None, 20.0)},
    golden=entries("mismatch_metric"),
    golden_seeds=(1, 2, 3),
    # δ = 25 beyond verl's ±20 clamp of the χ² exponent
    preset_inputs=lambda preset, **kw: _tok([[0.0, 25.0, 0.3, -0.2], [0.0, 0.1, -0.4, 0.0]], mask(".xxx", ".xx."),
                                            **{"metric": "chi2_token", **kw}),
)

SEQUENCE_MISMATCH_METRIC = Quantity(
    "sequence_mismatch_metric",
    "metric.mismatch",
    returns="scalar: a per-row value of δ averaged over the rows with a valid token (a constant)",
    args=_MISMATCH_ARGS,
    keywords=(SEQUENCE_MISMATCH("log_ppl_diff"), LOG_RATIO_CLAMP(None)),
    inputs=_sequence_mismatch_inputs,
    output="scalar",
    question=("metric",),
    variants={"log_ratio_clamp": (None, 20.0)},
    golden=entries("sequence_mismatch_metric"),
    golden_seeds=(1, 2, 3),
    # a row whose Σδ = 24.3 passes verl's ±20 clamp of the χ² exponent
    preset_inputs=lambda preset, **kw: _seq([[0.0, 25.0, 0.3, -1.0], [0.0, 0.1, -0.4, 0.0]], mask(".xxx", ".xx."),
                                            **{"metric": "chi2_seq", **kw}),
)


RECORDS = (PPO_CLIPPED_MASK, MISMATCH_METRIC, SEQUENCE_MISMATCH_METRIC)
