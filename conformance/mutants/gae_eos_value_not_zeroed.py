"""The value after the last valid (EOS) token is not zeroed: the final TD error bootstraps from the
critic's value at the next slot (padding) instead of the terminal 0.

verl aa11dd1 / verl#1850 (2025-06-06): the EOS token's value was not zero, which affects GAE for
λ < 1; trl#1536 (bootstrapping on truncation); cleanrl#337 and tianshou#869 (terminal handling).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant
from refimpl.rewards import last_valid_positions


def gae(token_rewards, values, mask, *, gamma=1.0, lam=1.0):
    m = mask.bool()
    after_last = torch.zeros_like(m)
    after_last[:, 1:] = last_valid_positions(m)[:, :-1]
    bootstrap = torch.where(after_last, values, 0.0).sum(dim=1, keepdim=True)  # V at t_n + 1
    # δ_n = r_n + γ·V[t_n + 1] − V_n: the same as adding γ·V[t_n + 1] to the last reward
    rewards = torch.where(last_valid_positions(m), token_rewards + gamma * bootstrap, token_rewards)
    return refimpl.gae(rewards, values, m, gamma=gamma, lam=lam)


MUTANT = Mutant(
    name="gae_eos_value_not_zeroed",
    bug_class="value after the last valid (EOS) token not zeroed: GAE bootstraps from padding",
    catalogue=11,
    cites=("verl#1850 (aa11dd1)", "trl#1536", "cleanrl#337"),
    signature={
        "gae": ("property", "golden", "invariant:mask", "preset:rlhf_book", "preset:torchtune", "preset:trl"),
    },
    replace={"gae": gae},
)
