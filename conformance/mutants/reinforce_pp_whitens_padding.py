"""REINFORCE++ returns whitened over every position of the [B, T] tensor, padding and prompt included
(the returns are 0 there), then masked again: the mean is pulled towards 0 and the variance is over
B·T values instead of the valid tokens, so every advantage is off. The returns themselves are right.

Bug-catalogue class 32 (pads in the whitening statistics: verl#1527, miles#3229, ROLL#475); the vector
``reinforce_pp_advantages/padding-not-in-statistics`` (4 valid returns among 12 positions) shows it.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def reinforce_pp_advantages(token_rewards, mask, *, std_ddof=1, eps=1e-8, **kwargs):
    m = mask.bool()
    _, G = refimpl.reinforce_pp_advantages(token_rewards, mask, std_ddof=std_ddof, eps=eps, **kwargs)
    x = G.double()  # 0 at every masked position
    if x.numel() - std_ddof <= 0:
        return torch.zeros_like(G), G
    A = (x - x.mean()) / torch.sqrt(x.var(correction=std_ddof) + eps)  # over all B*T positions
    return torch.where(m, A, 0.0).to(G.dtype), G


MUTANT = Mutant(
    name="reinforce_pp_whitens_padding",
    bug_class="REINFORCE++ advantages whitened over padding and prompt positions as well as valid tokens",
    catalogue=32,
    cites=("verl#1527", "miles#3229", "ROLL#475"),
    signature={"reinforce_pp_advantages": ("property", "golden", "preset:openrlhf", "preset:skyrl")},
    replace={"reinforce_pp_advantages": reinforce_pp_advantages},
)
