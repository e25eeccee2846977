"""The log-probs are divided by the temperature instead of the logits: log softmax(z) / T.

prime-rl#697 (2025-08-08): `logprobs /= temperature` "is just plain wrong"; prime-rl#679. With
z = [2, 1, 0], T = 0.5, token 0: the right value is -0.1429, this one -0.8152 (ratio 0.511).
"""

import refimpl
from conformance.mutants.base import Mutant


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    return refimpl.token_logprobs(logits, input_ids, mask) / temperature


MUTANT = Mutant(
    name="logprob_divided_by_temperature",
    bug_class="log-probs divided by the temperature instead of the logits",
    catalogue=4,
    cites=("prime-rl#697", "prime-rl#679"),
    signature={"token_logprobs": ("property", "golden")},
    replace={"token_logprobs": token_logprobs},
)
