"""Advantages broadcast over the wrong groups: the rewards are grouped with a strided view (row i in group
i mod P) while the rollout lays each prompt's completions out contiguously, so every completion is compared
with completions of other prompts.

The bug catalogue's class 4 (group layout); verl's ``uid`` / interleave and repeat mismatches.
"""

from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import loop


def plant(stack, cfg):
    def sequence_advantages(cfg, rewards_global):
        G = cfg.group_size
        P = rewards_global.shape[0] // G
        strided = rewards_global.reshape(G, P).T.reshape(-1)  # group p: rows p, p + P, p + 2P, ...
        A = original(cfg, strided)
        return A.reshape(P, G).T.reshape(-1)

    original = replace_attr(stack, loop, "sequence_advantages", sequence_advantages)


MUTANT = WiringMutant(
    name="advantages_wrong_group",
    bug_class="advantages computed over the wrong groups (strided instead of contiguous)",
    cites=("bug catalogue: group layout",),
    link="trace.advantages",
    identifies="advantages from another group layout",
    plant=plant,
)
