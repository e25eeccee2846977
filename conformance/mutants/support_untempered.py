"""The engine's sampling support re-applied on the trainer's side, but to the raw logits: the log-probs are
renormalised over the kept set of softmax(z) instead of softmax(z / T), so at T != 1 every ratio against
the engine's processed log-probs is off even on the same weights.

The temperature half of the sampling distribution dropped where the support half is kept: trl#4159,
open-instruct#1678 (the same trap for the full-vocabulary log-probs).
"""

import refimpl
from conformance.mutants.base import Mutant


def support_logprobs(logits, input_ids, mask, support, *, temperature=1.0):
    return refimpl.support_logprobs(logits, input_ids, mask, support)  # temperature dropped


MUTANT = Mutant(
    name="support_untempered",
    bug_class="log-probs renormalised over the engine's support but before temperature",
    catalogue=5,
    cites=("trl#4159", "open-instruct#1678"),
    signature={"support_logprobs": ("property", "golden")},
    replace={"support_logprobs": support_logprobs},
)
