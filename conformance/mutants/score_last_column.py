"""Padding-side confusion: the score index is computed for one padding side and used on the other.
Here the score goes to the tensor's last column (right for left-padded rows); for right-padded rows
it lands on padding and is masked away.

trl#2778 (2025-02-06, labelled bug): the PPO example left-pads while `get_reward` assumes right
padding (the mirror image of this mutant); verl#6392 (the reward placed on the last
attention-valid token, a tool observation).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def rlhf_token_rewards(scores, logp, ref_logp, mask, *, kl_coef, estimator="k1", **kwargs):
    m = mask.bool()
    kl_part = refimpl.rlhf_token_rewards(torch.zeros_like(scores), logp, ref_logp, m, kl_coef=kl_coef,
                                         estimator=estimator, **kwargs)
    last_column = torch.zeros_like(m)
    last_column[:, -1] = True
    placed = torch.where(last_column, scores.to(kl_part.dtype).unsqueeze(1), 0.0)
    return torch.where(m, kl_part + placed, 0.0)


MUTANT = Mutant(
    name="score_last_column",
    bug_class="sequence score placed in the tensor's last column, assuming left padding",
    catalogue=8,
    cites=("trl#2778", "verl#6392"),
    signature={"rlhf_token_rewards": ("property", "golden", "invariant:on_policy")},
    replace={"rlhf_token_rewards": rlhf_token_rewards},
)
