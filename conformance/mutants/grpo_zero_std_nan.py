"""Advantages divided by the group std with no epsilon: a group whose rewards are all equal gives
0/0 = NaN (every completion right, or every one wrong — the most common groups late in training).

ms-swift#8123 (GDPO NaN advantages: loss 0, grad NaN); NeMo-RL#1518 (LOO + normalisation with a
near-zero std exploding to ±1e6). Catalogue class 9 test: group rewards [1,1,1,1] must give exactly
[0,0,0,0]. The spec: where the std is 0 the advantage is exactly 0, never NaN.
"""

import refimpl
from conformance.mutants.base import Mutant, upcast


def grpo_advantages(rewards, group_size, *, scale="group", std_ddof=1, eps=1e-6, singleton="zero"):
    if group_size == 1 or scale == "none":
        return refimpl.grpo_advantages(rewards, group_size, scale=scale, std_ddof=std_ddof, eps=eps, singleton=singleton)
    (r,), out_dtype = upcast(rewards)
    groups = r.view(-1, group_size)
    centered = groups - groups.mean(dim=1, keepdim=True)
    if scale == "group":
        std = groups.std(dim=1, correction=std_ddof, keepdim=True)
    else:
        std = r.std(correction=std_ddof)
    return (centered / std).reshape(-1).to(out_dtype)  # eps dropped: 0/0 for an all-equal group


MUTANT = Mutant(
    name="grpo_zero_std_nan",
    bug_class="advantages divided by a zero group std with no epsilon: all-equal groups give 0/0 = NaN",
    catalogue=9,
    cites=("ms-swift#8123", "NeMo-RL#1518"),
    signature={
        "grpo_advantages": (
            "property", "golden", "preset:areal", "preset:ms_swift", "preset:openrlhf", "preset:rlhf_book",
            "preset:skyrl", "preset:torchrl", "preset:trl", "preset:verl",
        ),
    },
    replace={"grpo_advantages": grpo_advantages},
)
