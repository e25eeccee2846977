"""`scale_rewards` mis-wired: under "group" the std is computed but not applied, under "none" and
"batch" the advantages are divided by the group std.

trl 35702ce / trl#3992 (2025-09-03; introduced by trl#3935 on 2025-08-21, shipped in v0.22.x).
Catalogue test: groups [[1,0,0,0],[1,1,1,0]] give [.75,-.25,-.25,-.25 | .25,.25,.25,-.75] for
"none", twice that for "group", ÷0.5345 for "batch".
"""

import refimpl
from conformance.mutants.base import Mutant

WIRED_TO = {"group": "none", "none": "group", "batch": "group"}


def grpo_advantages(rewards, group_size, *, scale="group", **kwargs):
    return refimpl.grpo_advantages(rewards, group_size, scale=WIRED_TO[scale], **kwargs)


MUTANT = Mutant(
    name="grpo_scale_miswired",
    bug_class="scale_rewards modes mis-wired (group std not applied under 'group', applied under 'none'/'batch')",
    catalogue=22,
    cites=("trl#3992 (35702ce)", "trl#3935"),
    signature={
        "grpo_advantages": (
            "property", "golden", "preset:areal", "preset:ms_swift", "preset:open_instruct", "preset:openrlhf",
            "preset:rlhf_book", "preset:skyrl", "preset:tinker_cookbook", "preset:torchrl", "preset:trl",
            "preset:verl",
        ),
    },
    replace={"grpo_advantages": grpo_advantages},
)
