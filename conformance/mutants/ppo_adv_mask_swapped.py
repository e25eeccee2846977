"""`advantages` and `response_mask` passed to each other's slot of the policy loss: the loss uses
the mask as the advantage (every token A = 1) and "masks" by multiplying with the advantages.

verl fbec86d / verl#2513 (2025-07-14, issue #2506): `advantages` were passed as `response_mask` to
`policy_loss_fn`; verl a43ead6 / verl#1411 (a tensor stacked into the attention-mask slot).
"""


import refimpl
from conformance.mutants.base import Mutant
from refimpl.masking import masked_advantages


def ppo_token_loss(logp, old_logp, advantages, mask, **kwargs):
    m = mask.bool()
    as_advantage = m.to(logp.dtype)  # the mask in the advantages slot
    loss = refimpl.ppo_token_loss(logp, old_logp, as_advantage, m, **kwargs)
    return loss * masked_advantages(advantages, m, loss.dtype)  # the advantages in the mask slot


MUTANT = Mutant(
    name="ppo_adv_mask_swapped",
    bug_class="advantages and response mask swapped in the policy-loss call",
    catalogue=10,
    cites=("verl#2513 (fbec86d)", "verl#2506", "verl#1411 (a43ead6)"),
    signature={
        "ppo_token_loss": (
            "property", "golden", "preset:open_instruct", "preset:openrlhf", "preset:skyrl", "preset:torchtune",
            "preset:verl",
        ),
    },
    replace={"ppo_token_loss": ppo_token_loss},
)
