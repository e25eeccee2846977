"""Records of the off-policy corrections of spec v1.1: rollout importance weights, rejection masks,
decoupled PPO, the proximal log-probs and the off-policy sequence mask (offpolicy.*)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, M6, build, f64, inf, mask, nan, where
from conformance.records.conditioning import far, ppo_conditioned, ratio
from conformance.records.inputs import (
    Inputs, advantages_like, batch_dims, logprobs_like, nearby, policy_args, ragged_mask,
)
from conformance.records.keywords import (
    BATCH_NORMALIZE, BEHAV_CAP, BEHAV_MODE, DUAL_CLIP, EPS_HIGH, EPS_LOW, HI, IS_LEVEL, IS_MODE, IS_SEQ_STAT,
    KL_OF, LO, LOG_RATIO_CLAMP, PROXIMAL_METHOD, REJECTION_LEVEL, REJECTION_STATISTIC, THRESHOLD, VERSION,
)
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# rollout_is_weights (offpolicy.is_weights)
# ---------------------------------------------------------------------------------------------------


def _mismatched(rng: np.random.Generator, logp: np.ndarray, scales: tuple[float, ...] = (0.05, 0.3, 1.0)) -> np.ndarray:
    """Another engine's or an older policy's log-probs of the same tokens: a training-inference
    mismatch or staleness large enough that bounds and caps are crossed in most batches."""
    return logp + rng.normal(0.0, float(rng.choice(scales)), size=logp.shape)


def _rollout_args(rng: np.random.Generator) -> dict[str, Any]:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    old_logp = logprobs_like(rng, (B, T))
    return {"old_logp": old_logp, "rollout_logp": _mismatched(rng, old_logp), "mask": mask}


def _ratio_bounds(rng: np.random.Generator) -> tuple[float | None, float | None]:
    return rng.choice([None, 0.5, 0.8]), rng.choice([None, 1.25, 2.0, 3.0, 5.0])


def _rollout_is_weights_inputs(rng: np.random.Generator) -> Inputs:
    lo, hi = _ratio_bounds(rng)
    return (
        _rollout_args(rng),
        {
            "level": str(rng.choice(["token", "sequence"])),
            "seq_stat": str(rng.choice(["product", "geometric"])),
            "mode": str(rng.choice(["truncate", "mask", "none"])),
            "lo": lo,
            "hi": hi,
            "log_ratio_clamp": rng.choice([None, 20.0]),
            "batch_normalize": bool(rng.random() < 0.25),
        },
    )


def _log_ratio(args: dict[str, Any]) -> np.ndarray:
    """δ = old_logp − rollout_logp with masked positions 0 (they are never read)."""
    mask = args["mask"]
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(mask, args["old_logp"] - np.where(mask, args["rollout_logp"], 0.0), 0.0)


def _row_stats(x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sum, mean, max) of x over each row's valid positions, for the rows that have one."""
    n = mask.sum(axis=1)
    rows = n > 0
    total = np.where(mask, x, 0.0).sum(axis=1)[rows]
    top = np.where(mask, x, -np.inf).max(axis=1)[rows]
    return total, total / n[rows], top


