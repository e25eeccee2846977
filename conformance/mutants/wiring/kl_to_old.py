"""The KL term anchors to the old (sampling) policy instead of the reference: the penalty keeps the policy
near last step's, not near the initial model, so it never limits the drift it exists to limit.

The bug catalogue's class 3; the k3-to-old confusion of several GRPO reimplementations.
"""

from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import loop


def plant(stack, cfg):
    def objective_token_loss(cfg, out, old_logp, ref_logp, advantages, mask):
        return original(cfg, out, old_logp, old_logp, advantages, mask)

    original = replace_attr(stack, loop, "objective_token_loss", objective_token_loss)


MUTANT = WiringMutant(
    name="kl_to_old",
    bug_class="KL penalty to the old policy instead of the reference",
    cites=("bug catalogue: KL anchor",),
    link="trace.grad",
    identifies="KL to the old policy instead of the reference",
    plant=plant,
)
