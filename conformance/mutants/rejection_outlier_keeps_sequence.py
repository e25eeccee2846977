"""An outlier token does not reject its sequence: `level="seq_all"` (one token outside the bounds
drops the whole sequence, SkyRL's outlier-token mask) is applied per token, so the rest of a
sequence the engine sampled from a different distribution is still trained on.

SkyRL off_policy_correction_utils.py (outlier-token mask vs token mask, modern-quantities.md §1);
verl's seq_max options serve the same purpose (rollout_corr_helper.py:360). Only a row that mixes kept
and rejected tokens shows it, which the seeded cases rarely draw under `seq_all`: the golden vector
`rollout_rejection_mask/seq-all-outlier-token` pins it.
"""

import refimpl
from conformance.mutants.base import Mutant


def rollout_rejection_mask(old_logp, rollout_logp, mask, *, level="token", **kwargs):
    level = "token" if level == "seq_all" else level
    return refimpl.rollout_rejection_mask(old_logp, rollout_logp, mask, level=level, **kwargs)


MUTANT = Mutant(
    name="rejection_outlier_keeps_sequence",
    bug_class="an outlier token rejects only itself where it must reject its whole sequence",
    catalogue=16,
    cites=("SkyRL off_policy_correction_utils.py", "verl rollout_corr_helper.py:360"),
    signature={"rollout_rejection_mask": ("golden",)},
    replace={"rollout_rejection_mask": rollout_rejection_mask},
)
