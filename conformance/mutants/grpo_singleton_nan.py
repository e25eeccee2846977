"""Group size 1 (one completion per prompt): the unbiased std of one element is NaN, and so is every
advantage (and the loss) — or, with eps inside the sqrt, training silently does nothing.

DeepAnalyze#116 (2026-06-27): `num_generations=1` gives std = NaN and a NaN loss on every batch;
axolotl#3353 (the same in GDPO); trl#5773 / #5775 (nanstd of one element). The spec: G = 1 gives
A = 0 (finite).
"""

import warnings

import refimpl
from conformance.mutants.base import Mutant, upcast


def grpo_advantages(rewards, group_size, *, scale="group", std_ddof=1, eps=1e-6, singleton="zero"):
    if group_size != 1:
        return refimpl.grpo_advantages(rewards, group_size, scale=scale, std_ddof=std_ddof, eps=eps, singleton=singleton)
    (r,), out_dtype = upcast(rewards)
    groups = r.view(-1, 1)
    centered = (groups - groups.mean(dim=1, keepdim=True)).view(-1)
    if scale == "none":
        return centered.to(out_dtype)
    with warnings.catch_warnings():  # torch warns of the zero degrees of freedom: the bug, known and wanted here
        warnings.simplefilter("ignore", UserWarning)
        std = groups.std(dim=1, correction=std_ddof).view(-1) if scale == "group" else r.std(correction=std_ddof)
    return (centered / (std + eps)).to(out_dtype)  # std of one element: NaN


MUTANT = Mutant(
    name="grpo_singleton_nan",
    bug_class="group std of a size-1 group is NaN (unbiased std of one element)",
    catalogue=9,
    cites=("DeepAnalyze#116", "axolotl#3353", "trl#5773"),
    signature={
        "grpo_advantages": (
            "property", "golden", "preset:areal", "preset:ms_swift", "preset:openrlhf", "preset:rlhf_book",
            "preset:skyrl", "preset:torchrl", "preset:trl", "preset:verl",
        ),
    },
    replace={"grpo_advantages": grpo_advantages},
)
