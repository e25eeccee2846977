"""Old and reference log-probs swapped at the loss: the PPO ratio is taken against the reference policy and
the KL term anchors to the sampling policy (both tensors exist, same shape, same mask: nothing crashes).

The bug catalogue's class 3 (old vs reference vs rollout log-probs confused); OpenRLHF#529-style argument
order mix-ups.
"""

from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import loop


def plant(stack, cfg):
    def objective_token_loss(cfg, out, old_logp, ref_logp, advantages, mask):
        return original(cfg, out, ref_logp, old_logp, advantages, mask)

    original = replace_attr(stack, loop, "objective_token_loss", objective_token_loss)


MUTANT = WiringMutant(
    name="old_ref_swapped",
    bug_class="old and reference log-probs swapped at the loss (ratio to the reference, KL to the old policy)",
    cites=("bug catalogue: old vs reference log-probs",),
    link="trace.grad",
    identifies="old and reference log-probs swapped",
    plant=plant,
)
