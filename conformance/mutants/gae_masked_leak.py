"""GAE run over every position of the row, masked ones included: the values and rewards stored at
padding and tool-observation positions feed `nextvalues` and the recursion (only the output is
masked).

alibaba/ROLL#447 (2026-05-20): mask [1,1,0], r [0,1,0], V [0,0,100], γ = 1, λ = 0.95 gives
[5.7, 6.0, 0] instead of [0.95, 1.0, 0]; verl#50 (dp critic values not masked before GAE); verl
f147ede / verl#1440 (values re-ordered but not the mask); tianshou#869; cleanrl#337.
"""

import torch

from conformance.mutants.base import Mutant, upcast


def gae(token_rewards, values, mask, *, gamma=1.0, lam=1.0):
    m = mask.bool()
    (r, V), out_dtype = upcast(token_rewards, values)
    T = m.shape[1]
    A = torch.zeros_like(r)
    last = torch.zeros_like(r[:, 0])
    for t in reversed(range(T)):  # the plain recursion, no mask inside
        next_value = V[:, t + 1] if t + 1 < T else torch.zeros_like(last)
        delta = r[:, t] + gamma * next_value - V[:, t]
        last = delta + gamma * lam * last
        A[:, t] = last
    returns = A + V
    return torch.where(m, A, 0.0).to(out_dtype), torch.where(m, returns, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="gae_masked_leak",
    bug_class="GAE reads values and rewards at masked positions (padding, tool tokens)",
    catalogue=11,
    cites=("ROLL#447", "verl#50", "verl#1440 (f147ede)", "tianshou#869"),
    signature={
        "gae": ("property", "golden", "invariant:mask", "preset:rlhf_book", "preset:torchtune", "preset:trl"),
    },
    replace={"gae": gae},
)
