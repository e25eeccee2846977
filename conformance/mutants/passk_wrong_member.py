"""GRPO pass@k credit written at the wrong row: the best member's index within its group is used as an
index into the batch, so every group's margin lands on rows 0..G-1 (the last group's write wins) and
the real best members get 0. verl maps the group-local top-1 index back through ``id2indices``
(core_algos.py:522); dropping that mapping is this bug.

Bug-catalogue class 10 (advantage plumbing); the vector ``grpo_passk_advantages/best-not-first`` shows it.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def grpo_passk_advantages(rewards, group_size, **kwargs):
    correct = refimpl.grpo_passk_advantages(rewards, group_size, **kwargs)
    G = group_size
    out = torch.zeros_like(correct)
    for g in range(rewards.shape[0] // G):
        members = correct[g * G:(g + 1) * G]
        local = int(torch.argmax(rewards[g * G:(g + 1) * G]))
        out[local] = members[local]  # the group-local index used as a batch index
    return out


MUTANT = Mutant(
    name="passk_wrong_member",
    bug_class="pass@k advantage written at the group-local index of the best member instead of its batch row",
    catalogue=10,
    cites=("verl core_algos.py:521-528", "bug-catalogue class 10 [U]"),
    signature={"grpo_passk_advantages": ("property", "golden")},
    replace={"grpo_passk_advantages": grpo_passk_advantages},
)
