"""The off-policy sequence mask drops every sequence whose divergence exceeds the threshold, ignoring
the advantage: DeepSeek-V3.2's mask only drops *negative-advantage* sequences (those are the ones
whose off-policy gradient destabilises training), positive ones are always kept.

arXiv:2512.02556 eq. for M_{i,t}; TRL grpo_trainer.py:2945 get_off_policy_mask
(`is_pos_adv | is_low_kl`).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def off_policy_sequence_mask(logp, old_logp, advantages, mask, **kwargs):
    negative = -torch.ones_like(advantages)  # every sequence treated as negative-advantage
    return refimpl.off_policy_sequence_mask(logp, old_logp, negative, mask, **kwargs)


MUTANT = Mutant(
    name="opsm_ignores_advantage",
    bug_class="off-policy sequence mask ignores the advantage sign (drops positive-advantage sequences too)",
    catalogue=21,
    cites=("arXiv:2512.02556", "trl grpo_trainer.py:2945"),
    signature={"off_policy_sequence_mask": ("property", "golden")},
    replace={"off_policy_sequence_mask": off_policy_sequence_mask},
)