def _is_weights_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Masked importance sampling keeps a weight only inside [lo, hi]: the statistic must not sit
    on a bound (the decision flips with rounding)."""
    if kw.get("mode", "truncate") != "mask":
        return True
    mask, d = args["mask"], _log_ratio(args)
    if kw.get("level", "token") == "token":
        s = d[mask]
    else:
        total, mean, _ = _row_stats(d, mask)
        s = total if kw.get("seq_stat", "product") == "product" else mean
    if kw.get("log_ratio_clamp") is not None:
        s = np.clip(s, -kw["log_ratio_clamp"], kw["log_ratio_clamp"])
    with np.errstate(over="ignore"):
        return far(np.exp(s), [b for b in (kw.get("lo"), kw.get("hi", 2.0)) if b is not None])


def _isw(delta, m, old=-2.0, **kw):
    delta = f64(delta)
    old_logp = np.full(delta.shape, old)
    return lambda: build("rollout_is_weights", {"old_logp": old_logp, "rollout_logp": old_logp - delta, "mask": m}, kw)


D6 = [[0.0, 1.0, -1.0, 0.2, 2.0, -0.5]]  # rho = e, 1/e, 1.22, 7.39, 0.61 at the valid tokens
D2x5 = [[0.0, 0.1, 0.2, -0.1, 0.4], [0.0, -0.3, 0.9, 0.0, 0.0]]  # row sums 0.6 and 0.6, means 0.15 and 0.2
M2x5 = mask(".xxxx", ".xxx.")

add("rollout_is_weights/on-policy",
    "rollout log-probs equal to the trainer's: every weight is exactly 1",
    _isw([[0.0] * 6], M6), expect=where(M6, 1.0))
add("rollout_is_weights/token-truncate",
    "TIS: token weights e^delta capped at hi = 2 (no lower bound)",
    _isw(D6, M6), expect=where(M6, [[0.0, 2.0, np.exp(-1.0), np.exp(0.2), 2.0, np.exp(-0.5)]]))
add("rollout_is_weights/token-truncate-both-bounds",
    "truncation to [0.5, 2]: e^-1 = 0.37 is raised to 0.5",
    _isw(D6, M6, lo=0.5), expect=where(M6, [[0.0, 2.0, 0.5, np.exp(0.2), 2.0, np.exp(-0.5)]]))
add("rollout_is_weights/token-mask-icepop",
    "IcePop / masked IS: weights outside [0.5, 2] are 0, the others kept as they are",
    _isw(D6, M6, mode="mask", lo=0.5), expect=where(M6, [[0.0, 0.0, 0.0, np.exp(0.2), 0.0, np.exp(-0.5)]]))
add("rollout_is_weights/token-none",
    "mode none: the raw ratio e^delta",
    _isw(D6, M6, mode="none"), expect=where(M6, np.exp(f64(D6))))
add("rollout_is_weights/sequence-product",
    "sequence level, product: every valid token of a row carries e^(sum of its deltas) = e^0.6 (mode none)",
    _isw(D2x5, M2x5, level="sequence", mode="none"),
    expect=where(M2x5, [[np.exp(0.6)], [np.exp(0.6)]]))
add("rollout_is_weights/sequence-geometric",
    "sequence level, geometric mean: e^(mean delta) = e^0.15 and e^0.2 (rows of 4 and 3 valid tokens)",
    _isw(D2x5, M2x5, level="sequence", seq_stat="geometric", mode="none"),
    expect=where(M2x5, [[np.exp(0.15)], [np.exp(0.2)]]))
add("rollout_is_weights/overflow-truncated-and-masked",
    "delta = 800 overflows e^delta to inf: masking to [None, 2] gives 0, never NaN",
    _isw([[0.0, 800.0, 0.1, 0.0], [0.0, 800.0, 0.1, 0.0]], mask(".xxx", ".xxx"), mode="mask", hi=2.0),
    expect=where(mask(".xxx", ".xxx"), [[0.0, 0.0, np.exp(0.1), 1.0]] * 2))
add("rollout_is_weights/log-ratio-clamp",
    "log_ratio_clamp 20 (verl's safety bound): delta = 800 gives e^20, delta = -30 gives e^-20",
    _isw([[0.0, 800.0, -30.0, 0.5]], mask(".xxx"), mode="none", log_ratio_clamp=20.0),
    expect=where(mask(".xxx"), [[0.0, np.exp(20.0), np.exp(-20.0), np.exp(0.5)]]))
add("rollout_is_weights/batch-normalize-token",
    "verl's batch normalisation, token level: the weights divided by their mean over valid tokens",
    _isw([[0.0, np.log(2.0), 0.0, 0.0], [0.0, np.log(0.5), np.log(1.5), 0.0]], mask(".xxx", ".xx."), mode="none",
         batch_normalize=True),
    expect=where(mask(".xxx", ".xx."), [[0.0, 2.0, 1.0, 1.0], [0.0, 0.5, 1.5, 0.0]]) / 1.2)
add("rollout_is_weights/batch-normalize-sequence",
    "sequence level: the mean is over rows (one weight per row with a valid token), not over tokens",
    _isw([[0.0, np.log(3.0), 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0] * 4], mask(".xxx", ".x..", "...."),
         level="sequence", mode="none", batch_normalize=True),
    expect=where(mask(".xxx", ".x..", "...."), [[3.0], [1.0], [0.0]]) / 2.0)
add("rollout_is_weights/empty-mask-row",
    "a row with no valid token is all 0",
    _isw([[0.0, 0.3, -0.2, 0.1]] * 2, mask(".xxx", "...."), level="sequence"),
    expect=where(mask(".xxx", "...."), [[np.exp(0.2)], [0.0]]))
add("rollout_is_weights/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in either log-prob at masked positions change nothing",
    lambda: build("rollout_is_weights", {
        "old_logp": f64([[nan, -1.0, inf, -1.5, 1e30]]),
        "rollout_logp": f64([[-inf, -1.2, nan, -1.0, -2.0]]),
        "mask": mask(".x.x."),
    }, {"level": "sequence", "seq_stat": "geometric", "mode": "none"}),
    expect=where(mask(".x.x."), np.exp((0.2 - 0.5) / 2)))


ROLLOUT_IS_WEIGHTS = Quantity(
    "rollout_is_weights",
    "offpolicy.is_weights",
    returns="`[B,T]` importance weights",
    args=(
        Arg("old_logp", "[B, T]", "token", constant=True),
        Arg("rollout_logp", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(
        IS_LEVEL("token"), IS_SEQ_STAT("product"), IS_MODE("truncate"), LO(None), HI(2.0),
        LOG_RATIO_CLAMP(None), BATCH_NORMALIZE(False),
    ),
    inputs=_rollout_is_weights_inputs,
    invariants=("mask", "on_policy"),
    question=("level", "seq_stat", "mode", "lo", "hi", "batch_normalize"),
    variants={"log_ratio_clamp": (None, 20.0)},
    well_conditioned=_is_weights_conditioned,
    golden=entries("rollout_is_weights"),
    golden_seeds=(1, 2, 3),
    # delta = -25 (beyond verl's +-20 clamp), rho = e^2 > 5 and e^-1 < 0.5 (OpenRLHF's [0.5, 5] gate),
    # a row whose ratio product e^1.6 = 4.95 exceeds TRL's sequence bound 3, one that stays inside.
    preset_inputs=lambda preset, **kw: _isw(
        [[0.0, -25.0, 0.3, -1.0, 2.0], [0.0, 0.5, 0.6, 0.4, 0.1], [0.0, 0.2, 0.1, -0.1, 0.3]],
        mask(".xxxx", ".xxxx", ".xxxx"), **kw),
)


# ---------------------------------------------------------------------------------------------------
# rollout_rejection_mask (offpolicy.rejection)
# ---------------------------------------------------------------------------------------------------


def _rollout_rejection_mask_inputs(rng: np.random.Generator) -> Inputs:
    statistic = str(rng.choice(["ratio", "k1", "k2", "k3"]))
    if statistic == "ratio":
        lo, hi = _ratio_bounds(rng)
    elif statistic == "k1":
        lo, hi = rng.choice([None, -0.5, -0.1]), rng.choice([None, 0.1, 0.5])
    else:  # k2, k3 >= 0
        lo, hi = None, rng.choice([None, 0.01, 0.1, 1.0])
    return (
        _rollout_args(rng),
        {
            "statistic": statistic,
            "level": str(rng.choice(["token", "seq_sum", "seq_mean", "seq_max", "seq_all"])),
            "lo": lo,
            "hi": hi,
            "kl_of": str(rng.choice(["rollout_old", "old_rollout"])),
        },
    )


def _rejection_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Every statistic the keep decision reads must be off its bounds."""
    bounds = [b for b in (kw.get("lo"), kw.get("hi")) if b is not None]
    if not bounds:
        return True
    mask, delta = args["mask"], _log_ratio(args)
    d = -delta if kw.get("kl_of", "rollout_old") == "rollout_old" else delta
    statistic = kw.get("statistic", "ratio")
    with np.errstate(over="ignore"):
        per_token = {"ratio": delta, "k1": d, "k2": d * d / 2, "k3": np.expm1(-d) + d}[statistic]
    level = kw.get("level", "token")
    if level in ("token", "seq_all"):
        values = per_token[mask]
    else:
        total, mean, top = _row_stats(per_token, mask)
        values = {"seq_sum": total, "seq_mean": mean, "seq_max": top}[level]
    with np.errstate(over="ignore"):
        values = np.exp(values) if statistic == "ratio" else values
    return far(values, bounds)


