"""The behaviour log-probs are the engine's raw log-softmax, before temperature and truncation (vLLM's
default `logprobs_mode="raw_logprobs"`), while the sampler drew from softmax(z/T) truncated: at T != 1
every importance ratio against them is wrong.

trl#4159 (fixed by trl#4163: processed log-probs), open-instruct#1678, vime#64, prime-rl#697 (where the
fix divided the log-probs by T instead: `logprob_divided_by_temperature`).
"""

import refimpl
from conformance.mutants.base import Mutant


def sampling_logprobs(logits, input_ids, mask, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    return refimpl.token_logprobs(logits, input_ids, mask)  # raw: temperature and support ignored


MUTANT = Mutant(
    name="sampling_untempered",
    bug_class="behaviour log-probs taken before temperature and truncation (an engine's raw log-probs)",
    catalogue=5,
    cites=("trl#4159 (trl#4163)", "open-instruct#1678", "vime#64", "prime-rl#697"),
    signature={"sampling_logprobs": ("property", "golden")},
    replace={"sampling_logprobs": sampling_logprobs},
)
