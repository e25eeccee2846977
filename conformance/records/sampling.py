"""Records of the sampling distribution an inference engine draws from (logprob.sampling): the log-probs
under the tempered, min-p / top-k / top-p truncated distribution, the log of the kept mass, and the log-probs
renormalised over a support the engine recorded (the keep sampling mask)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, EOS, build, f64, grid, i64, inf, mask, nan, where
from conformance.records.conditioning import MARGIN
from conformance.records.inputs import Inputs, batch_dims, logits_like, ragged_mask, temperature, token_ids
from conformance.records.keywords import MIN_P, TEMPERATURE, TOP_K, TOP_P
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# the generator's view of the support: which tokens may be drawn, and how far each cut is from a token
# ---------------------------------------------------------------------------------------------------


def support_margin(z: np.ndarray, kw: dict[str, Any]) -> tuple[np.ndarray, float]:
    """For one logits row: the kept tokens (bool [V]) and the smallest relative distance of any token to a
    cut (min-p threshold, k-th logit, top-p mass), +inf when no cut applies. Sorting-based, unlike the
    oracle's token-by-token definition."""
    a = z / kw.get("temperature", 1.0)
    p = np.exp(a - a.max())
    p /= p.sum()
    keep = np.ones(z.shape, dtype=bool)
    gap = np.inf
    min_p = kw.get("min_p", 0.0)
    if min_p > 0:
        r = p / p.max()
        keep = r >= min_p
        gap = min(gap, float(np.min(np.abs(r - min_p))) / min_p)
    k = kw.get("top_k", 0)
    if 0 < k < keep.sum():
        kept = np.sort(z[keep])[::-1]
        gap = min(gap, float(kept[k - 1] - kept[k]) / max(1.0, abs(float(kept[k]))))
        keep &= z >= kept[k - 1]
    top_p = kw.get("top_p", 1.0)
    if top_p < 1.0:
        q = np.where(keep, p, 0.0)
        q /= q.sum()
        order = np.argsort(-q, kind="stable")
        above = np.concatenate([[0.0], np.cumsum(q[order])[:-1]])
        gap = min(gap, float(np.min(np.abs(above[keep[order]] - top_p))))
        kept = np.zeros_like(keep)
        kept[order] = above < top_p
        keep &= kept
    return keep, gap


def _keywords(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "temperature": temperature(rng),
        "top_k": int(rng.choice([0, 0, 1, 2, 3, 5])),
        "top_p": float(rng.choice([1.0, 1.0, 0.95, 0.8, 0.5])),
        "min_p": float(rng.choice([0.0, 0.0, 0.05, 0.2])),
    }


def _rows(mask: np.ndarray):
    for b, t in zip(*np.nonzero(mask)):
        yield int(b), int(t)


def sampling_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """No valid position has a token within rounding distance of a cut (the support would differ between
    precisions)."""
    z, m = args["logits"], args["mask"]
    return all(support_margin(np.asarray(z[b, t - 1], dtype=np.float64), kw)[1] > MARGIN for b, t in _rows(m))


# ---------------------------------------------------------------------------------------------------
# sampling_logprobs (logprob.sampling)
# ---------------------------------------------------------------------------------------------------


def _sampling_logprobs_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 13))
    m = ragged_mask(rng, B, T)
    z = logits_like(rng, (B, T, V))
    kw = _keywords(rng)
    ids = token_ids(rng, m, V)
    for b, t in _rows(m):  # a token the sampler can draw: inside the kept support
        keep, _ = support_margin(z[b, t - 1], kw)
        ids[b, t] = int(rng.choice(np.flatnonzero(keep)))
    return {"logits": z, "input_ids": ids, "mask": m}, kw


def _slp(logits, ids, m, **kw):
    return lambda: build("sampling_logprobs", {"logits": f64(logits), "input_ids": i64(ids), "mask": m}, kw)


L = np.log
# one row z = log p: softmax(z) = p when p sums to 1
P532 = [[L(0.5), L(0.3), L(0.2)]]

