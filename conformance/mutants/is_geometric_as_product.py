"""The sequence-level rollout weight is the product of the token ratios where the geometric mean was
asked: exp(Σ log ρ) instead of exp(mean log ρ), a weight that grows or vanishes exponentially with
the length of the sequence.

The two conventions coexist (modern-quantities.md §1): TRL, verl and SkyRL's TIS take the product,
ms-swift, OpenRLHF and AReaL the geometric mean (AReaL functional.py apply_rejection_sampling: "avoid
the 'length trap'"); GSPO's sequence ratio is length-normalised for the same reason (gspo_no_length_norm).
"""

import refimpl
from conformance.mutants.base import Mutant


def rollout_is_weights(old_logp, rollout_logp, mask, **kwargs):
    return refimpl.rollout_is_weights(old_logp, rollout_logp, mask, **{**kwargs, "seq_stat": "product"})


MUTANT = Mutant(
    name="is_geometric_as_product",
    bug_class="sequence importance weight is the product of token ratios where the geometric mean was asked",
    catalogue=27,
    cites=("AReaL functional.py apply_rejection_sampling", "ms-swift grpo_trainer.py:2328", "arXiv:2507.18071"),
    signature={"rollout_is_weights": ("property", "golden")},
    replace={"rollout_is_weights": rollout_is_weights},
)
