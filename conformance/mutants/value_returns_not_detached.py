"""The value-loss target is not detached: when the returns were computed from the critic's own values
(R = A + V), the regression pulls the target towards the prediction and the critic gradient is wrong.
The value of the loss is right; only its gradient differs.

Catalogue class 30 (test: "returns and advantages have no grad_fn"); the general-RL instances of a
value not stop-gradiented: keras-io#194, astariul/encode-attend-navigate-pytorch#2. No LLM-trainer
instance is public (catalogue: [U]).
"""

import torch

from conformance.mutants.base import Mutant, upcast


def value_token_loss(values, old_values, returns, mask, *, clip=None):
    m = mask.bool()
    (V, V_old, R), out_dtype = upcast(values, old_values, returns)
    V, V_old, R = (torch.where(m, x, 0.0) for x in (V, V_old, R))  # R keeps its graph
    unclipped = (V - R).square()
    if clip is not None:
        clipped = (V_old + (V - V_old).clamp(-clip, clip) - R).square()
        unclipped = torch.where(unclipped >= clipped, unclipped, clipped)
    return torch.where(m, 0.5 * unclipped, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="value_returns_not_detached",
    bug_class="value-loss targets (returns) not detached: gradient flows into the target",
    catalogue=30,
    cites=("keras-io#194", "encode-attend-navigate-pytorch#2", "bug-catalogue class 30 [U]"),
    signature={"value_token_loss": ("invariant:detached",)},
    replace={"value_token_loss": value_token_loss},
)