add("sampling_logprobs/top-p-keeps-the-crossing-token",
    "p = (0.5, 0.3, 0.2), top_p = 0.7: 0.5 < 0.7 above the 0.3 token keeps it, 0.8 above the 0.2 token drops "
    "it; the 0.3 token gets log(0.3 / 0.8)",
    _slp([P532 * 2], [[0, 1]], mask(".x"), top_p=0.7),
    expect=where(mask(".x"), [[0.0, L(0.3 / 0.8)]]))
add("sampling_logprobs/top-p-one-token-support",
    "p = (0.5, 0.3, 0.2), top_p = 0.5: only the most probable token is kept; its log-prob is 0",
    _slp([P532 * 2], [[0, 0]], mask(".x"), top_p=0.5),
    expect=np.zeros((1, 2)))
add("sampling_logprobs/top-k-ties-kept",
    "z = (1, 1, 1, 0), top_k = 1: the three tied maxima are all kept, log(1/3) each",
    _slp([[[1.0, 1.0, 1.0, 0.0]] * 2], [[0, 2]], mask(".x"), top_k=1),
    expect=where(mask(".x"), [[0.0, L(1.0 / 3.0)]]))
add("sampling_logprobs/top-k-before-top-p",
    "p = (0.5, 0.3, 0.2), top_k = 2 then top_p = 0.6 on the renormalised (0.625, 0.375): the second token is "
    "dropped (0.625 >= 0.6), the first gets 0",
    _slp([P532 * 2], [[0, 0]], mask(".x"), top_k=2, top_p=0.6),
    expect=np.zeros((1, 2)))
add("sampling_logprobs/min-p",
    "p = (0.5, 0.3, 0.2), min_p = 0.5: keep p >= 0.25, so the 0.2 token goes; log(0.3 / 0.8)",
    _slp([P532 * 2], [[0, 1]], mask(".x"), min_p=0.5),
    expect=where(mask(".x"), [[0.0, L(0.3 / 0.8)]]))
add("sampling_logprobs/temperature-then-truncation",
    "T = 0.5 on z = log(0.5, 0.3, 0.2) gives p ∝ (0.25, 0.09, 0.04); top_k = 2 keeps the first two; "
    "token 0 gets log(0.25 / 0.34)",
    _slp([P532 * 2], [[0, 0]], mask(".x"), temperature=0.5, top_k=2),
    expect=where(mask(".x"), [[0.0, L(0.25 / 0.34)]]))
add("sampling_logprobs/no-truncation-is-token-logprobs",
    "top_k = 0, top_p = 1, min_p = 0 at T = 0.7: exactly logprob.token",
    _slp(grid((2, 5, 4), 2.0), [[1, 2, 3, 1, EOS], [2, 1, 1, 3, 2]], mask("..xxx", ".xxx."), temperature=0.7))
add("sampling_logprobs/token-outside-the-support",
    "a token the sampler could not have drawn (top_k = 1 keeps token 0 only): -inf, no gradient",
    _slp([P532 * 3], [[0, 0, 2]], mask(".xx"), top_k=1),
    expect=where(mask(".xx"), [[0.0, 0.0, -inf]]))
add("sampling_logprobs/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logits rows that predict no valid token change nothing",
    lambda: build("sampling_logprobs", {
        "logits": f64([[[nan, 0.0, 1.0], [0.2, -0.4, 1.0], [inf, -inf, 1e30], [1.0, 0.5, 0.0], [0.0, 0.0, 0.0]]]),
        "input_ids": i64([[0, 2, 1, 999, 1]]), "mask": mask("..x.x")}, {"top_p": 0.9, "temperature": 0.8}))
add("sampling_logprobs/empty-mask-row",
    "a row with no valid token is all 0",
    _slp(grid((2, 4, 3), phase=2), [[1, 2, 0, 1], [1, 1, 1, 1]], mask(".xx.", "...."), top_k=2))


