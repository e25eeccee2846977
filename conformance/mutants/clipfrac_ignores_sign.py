"""The clip fraction counts every token whose ratio is outside [1 - ε_low, 1 + ε_high], whatever the
advantage's sign: tokens on the unclipped branch (A > 0 with a low ratio, A < 0 with a high one, and
A = 0) are reported as clipped.

trl 5b586da / trl#3175 (2025-03-29): `is_clipped` ignored the sign of the advantage. Catalogue test:
(ratio, A) = (1.5, +1), (0.5, +1), (0.5, -1), (1.5, -1) with ε = 0.2: clip fraction 0.5; this gives 1.0.
"""

import torch

from conformance.mutants.base import Mutant, upcast


def ppo_clipped_mask(logp, old_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None,
                     log_ratio_clamp=None):
    m = mask.bool()
    (lp, old), out_dtype = upcast(logp, old_logp)
    d = torch.where(m, lp - old, 0.0)
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(d)
    is_clipped = (ratio < 1 - eps_low) | (ratio > 1 + eps_high)  # no look at the advantage
    return torch.where(m, is_clipped.to(lp.dtype), 0.0).to(out_dtype).detach()


MUTANT = Mutant(
    name="clipfrac_ignores_sign",
    bug_class="clip fraction ignores the advantage sign (counts ratios outside the range as clipped)",
    catalogue=21,
    cites=("trl#3175 (5b586da)",),
    signature={"ppo_clipped_mask": ("property", "golden")},
    replace={"ppo_clipped_mask": ppo_clipped_mask},
)
