"""Entropy computed at every position, padding and prompt included, instead of the trained tokens
only: the logged mean entropy (and an entropy-quantile training mask) is taken over padding.

trl#2281 / trl#2496 (INVALID_LOGPROB = 1.0 at pads makes entropy negative; fixed by trl#6121);
trl 9708553 / trl#3715 (the entropy-quantile training-mask threshold included pads); open-instruct#756;
trl#6803.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def token_entropy(logits, mask, *, temperature=1.0):
    everywhere = torch.ones_like(mask, dtype=torch.bool)
    everywhere[:, 0] = False  # the only position without a prediction
    return refimpl.token_entropy(logits, everywhere, temperature=temperature)


MUTANT = Mutant(
    name="entropy_over_padding",
    bug_class="entropy computed over padding and prompt positions, not only trained tokens",
    catalogue=20,
    cites=("trl#2281", "trl#2496", "trl#3715 (9708553)", "open-instruct#756"),
    signature={"token_entropy": ("property", "golden", "invariant:mask")},
    replace={"token_entropy": token_entropy},
)