def _rej(delta, m, old=-2.0, **kw):
    delta = f64(delta)
    old_logp = np.full(delta.shape, old)
    return lambda: build("rollout_rejection_mask", {"old_logp": old_logp, "rollout_logp": old_logp - delta, "mask": m},
                         kw)


add("rollout_rejection_mask/on-policy",
    "rollout log-probs equal to the trainer's: nothing is rejected (every bound contains ratio 1 / KL 0)",
    _rej([[0.0] * 6], M6, lo=0.5, hi=2.0), expect=M6)
add("rollout_rejection_mask/token-ratio",
    "token ratio bounds [0.5, 2]: e and e^2 and 1/e rejected",
    _rej(D6, M6, lo=0.5, hi=2.0), expect=mask(".....x") | mask("...x.."))
add("rollout_rejection_mask/token-ratio-asymmetric-vs-k1",
    "asymmetric ratio bounds [0.8, 1.5] keep rho in [0.8, 1.5]: delta 0.3 (1.35) kept, -0.3 (0.74) rejected",
    _rej([[0.0, 0.3, -0.3, 0.0]], mask(".xxx"), lo=0.8, hi=1.5), expect=mask(".x.x"))
add("rollout_rejection_mask/token-k1-bounds",
    "k1 = log(pi_rollout / pi_old) = -delta in [-0.5, 0.1]: delta 0.3 kept (-0.3), delta -0.3 rejected (0.3)",
    _rej([[0.0, 0.3, -0.3, 0.0, 0.6]], mask(".xxxx"), statistic="k1", lo=-0.5, hi=0.1), expect=mask(".x.x."))
