"""Records of the advantage estimators of spec v1.1 (adv.reinforce_pp ... adv.optimal_token_baseline)."""

from __future__ import annotations

from typing import Any

import numpy as np

import oracle
from conformance.records.builders import Catalogue, build, f64, inf, mask, nan, where
from conformance.records.inputs import (
    Inputs, batch_dims, group_dims, group_rewards, logprobs_like, ragged_mask,
)
from conformance.records.keywords import (
    ALIGN, BASELINE_LEVEL, BATCH_NORMALIZE, EPS, GAMMA, GAP, GPG_ALPHA, PASSK_SCALE, REWARD_WEIGHTS, SINGLETON,
    STD_DDOF, TAIL_LENGTH, ZERO_TAIL,
)
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# reinforce_pp_advantages (adv.reinforce_pp)
# ---------------------------------------------------------------------------------------------------


def _outcome_token_rewards(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """[B, T] rewards: a score on each row's last valid token and, half the time, a dense per-token
    term (a KL reward); masked positions hold finite garbage."""
    B, T = mask.shape
    r = rng.normal(0.0, float(rng.choice([0.05, 0.5])), size=(B, T)) if rng.random() < 0.5 else np.zeros((B, T))
    for b in range(B):
        valid = np.flatnonzero(mask[b])
        if valid.size:
            r[b, valid[-1]] += float(rng.choice([0.0, 1.0, -1.0, rng.normal(0.0, 2.0)]))
    return np.where(mask, r, rng.uniform(-3.0, 3.0, size=(B, T)))


def _reinforce_pp_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng, max_T=12)
    mask = ragged_mask(rng, B, T)
    return (
        {"token_rewards": _outcome_token_rewards(rng, mask), "mask": mask},
        {
            "gamma": float(rng.choice([1.0, 0.99, 0.9, 0.5])),
            "gap": str(rng.choice(["skip", "reset", "discount"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([1e-8, 1e-6])),
        },
    )


def _rpp(rewards, m, **kw):
    return lambda: build("reinforce_pp_advantages", {"token_rewards": f64(rewards), "mask": m}, kw)


def _whitened(returns, m, ddof=1, eps=1e-8):
    """The hand whitening of the valid returns (mean and variance over the valid positions)."""
    x = f64(returns)[m]
    var = ((x - x.mean()) ** 2).sum() / (x.size - ddof)
    return where(m, (f64(returns) - x.mean()) / np.sqrt(var + eps))


M_GAP = mask(".x.x")  # a masked tool token between two completion tokens (bug-catalogue class 11)
add("reinforce_pp_advantages/gap-skip",
    "r = [., 0, ., 1], mask .x.x, gamma 0.5: the return skips the masked token: returns [0, 0.5, 0, 1]",
    _rpp([[9.0, 0.0, 7.0, 1.0]], M_GAP, gamma=0.5),
    expect=(_whitened([[0.0, 0.5, 0.0, 1.0]], M_GAP), where(M_GAP, [[0.0, 0.5, 0.0, 1.0]])))
add("reinforce_pp_advantages/gap-reset",
    "gap 'reset' (SkyRL): the masked token ends the return: returns [0, 0, 0, 1]",
    _rpp([[9.0, 0.0, 7.0, 1.0]], M_GAP, gamma=0.5, gap="reset"),
    expect=(_whitened([[0.0, 0.0, 0.0, 1.0]], M_GAP), where(M_GAP, [[0.0, 0.0, 0.0, 1.0]])))
add("reinforce_pp_advantages/gap-discount",
    "gap 'discount' (OpenRLHF): the masked position discounts too: returns [0, 0.25, 0, 1]",
    _rpp([[9.0, 0.0, 7.0, 1.0]], M_GAP, gamma=0.5, gap="discount"),
    expect=(_whitened([[0.0, 0.25, 0.0, 1.0]], M_GAP), where(M_GAP, [[0.0, 0.25, 0.0, 1.0]])))
add("reinforce_pp_advantages/gamma-0.9-dense",
    "dense rewards 1, 2, 3 with gamma 0.9: returns 5.23, 4.7, 3",
    _rpp([[0.0, 1.0, 2.0, 3.0]], mask(".xxx"), gamma=0.9),
    expect=(_whitened([[0.0, 5.23, 4.7, 3.0]], mask(".xxx")), where(mask(".xxx"), [[0.0, 5.23, 4.7, 3.0]])))
add("reinforce_pp_advantages/outcome-score-every-token",
    "gamma 1 and the score on the last token only: each valid token's return is its row's score",
    _rpp([[0.0, 0.0, 0.0, 2.0, 0.0], [0.0, 0.0, -1.0, 0.0, 0.0]], mask(".xxx.", ".xx.."), gamma=1.0),
    expect=(_whitened([[0.0, 2.0, 2.0, 2.0, 0.0], [0.0, -1.0, -1.0, 0.0, 0.0]], mask(".xxx.", ".xx..")),
            where(mask(".xxx.", ".xx.."), [[0.0, 2.0, 2.0, 2.0, 0.0], [0.0, -1.0, -1.0, 0.0, 0.0]])))
add("reinforce_pp_advantages/rows-independent",
    "a right-padded row followed by another row: no reward of the next row reaches it (returns [1, 0] and [5, 5, 0])",
    _rpp([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 5.0, 0.0]], mask(".xx.", ".xxx")),
    expect=(_whitened([[0.0, 1.0, 0.0, 0.0], [0.0, 5.0, 5.0, 0.0]], mask(".xx.", ".xxx")),
            where(mask(".xx.", ".xxx"), [[0.0, 1.0, 0.0, 0.0], [0.0, 5.0, 5.0, 0.0]])))
add("reinforce_pp_advantages/padding-not-in-statistics",
    "left padding, right padding and an empty row: only the 4 valid returns enter the whitening",
    _rpp([[0.0, 0.0, 1.0, 2.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]], mask("..xx", ".xx.", "...."), gamma=1.0),
    expect=(_whitened([[0.0, 0.0, 3.0, 2.0], [0.0, 4.0, 1.0, 0.0], [0.0] * 4], mask("..xx", ".xx.", "....")),
            where(mask("..xx", ".xx.", "...."), [[0.0, 0.0, 3.0, 2.0], [0.0, 4.0, 1.0, 0.0], [0.0] * 4])))
add("reinforce_pp_advantages/biased-variance",
    "std_ddof 0 (OpenRLHF's whitening variance)",
    _rpp([[0.0, 1.0, 2.0, 3.0]], mask(".xxx"), std_ddof=0),
    expect=(_whitened([[0.0, 6.0, 5.0, 3.0]], mask(".xxx"), ddof=0), where(mask(".xxx"), [[0.0, 6.0, 5.0, 3.0]])))
add("reinforce_pp_advantages/single-valid-token",
    "one valid token in the batch: its return, and an advantage of 0 (the unbiased variance is 0)",
    _rpp([[0.0, 4.0, 0.0]], mask(".x."), gamma=0.9),
    expect=(np.zeros((1, 3)), where(mask(".x."), [[0.0, 4.0, 0.0]])))
add("reinforce_pp_advantages/all-rows-masked",
    "no valid token: both outputs are 0",
    _rpp([[1.0, 2.0, 3.0]], mask("...")),
    expect=(np.zeros((1, 3)), np.zeros((1, 3))))
add("reinforce_pp_advantages/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions (prompt, tool token, padding) are never read",
    _rpp([[nan, 1.0, inf, 2.0, -inf, 1e30]], mask(".x.x.."), gamma=0.9),
    expect=(_whitened([[0.0, 2.8, 0.0, 2.0, 0.0, 0.0]], mask(".x.x..")),
            where(mask(".x.x.."), [[0.0, 2.8, 0.0, 2.0, 0.0, 0.0]])))


REINFORCE_PP_ADVANTAGES = Quantity(
    "reinforce_pp_advantages",
    "adv.reinforce_pp",
    returns="`(advantages, returns)` `[B,T]` each",
    args=(Arg("token_rewards", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask")),
    keywords=(GAMMA(1.0), GAP("skip"), STD_DDOF(1), EPS(1e-08)),
    inputs=_reinforce_pp_advantages_inputs,
    output="pair",
    question=("gamma",),
    variants={"gap": ("skip", "reset", "discount"), "std_ddof": (1, 0)},
    golden=entries("reinforce_pp_advantages"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _rpp(
        [[0.0, 1.0, 0.5, 0.0, 2.0], [0.0, 0.0, 0.3, 1.0, 0.0]], mask(".x.x.", "..xx."), gamma=0.9, **kw),
)


# ---------------------------------------------------------------------------------------------------
# reinforce_pp_baseline_advantages (adv.reinforce_pp_baseline)
# ---------------------------------------------------------------------------------------------------


def _reinforce_pp_baseline_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, G = group_dims(rng)
    T = int(rng.integers(2, 9))
    mask = ragged_mask(rng, B, T)
    return (
        {"rewards": group_rewards(rng, B, G), "group_size": G, "mask": mask},
        {
            "level": str(rng.choice(["token", "sequence"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([1e-8, 1e-6, 1e-4])),
            "singleton": str(rng.choice(["zero", "raw"])),
        },
    )


def _rppb(rewards, G, m, **kw):
    return lambda: build("reinforce_pp_baseline_advantages", {"rewards": f64(rewards), "group_size": G, "mask": m}, kw)


M_RPPB = mask(".xx.", ".x..", "..x.", "....")  # 2, 1, 1 and 0 valid tokens
X_RPPB = [[0.0, 0.5, 0.5, 0.0], [0.0, -0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0] * 4]  # a = r - mu_g per token
add("reinforce_pp_baseline_advantages/worked-example",
    "G = 2, rewards [1, 0, 0.5, 0.5], rows of 2, 1, 1, 0 tokens: a = [0.5, -0.5, 0, 0] whitened over the 4 tokens",
    _rppb([1.0, 0.0, 0.5, 0.5], 2, M_RPPB), expect=_whitened(X_RPPB, M_RPPB))
add("reinforce_pp_baseline_advantages/level-sequence",
    "level 'sequence', eps 1e-4 (ms-swift): a / (std of the 4 values of a + 1e-4), each row once",
    _rppb([1.0, 0.0, 0.5, 0.5], 2, M_RPPB, level="sequence", eps=1e-4),
    expect=where(M_RPPB, f64([[0.5], [-0.5], [0.0], [0.0]]) / (np.sqrt(0.5 / 3) + 1e-4)))
add("reinforce_pp_baseline_advantages/long-row-weighs-more",
    "token level: a 3-token row and a 1-token row of the same group shift the token mean to the long row",
    _rppb([1.0, 0.0], 2, mask(".xxx", ".x.."), std_ddof=0),
    expect=_whitened([[0.0, 0.5, 0.5, 0.5], [0.0, -0.5, 0.0, 0.0]], mask(".xxx", ".x.."), ddof=0))
add("reinforce_pp_baseline_advantages/all-equal-group",
    "an all-equal group contributes exact zeros, which still count in the token statistics",
    _rppb([2.0, 2.0, 1.0, 0.0], 2, mask(".xx", ".xx", ".xx", ".xx")),
    expect=_whitened([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, -0.5, -0.5]],
                     mask(".xx", ".xx", ".xx", ".xx")))
add("reinforce_pp_baseline_advantages/singleton-zero",
    "G = 1, singleton 'zero': every a is 0, so every advantage is 0",
    _rppb([1.0, -2.0, 0.5], 1, mask(".xx", ".x.", ".xx")), expect=np.zeros((3, 3)))
add("reinforce_pp_baseline_advantages/singleton-raw",
    "G = 1, singleton 'raw' (verl): a = r, whitened over the tokens",
    _rppb([1.0, -2.0, 0.5], 1, mask(".xx", ".x.", ".xx"), singleton="raw"),
    expect=_whitened([[0.0, 1.0, 1.0], [0.0, -2.0, 0.0], [0.0, 0.5, 0.5]], mask(".xx", ".x.", ".xx")))


REINFORCE_PP_BASELINE_ADVANTAGES = Quantity(
    "reinforce_pp_baseline_advantages",
    "adv.reinforce_pp_baseline",
    returns="`[B,T]`",
    args=(
        Arg("rewards", "[B]", "seq", constant=True), Arg("group_size", "int", "group"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(BASELINE_LEVEL("token"), STD_DDOF(1), EPS(1e-08), SINGLETON("zero")),
    inputs=_reinforce_pp_baseline_advantages_inputs,
    invariants=("group_permutation",),
    variants={"level": ("token", "sequence"), "std_ddof": (1, 0), "eps": (1e-08, 0.0001), "singleton": ("zero", "raw")},
    golden=entries("reinforce_pp_baseline_advantages"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _rppb(
        [1.0, -0.5, 3.0] if preset == "verl" else [1.0, 0.0, 0.0, 1.0, 0.5, 0.5],
        1 if preset == "verl" else 2,
        mask(".xx", ".x.", ".xx") if preset == "verl" else mask(".xxx", ".x..", ".xx.", ".x..", ".xxx", "...."), **kw),
)


# ---------------------------------------------------------------------------------------------------
# remax_advantages (adv.remax)
# ---------------------------------------------------------------------------------------------------


def _remax_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, G = group_dims(rng)
    rewards = group_rewards(rng, B, G)
    greedy = np.array([float(rng.choice(rewards[g * G:(g + 1) * G])) if rng.random() < 0.5 else float(rng.normal(0.0, 1.0))
                       for g in range(B // G)])
    return {"rewards": rewards, "greedy_rewards": greedy, "group_size": G}, {}


def _remax(rewards, greedy, G):
    return lambda: build("remax_advantages", {"rewards": f64(rewards), "greedy_rewards": f64(greedy), "group_size": G}, {})


add("remax_advantages/worked-example",
    "G = 2: each reward minus its own prompt's greedy reward, [1, 0] - 0.5 and [0.5, 0.5] - 1",
    _remax([1.0, 0.0, 0.5, 0.5], [0.5, 1.0], 2), expect=f64([0.5, -0.5, -0.5, -0.5]))
add("remax_advantages/greedy-of-own-prompt",
    "G = 3, greedy rewards [0, 1]: the first prompt's three samples use 0, the second's 1 (not the tiled [0, 1, 0])",
    _remax([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0.0, 1.0], 3), expect=f64([1.0, 1.0, 1.0, -1.0, -1.0, -1.0]))
add("remax_advantages/one-sample-per-prompt",
    "G = 1 (the paper's setting): r - b row by row",
    _remax([0.3, -1.0, 2.0], [0.5, -1.0, 0.0], 1), expect=f64([-0.2, 0.0, 2.0]))
add("remax_advantages/one-prompt",
    "G = B: one prompt, one greedy reward for every sample",
    _remax([1.0, 0.0, 0.25, 0.75], [0.5], 4), expect=f64([0.5, -0.5, -0.25, 0.25]))
add("remax_advantages/large-offset",
    "rewards around 1000: the differences are exact",
    _remax([1000.5, 1000.0, 999.25, 1001.0], [1000.0, 1000.25], 2), expect=f64([0.5, 0.0, -1.0, 0.75]))


REMAX_ADVANTAGES = Quantity(
    "remax_advantages",
    "adv.remax",
    returns="`[B]`; `greedy_rewards` `[B/G]`, one per prompt",
    args=(
        Arg("rewards", "[B]", "seq", constant=True), Arg("greedy_rewards", "[B / G]", "seq", constant=True),
        Arg("group_size", "int", "group"),
    ),
    keywords=(),
    inputs=_remax_advantages_inputs,
    invariants=("group_permutation",),
    golden=entries("remax_advantages"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# opo_advantages (adv.opo)
# ---------------------------------------------------------------------------------------------------


def _opo_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, G = group_dims(rng)
    T = int(rng.integers(2, 10))
    mask = ragged_mask(rng, B, T)
    if rng.random() < 0.3:  # a group whose rows have no valid token (its baseline would be 0/0)
        g = int(rng.integers(0, B // G))
        mask[g * G:(g + 1) * G] = False
    return (
        {"rewards": group_rewards(rng, B, G), "group_size": G, "mask": mask},
        {"singleton": str(rng.choice(["zero", "raw"]))},
    )


def _opo(rewards, G, m, **kw):
    return lambda: build("opo_advantages", {"rewards": f64(rewards), "group_size": G, "mask": m}, kw)


M_OPO = mask(".xxx..", ".x....", ".xxxx.", ".xx...")  # lengths 3, 1, 4, 2
add("opo_advantages/worked-example",
    "G = 2, rewards [1, 0, 0, 1], lengths [3, 1, 4, 2]: baselines 3/4 and 1/3",
    _opo([1.0, 0.0, 0.0, 1.0], 2, M_OPO), expect=f64([0.25, -0.75, -1 / 3, 2 / 3]))
add("opo_advantages/equal-lengths-is-group-mean",
    "equal lengths: the baseline is the plain group mean",
    _opo([1.0, 0.0, 0.0, 0.0], 4, mask(".xx", ".xx", ".xx", ".xx")), expect=f64([0.75, -0.25, -0.25, -0.25]))
add("opo_advantages/all-equal-group",
    "an all-equal group gives 0 whatever the lengths",
    _opo([0.7, 0.7, 0.7], 3, mask(".xxx", ".x..", ".xx.")), expect=f64([0.0, 0.0, 0.0]))
add("opo_advantages/empty-row-in-group",
    "a row without valid tokens weighs 0 in the baseline (b = 1) and still gets r - b",
    _opo([1.0, 0.0, 1.0], 3, mask(".xx", "...", ".x.")), expect=f64([0.0, -1.0, 0.0]))
add("opo_advantages/group-without-tokens",
    "a group with no valid token gives 0 (no 0/0), the other group is unaffected",
    _opo([1.0, 0.0, 1.0, 0.0], 2, mask("...", "...", ".xx", ".x.")), expect=f64([0.0, 0.0, 1 / 3, -2 / 3]))
add("opo_advantages/singleton-zero",
    "G = 1, singleton 'zero': b = r, A = 0",
    _opo([1.0, -0.5], 1, mask(".xx", ".x.")), expect=f64([0.0, 0.0]))
add("opo_advantages/singleton-raw",
    "G = 1, singleton 'raw' (verl): b = 0, A = r",
    _opo([1.0, -0.5], 1, mask(".xx", ".x."), singleton="raw"), expect=f64([1.0, -0.5]))


OPO_ADVANTAGES = Quantity(
    "opo_advantages",
    "adv.opo",
    returns="`[B]`",
    args=(
        Arg("rewards", "[B]", "seq", constant=True), Arg("group_size", "int", "group"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(SINGLETON("zero"),),
    inputs=_opo_advantages_inputs,
    invariants=("group_permutation",),
    variants={"singleton": ("zero", "raw")},
    golden=entries("opo_advantages"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _opo([1.0, -0.5], 1, mask(".xx", ".x."), **kw),
)


# ---------------------------------------------------------------------------------------------------
# grpo_passk_advantages (adv.grpo_passk)
# ---------------------------------------------------------------------------------------------------


def _grpo_passk_advantages_inputs(rng: np.random.Generator) -> Inputs:
    G = int(rng.choice([2, 3, 4, 8]))
    B = G * int(rng.integers(1, 4))
    return (
        {"rewards": group_rewards(rng, B, G), "group_size": G},
        {
            "scale": str(rng.choice(["group", "none"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([0.0, 1e-9, 1e-6, 1e-4])),
        },
    )


def _passk(rewards, G, **kw):
    return lambda: build("grpo_passk_advantages", {"rewards": f64(rewards), "group_size": G}, kw)


add("grpo_passk_advantages/best-member-only",
    "G = 4, [1, 0, 0, 0]: only the best member gets (1 - 0) / (0.5 + 1e-6)",
    _passk([1.0, 0.0, 0.0, 0.0], 4), expect=f64([1.0 / (0.5 + 1e-6), 0.0, 0.0, 0.0]))
add("grpo_passk_advantages/shared-maximum",
    "a maximum shared by two members: the margin is 0, every advantage of the group is 0",
    _passk([1.0, 1.0, 0.0, 0.0, 0.2, 0.9, 0.5, 0.9], 4), expect=np.zeros(8))
add("grpo_passk_advantages/scale-none",
    "scale 'none': the margin over the runner-up, 0.9 - 0.7, on the best member (index 1)",
    _passk([0.2, 0.9, 0.5, 0.7], 4, scale="none"), expect=f64([0.0, 0.2, 0.0, 0.0]))
add("grpo_passk_advantages/best-not-first",
    "two groups whose best members sit at different positions: each group credits its own member",
    _passk([0.0, 0.0, 3.0, 1.0, 2.0, 0.0], 3, scale="none"), expect=f64([0.0, 0.0, 3.0, 0.0, 1.0, 0.0]))
add("grpo_passk_advantages/g2-binary",
    "G = 2 binary: a mixed group credits its solver with 1/(sqrt(0.5) + 1e-6); a solved group gets 0",
    _passk([0.0, 1.0, 1.0, 1.0], 2), expect=f64([0.0, 1.0 / (np.sqrt(0.5) + 1e-6), 0.0, 0.0]))
add("grpo_passk_advantages/biased-std-eps0",
    "std_ddof 0 and eps 0: (3 - 1) / std([3, 1, 0], ddof 0)",
    _passk([3.0, 1.0, 0.0], 3, std_ddof=0, eps=0.0), expect=f64([2.0 / np.sqrt(14 / 9), 0.0, 0.0]))
add("grpo_passk_advantages/all-equal-eps0",
    "an all-equal group with eps 0: 0/0 is 0, never NaN",
    _passk([0.5, 0.5, 0.5], 3, eps=0.0), expect=np.zeros(3))


GRPO_PASSK_ADVANTAGES = Quantity(
    "grpo_passk_advantages",
    "adv.grpo_passk",
    returns="`[B]`; `group_size ≥ 2`",
    args=(Arg("rewards", "[B]", "seq", constant=True), Arg("group_size", "int", "group")),
    keywords=(PASSK_SCALE("group"), STD_DDOF(1), EPS(1e-06)),
    inputs=_grpo_passk_advantages_inputs,
    invariants=("group_permutation",),
    question=("scale",),
    variants={"std_ddof": (1, 0), "eps": (1e-06, 0.0001, 1e-08)},
    golden=entries("grpo_passk_advantages"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# gdpo_advantages (adv.gdpo)
# ---------------------------------------------------------------------------------------------------


def _gdpo_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, G = group_dims(rng)
    K = int(rng.integers(1, 4))
    rewards = np.stack([group_rewards(rng, B, G) for _ in range(K)], axis=1)
    weights = None if rng.random() < 0.4 else [float(rng.choice([1.0, 0.5, 2.0, -1.0])) for _ in range(K)]
    return (
        {"rewards": rewards, "group_size": G},
        {
            "reward_weights": weights,
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([0.0, 1e-8, 1e-6, 1e-4])),
            "batch_normalize": bool(rng.random() < 0.7),
            "singleton": str(rng.choice(["zero", "raw"])),
        },
    )


def _gdpo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """GDPO's batch normalisation divides the spread of s = Σ_k w_k·z_k: when the weighted z-scores nearly
    cancel (s of the size of eps's effect on them) the result is a ratio of rounding-sized differences.
    Either s is exactly constant (the output is exactly 0) or its spread is well above that size."""
    if not kw.get("batch_normalize", True):
        return True
    s = oracle.gdpo_advantages(args["rewards"], args["group_size"], **{**kw, "batch_normalize": False})
    weights = kw.get("reward_weights") or [1.0] * args["rewards"].shape[1]
    spread = float(np.ptp(s)) if s.size else 0.0
    return spread == 0.0 or spread > 1e-3 * sum(abs(w) for w in weights)


def _gdpo(rewards, G, **kw):
    return lambda: build("gdpo_advantages", {"rewards": f64(rewards), "group_size": G}, kw)


R_GDPO = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
Z_GDPO = 0.5 / (np.sqrt(0.5) + 1e-6)  # each column's group z-score (G = 2, values differ by 1)
S_GDPO = f64([Z_GDPO - 2 * Z_GDPO, -Z_GDPO + 2 * Z_GDPO, Z_GDPO + 2 * Z_GDPO, -Z_GDPO - 2 * Z_GDPO])
add("gdpo_advantages/weighted-sum-not-normalised",
    "two rewards, weights [1, 2], batch_normalize False: s = z_1 + 2 z_2 per sequence",
    _gdpo(R_GDPO, 2, reward_weights=[1.0, 2.0], batch_normalize=False), expect=S_GDPO)
add("gdpo_advantages/worked-example",
    "the same s normalised over the batch: (s - mean s) / (std s + 1e-6)",
    _gdpo(R_GDPO, 2, reward_weights=[1.0, 2.0]),
    expect=(S_GDPO - S_GDPO.mean()) / (S_GDPO.std(ddof=1) + 1e-6))
add("gdpo_advantages/each-reward-normalised-before-the-sum",
    "a reward of spread 100 and one of spread 1 weigh the same once each is a group z-score",
    _gdpo([[100.0, 0.0], [0.0, 1.0]], 2, batch_normalize=False, eps=0.0), expect=f64([0.0, 0.0]))
add("gdpo_advantages/single-reward",
    "K = 1: grpo_advantages of the column, normalised again over the batch",
    _gdpo([[1.0], [0.0], [0.0], [0.0]], 4, eps=0.0),
    expect=f64([1.5, -0.5, -0.5, -0.5]))
add("gdpo_advantages/all-equal-column",
    "an all-equal column of a group contributes exactly 0; all s equal gives 0",
    _gdpo([[2.0, 1.0], [2.0, 1.0], [5.0, 0.0], [5.0, 0.0]], 2), expect=np.zeros(4))
add("gdpo_advantages/singleton-raw",
    "G = 1, singleton 'raw' (verl): r / (1 + eps) per column, summed, not normalised",
    _gdpo([[1.0, 2.0], [0.0, -1.0]], 1, singleton="raw", batch_normalize=False),
    expect=f64([3.0, -1.0]) / (1 + 1e-6))
add("gdpo_advantages/singleton-zero",
    "G = 1, singleton 'zero': every z-score is 0",
    _gdpo([[1.0, 2.0], [0.0, -1.0]], 1), expect=np.zeros(2))


GDPO_ADVANTAGES = Quantity(
    "gdpo_advantages",
    "adv.gdpo",
    returns="`[B]`; `rewards` `[B, K]`",
    args=(Arg("rewards", "[B, K]", "seq", constant=True), Arg("group_size", "int", "group")),
    keywords=(REWARD_WEIGHTS(None), STD_DDOF(1), EPS(1e-06), BATCH_NORMALIZE(True), SINGLETON("zero")),
    inputs=_gdpo_advantages_inputs,
    invariants=("group_permutation",),
    question=("reward_weights",),
    variants={"eps": (1e-06, 0.0001, 1e-08), "std_ddof": (1, 0), "batch_normalize": (True, False), "singleton": ("zero", "raw")},
    well_conditioned=_gdpo_conditioned,
    golden=entries("gdpo_advantages"),
    golden_seeds=(1, 2, 3),
    # three weighted reward columns, one all-equal within a group: each framework's eps shows in the z-scores
    preset_inputs=lambda preset, **kw: _gdpo(
        [[1.0, 0.0, 2.0], [0.0, 1.0, 2.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]], 2, reward_weights=[1.0, 0.5, 2.0], **kw),
)


# ---------------------------------------------------------------------------------------------------
# maxrl_advantages (adv.maxrl)
# ---------------------------------------------------------------------------------------------------


def _maxrl_advantages_inputs(rng: np.random.Generator) -> Inputs:
    """Success-rate rewards in [0, 1] (binary, graded or continuous): the group mean is a pass rate."""
    B, G = group_dims(rng)
    kind = rng.choice(["binary", "graded", "continuous"])
    if kind == "binary":
        r = rng.integers(0, 2, size=B).astype(np.float64)
    elif kind == "graded":
        r = rng.integers(0, 5, size=B) / 4.0
    else:
        r = rng.uniform(0.0, 1.0, size=B)
    for g in range(B // G):
        if rng.random() < 0.25:
            r[g * G:(g + 1) * G] = r[g * G]
    return (
        {"rewards": r, "group_size": G},
        {"eps": float(rng.choice([1e-6, 1e-8, 1e-4])), "singleton": str(rng.choice(["zero", "raw"]))},
    )


def _maxrl(rewards, G, **kw):
    return lambda: build("maxrl_advantages", {"rewards": f64(rewards), "group_size": G}, kw)


add("maxrl_advantages/worked-example",
    "G = 4: [1, 0, 0, 0] (pass rate 0.25) and [1, 1, 1, 0] (0.75): (r - mu) / (mu + 1e-6)",
    _maxrl([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0], 4),
    expect=f64([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, 0.25, -0.75]) / f64([0.25 + 1e-6] * 4 + [0.75 + 1e-6] * 4))
add("maxrl_advantages/all-failed-group",
    "an all-failed group (mu = 0) gives exactly 0, also with eps 0",
    _maxrl([0.0, 0.0, 1.0, 0.0], 2, eps=0.0), expect=f64([0.0, 0.0, 1.0, -1.0]))
add("maxrl_advantages/hard-prompt-weighs-more",
    "the same centred reward weighs 3x more on a prompt solved 1 time in 4 than 3 times in 4",
    _maxrl([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0], 4, eps=0.0),
    expect=f64([3.0, -1.0, -1.0, -1.0, 1 / 3, 1 / 3, 1 / 3, -1.0]))
add("maxrl_advantages/singleton-zero",
    "G = 1, singleton 'zero': 0",
    _maxrl([1.0, 0.0, 0.5], 1), expect=np.zeros(3))
add("maxrl_advantages/singleton-raw",
    "G = 1, singleton 'raw' (SkyRL): r - 0, no division",
    _maxrl([1.0, 0.0, 0.5], 1, singleton="raw"), expect=f64([1.0, 0.0, 0.5]))


MAXRL_ADVANTAGES = Quantity(
    "maxrl_advantages",
    "adv.maxrl",
    returns="`[B]`",
    args=(Arg("rewards", "[B]", "seq", constant=True), Arg("group_size", "int", "group")),
    keywords=(EPS(1e-06), SINGLETON("zero")),
    inputs=_maxrl_advantages_inputs,
    invariants=("group_permutation",),
    variants={"eps": (1e-06, 1e-08), "singleton": ("zero", "raw")},
    golden=entries("maxrl_advantages"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _maxrl([1.0, 0.0, 0.5], 1, **kw),
)


# ---------------------------------------------------------------------------------------------------
# gpg_advantages (adv.gpg)
# ---------------------------------------------------------------------------------------------------


def _gpg_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, G = group_dims(rng)
    return (
        {"rewards": group_rewards(rng, B, G), "group_size": G},
        {"singleton": str(rng.choice(["zero", "raw"])), "alpha": str(rng.choice(["groups", "nonzero_rewards"]))},
    )


def _gpg(rewards, G, **kw):
    return lambda: build("gpg_advantages", {"rewards": f64(rewards), "group_size": G}, kw)


add("gpg_advantages/worked-example",
    "G = 4, one group of two (1, 0, 0, 0 and 1, 1, 1, 0), none all-equal: alpha = 1, the group-centred rewards",
    _gpg([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0], 4),
    expect=f64([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, 0.25, -0.75]))
add("gpg_advantages/paper-vs-verl-alpha",
    "rewards [1, 0 | 1, 1 | 0, 0], G = 2: two of three groups all-equal, paper alpha = 6 / 2 = 3",
    _gpg([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], 2), expect=f64([1.5, -1.5, 0.0, 0.0, 0.0, 0.0]))
add("gpg_advantages/paper-vs-verl-alpha-nonzero",
    "the same rewards with verl's count: three non-zero rewards of six, alpha = 2",
    _gpg([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], 2, alpha="nonzero_rewards"), expect=f64([1.0, -1.0, 0.0, 0.0, 0.0, 0.0]))
add("gpg_advantages/nonzero-worked-example",
    "verl's count: 4 non-zero rewards out of 8, alpha = 2 times the group-centred rewards",
    _gpg([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0], 4, alpha="nonzero_rewards"),
    expect=f64([1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5]))
add("gpg_advantages/no-zero-rewards",
    "no all-equal group and no zero reward: alpha = 1 in both counts, the Dr. GRPO advantage",
    _gpg([1.0, 2.0, 0.5, 1.5], 2), expect=f64([-0.5, 0.5, -0.5, 0.5]))
add("gpg_advantages/all-zero",
    "every reward 0: no signal anywhere, alpha = 1 and every advantage 0",
    _gpg([0.0, 0.0, 0.0, 0.0], 2), expect=np.zeros(4))
add("gpg_advantages/all-groups-equal",
    "every group all-equal but not zero: M = B, alpha = 1, every advantage exactly 0",
    _gpg([0.5, 0.5, 2.0, 2.0], 2), expect=np.zeros(4))
add("gpg_advantages/alpha-counts-the-batch",
    "alpha = 6 / 2: one group with a signal scales by the batch, the all-equal ones giving 0",
    _gpg([0.0, 0.0, 0.0, 0.0, 1.0, 0.0], 2), expect=f64([0.0, 0.0, 0.0, 0.0, 1.5, -1.5]))
add("gpg_advantages/alpha-counts-the-batch-nonzero",
    "verl's count, alpha = 6 / 1: one non-zero reward in the batch",
    _gpg([0.0, 0.0, 0.0, 0.0, 1.0, 0.0], 2, alpha="nonzero_rewards"), expect=f64([0.0, 0.0, 0.0, 0.0, 3.0, -3.0]))
add("gpg_advantages/singleton-raw",
    "G = 1, singleton 'raw', verl's count: alpha * r, alpha = 3 / 2",
    _gpg([1.0, 0.0, -2.0], 1, singleton="raw", alpha="nonzero_rewards"), expect=f64([1.5, 0.0, -3.0]))
add("gpg_advantages/singleton-raw-groups",
    "G = 1, singleton 'raw', the paper's count: every group of one is all-equal, alpha = 1, A = r",
    _gpg([1.0, 0.0, -2.0], 1, singleton="raw"), expect=f64([1.0, 0.0, -2.0]))


GPG_ADVANTAGES = Quantity(
    "gpg_advantages",
    "adv.gpg",
    returns="`[B]`",
    args=(Arg("rewards", "[B]", "seq", constant=True), Arg("group_size", "int", "group")),
    keywords=(SINGLETON("zero"), GPG_ALPHA("groups")),
    inputs=_gpg_advantages_inputs,
    invariants=("group_permutation",),
    variants={"singleton": ("zero", "raw"), "alpha": ("groups", "nonzero_rewards")},
    golden=entries("gpg_advantages"),
    golden_seeds=(1, 2, 3),
    preset_inputs=lambda preset, **kw: _gpg([1.0, 0.0, -2.0], 1, **kw),
)


# ---------------------------------------------------------------------------------------------------
# optimal_token_baseline_advantages (adv.optimal_token_baseline)
# ---------------------------------------------------------------------------------------------------


def _group_completions(rng: np.random.Generator, B: int, G: int, T: int) -> np.ndarray:
    """[B, T] mask: each group's completions start at one column (its shared prompt), with lengths from
    empty to the whole width, ties for the longest at times and masked tool tokens inside."""
    mask = np.zeros((B, T), dtype=bool)
    for g in range(B // G):
        start = int(rng.integers(1, max(T // 2, 1) + 1))
        lengths = rng.integers(0, T - start + 1, size=G)
        if rng.random() < 0.25:  # a tie for the longest completion: no zero tail
            lengths[int(rng.integers(0, G))] = lengths.max()
        for i, length in enumerate(lengths):
            b = g * G + i
            mask[b, start:start + int(length)] = True
            span = np.flatnonzero(mask[b])
            if span.size >= 3 and rng.random() < 0.3:  # a tool observation inside the completion
                mask[b, int(rng.choice(span[1:-1]))] = False
    return mask


def _optimal_token_baseline_advantages_inputs(rng: np.random.Generator) -> Inputs:
    """Groups whose completions start together (one prompt each) or ragged masks (any padding), tool
    gaps and empty rows; outcome scores (all-equal groups at times) with or without dense rewards; sampled
    tokens from confident to flat (Σπ² = π² + f·(1 - π)², f in [0, 1], the range a real distribution
    allows, so w = (1 + f)·(1 - π)²); rollout IS weights of 1, truncated at 2, or with zeros; finite
    garbage at masked positions."""
    B, G = group_dims(rng)
    T = int(rng.integers(2, 10))
    mask = _group_completions(rng, B, G, T) if rng.random() < 0.6 else ragged_mask(rng, B, T)
    scores = group_rewards(rng, B, G)
    rewards = _outcome_token_rewards(rng, mask)
    for b in range(B):  # the group's scores on each row's last valid token
        valid = np.flatnonzero(mask[b])
        if valid.size:
            rewards[b, valid[-1]] = scores[b] + (rewards[b, valid[-1]] if rng.random() < 0.3 else 0.0)
    old_logp = logprobs_like(rng, (B, T))
    pi = np.exp(old_logp)
    spread = rng.choice([0.0, 1.0, 0.5]) if rng.random() < 0.3 else rng.uniform(0.0, 1.0, size=(B, T))
    sum_pi_squared = pi**2 + spread * (1.0 - pi) ** 2
    kind = rng.choice(["ones", "truncated", "masked"])
    weights = np.ones((B, T)) if kind == "ones" else np.minimum(np.exp(rng.normal(0.0, 0.4, size=(B, T))), 2.0)
    if kind == "masked":
        weights = np.where(rng.random((B, T)) < 0.2, 0.0, weights)
    garbage = rng.uniform(-3.0, 3.0, size=(3, B, T))
    return (
        {"token_rewards": rewards, "mask": mask, "group_size": G, "old_logp": np.where(mask, old_logp, garbage[0]),
         "sum_pi_squared": np.where(mask, sum_pi_squared, garbage[1]), "is_weights": np.where(mask, weights, garbage[2])},
        {
            "align": str(rng.choice(["position", "valid_token"])),
            "zero_tail": bool(rng.random() < 0.7),
            "tail_length": str(rng.choice(["extent", "count"])),
            "eps": float(rng.choice([0.0, 1e-8, 1e-3])),
        },
    )


def _otb(rewards, m, G, pi, S, rho=None, **kw):
    """optimal_token_baseline_advantages with old_logp = log(pi): pi and S = sum_pi_squared written out, so
    every w = 1 - 2 pi + S (times rho^2) is a hand number."""
    args = {"token_rewards": f64(rewards), "mask": m, "group_size": G, "old_logp": np.log(f64(pi)),
            "sum_pi_squared": f64(S), "is_weights": None if rho is None else f64(rho)}
    return lambda: build("optimal_token_baseline_advantages", args, kw)


# The spec's worked example: row 0 w = 0.5, 0.25, 0.25 (W = 0.5, 0.75, 1), row 1 w = 0.75 (W = 0.75, 1.5);
# returns 1 and 0; B = 0.4 and 1/3 where both rows are present, row 0 alone at position 3.
M_OTB = mask(".xxx", ".xx.")
R_OTB = [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
PI_OTB = [[0.5] * 4, [0.25] * 4]
S_OTB = [[0.5, 0.5, 0.25, 0.25], [0.25] * 4]
RET_OTB = where(M_OTB, [[0.0, 1.0, 1.0, 1.0], [0.0] * 4])
add("optimal_token_baseline_advantages/worked-example",
    "G = 2, position alignment: B = 0.4 and 1/3 where both rows are present; row 0 alone at position 3 (the "
    "unique longest): zero tail, B = 0",
    _otb(R_OTB, M_OTB, 2, PI_OTB, S_OTB),
    expect=(where(M_OTB, [[0.0, 0.6, 2 / 3, 1.0], [0.0, -0.4, -1 / 3, 0.0]]), RET_OTB))
add("optimal_token_baseline_advantages/no-zero-tail",
    "zero_tail False: at position 3 row 0 is its own baseline (B = its return, A = 0)",
    _otb(R_OTB, M_OTB, 2, PI_OTB, S_OTB, zero_tail=False),
    expect=(where(M_OTB, [[0.0, 0.6, 2 / 3, 0.0], [0.0, -0.4, -1 / 3, 0.0]]), RET_OTB))
add("optimal_token_baseline_advantages/nonfinite-at-masked",
    "the worked example with NaN, +-inf and 1e30 at masked positions of every per-token input: never read",
    _otb([[nan, 0.0, 0.0, 1.0], [inf, 0.0, 0.0, -inf]], M_OTB, 2, [[0.5, 0.5, 0.5, 0.5], [0.25, 0.25, 0.25, inf]],
         [[1e30, 0.5, 0.25, 0.25], [nan, 0.25, 0.25, inf]], [[-inf, 1.0, 1.0, 1.0], [1e30, 1.0, 1.0, nan]]),
    expect=(where(M_OTB, [[0.0, 0.6, 2 / 3, 1.0], [0.0, -0.4, -1 / 3, 0.0]]), RET_OTB))
add("optimal_token_baseline_advantages/group-of-one",
    "G = 1: no baseline, the advantage is the return-to-go (0.5 + 1 and 1; 2)",
    _otb([[0.0, 0.5, 1.0], [0.0, 2.0, 0.0]], mask(".xx", ".x."), 1, [[0.5] * 3] * 2, [[0.5] * 3] * 2),
    expect=(where(mask(".xx", ".x."), [[0.0, 1.5, 1.0], [0.0, 2.0, 0.0]]),
            where(mask(".xx", ".x."), [[0.0, 1.5, 1.0], [0.0, 2.0, 0.0]])))
add("optimal_token_baseline_advantages/dense-rewards",
    "dense rewards, equal W in both rows: B is the plain mean of the two returns-to-go at each position",
    _otb([[0.0, 0.5, -0.25, 1.0], [0.0, 0.0, 1.0, 0.0]], mask(".xxx", ".xxx"), 2, [[0.5] * 4] * 2, [[0.5] * 4] * 2),
    expect=(where(mask(".xxx", ".xxx"), [[0.0, 0.125, -0.125, 0.5], [0.0, -0.125, 0.125, -0.5]]),
            where(mask(".xxx", ".xxx"), [[0.0, 1.25, 0.75, 1.0], [0.0, 1.0, 1.0, 0.0]])))
add("optimal_token_baseline_advantages/all-equal-group-exact-zero",
    "every row scores 1 (a tie for the longest: no zero tail), unequal weights: B = 1 at every step, A = 0 exactly",
    _otb([[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]], mask(".xxx", ".x..", ".xxx"), 3,
         [[0.3, 0.7, 0.9, 0.2], [0.6] * 4, [0.1, 0.95, 0.5, 0.8]],
         [[0.09 + 0.245, 0.49 + 0.045, 0.81 + 0.005, 0.04 + 0.32], [0.36 + 0.08] * 4, [0.01 + 0.405, 0.9025 + 0.00125, 0.25 + 0.125, 0.64 + 0.02]]),
    expect=(np.zeros((3, 4)), where(mask(".xxx", ".x..", ".xxx"), [[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]])))
add("optimal_token_baseline_advantages/is-weights-squared",
    "is_weights 2 and (1, 0): W = 2, 4 and 0.5, 0.5 (w·rho^2, a zero weight adds nothing): B = 0.8 and 8/9",
    _otb([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], mask(".xx", ".xx"), 2, [[0.5] * 3] * 2, [[0.5] * 3] * 2,
         [[1.0, 2.0, 2.0], [1.0, 1.0, 0.0]]),
    expect=(where(mask(".xx", ".xx"), [[0.0, 0.2, 1 / 9], [0.0, -0.8, -8 / 9]]),
            where(mask(".xx", ".xx"), [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])))
add("optimal_token_baseline_advantages/zero-weights-no-baseline",
    "pi = 1 and sum_pi_squared = 1 at every token: w = 0, a zero denominator, B = 0 (A = the return)",
    _otb([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], mask(".xx", ".xx"), 2, [[1.0] * 3] * 2, [[1.0] * 3] * 2),
    expect=(where(mask(".xx", ".xx"), [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]),
            where(mask(".xx", ".xx"), [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])))
add("optimal_token_baseline_advantages/empty-row-in-group",
    "a group with one non-empty row: it is the unique longest and alone at every step, so the zero tail "
    "leaves it no baseline (A = its return)",
    _otb([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], mask(".xx", "..."), 2, [[0.5] * 3] * 2, [[0.5] * 3] * 2),
    expect=(where(mask(".xx", "..."), [[0.0, 1.0, 1.0], [0.0] * 3]), where(mask(".xx", "..."), [[0.0, 1.0, 1.0], [0.0] * 3])))
# a tool token at position 2 of row 0: w = 0.5 at every token, W = 0.5, 1, 1.5 and 0.5, 1
M_OTB_GAP = mask(".x.xx", ".xx..")
R_OTB_GAP = [[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.5, 0.0, 0.0]]
RET_OTB_GAP = where(M_OTB_GAP, [[0.0, 1.0, 0.0, 1.0, 1.0], [0.0, 0.5, 0.5, 0.0, 0.0]])
add("optimal_token_baseline_advantages/position-alignment-with-gap",
    "align 'position': both rows meet at position 1 only (B = 0.75); row 1 alone at 2 (B = its return); row 0 "
    "alone beyond extent 3 (zero tail)",
    _otb(R_OTB_GAP, M_OTB_GAP, 2, [[0.5] * 5] * 2, [[0.5] * 5] * 2),
    expect=(where(M_OTB_GAP, [[0.0, 0.25, 0.0, 1.0, 1.0], [0.0, -0.25, 0.0, 0.0, 0.0]]), RET_OTB_GAP))
add("optimal_token_baseline_advantages/valid-token-alignment",
    "align 'valid_token' (verl's TIR form): the tool token does not count, the rows meet at their first two "
    "valid tokens (B = 0.75 twice); row 0's third token is alone (zero tail)",
    _otb(R_OTB_GAP, M_OTB_GAP, 2, [[0.5] * 5] * 2, [[0.5] * 5] * 2, align="valid_token"),
    expect=(where(M_OTB_GAP, [[0.0, 0.25, 0.0, 0.25, 1.0], [0.0, -0.25, -0.25, 0.0, 0.0]]), RET_OTB_GAP))
# row 1 has a tool gap: 2 tokens over extent 4; row 0 has 4 tokens, extent 5; every return is 1
M_OTB_TAIL = mask(".xxxx", ".x.x.")
R_OTB_TAIL = [[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0, 0.0]]
RET_OTB_TAIL = where(M_OTB_TAIL, [[0.0, 1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0, 0.0]])
add("optimal_token_baseline_advantages/tail-length-extent",
    "the zero tail starts past the other row's last position (4): only row 0's last token has no baseline",
    _otb(R_OTB_TAIL, M_OTB_TAIL, 2, [[0.5] * 5] * 2, [[0.5] * 5] * 2),
    expect=(where(M_OTB_TAIL, [[0.0, 0.0, 0.0, 0.0, 1.0], [0.0] * 5]), RET_OTB_TAIL))
add("optimal_token_baseline_advantages/tail-length-count",
    "tail_length 'count' (verl): the other row's 2 tokens laid out from the group's first column: row 0 has no "
    "baseline from position 3, where row 1 is still present",
    _otb(R_OTB_TAIL, M_OTB_TAIL, 2, [[0.5] * 5] * 2, [[0.5] * 5] * 2, tail_length="count"),
    expect=(where(M_OTB_TAIL, [[0.0, 0.0, 0.0, 1.0, 1.0], [0.0] * 5]), RET_OTB_TAIL))
add("optimal_token_baseline_advantages/tie-for-longest",
    "two rows share the longest extent: no zero tail, the third row's baseline is unaffected",
    _otb([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0]], mask(".xx", ".xx", ".x."), 3, [[0.5] * 3] * 3, [[0.5] * 3] * 3),
    expect=(where(mask(".xx", ".xx", ".x."), [[0.0, 0.0, 0.5], [0.0, -1.0, -0.5], [0.0, 1.0, 0.0]]),
            where(mask(".xx", ".xx", ".x."), [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 2.0, 0.0]])))


OPTIMAL_TOKEN_BASELINE_ADVANTAGES = Quantity(
    "optimal_token_baseline_advantages",
    "adv.optimal_token_baseline",
    returns="`(advantages, returns)` `[B,T]` each",
    args=(
        Arg("token_rewards", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask"),
        Arg("group_size", "int", "group"), Arg("old_logp", "[B, T]", "token", constant=True),
        Arg("sum_pi_squared", "[B, T]", "token", constant=True),
        Arg("is_weights", "[B, T]", "weights", constant=True, optional=True),
    ),
    keywords=(ALIGN("position"), ZERO_TAIL(True), TAIL_LENGTH("extent"), EPS(0.0)),
    inputs=_optimal_token_baseline_advantages_inputs,
    output="pair",
    invariants=("mask", "group_permutation"),
    question=("align", "zero_tail"),
    variants={"eps": (0.0, 1e-08), "tail_length": ("extent", "count")},
    golden=entries("optimal_token_baseline_advantages"),
    golden_seeds=(1, 6, 21),  # position / valid_token alignment, no zero tail
    # verl's eps 1e-8 and count-based tail: a gapped row (2 tokens over extent 4) beside a full one, IS weights
    # 2^-13 so that W = w·rho^2 = 2^-27 per token is of the size of eps
    preset_inputs=lambda preset, **kw: _otb(
        R_OTB_TAIL[:1] + [[0.0] * 5], M_OTB_TAIL, 2, [[0.5] * 5] * 2, [[0.5] * 5] * 2, [[2.0**-13] * 5] * 2, **kw),
)


RECORDS = (REINFORCE_PP_ADVANTAGES, REINFORCE_PP_BASELINE_ADVANTAGES, REMAX_ADVANTAGES, OPO_ADVANTAGES, GRPO_PASSK_ADVANTAGES, GDPO_ADVANTAGES, MAXRL_ADVANTAGES, GPG_ADVANTAGES, OPTIMAL_TOKEN_BASELINE_ADVANTAGES)
