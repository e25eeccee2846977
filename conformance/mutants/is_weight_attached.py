"""The rollout importance weight is left attached to the autograd graph: the weight ρ = π_old/π_rollout
is built from the trainer's recomputed old log-probs, and without a detach a gradient flows into them
(and, through a shared forward, into the policy), where IS theory makes the weight a constant.

verl rollout_corr_helper.py ("Detach weights to prevent gradient flow (mathematically required by IS
theory)"); the same class as bug-catalogue #28 (CISPO weight not detached) and #30 (value targets).
"""

from conformance.mutants._rollout_weights import weights
from conformance.mutants.base import Mutant


def rollout_is_weights(old_logp, rollout_logp, mask, **kwargs):
    return weights(old_logp, rollout_logp, mask, detach=False, **kwargs)


MUTANT = Mutant(
    name="is_weight_attached",
    bug_class="rollout importance weight left attached to the graph (a gradient reaches the log-probs)",
    catalogue=28,
    cites=("verl rollout_corr_helper.py compute_rollout_correction_weights", "bug-catalogue class 28"),
    signature={"rollout_is_weights": ("invariant:detached",)},
    replace={"rollout_is_weights": rollout_is_weights},
    attaches_gradient=True,
)