add("rollout_rejection_mask/token-k1-other-direction",
    "kl_of = old_rollout (AReaL): k1 = delta in [-0.5, 0.1]: delta -0.3 kept, 0.3 rejected",
    _rej([[0.0, 0.3, -0.3, 0.0, 0.6]], mask(".xxxx"), statistic="k1", lo=-0.5, hi=0.1, kl_of="old_rollout"),
    expect=mask("..xx."))
add("rollout_rejection_mask/token-k3",
    "k3 of d = -delta: e^delta - 1 - delta <= 0.1 keeps |delta| small (0.3: 0.05 kept, 0.6: 0.22 rejected)",
    _rej([[0.0, 0.3, -0.3, 0.0, 0.6]], mask(".xxxx"), statistic="k3", hi=0.1), expect=mask(".xxx."))
add("rollout_rejection_mask/seq-sum-k2",
    "sequence sum of k2 = delta^2/2: row 1 sums 0.045 + 0.045 = 0.09 <= 0.1 (kept), row 2 0.32 (rejected)",
    _rej([[0.0, 0.3, -0.3, 0.0], [0.0, 0.8, 0.0, 0.0]], mask(".xxx", ".xxx"), statistic="k2", level="seq_sum", hi=0.1),
    expect=mask(".xxx", "...."))
add("rollout_rejection_mask/seq-mean-ratio-is-geometric",
    "sequence mean of the ratio is the geometric mean e^(mean delta): rows e^0.15 and e^0.2, bounds [0.5, 1.2]",
    _rej(D2x5, M2x5, level="seq_mean", lo=0.5, hi=1.2), expect=mask(".xxxx", "....."))
add("rollout_rejection_mask/seq-max-k3",
    "sequence max of k3: one token with k3 = 0.22 > 0.1 rejects its row",
    _rej([[0.0, 0.3, -0.3, 0.0, 0.6], [0.0, 0.3, -0.3, 0.0, 0.1]], mask(".xxxx", ".xxxx"), statistic="k3",
         level="seq_max", hi=0.1), expect=mask(".....", ".xxxx"))
add("rollout_rejection_mask/seq-all-outlier-token",
    "seq_all: one token outside [0.5, 2] (rho = e^2) rejects its whole sequence; per-token it would reject only itself",
    _rej([[0.0, 0.1, 2.0, -0.1], [0.0, 0.1, 0.2, -0.1]], mask(".xxx", ".xxx"), lo=0.5, hi=2.0, level="seq_all"),
    expect=mask("....", ".xxx"))
