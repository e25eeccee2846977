"""The keep-sampling-mask option set, but the trainer's log-probs still taken over the whole vocabulary: the
engine's recorded support is never applied, so the importance ratio against the engine's processed
log-probs still carries the kept mass S that the mask was meant to remove.

DeepSeek-V3.2 (arXiv:2512.02556, "Keep Sampling Mask"); the mismatch it removes: trl#6789, vllm#42259.
"""

import refimpl
from conformance.mutants.base import Mutant


def support_logprobs(logits, input_ids, mask, support, *, temperature=1.0):
    return refimpl.token_logprobs(logits, input_ids, mask, temperature=temperature)  # support ignored


MUTANT = Mutant(
    name="support_mask_ignored",
    bug_class="the engine's sampling support recorded but not applied: trainer log-probs over the full vocabulary",
    catalogue=5,
    cites=("arXiv:2512.02556", "trl#6789", "vllm#42259"),
    signature={"support_logprobs": ("property", "golden")},
    replace={"support_logprobs": support_logprobs},
)
