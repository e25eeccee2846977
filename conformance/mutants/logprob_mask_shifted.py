"""The loss mask is sliced `[:, :-1]` where `[:, 1:]` was meant: it lags the tokens by one position,
so the first generated token is never trained and the position after the last one (EOS/padding) is.

verl 2d6c6db / verl#3287 (2025-09-03): the SFT `loss_mask[:, :-1]` "always masked the first
generated token"; trl#5620 (SFT entropy misaligned by one). The other direction of the shift bug.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    m = mask.bool()
    lagged = torch.zeros_like(m)
    lagged[:, 1:] = m[:, :-1]  # mask[:, :-1] aligned with positions 1..T-1
    return refimpl.token_logprobs(logits, input_ids, lagged, temperature=temperature)


MUTANT = Mutant(
    name="logprob_mask_shifted",
    bug_class="loss mask shifted one position late: the first completion token untrained, the one after the last trained",
    catalogue=6,
    cites=("verl#3287 (2d6c6db)", "trl#5620"),
    signature={"token_logprobs": ("property", "golden", "invariant:mask")},
    replace={"token_logprobs": token_logprobs},
)