add("rollout_rejection_mask/empty-mask-row",
    "a row with no valid token keeps nothing",
    _rej([[0.0, 0.1, 0.2, 0.0]] * 2, mask(".xxx", "...."), level="seq_sum", hi=2.0), expect=mask(".xxx", "...."))
add("rollout_rejection_mask/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions are never read",
    lambda: build("rollout_rejection_mask", {
        "old_logp": f64([[nan, -1.0, inf, -1.5, 1e30]]),
        "rollout_logp": f64([[-inf, -1.2, nan, -1.0, -2.0]]),
        "mask": mask(".x.x."),
    }, {"level": "seq_all", "lo": 0.5, "hi": 2.0}), expect=mask(".x.x."))


ROLLOUT_REJECTION_MASK = Quantity(
    "rollout_rejection_mask",
    "offpolicy.rejection",
    returns="`[B,T]` bool, True = kept",
    args=(
        Arg("old_logp", "[B, T]", "token"), Arg("rollout_logp", "[B, T]", "token"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(
        REJECTION_STATISTIC("ratio"), REJECTION_LEVEL("token"), LO(None), HI(None), KL_OF("rollout_old"),
    ),
    inputs=_rollout_rejection_mask_inputs,
    output="mask",
    invariants=("mask", "on_policy"),
    question=("statistic", "level", "lo", "hi"),
    variants={"kl_of": ("rollout_old", "old_rollout")},
    well_conditioned=_rejection_conditioned,
    golden=entries("rollout_rejection_mask"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _rej(
        [[0.0, 2.0, 0.3, -1.0, 0.0], [0.0, 0.5, -0.2, 0.1, 1.7]], mask(".xxxx", ".xxxx"), **kw),
)


# ---------------------------------------------------------------------------------------------------
# decoupled_ppo_token_loss (offpolicy.decoupled_ppo)
# ---------------------------------------------------------------------------------------------------


def _decoupled_ppo_token_loss_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    prox_logp = nearby(rng, logp)
    eps_low = float(rng.choice([0.2, 0.1]))
    return (
        {"logp": logp, "prox_logp": prox_logp, "behav_logp": _mismatched(rng, prox_logp, (0.3, 1.0)),
         "advantages": advantages_like(rng, B, T), "mask": mask},
        {
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
            "dual_clip": rng.choice([None, 3.0]),
            "behav_cap": rng.choice([None, 2.0, 5.0]),
            "behav_mode": str(rng.choice(["truncate", "mask"])),
        },
    )


def _decoupled_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """PPO's kinks in r = π/π_prox, and the behaviour-weight cap in w = π_prox/π_behav."""
    ratio_args = {"logp": args["logp"], "old_logp": args["prox_logp"], "mask": args["mask"]}
    if not ppo_conditioned(ratio_args, kw):
        return False
    if kw.get("behav_cap") is None:
        return True
    w = ratio({"logp": args["prox_logp"], "old_logp": args["behav_logp"], "mask": args["mask"]})
    return far(w, [kw["behav_cap"]])


def _dec(d, w_log, adv, m, old=-4.0, **kw):
    """logp = prox + d (the PPO log-ratio), behav = prox - w_log (the behaviour weight e^w_log)."""
    d, w_log = f64(d), f64(w_log)
    prox = np.full(d.shape, old)
    return lambda: build("decoupled_ppo_token_loss", {"logp": prox + d, "prox_logp": prox, "behav_logp": prox - w_log,
                                                      "advantages": f64(adv), "mask": m}, kw)


add("decoupled_ppo_token_loss/on-policy",
    "logp = prox = behav: ratio 1, weight 1, loss -A",
    _dec([[0.0] * 6], [[0.0] * 6], [1.5], M6), expect=where(M6, -1.5), grad_factor=where(M6, -1.5))
add("decoupled_ppo_token_loss/weight-scales-ppo",
    "behaviour weight e^0.5 multiplies the PPO loss and its gradient; the ratio is against the proximal policy",
    _dec([[0.0, 0.1, -0.1, 0.15, 0.5, 0.0]], [[0.0, 0.5, 0.5, 0.5, 0.5, 0.5]], [1.0], M6),
    expect=where(M6, -np.exp(0.5) * np.minimum(np.exp(f64([[0.0, 0.1, -0.1, 0.15, 0.5, 0.0]])), 1.2)),
    grad_factor=where(M6, -np.exp(0.5) * np.where(f64([[0.0, 0.1, -0.1, 0.15, 0.5, 0.0]]) > np.log(1.2), 0.0,
                                                  np.exp(f64([[0.0, 0.1, -0.1, 0.15, 0.5, 0.0]])))))
add("decoupled_ppo_token_loss/cap-truncate",
    "behav_cap 2, truncate: weights e^1 and e^2 become 2",
    _dec([[0.0] * 4], [[0.0, 1.0, 2.0, 0.3]], [-1.0], mask(".xxx"), behav_cap=2.0),
    expect=where(mask(".xxx"), [[0.0, 2.0, 2.0, np.exp(0.3)]]))
add("decoupled_ppo_token_loss/cap-mask",
    "behav_cap 2, mask (AReaL's rejection): weights above 2 drop the token's loss and gradient",
    _dec([[0.0] * 4], [[0.0, 1.0, 2.0, 0.3]], [-1.0], mask(".xxx"), behav_cap=2.0, behav_mode="mask"),
    expect=where(mask(".xxx"), [[0.0, 0.0, 0.0, np.exp(0.3)]]), grad_factor=where(mask(".xxx"), [[0.0, 0.0, 0.0, np.exp(0.3)]]))
add("decoupled_ppo_token_loss/clipped-branch",
    "A > 0 and r = e^0.5 > 1.2: the clipped branch, loss -w * A * 1.2, zero gradient",
    _dec([[0.0, 0.5, 0.5]], [[0.0, 0.2, -0.2]], [1.0], mask(".xx"),
         ), expect=where(mask(".xx"), [[0.0, -1.2 * np.exp(0.2), -1.2 * np.exp(-0.2)]]), grad_factor=np.zeros((1, 3)))
add("decoupled_ppo_token_loss/zero-weight-overflowing-ratio",
    "a masked-out weight (cap, mask mode) times an overflowing ratio is 0, never NaN",
    _dec([[0.0, 800.0, 0.1]], [[0.0, 3.0, 0.0]], [-1.0], mask(".xx"), old=-801.0, behav_cap=2.0, behav_mode="mask"),
    expect=where(mask(".xx"), [[0.0, 0.0, np.exp(0.1)]]))
add("decoupled_ppo_token_loss/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in any input at masked positions change nothing",
    lambda: build("decoupled_ppo_token_loss", {
        "logp": f64([[nan, -1.0, inf, -1.5]]),
        "prox_logp": f64([[1e30, -1.1, nan, -1.5]]),
        "behav_logp": f64([[-inf, -1.3, -inf, -1.4]]),
        "advantages": f64([[nan, 1.0, 1e30, -1.0]]),
        "mask": mask(".x.x"),
    }, {}))


DECOUPLED_PPO_TOKEN_LOSS = Quantity(
    "decoupled_ppo_token_loss",
    "offpolicy.decoupled_ppo",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("prox_logp", "[B, T]", "token", constant=True),
        Arg("behav_logp", "[B, T]", "token", constant=True), Arg("advantages", "[B] or [B, T]", "adv"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(EPS_LOW(0.2), EPS_HIGH(0.2), DUAL_CLIP(None), BEHAV_CAP(None), BEHAV_MODE("truncate")),
    inputs=_decoupled_ppo_token_loss_inputs,
    invariants=("mask", "on_policy"),
    question=("eps_low", "eps_high", "dual_clip", "behav_cap", "behav_mode"),
    well_conditioned=_decoupled_conditioned,
    golden=entries("decoupled_ppo_token_loss"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _dec(
        [[0.0, 1.5, 0.1, -0.3, 1.2]], [[0.0, 1.0, 2.0, 0.5, 0.2]], [-1.0], mask(".xxxx"), **kw),
)


# ---------------------------------------------------------------------------------------------------
# proximal_logp_interpolation (offpolicy.proximal)
# ---------------------------------------------------------------------------------------------------


def _proximal_logp_interpolation_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    version = int(rng.integers(1, 8))
    if rng.random() < 0.5:  # one version per row
        behav_version = rng.integers(0, version + 1, size=B).astype(np.int64)
    else:  # per token (partial rollouts span versions); prompt and padding hold -1, as in AReaL
        behav_version = np.where(mask, rng.integers(0, version + 1, size=(B, T)), -1).astype(np.int64)
    return (
        {"logp": logp, "behav_logp": nearby(rng, logp), "behav_version": behav_version, "mask": mask},
        {"version": version, "method": str(rng.choice(["loglinear", "linear"]))},
    )


def _prox(lp, blp, versions, m, version, **kw):
    return lambda: build("proximal_logp_interpolation", {"logp": f64(lp), "behav_logp": f64(blp),
                                                        "behav_version": np.asarray(versions, dtype=np.int64),
                                                        "mask": m}, {"version": version, **kw})


add("proximal_logp_interpolation/one-version-behind",
    "v_b = version - 1: alpha = 0, the proximal policy is the behaviour policy",
    _prox([[0.0, -1.0, -2.0]], [[0.0, -1.5, -1.0]], [4], mask(".xx"), 5), expect=where(mask(".xx"), [[0.0, -1.5, -1.0]]))
add("proximal_logp_interpolation/three-versions-behind",
    "v_b = version - 3: alpha = 2/3, log pi_prox = log pi_b + 2/3 (log pi - log pi_b)",
    _prox([[0.0, -1.0, -2.0]], [[0.0, -1.6, -0.5]], [2], mask(".xx"), 5),
    expect=where(mask(".xx"), [[0.0, -1.6 + 2 / 3 * 0.6, -0.5 + 2 / 3 * -1.5]]))
add("proximal_logp_interpolation/current-version",
    "v_b = version (a sample from the current policy): alpha = 0 by the spec's guard",
    _prox([[0.0, -1.0, -2.0]], [[0.0, -1.5, -1.0]], [5], mask(".xx"), 5), expect=where(mask(".xx"), [[0.0, -1.5, -1.0]]))
add("proximal_logp_interpolation/per-token-versions",
    "a partial rollout spans versions 1..4 at version 5: alpha = 3/4, 2/3, 1/2, 0 token by token; prompt tokens hold -1",
    _prox([[0.0, -1.0, -1.0, -1.0, -1.0]], [[0.0, -3.0, -3.0, -3.0, -3.0]], [[-1, 1, 2, 3, 4]], mask(".xxxx"), 5),
    expect=where(mask(".xxxx"), [[0.0, -3.0 + 1.5, -3.0 + 4 / 3, -3.0 + 1.0, -3.0]]))
add("proximal_logp_interpolation/linear",
    "method linear: log((1 - alpha) p_b + alpha p) with alpha = 1/2",
    _prox([[0.0, np.log(0.4)]], [[0.0, np.log(0.2)]], [3], mask(".x"), 5, method="linear"),
    expect=where(mask(".x"), [[0.0, np.log(0.3)]]))
add("proximal_logp_interpolation/empty-mask-row",
    "a row with no valid token is all 0",
    _prox([[0.0, -1.0, -2.0]] * 2, [[0.0, -1.5, -1.0]] * 2, [3, 3], mask(".xx", "..."), 5),
    expect=where(mask(".xx", "..."), [[0.0, -1.5 + 0.5 * 0.5, -1.0 + 0.5 * -1.0]]))


PROXIMAL_LOGP_INTERPOLATION = Quantity(
    "proximal_logp_interpolation",
    "offpolicy.proximal",
    returns="`[B,T]` approximate proximal log-probs",
    args=(
        Arg("logp", "[B, T]", "token", constant=True), Arg("behav_logp", "[B, T]", "token", constant=True),
        Arg("behav_version", "[B] or [B, T] int", "versions"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(VERSION(), PROXIMAL_METHOD("loglinear")),
    inputs=_proximal_logp_interpolation_inputs,
    question=("version", "method"),
    golden=entries("proximal_logp_interpolation"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# off_policy_sequence_mask (offpolicy.opsm)
# ---------------------------------------------------------------------------------------------------


def _off_policy_sequence_mask_inputs(rng: np.random.Generator) -> Inputs:
    args = policy_args(rng)
    return args, {"threshold": float(rng.choice([0.0, 0.01, 0.1, 1.0]))}


def _opsm_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The mean log-ratio of each row must be off the threshold."""
    mask = args["mask"]
    d = np.where(mask, args["old_logp"] - np.where(mask, args["logp"], 0.0), 0.0)
    return far(_row_stats(d, mask)[1], [kw["threshold"]])


def _opsm(d, adv, m, old=-2.0, **kw):
    """logp = old - d, so the row divergence D_b is the mean of d over the valid tokens."""
    d = f64(d)
    old_logp = np.full(d.shape, old)
    return lambda: build("off_policy_sequence_mask", {"logp": old_logp - d, "old_logp": old_logp,
                                                     "advantages": f64(adv), "mask": m}, kw)


add("off_policy_sequence_mask/positive-advantage-kept",
    "A >= 0 keeps the sequence whatever its divergence (D = 1 > threshold 0.1)",
    _opsm([[0.0, 1.0, 1.0, 1.0]], [0.5], mask(".xxx"), threshold=0.1), expect=mask(".xxx"))
add("off_policy_sequence_mask/negative-advantage-dropped",
    "A < 0 and D = 1 > 0.1: the sequence is dropped; D = 0.05 <= 0.1 keeps the other",
    _opsm([[0.0, 1.0, 1.0, 1.0], [0.0, 0.1, 0.0, 0.05]], [-0.5, -0.5], mask(".xxx", ".xxx"), threshold=0.1),
    expect=mask("....", ".xxx"))
add("off_policy_sequence_mask/zero-advantage-kept",
    "A = 0 counts as non-negative: kept",
    _opsm([[0.0, 2.0, 2.0]], [0.0], mask(".xx"), threshold=0.0), expect=mask(".xx"))
add("off_policy_sequence_mask/negative-divergence",
    "D < 0 (the current policy gives the tokens more mass) is below any threshold >= 0: kept",
    _opsm([[0.0, -1.0, -0.5]], [-1.0], mask(".xx"), threshold=0.0), expect=mask(".xx"))
add("off_policy_sequence_mask/token-advantages",
    "[B, T] advantages: each token is kept when its own advantage is >= 0 or its row's D is low",
    _opsm([[0.0, 1.0, 1.0, 1.0]], [[0.0, 1.0, -1.0, 0.0]], mask(".xxx"), threshold=0.1), expect=mask(".x.x"))
add("off_policy_sequence_mask/empty-mask-row",
    "a row with no valid token keeps nothing",
    _opsm([[0.0, 1.0, 0.0]] * 2, [-1.0, -1.0], mask(".x.", "..."), threshold=2.0), expect=mask(".x.", "..."))
add("off_policy_sequence_mask/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions are never read",
    lambda: build("off_policy_sequence_mask", {
        "logp": f64([[nan, -1.0, inf, -1.5]]),
        "old_logp": f64([[1e30, -1.05, nan, -1.5]]),
        "advantages": f64([[nan, -1.0, 1e30, -1.0]]),
        "mask": mask(".x.x"),
    }, {"threshold": 0.1}), expect=mask(".x.x"))


OFF_POLICY_SEQUENCE_MASK = Quantity(
    "off_policy_sequence_mask",
    "offpolicy.opsm",
    returns="`[B,T]` bool, True = kept",
    args=(
        Arg("logp", "[B, T]", "token"), Arg("old_logp", "[B, T]", "token"),
        Arg("advantages", "[B] or [B, T]", "adv"), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(THRESHOLD(),),
    inputs=_off_policy_sequence_mask_inputs,
    output="mask",
    question=("threshold",),
    well_conditioned=_opsm_conditioned,
    golden=entries("off_policy_sequence_mask"),
    golden_seeds=(1, 2, 3),
)


RECORDS = (ROLLOUT_IS_WEIGHTS, ROLLOUT_REJECTION_MASK, DECOUPLED_PPO_TOKEN_LOSS, PROXIMAL_LOGP_INTERPOLATION, OFF_POLICY_SEQUENCE_MASK)
