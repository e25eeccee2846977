"""The sequence-level rollout log-ratio sums over padding and prompt positions too: the sequence
statistic reads tokens the mask excludes (garbage log-probs of padded positions, or a NaN the
engine returned for them).

The masked sums of verl (`verl_F.masked_sum`, rollout_corr_helper.py:578), TRL
(`per_token_logps_diff * mask`, grpo_trainer.py:2662) and AReaL exist for this; the same class as
gspo_mean_includes_masked (bug-catalogue #27) and whiten_includes_padding (#32).
"""

from conformance.mutants._rollout_weights import weights
from conformance.mutants.base import Mutant


def rollout_is_weights(old_logp, rollout_logp, mask, **kwargs):
    return weights(old_logp, rollout_logp, mask, pad_in_sequence=True, **kwargs)


MUTANT = Mutant(
    name="is_seq_stat_over_padding",
    bug_class="sequence importance statistic summed over padding as well as valid tokens",
    catalogue=27,
    cites=("verl rollout_corr_helper.py:578", "trl grpo_trainer.py:2662", "bug-catalogue class 27"),
    signature={"rollout_is_weights": ("property", "golden", "invariant:mask", "preset:trl")},
    replace={"rollout_is_weights": rollout_is_weights},
)
