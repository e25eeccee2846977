"""The return/advantage recursion resets at a masked span inside a completion (a tool observation in
a multi-turn trajectory): each run of valid tokens is treated as its own episode, so the reward
after the tool call never reaches the tokens before it.

verl#6376 (2026-05-17) and verl#7278 (2026-08-06): RF++ reward-to-go reset at an internal
tool-observation mask; r = [0,0,1], mask = [1,0,1], γ = .5 gives [0, .5, 1] instead of [.5, 1, 1];
slime#1370; radixark/miles#1827.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def gae(token_rewards, values, mask, *, gamma=1.0, lam=1.0):
    m = mask.bool()
    starts = m.clone()
    starts[:, 1:] &= ~m[:, :-1]
    run = torch.cumsum(starts.int(), dim=1)  # 1, 2, ... for the runs of valid tokens of each row
    A = torch.zeros(m.shape, dtype=token_rewards.dtype)
    R = torch.zeros(m.shape, dtype=token_rewards.dtype)
    for k in range(1, int(run.max()) + 1 if m.any() else 1):  # one "episode" per run
        a, r = refimpl.gae(token_rewards, values, m & (run == k), gamma=gamma, lam=lam)
        A, R = A + a, R + r
    return A, R


MUTANT = Mutant(
    name="gae_reset_at_tool_mask",
    bug_class="return recursion resets at a masked tool-observation span inside a completion",
    catalogue=19,
    cites=("verl#6376", "verl#7278", "slime#1370", "miles#1827"),
    signature={"gae": ("golden",)},
    replace={"gae": gae},
)
