"""Value targets not detached: the returns are rebuilt from the critic's current predictions inside the
graph (returns = values + (returns - old values)), so the value loss's gradient through the targets cancels
the one through the predictions and the critic never learns.

The bug catalogue's class 9 (a weight or target left on the graph).
"""

import torch

import refimpl
from conformance.mutants.wiring.base import WiringMutant, replace_attr


def plant(stack, cfg):
    # refimpl.value_token_loss treats its targets as constants (it detaches them), so the bug is re-created
    # in plain torch: the unclipped 1/2 (V - R)^2 with R built from the live predictions
    def value_token_loss(values, old_values, returns, mask, *, clip=None):
        target = values + (returns - old_values)
        return torch.where(mask.bool(), 0.5 * (values - target) ** 2, torch.zeros_like(values))

    replace_attr(stack, refimpl, "value_token_loss", value_token_loss)


MUTANT = WiringMutant(
    name="value_targets_attached",
    bug_class="value targets left attached to the graph",
    cites=("bug catalogue: targets on the graph",),
    link="trace.value",
    identifies="value targets not detached",
    plant=plant,
    config=dict(algo="ppo", value_clip=None),
)
