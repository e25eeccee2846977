"""Adaptive entropy control that applies the coefficient whatever the entropy: the bonus keeps pushing
the entropy up after it has passed the target (Skywork-OR1 applies it only while the entropy is at or
below the target), and from the first step, before anything was measured.

arXiv:2505.22312 (adaptive entropy control); TRL grpo_trainer.py:3206-3209 (1.16.0) gates it:
`apply_coef = entropy_coef if _last_world_entropy <= entropy_target else 0.0`, with
`_last_world_entropy = inf` at the start (:853).
"""

import refimpl
from conformance.mutants.base import Mutant


def entropy_coef_applied(coef, last_entropy, *, target=0.2):
    refimpl.entropy_coef_applied(coef, last_entropy, target=target)  # validation
    return float(coef)  # no gate


MUTANT = Mutant(
    name="entropy_coef_applied_above_target",
    bug_class="adaptive entropy coefficient applied above the entropy target (the gate missing)",
    catalogue=20,
    cites=("arXiv:2505.22312", "trl grpo_trainer.py:3206-3209"),
    signature={"entropy_coef_applied": ("property", "golden")},
    replace={"entropy_coef_applied": entropy_coef_applied},
)
