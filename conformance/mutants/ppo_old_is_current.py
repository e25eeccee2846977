"""The "old" log-probs are the current ones detached (`old = logp.detach()`), also when the batch is
reused after an optimiser step: the ratio is always 1 and the clip never acts (`num_iterations` is
inert).

PrimeIntellect-ai/verifiers#320 (2025-09-11, merged): `old_per_token_logps` set to
`per_token_logps` in `compute_loss`; meta-pytorch/torchforge#571 (`logprobs - logprobs.detach()`);
tt-blacksmith#731.
"""

import refimpl
from conformance.mutants.base import Mutant


def ppo_token_loss(logp, old_logp, advantages, mask, **kwargs):
    return refimpl.ppo_token_loss(logp, logp.detach(), advantages, mask, **kwargs)


MUTANT = Mutant(
    name="ppo_old_is_current",
    bug_class="old log-probs equal to the current ones on reused batches (ratio always 1, clipping inert)",
    catalogue=13,
    cites=("verifiers#320", "torchforge#571", "tt-blacksmith#731"),
    signature={
        "ppo_token_loss": (
            "property", "golden", "preset:open_instruct", "preset:openrlhf", "preset:skyrl", "preset:torchtune",
            "preset:verl",
        ),
    },
    replace={"ppo_token_loss": ppo_token_loss},
)