SAMPLING_LOGPROBS = Quantity(
    "sampling_logprobs",
    "logprob.sampling",
    returns="`[B,T]` (log-prob under the truncated tempered sampler; −inf for a token outside its support)",
    args=(
        Arg("logits", "[B, T, V]", "logits", grad=True), Arg("input_ids", "[B, T] int", "ids"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(TEMPERATURE(1.0), TOP_K(0), TOP_P(1.0), MIN_P(0.0)),
    inputs=_sampling_logprobs_inputs,
    question=("temperature", "top_k", "top_p", "min_p"),
    well_conditioned=sampling_conditioned,
    golden=entries("sampling_logprobs"),
    golden_seeds=(1, 4, 7),
)


# ---------------------------------------------------------------------------------------------------
# sampling_log_mass (logprob.sampling, the kept mass)
# ---------------------------------------------------------------------------------------------------


def _sampling_log_mass_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 13))
    return {"logits": logits_like(rng, (B, T, V)), "mask": ragged_mask(rng, B, T)}, _keywords(rng)


def _mass(logits, m, **kw):
    return lambda: build("sampling_log_mass", {"logits": f64(logits), "mask": m}, kw)


add("sampling_log_mass/top-p",
    "p = (0.5, 0.3, 0.2), top_p = 0.7 keeps 0.8 of the mass: log 0.8",
    _mass([P532 * 2], mask(".x"), top_p=0.7),
    expect=where(mask(".x"), [[0.0, L(0.8)]]))
add("sampling_log_mass/top-k-under-temperature",
    "T = 0.5, top_k = 2 on p = (0.5, 0.3, 0.2): tempered p ∝ (0.25, 0.09, 0.04), kept 0.34 / 0.38",
    _mass([P532 * 2], mask(".x"), temperature=0.5, top_k=2),
    expect=where(mask(".x"), [[0.0, L(0.34 / 0.38)]]))
add("sampling_log_mass/no-truncation",
    "no truncation keeps all the mass: 0",
    _mass(grid((1, 5, 4), 2.0), mask("..xxx"), temperature=0.7),
    expect=np.zeros((1, 5)))
add("sampling_log_mass/empty-mask-row",
    "a row with no valid token is all 0",
    _mass(grid((2, 4, 3), phase=2), mask(".xx.", "...."), top_k=1))


SAMPLING_LOG_MASS = Quantity(
    "sampling_log_mass",
    "logprob.sampling",
    returns="`[B,T]` (log S ≤ 0, the tempered mass the sampler keeps)",
    args=(Arg("logits", "[B, T, V]", "logits", grad=True), Arg("mask", "[B, T] bool", "mask")),
    keywords=(TEMPERATURE(1.0), TOP_K(0), TOP_P(1.0), MIN_P(0.0)),
    inputs=_sampling_log_mass_inputs,
    question=("temperature", "top_k", "top_p", "min_p"),
    well_conditioned=sampling_conditioned,
    golden=entries("sampling_log_mass"),
    golden_seeds=(2, 5, 9),
)



# ---------------------------------------------------------------------------------------------------
# support_logprobs (logprob.sampling under a given support: the engine's kept set, re-applied)
# ---------------------------------------------------------------------------------------------------


def _support_logprobs_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 13))
    m = ragged_mask(rng, B, T)
    z = logits_like(rng, (B, T, V))
    ids = token_ids(rng, m, V)
    support = rng.random((B, T, V)) < rng.choice([0.3, 0.6, 1.0])  # any subset: another engine's cut
    for b, t in _rows(m):  # the sampled token is inside the set it was drawn from
        support[b, t, ids[b, t]] = True
    return {"logits": z, "input_ids": ids, "mask": m, "support": support}, {"temperature": temperature(rng)}


def _sup(logits, ids, m, support, **kw):
    return lambda: build("support_logprobs", {"logits": f64(logits), "input_ids": i64(ids), "mask": m,
                                              "support": np.asarray(support, dtype=bool)}, kw)


ALL3, NONE3 = [True, True, True], [False, False, False]

