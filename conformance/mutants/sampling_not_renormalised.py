"""Behaviour log-probs taken over the full vocabulary when the engine sampled from a top-k / top-p /
min-p truncated distribution: log S (the log of the kept mass) is missing, so an importance ratio
against the engine's processed log-probs carries a spurious factor S.

trl#6789, trl#7269, vllm#42259, prime-rl#3235 (at top_k = 20 about 11% of the gradient survives);
NeMo-RL#69 (raw log-probs "incorrect for top-k, top-p sampling").
"""

import refimpl
from conformance.mutants.base import Mutant


def sampling_logprobs(logits, input_ids, mask, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    return refimpl.token_logprobs(logits, input_ids, mask, temperature=temperature)  # support ignored


MUTANT = Mutant(
    name="sampling_not_renormalised",
    bug_class="sampling log-probs not renormalised over the kept top-k/top-p/min-p support (log S missing)",
    catalogue=5,
    cites=("trl#6789", "trl#7269", "vllm#42259", "prime-rl#3235"),
    signature={"sampling_logprobs": ("property", "golden")},
    replace={"sampling_logprobs": sampling_logprobs},
)
