"""SAPO's soft gate without its 4/τ normalisation: L = −A·σ(τ(r − 1)) instead of −A·(4/τ)·σ(τ(r − 1)),
so the gradient at r = 1 is τ/4 of REINFORCE's instead of equal to it, and changing τ rescales the
learning rate instead of only the gate's width.

SAPO arXiv:2511.20347 (the 4/τ factor makes f'(1) = 1); verl core_algos.py:1650 `gate_function`.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def sapo_token_loss(logp, old_logp, advantages, mask, *, tau_pos=1.0, tau_neg=1.05, **kwargs):
    loss = refimpl.sapo_token_loss(logp, old_logp, advantages, mask, tau_pos=tau_pos, tau_neg=tau_neg, **kwargs)
    A = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(loss)
    tau = torch.where(A > 0, tau_pos, tau_neg).to(loss.dtype)
    return loss * tau / 4  # the 4/τ factor dropped


MUTANT = Mutant(
    name="sapo_gate_unscaled",
    bug_class="SAPO gate without its 4/tau normalisation",
    catalogue=22,
    cites=("arXiv:2511.20347", "verl core_algos.py:1650"),
    signature={
        "sapo_token_loss": ("property", "golden", "invariant:on_policy", "preset:skyrl", "preset:verl"),
    },
    replace={"sapo_token_loss": sapo_token_loss},
)
