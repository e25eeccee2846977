"""Labels not shifted: token t is scored with the logits *at* t (which predict token t+1).

The off-by-one of the logits/labels shift, in the "too early" direction: trl 3bf9449 / trl#1718
(PPO response masks shifted), lucidrains/PaLM-rlhf-pytorch#31, prime-rl#1525 (a one-position offset
between trainer and inference log-probs), ms-swift#8427, unsloth#4181. Silent whenever the shapes
happen to match.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    # refimpl reads logits[:, t-1] for token t; hand it logits moved one step left: logits[:, t]
    unshifted = torch.cat([logits[:, 1:], logits[:, -1:]], dim=1)
    return refimpl.token_logprobs(unshifted, input_ids, mask, temperature=temperature)


MUTANT = Mutant(
    name="logprob_no_shift",
    bug_class="logits/labels shift missing: token t scored with the logits at t instead of t-1",
    catalogue=6,
    cites=("trl#1718 (3bf9449)", "PaLM-rlhf-pytorch#31", "prime-rl#1525", "ms-swift#8427"),
    signature={"token_logprobs": ("property", "golden", "invariant:mask")},
    replace={"token_logprobs": token_logprobs},
)
