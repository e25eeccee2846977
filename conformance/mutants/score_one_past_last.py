"""The sequence score is written one position past the last valid token (the first padding slot,
`sequence_lengths + 1`), where the mask removes it: the reward signal is silently dropped.

trl#1893 / trl#3750 (the score lands on the first PAD slot; fix PR trl#5338); trl 1b1140a / trl#2575
(RLOO `token_level_kl` did not place the score at the last token); gpt-neox#1285; minimind#541.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant
from refimpl.rewards import last_valid_positions


def rlhf_token_rewards(scores, logp, ref_logp, mask, *, kl_coef, estimator="k1", **kwargs):
    m = mask.bool()
    kl_part = refimpl.rlhf_token_rewards(torch.zeros_like(scores), logp, ref_logp, m, kl_coef=kl_coef,
                                         estimator=estimator, **kwargs)
    one_past = torch.zeros_like(m)
    one_past[:, 1:] = last_valid_positions(m)[:, :-1]  # t_n + 1 (nothing when t_n = T - 1)
    placed = torch.where(one_past, scores.to(kl_part.dtype).unsqueeze(1), 0.0)
    return torch.where(m, kl_part + placed, 0.0)  # the mask then removes it


MUTANT = Mutant(
    name="score_one_past_last",
    bug_class="sequence score placed one position past the last valid token (masked away)",
    catalogue=8,
    cites=("trl#1893", "trl#3750", "trl#2575 (1b1140a)", "gpt-neox#1285"),
    signature={"rlhf_token_rewards": ("property", "golden", "invariant:on_policy")},
    replace={"rlhf_token_rewards": rlhf_token_rewards},
)
