"""Prompt tokens are trained on: the completion mask is replaced by "every position up to the end of
the completion" (the attention mask of prompt + completion), so the loss and its gradient reach the
prompt's logits.

trl 4ae35af / trl#1185 (instruction span left unmasked); trl#1920 (unmatchable response template,
so the whole row was trained); OpenRLHF 4e15591 / #237 (prompt logits in DPO not masked);
A1.5_Smart_Contract#10.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    m = mask.bool()
    upto_end = torch.flip(torch.cumsum(torch.flip(m.int(), [1]), dim=1), [1]) > 0  # t <= last valid
    upto_end[:, 0] = False  # the first token has no prediction
    return refimpl.token_logprobs(logits, input_ids, upto_end, temperature=temperature)


MUTANT = Mutant(
    name="logprob_prompt_trained",
    bug_class="prompt tokens trained on (the completion mask replaced by the prompt + completion span)",
    catalogue=31,
    cites=("trl#1185 (4ae35af)", "trl#1920", "OpenRLHF#237 (4e15591)"),
    signature={"token_logprobs": ("property", "golden", "invariant:mask")},
    replace={"token_logprobs": token_logprobs},
)
