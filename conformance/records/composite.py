"""Records of the composite losses: the PPO + KL policy loss (loss.policy) and its rollout-corrected
form (spec v1.1 offpolicy.loss)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, M5, build, f64, inf, mask, nan
from conformance.records.conditioning import ppo_conditioned
from conformance.records.inputs import AGG_MODES, Inputs, nearby, policy_args
from conformance.records.keywords import (
    AGG_MODE, DUAL_CLIP, EPS_HIGH, EPS_LOW, KL_COEF, NORM_LENGTH, NUM_SEQS, NUM_TOKENS, POLICY_KL_ESTIMATOR,
    REJECTED, WEIGHT_KL,
)
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# policy_loss (loss.policy)
# ---------------------------------------------------------------------------------------------------


def _policy_loss_inputs(rng: np.random.Generator) -> Inputs:
    args = policy_args(rng)
    mask = args.pop("mask")
    advantages = args.pop("advantages")
    args["ref_logp"] = nearby(rng, args["logp"])
    args["advantages"] = advantages
    args["mask"] = mask
    mode = str(rng.choice(AGG_MODES))
    kwargs: dict[str, Any] = {
        "eps_low": 0.2,
        "eps_high": float(rng.choice([0.2, 0.28])),
        "dual_clip": rng.choice([None, 3.0]),
        "kl_coef": float(rng.choice([0.0, 0.04, 0.1, 1.0])),
        "kl_estimator": str(rng.choice(["k1", "k2", "k3"])),
        "mode": mode,
    }
    if mode == "seq_mean_token_sum_norm":
        kwargs["norm_length"] = float(rng.choice([mask.shape[1], 16]))
    return args, kwargs


def _pol(d_old, d_ref, adv, m, old=-4.0, **kw):
    """logp = old_logp + d_old; ref_logp = logp - d_ref (d_ref is the KL log-ratio logp - ref_logp)."""
    d_old, d_ref = f64(d_old), f64(d_ref)
    old_logp = np.full(d_old.shape, old)
    logp = old_logp + d_old
    return lambda: build("policy_loss", {
        "logp": logp, "old_logp": old_logp, "ref_logp": logp - d_ref, "advantages": f64(adv), "mask": m,
    }, kw)


add("policy_loss/on-policy",
    "old == ref == current: ratio 1, KL 0; token_mean of -A, gradient -A/N per token",
    _pol([[0.0] * 5], [[0.0] * 5], [[0.0, 1.0, -2.0, 0.5, 1.5]], M5, kl_coef=0.1),
    expect=-1.0 / 4)
add("policy_loss/kl-is-added",
    "A = 0 and ratio 1: the loss is +kl_coef * mean k3 of d = logp - ref_logp (a penalty, never a bonus)",
    _pol([[0.0] * 5], [[0.0, -1.0, 1.0, 0.5, -0.5]], [0.0], M5, kl_coef=1.0, kl_estimator="k3"),
    expect=float(np.mean(np.expm1(-f64([-1.0, 1.0, 0.5, -0.5])) + f64([-1.0, 1.0, 0.5, -0.5]))))
add("policy_loss/old-and-ref-differ",
    "the ratio is taken against old_logp (clipped at 1.2), the KL against ref_logp (k1)",
    _pol([[0.0, 0.5, 0.5, 0.0, -0.1]], [[0.0, 0.0, 0.3, -0.4, 0.2]], [1.0], M5, kl_coef=0.5, kl_estimator="k1"),
    expect=float(np.mean([-1.2 + 0.0, -1.2 + 0.15, -1.0 - 0.2, -np.exp(-0.1) + 0.1])))
add("policy_loss/seq-mean-token-mean-with-kl",
    "rows of 2 and 4 tokens, seq_mean_token_mean, k2 penalty",
    _pol([[0.0, 0.1, -0.1, 0.0, 0.0], [0.0, 0.05, 0.3, -0.3, 0.1]], [[0.0, 0.5, -0.5, 0.0, 0.0], [0.0, 1.0, 0.2, 0.0, -0.6]],
         [1.0, -0.5], mask(".xx..", ".xxxx"), kl_coef=0.04, kl_estimator="k2", mode="seq_mean_token_mean"))
add("policy_loss/dual-clip",
    "dual_clip 3 with A < 0 and ratio e^1.5 > 3: the capped token has loss 3 and no gradient",
    _pol([[0.0, 1.5, 0.1, -0.3, 0.0]], [[0.0, 0.2, 0.2, 0.2, 0.2]], [-1.0], M5, dual_clip=3.0, kl_coef=0.1, kl_estimator="k3"))
add("policy_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions of every input change nothing",
    lambda: build("policy_loss", {
        "logp": f64([[nan, -0.9, -1.5, inf, -0.7, 1e30]]),
        "old_logp": f64([[-inf, -1.0, -1.0, nan, -1.0, -1.0]]),
        "ref_logp": f64([[1e30, -1.2, -1.4, -inf, -0.5, nan]]),
        "advantages": f64([[1e30, 1.0, -1.0, -inf, 0.5, nan]]),
        "mask": mask(".xx.x."),
    }, {"kl_coef": 0.1, "kl_estimator": "k3"}))
add("policy_loss/empty-mask-row",
    "a row with no valid token adds nothing and counts in S for seq_mean_token_sum",
    _pol([[0.0, 0.1, -0.2, 0.3, 0.0]] * 2, [[0.0, 0.3, 0.3, -0.2, 0.1]] * 2, [1.0, -1.0], mask(".xxxx", "....."),
         kl_coef=0.1, mode="seq_mean_token_sum"))


POLICY_LOSS = Quantity(
    "policy_loss",
    "loss.policy",
    returns=("scalar: `aggregate(ppo_token_loss(logp, old_logp, A) + kl_coef·kl_penalty(logp, ref_logp), mask, "
             "mode)`"),
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("ref_logp", "[B, T]", "token"), Arg("advantages", "[B] or [B, T]", "adv"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(
        EPS_LOW(0.2), EPS_HIGH(0.2), DUAL_CLIP(None), KL_COEF(0.0), POLICY_KL_ESTIMATOR("k3"),
        AGG_MODE("token_mean"), NORM_LENGTH(None), NUM_TOKENS(None), NUM_SEQS(None),
    ),
    inputs=_policy_loss_inputs,
    output="scalar",
    invariants=("mask", "on_policy", "partition"),
    question=("eps_low", "eps_high", "dual_clip", "kl_coef", "kl_estimator", "mode", "norm_length"),
    well_conditioned=ppo_conditioned,
    golden=entries("policy_loss"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# corrected_policy_loss (offpolicy.loss)
# ---------------------------------------------------------------------------------------------------


def _corrected_policy_loss_inputs(rng: np.random.Generator) -> Inputs:
    """policy_loss's case plus constant rollout weights (some 0, as masked IS gives) and a keep mask
    that rejects some valid tokens (on-policy: the weights stay as drawn, so the on-policy check
    compares the composition, not its identity)."""
    base_args, base_kwargs = _policy_loss_inputs(rng)
    args = dict(base_args)
    mask = args.pop("mask")
    shape = mask.shape
    weights = np.exp(rng.normal(0.0, 0.3, size=shape))
    weights = np.where(rng.random(shape) < 0.15, 0.0, weights)
    keep = mask & (rng.random(shape) < float(rng.choice([1.0, 0.8, 0.5])))
    args.update({"is_weights": weights, "keep_mask": keep, "mask": mask})
    kwargs = {**base_kwargs, "weight_kl": bool(rng.random() < 0.3), "rejected": str(rng.choice(["drop", "zero"]))}
    return args, kwargs


def _cpl(d_old, d_ref, adv, w, keep, m, old=-4.0, **kw):
    """corrected_policy_loss: logp = old_logp + d_old, ref_logp = logp - d_ref, weights w, keep mask."""
    d_old, d_ref = f64(d_old), f64(d_ref)
    old_logp = np.full(d_old.shape, old)
    logp = old_logp + d_old
    return lambda: build("corrected_policy_loss", {
        "logp": logp, "old_logp": old_logp, "ref_logp": logp - d_ref, "advantages": f64(adv), "is_weights": f64(w),
        "keep_mask": keep, "mask": m,
    }, kw)


W4 = [[0.0, 2.0, 0.5, 1.0]]
add("corrected_policy_loss/identity-is-policy-loss",
    "weights 1 and nothing rejected: policy_loss exactly (on-policy: token_mean of -A)",
    _cpl([[0.0] * 4], [[0.0] * 4], [[0.0, 1.0, -2.0, 0.5]], [[1.0] * 4], mask(".xxx"), mask(".xxx"), kl_coef=0.1),
    expect=(-1.0 + 2.0 - 0.5) / 3)
add("corrected_policy_loss/weights-scale-policy-term",
    "on-policy with weights 2, 0.5, 1 and A = 1: token_mean of -w = -(2 + 0.5 + 1)/3",
    _cpl([[0.0] * 4], [[0.0] * 4], [1.0], W4, mask(".xxx"), mask(".xxx")), expect=-3.5 / 3)
add("corrected_policy_loss/rejected-dropped",
    "rejected='drop': the rejected token leaves the loss and the count: -(2 + 1)/2",
    _cpl([[0.0] * 4], [[0.0] * 4], [1.0], W4, mask(".x.x"), mask(".xxx")), expect=-1.5)
add("corrected_policy_loss/rejected-zero",
    "rejected='zero' (TRL, OpenRLHF, AReaL): the rejected token is a zero that still counts: -(2 + 1)/3",
    _cpl([[0.0] * 4], [[0.0] * 4], [1.0], W4, mask(".x.x"), mask(".xxx"), rejected="zero"), expect=-1.0)
add("corrected_policy_loss/kl-not-weighted",
    "k1 KL of 0.5 per token, kl_coef 1: the KL is added unweighted: mean(-w + 0.5)",
    _cpl([[0.0] * 4], [[0.0, 0.5, 0.5, 0.5]], [1.0], W4, mask(".xxx"), mask(".xxx"), kl_coef=1.0, kl_estimator="k1"),
    expect=(-3.5 + 1.5) / 3)
add("corrected_policy_loss/kl-weighted",
    "weight_kl (ms-swift): the KL term is multiplied by w too: mean(-w + 0.5 w)",
    _cpl([[0.0] * 4], [[0.0, 0.5, 0.5, 0.5]], [1.0], W4, mask(".xxx"), mask(".xxx"), kl_coef=1.0, kl_estimator="k1",
         weight_kl=True),
    expect=(-3.5 + 0.5 * 3.5) / 3)
add("corrected_policy_loss/zero-weight-overflowing-ratio",
    "a zero weight on a token whose ratio overflows (d = 800, A < 0) contributes 0, never NaN",
    _cpl([[0.0, 800.0, 0.1]], [[0.0, 0.0, 0.0]], [-1.0], [[0.0, 0.0, 1.0]], mask(".xx"), mask(".xx"), old=-801.0),
    expect=np.exp(0.1) / 2)
add("corrected_policy_loss/all-rejected",
    "every token rejected: 'drop' gives 0 (nothing counted)",
    _cpl([[0.0, 0.3, -0.2]], [[0.0, 0.1, 0.1]], [1.0], [[1.0] * 3], mask("..."), mask(".xx"), kl_coef=0.1),
    expect=0.0)
add("corrected_policy_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions of every input (and keep_mask True there) change nothing",
    lambda: build("corrected_policy_loss", {
        "logp": f64([[nan, -1.0, inf, -1.5]]),
        "old_logp": f64([[1e30, -1.1, nan, -1.5]]),
        "ref_logp": f64([[-inf, -1.2, 1e30, -1.4]]),
        "advantages": f64([[nan, 1.0, 1e30, -1.0]]),
        "is_weights": f64([[nan, 1.5, inf, 0.5]]),
        "keep_mask": mask("xxxx"),
        "mask": mask(".x.x"),
    }, {"kl_coef": 0.1}))


CORRECTED_POLICY_LOSS = Quantity(
    "corrected_policy_loss",
    "offpolicy.loss",
    returns="scalar (gradient: `corrected_policy_loss_grad`, dL/d`logp`)",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("old_logp", "[B, T]", "token"),
        Arg("ref_logp", "[B, T]", "token"), Arg("advantages", "[B] or [B, T]", "adv"),
        Arg("is_weights", "[B, T]", "weights", constant=True), Arg("keep_mask", "[B, T] bool", "keep"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(
        EPS_LOW(0.2), EPS_HIGH(0.2), DUAL_CLIP(None), KL_COEF(0.0), POLICY_KL_ESTIMATOR("k3"),
        AGG_MODE("token_mean"), NORM_LENGTH(None), NUM_TOKENS(None), NUM_SEQS(None), WEIGHT_KL(False),
        REJECTED("drop"),
    ),
    inputs=_corrected_policy_loss_inputs,
    output="scalar",
    invariants=("mask", "on_policy", "partition"),
    question=("eps_low", "eps_high", "dual_clip", "kl_coef", "kl_estimator", "mode", "norm_length"),
    variants={"rejected": ("drop", "zero"), "weight_kl": (False, True)},
    well_conditioned=ppo_conditioned,
    golden=entries("corrected_policy_loss"),
    golden_seeds=(1, 2, 3),
    # two rejected tokens with large weights in a row of four: dropped vs zero changes the count
    preset_inputs=lambda preset, **kw: _cpl(
        [[0.0, 0.1, -0.1, 0.2, 0.0]], [[0.0] * 5], [1.0], [[0.0, 2.0, 0.5, 1.5, 3.0]], mask(".x.x."), mask(".xxxx"),
        **kw),
)


RECORDS = (POLICY_LOSS, CORRECTED_POLICY_LOSS)
