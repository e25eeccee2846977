"""Dual clip applied whatever the advantage's sign: `min(L, -c·A)` also for A > 0, where -c·A is
below every loss value, so every positive-advantage token gets the constant -c·A and no gradient.

tianshou#433 (2021-09-01): dual clip applied regardless of the advantage sign; the dual-clip paper
(Ye et al., arXiv:1912.09729) defines it for A < 0 only.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant
from refimpl.masking import masked_advantages


def ppo_token_loss(logp, old_logp, advantages, mask, *, dual_clip=None, **kwargs):
    loss = refimpl.ppo_token_loss(logp, old_logp, advantages, mask, **kwargs)
    if dual_clip is None:
        return loss
    cap = -dual_clip * masked_advantages(advantages, mask.bool(), loss.dtype)
    return torch.where(loss > cap, cap, loss)  # both signs


MUTANT = Mutant(
    name="ppo_dual_clip_positive",
    bug_class="dual clip applied to positive advantages too",
    catalogue=29,
    cites=("tianshou#433", "arXiv:1912.09729"),
    signature={"ppo_token_loss": ("property", "golden", "invariant:on_policy", "preset:verl")},
    replace={"ppo_token_loss": ppo_token_loss},
)
