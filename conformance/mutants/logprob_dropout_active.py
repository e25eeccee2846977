"""Log-probs recomputed with the model in train mode: dropout perturbs the logits, so old, reference
and current log-probs differ even on-policy (ratio != 1 in the first minibatch).

"N+ implementation details of RLHF with PPO" (arXiv:2403.17031): dropout makes PPO ratios != 1;
trl#3234 / trl#2042 (`disable_dropout`); verl c790552 / verl#4708 (Megatron `compute_log_prob` in
train mode, LoRA dropout); PaddleNLP#10596. The dropout mask here is drawn from a fixed seed so the
mutant is reproducible (a real one is not even that).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant

P = 0.1


def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
    gen = torch.Generator().manual_seed(0)
    keep = torch.rand(logits.shape, generator=gen) >= P
    dropped = torch.where(keep, logits / (1 - P), torch.zeros((), dtype=logits.dtype))
    return refimpl.token_logprobs(dropped, input_ids, mask, temperature=temperature)


MUTANT = Mutant(
    name="logprob_dropout_active",
    bug_class="dropout left active (train mode) when recomputing log-probs",
    catalogue=23,
    cites=("arXiv:2403.17031", "trl#3234", "verl#4708 (c790552)", "PaddleNLP#10596"),
    signature={"token_logprobs": ("property", "golden")},
    replace={"token_logprobs": token_logprobs},
)
