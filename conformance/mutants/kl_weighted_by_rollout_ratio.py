"""The KL regulariser is multiplied by the rollout importance weight along with the policy term: the
penalty towards the reference policy then depends on how the inference engine's numerics differ from
the trainer's, and vanishes on tokens a masked-IS rule zeroed.

modern-quantities.md §1: ms-swift multiplies the KL term by ρ too (grpo_trainer.py:1066), TRL adds the
KL after the weighting (grpo_trainer.py:3146-3150); the spec's `weight_kl=True` expresses ms-swift's
choice. The same class as kl_sign_flipped / policy_old_ref_swapped: the KL term wired wrongly
(bug-catalogue class 7).
"""

import refimpl
from conformance.mutants.base import Mutant


def corrected_policy_loss(*args, **kwargs):
    return refimpl.corrected_policy_loss(*args, **{**kwargs, "weight_kl": True})


MUTANT = Mutant(
    name="kl_weighted_by_rollout_ratio",
    bug_class="KL penalty multiplied by the rollout importance weight",
    catalogue=7,
    cites=("trl grpo_trainer.py:3146", "ms-swift grpo_trainer.py:1066 (modern-quantities.md)", "bug-catalogue class 7"),
    signature={"corrected_policy_loss": ("property", "golden")},
    replace={"corrected_policy_loss": corrected_policy_loss},
)
