"""Records of the outcome advantages of spec v1: REINFORCE, RLOO and GRPO (adv.reinforce, adv.rloo,
adv.grpo)."""

from __future__ import annotations

import numpy as np

from conformance.records.builders import Catalogue, build, f64
from conformance.records.inputs import Inputs, group_dims, group_rewards
from conformance.records.keywords import BASELINE, EPS, SCALE, SINGLETON, STD_DDOF
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# reinforce_advantages (adv.reinforce)
# ---------------------------------------------------------------------------------------------------


def _reinforce_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B = int(rng.integers(1, 9))
    return {"rewards": group_rewards(rng, B, 1)}, {"baseline": str(rng.choice(["none", "batch_mean"]))}


def _rf(rewards, **kw):
    return lambda: build("reinforce_advantages", {"rewards": f64(rewards)}, kw)


add("reinforce_advantages/baseline-none",
    "baseline 'none' returns the rewards unchanged",
    _rf([1.0, 0.0, 0.5, -2.0]),
    expect=f64([1.0, 0.0, 0.5, -2.0]))
add("reinforce_advantages/batch-mean",
    "baseline 'batch_mean' subtracts the mean reward of the batch",
    _rf([1.0, 0.0, 0.5, -2.5], baseline="batch_mean"),
    expect=f64([1.25, 0.25, 0.75, -2.25]))
add("reinforce_advantages/batch-mean-single-row",
    "a batch of one row minus its own mean is 0",
    _rf([3.5], baseline="batch_mean"),
    expect=f64([0.0]))
add("reinforce_advantages/batch-mean-all-equal",
    "equal rewards minus their mean are all 0",
    _rf([2.0, 2.0, 2.0], baseline="batch_mean"),
    expect=f64([0.0, 0.0, 0.0]))
add("reinforce_advantages/batch-mean-large-offset",
    "rewards around 1e6: the baseline removes the offset exactly",
    _rf([1e6 + 1.0, 1e6, 1e6 - 1.0, 1e6 + 0.5], baseline="batch_mean"),
    expect=f64([0.875, -0.125, -1.125, 0.375]))
add("reinforce_advantages/batch-mean-binary",
    "binary rewards (2 of 8 correct) with the batch-mean baseline",
    _rf([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], baseline="batch_mean"),
    expect=f64([0.75, -0.25, -0.25, -0.25, 0.75, -0.25, -0.25, -0.25]))


REINFORCE_ADVANTAGES = Quantity(
    "reinforce_advantages",
    "adv.reinforce",
    returns='`[B]`; baseline `"none"` or `"batch_mean"`',
    args=(Arg("rewards", "[B]", "seq", constant=True),),
    keywords=(BASELINE("none"),),
    inputs=_reinforce_advantages_inputs,
    invariants=(),
    question=("baseline",),
    golden=entries("reinforce_advantages"),
    golden_seeds=(1, 2, 3),
)


# ---------------------------------------------------------------------------------------------------
# rloo_advantages (adv.rloo)
# ---------------------------------------------------------------------------------------------------


def _rloo_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, G = group_dims(rng)
    return {"rewards": group_rewards(rng, B, G), "group_size": G}, {}


def _rloo(rewards, G):
    return lambda: build("rloo_advantages", {"rewards": f64(rewards), "group_size": G}, {})


add("rloo_advantages/worked-example-g4",
    "the spec's worked example: G = 4, group [1, 0, 0, 0] gives [1, -1/3, -1/3, -1/3]",
    _rloo([1.0, 0.0, 0.0, 0.0], 4),
    expect=f64([1.0, -1 / 3, -1 / 3, -1 / 3]))
add("rloo_advantages/group-of-2",
    "G = 2: each advantage is the difference with the other sample",
    _rloo([0.5, -1.5], 2),
    expect=f64([2.0, -2.0]))
add("rloo_advantages/two-groups-g3",
    "two groups of 3: each baseline uses only its own group",
    _rloo([1.0, 2.0, 6.0, 0.0, 0.0, 3.0], 3),
    expect=f64([-3.0, -1.5, 4.5, -1.5, -1.5, 3.0]))
add("rloo_advantages/group-size-1",
    "G = 1: no other sample to form a baseline, every advantage is 0",
    _rloo([2.0, -1.0, 0.5], 1),
    expect=f64([0.0, 0.0, 0.0]))
add("rloo_advantages/all-equal-group",
    "an all-equal group gives 0 (up to rounding), never NaN",
    _rloo([0.7, 0.7, 0.7, 0.7], 4),
    expect=f64([0.0, 0.0, 0.0, 0.0]))
