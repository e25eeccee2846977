"""The cap on the behaviour importance weight of the decoupled objective is ignored: tokens whose
proximal/behaviour ratio exceeds `behave_imp_weight_cap` are neither truncated nor rejected, so one
very stale sample can dominate the update.

AReaL functional.py ppo_actor_loss_fn / apply_rejection_sampling (`behave_imp_weight_cap`,
modern-quantities.md §2); bug-catalogue class 16 (a clamp that is not applied).
"""

import refimpl
from conformance.mutants.base import Mutant


def decoupled_ppo_token_loss(logp, prox_logp, behav_logp, advantages, mask, **kwargs):
    return refimpl.decoupled_ppo_token_loss(logp, prox_logp, behav_logp, advantages, mask,
                                            **{**kwargs, "behav_cap": None})


MUTANT = Mutant(
    name="decoupled_cap_ignored",
    bug_class="decoupled PPO behaviour-weight cap ignored",
    catalogue=16,
    cites=("AReaL functional.py ppo_actor_loss_fn", "bug-catalogue class 16"),
    signature={
        "decoupled_ppo_token_loss": ("property", "golden", "preset:areal", "preset:skyrl", "preset:verl"),
    },
    replace={"decoupled_ppo_token_loss": decoupled_ppo_token_loss},
)
