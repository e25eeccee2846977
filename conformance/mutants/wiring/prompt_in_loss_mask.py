"""Prompt tokens in the loss mask: the mask is built from the attention mask (every non-padding token)
instead of the completion, so the policy is trained to raise the likelihood of its prompts too.

The bug catalogue's class 6 (masks); TRL#2203-style collators that leave labels on the prompt.
"""

from conformance.mutants.wiring._masks import rewrite_mask
from conformance.mutants.wiring.base import WiringMutant


def plant(stack, cfg):
    def attended(batch):
        m = batch.attention_mask.bool().clone()
        m[:, 0] = False  # no log-prob predicts column 0
        return m

    rewrite_mask(stack, attended)


MUTANT = WiringMutant(
    name="prompt_in_loss_mask",
    bug_class="prompt tokens in the loss mask",
    cites=("bug catalogue: prompt tokens trained on",),
    link="trace.mask",
    identifies="prompt tokens in the loss mask",
    plant=plant,
)