add("rloo_advantages/whole-batch-one-group",
    "G = B: one group spanning the whole batch",
    _rloo([3.0, 1.0, 2.0, 0.0, 4.0, 2.0], 6),
    expect=f64([1.2, -1.2, 0.0, -2.4, 2.4, 0.0]))
add("rloo_advantages/large-offset",
    "rewards around 1000: leave-one-out differences are shift invariant",
    _rloo([1000.0, 1001.0, 1002.0, 1004.0], 2),
    expect=f64([-1.0, 1.0, -2.0, 2.0]))


add("rloo_advantages/group-size-1-raw",
    "singleton 'raw' (verl's loop rloo): a one-sample group keeps its reward as the advantage",
    lambda: build("rloo_advantages", {"rewards": f64([2.0, -1.0, 0.5]), "group_size": 1}, {"singleton": "raw"}),
    expect=f64([2.0, -1.0, 0.5]))
add("rloo_advantages/singleton-raw-ignored-for-g2",
    "singleton 'raw' changes nothing when G > 1",
    lambda: build("rloo_advantages", {"rewards": f64([1.0, 0.0, 0.5, -1.5]), "group_size": 2}, {"singleton": "raw"}),
    expect=f64([1.0, -1.0, 2.0, -2.0]))


RLOO_ADVANTAGES = Quantity(
    "rloo_advantages",
    "adv.rloo",
    returns='`[B]`; r_i − mean_{j≠i} r_j; group of size 1 gives 0 (`singleton="raw"`, v1.1: r)',
    args=(Arg("rewards", "[B]", "seq", constant=True), Arg("group_size", "int", "group")),
    keywords=(SINGLETON("zero"),),
    inputs=_rloo_advantages_inputs,
    invariants=("group_permutation",),
    variants={"singleton": ("zero", "raw")},
    golden=entries("rloo_advantages"),
    golden_seeds=(1, 2, 3),
    # spec v1.1 advantage estimators: G = 1 for the singleton presets (verl, SkyRL), a masked tool token with
    # gamma 0.9 for the gap presets (OpenRLHF, SkyRL), several groups with unequal row lengths for the rest
    preset_inputs=lambda preset, **kw: lambda: build(
        "rloo_advantages", {"rewards": f64([1.0, -0.5, 3.0]), "group_size": 1}, kw),
)


# ---------------------------------------------------------------------------------------------------
# grpo_advantages (adv.grpo)
# ---------------------------------------------------------------------------------------------------


