"""The loss mask is shifted one position late against the token-aligned log-probs (``mask[:, :-1]`` used
where ``mask[:, 1:]`` was meant): the first generated token is never trained, the one after EOS is.

verl#3287 (2d6c6db: the SFT loss mask always masked the first generated token); trl#5620.
"""

import torch

from conformance.mutants.wiring._masks import rewrite_mask
from conformance.mutants.wiring.base import WiringMutant


def plant(stack, cfg):
    def late(batch):
        m = torch.zeros_like(batch.mask)
        m[:, 1:] = batch.mask[:, :-1]
        return m

    rewrite_mask(stack, late)


MUTANT = WiringMutant(
    name="loss_mask_shifted",
    bug_class="loss mask shifted one position late against the log-probs",
    cites=("verl#3287 (2d6c6db)", "trl#5620"),
    link="trace.mask",
    identifies="loss mask shifted one column late",
    plant=plant,
)
