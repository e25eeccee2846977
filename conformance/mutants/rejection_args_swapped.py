"""The rejection statistic is computed with the trainer's and the engine's log-probs swapped: the
ratio becomes π_rollout/π_old (so asymmetric bounds keep the wrong tokens) and k1/k3 estimate the
other direction of the KL.

This is what verl's k1 options amount to against IcePop's ratio bounds (modern-quantities.md §1:
rollout_corr_helper.py:263 `token_k1 = -log_ratio` compared with [log lo, log hi]): the two agree only
for symmetric bounds.
"""

import refimpl
from conformance.mutants.base import Mutant


def rollout_rejection_mask(old_logp, rollout_logp, mask, **kwargs):
    return refimpl.rollout_rejection_mask(rollout_logp, old_logp, mask, **kwargs)  # arguments swapped


MUTANT = Mutant(
    name="rejection_args_swapped",
    bug_class="rejection statistic with trainer and engine log-probs swapped (bounds applied to the inverse ratio)",
    catalogue=7,
    cites=("verl rollout_corr_helper.py:263", "IcePop (Ring-1T, 2025)"),
    signature={"rollout_rejection_mask": ("property", "golden", "preset:openrlhf", "preset:areal")},
    replace={"rollout_rejection_mask": rollout_rejection_mask},
)