def _grpo_advantages_inputs(rng: np.random.Generator) -> Inputs:
    B, G = group_dims(rng)
    return (
        {"rewards": group_rewards(rng, B, G), "group_size": G},
        {
            "scale": str(rng.choice(["group", "batch", "none"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([0.0, 1e-9, 1e-6, 1e-4])),
            "singleton": str(rng.choice(["zero", "raw"])),
        },
    )


def _grpo(rewards, G, **kw):
    return lambda: build("grpo_advantages", {"rewards": f64(rewards), "group_size": G}, kw)


R8 = [1.0, 0.0, 0.0, 0.0, 0.5, 1.5, 2.5, 3.5]  # group stds (ddof 1): 0.5 and sqrt(5/3)

add("grpo_advantages/group-unbiased-std",
    "canonical: (r - group mean) / (unbiased group std + 1e-6)",
    _grpo(R8, 4),
    expect=f64([0.75, -0.25, -0.25, -0.25, -1.5, -0.5, 0.5, 1.5])
    / f64([0.5 + 1e-6] * 4 + [np.sqrt(5 / 3) + 1e-6] * 4))
add("grpo_advantages/biased-std-ddof0",
    "std_ddof 0: the biased group std",
    _grpo(R8, 4, std_ddof=0),
    expect=f64([0.75, -0.25, -0.25, -0.25, -1.5, -0.5, 0.5, 1.5])
    / f64([np.sqrt(0.1875) + 1e-6] * 4 + [np.sqrt(1.25) + 1e-6] * 4))
add("grpo_advantages/scale-batch",
    "scale 'batch': group-centred rewards divided by the std of all B rewards",
    _grpo([1.0, 0.0, 3.0, 2.0], 2, scale="batch"),
    expect=f64([0.5, -0.5, 0.5, -0.5]) / (np.sqrt(5 / 3) + 1e-6))
add("grpo_advantages/scale-none",
    "scale 'none': rewards minus the group mean only",
    _grpo([1.0, 0.0, 3.0, 2.0, 4.0, 4.0], 3, scale="none"),
    expect=f64([-1 / 3, -4 / 3, 5 / 3, -4 / 3, 2 / 3, 2 / 3]))
add("grpo_advantages/all-equal-group-eps0",
    "eps 0 and an all-equal group: 0/0 is defined as 0 (never NaN); the other group is a z-score",
    _grpo([2.0, 2.0, 2.0, 2.0, 1.0, 0.0, 1.0, 0.0], 4, eps=0.0),
    expect=f64([0.0] * 4 + [0.5, -0.5, 0.5, -0.5]) / f64([1.0] * 4 + [np.sqrt(1 / 3)] * 4))
add("grpo_advantages/all-equal-group-eps-default",
    "an all-equal group with eps 1e-6 gives 0",
    _grpo([2.0, 2.0, 2.0, 2.0, 1.0, 0.0, 1.0, 0.0], 4),
    expect=f64([0.0] * 4 + [0.5, -0.5, 0.5, -0.5]) / f64([1.0] * 4 + [np.sqrt(1 / 3) + 1e-6] * 4))
add("grpo_advantages/singleton-zero",
    "G = 1 with the canonical singleton 'zero': every advantage is 0",
    _grpo([1.0, -0.5, 3.0], 1),
    expect=f64([0.0, 0.0, 0.0]))
add("grpo_advantages/singleton-raw",
    "G = 1 with singleton 'raw' (verl): mean 0 and std 1, so A = r / (1 + eps)",
    _grpo([1.0, -0.5, 3.0], 1, singleton="raw"),
    expect=f64([1.0, -0.5, 3.0]) / (1 + 1e-6))
add("grpo_advantages/singleton-raw-ignored-for-g2",
    "singleton 'raw' changes nothing when G > 1",
    _grpo([1.0, 0.0, 0.0, 1.0], 2, singleton="raw"),
    expect=f64([0.5, -0.5, -0.5, 0.5]) / (np.sqrt(0.5) + 1e-6))
add("grpo_advantages/eps0-z-score",
    "eps 0: the exact z-score with the unbiased std",
    _grpo([1.0, 2.0, 3.0, 6.0], 4, eps=0.0),
    expect=f64([-2.0, -1.0, 0.0, 3.0]) / np.sqrt(14 / 3))
add("grpo_advantages/g2-binary",
    "G = 2 with binary rewards: +-1/sqrt(2) for mixed groups, 0 for a solved group",
    _grpo([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], 2),
    expect=f64([0.5, -0.5, -0.5, 0.5, 0.0, 0.0]) / (np.sqrt(0.5) + 1e-6))
add("grpo_advantages/scale-batch-with-equal-group",
    "scale 'batch' with an all-equal group: its advantages are 0, the batch std still counts it",
    _grpo([2.0, 2.0, 1.0, 0.0], 2, scale="batch"),
    expect=f64([0.0, 0.0, 0.5, -0.5]) / (np.sqrt(2.75 / 3) + 1e-6))
add("grpo_advantages/large-offset",
    "rewards around 1000: the group mean removes the offset",
    _grpo([1000.25, 1000.0, 1000.5, 1000.75], 4),
    expect=f64([-0.125, -0.375, 0.125, 0.375]) / (np.sqrt(0.3125 / 3) + 1e-6))


GRPO_ADVANTAGES = Quantity(
    "grpo_advantages",
    "adv.grpo",
    returns="`[B]`",
    args=(Arg("rewards", "[B]", "seq", constant=True), Arg("group_size", "int", "group")),
    keywords=(SCALE("group"), STD_DDOF(1), EPS(1e-06), SINGLETON("zero")),
    inputs=_grpo_advantages_inputs,
    invariants=("group_permutation",),
    question=("scale",),
    variants={"std_ddof": (1, 0), "eps": (1e-06, 0.0, 0.0001, 1e-08, 1e-09), "singleton": ("zero", "raw")},
    golden=entries("grpo_advantages"),
    golden_seeds=(1, 2, 3),
    # G = 4 with a mixed, an all-equal and a binary group; verl's deviation needs G = 1.
    preset_inputs=lambda preset, **kw: _grpo(
        [1.0, -0.5, 3.0] if preset == "verl" else
        [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 3.0, 0.0, 1.0, 2.0],
        1 if preset == "verl" else 4, **kw),
)


RECORDS = (REINFORCE_ADVANTAGES, RLOO_ADVANTAGES, GRPO_ADVANTAGES)
