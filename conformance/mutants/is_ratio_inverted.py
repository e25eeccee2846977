"""The rollout importance weight is inverted: π_rollout / π_old instead of π_old / π_rollout (the
engine's and the trainer's log-probs swapped in the log-ratio), so tokens the inference engine
over-sampled are up-weighted instead of down-weighted.

TIS (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training")
defines ρ = π_train(y)/π_rollout(y); modern-quantities.md §1 (verl rollout_corr_helper.py:522,
TRL grpo_trainer.py:2662 `old_per_token_logps - sampling_per_token_logps`); the same swap for the KL
estimators is bug-catalogue class 7 (kl_args_swapped).
"""

import refimpl
from conformance.mutants.base import Mutant


def rollout_is_weights(old_logp, rollout_logp, mask, **kwargs):
    return refimpl.rollout_is_weights(rollout_logp, old_logp, mask, **kwargs)  # arguments swapped


MUTANT = Mutant(
    name="is_ratio_inverted",
    bug_class="rollout importance weight inverted (rollout / trainer instead of trainer / rollout)",
    catalogue=7,
    cites=("Yao et al. 2025 (TIS)", "verl rollout_corr_helper.py:522", "trl grpo_trainer.py:2662"),
    signature={
        "rollout_is_weights": (
            "property", "golden", "preset:areal", "preset:ms_swift", "preset:openrlhf", "preset:skyrl",
            "preset:trl", "preset:verl",
        ),
    },
    replace={"rollout_is_weights": rollout_is_weights},
)
