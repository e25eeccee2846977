"""Entropy computed unshifted: column t gets the entropy of the distribution produced at position t (the one
that predicts x_{t+1}) instead of the one that predicted x_t, so the entropy bonus and its metric are one
token off (the last completion token's entropy is that of the padding after it).

trl#5620 (SFT entropy misaligned by one); the bug catalogue's class 1 (shift).
"""

import torch

import refimpl
from conformance.mutants.wiring.base import WiringMutant, replace_attr


def plant(stack, cfg):
    def token_logprobs_and_entropy_from_hidden(hidden, weight, input_ids, mask, **kw):
        logp, _ = original(hidden, weight, input_ids, mask, **kw)
        ahead = torch.cat([hidden[:, 1:], hidden[:, -1:]], dim=1)  # column t reads hidden state t
        _, entropy = original(ahead, weight, input_ids, mask, **kw)
        return logp, entropy

    original = replace_attr(stack, refimpl, "token_logprobs_and_entropy_from_hidden", token_logprobs_and_entropy_from_hidden)


MUTANT = WiringMutant(
    name="entropy_unshifted",
    bug_class="entropy computed unshifted (one token off the log-probs)",
    cites=("trl#5620",),
    link="trace.entropy",
    identifies="entropy computed unshifted",
    plant=plant,
    config=dict(entropy_coef=0.01),
)