add("support_logprobs/the-engines-support-not-the-trainers",
    "p = (0.5, 0.3, 0.2) on the trainer's side, the engine kept {1, 2} (its own logits differed): token 1 is "
    "renormalised over the engine's set, log(0.3 / 0.5), though the trainer's own top-k = 2 would keep {0, 1}",
    _sup([P532 * 2], [[0, 1]], mask(".x"), [[ALL3, [False, True, True]]]),
    expect=where(mask(".x"), [[0.0, L(0.3 / 0.5)]]))
add("support_logprobs/its-own-kept-support-is-sampling-logprobs",
    "the kept support of top_p = 0.7 on p = (0.5, 0.3, 0.2) is {0, 1}: log(0.3 / 0.8), sampling_logprobs' value",
    _sup([P532 * 2], [[0, 1]], mask(".x"), [[ALL3, [True, True, False]]]),
    expect=where(mask(".x"), [[0.0, L(0.3 / 0.8)]]))
add("support_logprobs/all-kept-is-token-logprobs",
    "an all-True support at T = 0.7: exactly logprob.token",
    _sup(grid((2, 5, 4), 2.0), [[1, 2, 3, 1, EOS], [2, 1, 1, 3, 2]], mask("..xxx", ".xxx."),
         np.ones((2, 5, 4), dtype=bool), temperature=0.7))
add("support_logprobs/one-token-support",
    "a support of the sampled token alone: log-prob 0 whatever the logits",
    _sup([P532 * 2], [[0, 2]], mask(".x"), [[ALL3, [False, False, True]]]),
    expect=np.zeros((1, 2)))
add("support_logprobs/temperature-inside-the-support",
    "T = 0.5 on z = log(0.5, 0.3, 0.2): p ∝ (0.25, 0.09, 0.04); support {0, 2}: token 0 gets log(0.25 / 0.29)",
    _sup([P532 * 2], [[0, 0]], mask(".x"), [[ALL3, [True, False, True]]], temperature=0.5),
    expect=where(mask(".x"), [[0.0, L(0.25 / 0.29)]]))
add("support_logprobs/token-outside-the-support",
    "a token outside the set it was supposedly drawn from: -inf, no gradient",
    _sup([P532 * 3], [[0, 0, 2]], mask(".xx"), [[ALL3, [True, False, False], [True, True, False]]]),
    expect=where(mask(".xx"), [[0.0, 0.0, -inf]]))
add("support_logprobs/nonfinite-and-empty-support-at-masked",
    "NaN, +-inf and 1e30 in logits rows that predict no valid token, and empty supports at masked positions, "
    "change nothing",
    lambda: build("support_logprobs", {
        "logits": f64([[[nan, 0.0, 1.0], [0.2, -0.4, 1.0], [inf, -inf, 1e30], [1.0, 0.5, 0.0], [0.0, 0.0, 0.0]]]),
        "input_ids": i64([[0, 2, 1, 999, 1]]), "mask": mask("..x.x"),
        "support": np.array([[NONE3, NONE3, [False, True, True], NONE3, [True, True, False]]])},
        {"temperature": 0.8}))
add("support_logprobs/empty-mask-row",
    "a row with no valid token is all 0",
    _sup(grid((2, 4, 3), phase=2), [[1, 2, 0, 1], [1, 1, 1, 1]], mask(".xx.", "...."),
         np.ones((2, 4, 3), dtype=bool)))


SUPPORT_LOGPROBS = Quantity(
    "support_logprobs",
    "logprob.sampling",
    returns="`[B,T]` (log-prob renormalised over the given support; −inf for a token outside it)",
    args=(
        Arg("logits", "[B, T, V]", "logits", grad=True), Arg("input_ids", "[B, T] int", "ids"),
        Arg("mask", "[B, T] bool", "mask"), Arg("support", "[B, T, V] bool", "support"),
    ),
    keywords=(TEMPERATURE(1.0),),
    inputs=_support_logprobs_inputs,
    question=("temperature",),
    golden=entries("support_logprobs"),
    golden_seeds=(3, 6, 8),
)


RECORDS = (SAMPLING_LOGPROBS, SAMPLING_LOG_MASS, SUPPORT_LOGPROBS)
