"""The off-policy sequence mask measures the divergence with the wrong sign: log π_θ − log π_old
instead of log π_old − log π_θ, so the sequences the current policy has moved *towards* are dropped
and the ones it moved away from are kept.

DeepSeek-V3.2 (arXiv:2512.02556) OPSM; TRL grpo_trainer.py:2945 get_off_policy_mask ("forward KL
div: log(pi_old) - log(pi_theta)").
"""

import refimpl
from conformance.mutants.base import Mutant


def off_policy_sequence_mask(logp, old_logp, advantages, mask, **kwargs):
    return refimpl.off_policy_sequence_mask(old_logp, logp, advantages, mask, **kwargs)


MUTANT = Mutant(
    name="opsm_kl_sign_flipped",
    bug_class="off-policy sequence mask divergence with the wrong sign (current minus old)",
    catalogue=7,
    cites=("arXiv:2512.02556", "trl grpo_trainer.py:2945"),
    signature={"off_policy_sequence_mask": ("property", "golden")},
    replace={"off_policy_sequence_mask": off_policy_sequence_mask},
)
