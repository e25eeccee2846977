"""The mask is rebuilt from token *values* (`input_ids != pad_id`) with pad_id == eos_id: every EOS
(and any real token with that id) is dropped from training, so the model never learns to stop.

trl 485852c / trl#3200 (2025-04-02) "Fix SFT masking EOS when equal to PAD"; trl 707a717 / trl#6357
(the same in GKD/GOLD); trl#976 (DataCollatorForCompletionOnlyLM); transformers#23530; trl#4970.
The spec: the mask comes from positions (generation lengths), never from token values.
"""

import refimpl
from conformance.records.cases import EOS_ID
from conformance.mutants.base import Mutant

PAD_ID = EOS_ID  # the tokenizer reuses EOS as the padding token


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    from_values = mask.bool() & (input_ids != PAD_ID)  # "not padding", judged by value
    return refimpl.token_logprobs(logits, input_ids, from_values, temperature=temperature)


MUTANT = Mutant(
    name="logprob_eos_masked",
    bug_class="EOS masked out because the mask is built from token values with pad == eos",
    catalogue=3,
    cites=("trl#3200 (485852c)", "trl#6357 (707a717)", "trl#976", "transformers#23530"),
    signature={"token_logprobs": ("property", "golden")},
    replace={"token_logprobs": token_logprobs},
)
