"""The sampler draws from softmax(z/T) but the trainer recomputes log-probs from softmax(z).

trl 04f6597 / trl#3029 (2025-03-12) "Fix temperature inconsistency in GRPO trainer"; OpenRLHF
45898fd / #857; verl 5deb8cc / #3133 (Megatron path, found at T = 0.9); unsloth-zoo#832; ms-swift#8427.
Symptom: the on-policy ratio is not 1 at step 0 (trl#4159: first-token IS ratio 2.0 at T = 0.6).
"""

import refimpl
from conformance.mutants.base import Mutant


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    return refimpl.token_logprobs(logits, input_ids, mask)  # temperature dropped


MUTANT = Mutant(
    name="logprob_temperature_missing",
    bug_class="temperature not applied when recomputing log-probs",
    catalogue=4,
    cites=("trl#3029 (04f6597)", "OpenRLHF#857 (45898fd)", "verl#3133 (5deb8cc)", "unsloth-zoo#832"),
    signature={"token_logprobs": ("property", "golden")},
    replace={"token_logprobs": token_logprobs},
)
