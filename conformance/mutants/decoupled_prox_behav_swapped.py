"""The proximal and behaviour policies are swapped in the decoupled PPO objective: the trust-region
ratio is taken against the (stale) behaviour policy and the importance weight is π_behav/π_prox,
which undoes the decoupling (AReaL arXiv:2505.24298 §4: the clip must be centred on the proximal
policy, the off-policyness corrected by π_prox/π_behav).

AReaL functional.py ppo_actor_loss_fn (`proximal_logprobs` vs `old_logprobs`); the v1 analogue is
policy_old_ref_swapped (bug-catalogue #14).
"""

import refimpl
from conformance.mutants.base import Mutant


def decoupled_ppo_token_loss(logp, prox_logp, behav_logp, advantages, mask, **kwargs):
    return refimpl.decoupled_ppo_token_loss(logp, behav_logp, prox_logp, advantages, mask, **kwargs)


MUTANT = Mutant(
    name="decoupled_prox_behav_swapped",
    bug_class="proximal and behaviour log-probs swapped in the decoupled PPO objective",
    catalogue=14,
    cites=("arXiv:2505.24298", "AReaL functional.py ppo_actor_loss_fn"),
    signature={
        "decoupled_ppo_token_loss": ("property", "golden", "preset:areal", "preset:skyrl", "preset:verl"),
    },
    replace={"decoupled_ppo_token_loss": decoupled_ppo_token_loss},
)
