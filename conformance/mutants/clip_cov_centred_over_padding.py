"""Clip-Cov's covariance centred with plain means over every position of the batch, padding and
prompt included: Ā = advantages.mean() and l̄ = logp.mean() instead of the means over the valid
tokens. The padding's values (a sentinel log-prob, the row's advantage broadcast over its padding)
shift every covariance, so different tokens fall inside (cov_low, cov_high); a NaN at a padded
position makes every covariance NaN and nothing is cut. The golden vectors with padding and empty rows
and the masked-poison invariant catch it (random property cases rarely move the few cut tokens).

verl centres with `verl_F.masked_mean(advantages, response_mask)` and `masked_mean(log_prob, ...)`
(core_algos.py:1812-1814), SkyRL with `masked_mean(..., loss_mask)`: the statistic must ignore pads,
as whitening must (bug-catalogue class 32: verl#1527, padding in the whitening statistics).
"""

import math

import torch

from conformance.mutants.base import Mutant, upcast
from refimpl.masking import masked_advantages


def clip_cov_mask(logp, old_logp, advantages, mask, draws, *, fraction=2e-4, cov_low=1.0, cov_high=5.0,
                  eps_low=0.2, eps_high=0.2):
    m = mask.bool()
    (lp, old), _ = upcast(logp, old_logp)
    lp, old = lp.detach().double(), old.detach().double()
    A = advantages.detach().double()
    A = A.unsqueeze(1).expand(m.shape) if A.dim() == 1 else A
    with torch.no_grad():
        cov = (A - A.mean()) * (lp - lp.mean())  # the bug: means over all B*T positions
        r = torch.exp(torch.where(m, lp - old, 0.0))
        A_valid = masked_advantages(advantages.detach(), m, torch.float64)
        clipped = ((A_valid > 0) & (r > 1.0 + eps_high)) | ((A_valid < 0) & (r < 1.0 - eps_low))
        candidates = m & ~clipped & (cov > cov_low) & (cov < cov_high)
        flat = candidates.flatten().nonzero().squeeze(1)
        key = torch.where(m, draws.detach().double(), 0.0).flatten()[flat]
        n = max(1, math.floor(fraction * int(m.sum())))
        cut = torch.zeros(m.numel(), dtype=torch.bool)
        cut[flat[torch.sort(key, stable=True).indices[:n]]] = True
    return m & ~cut.view(m.shape)


MUTANT = Mutant(
    name="clip_cov_centred_over_padding",
    bug_class="Clip-Cov covariance centred with means over padding and prompt positions too",
    catalogue=32,
    cites=("verl core_algos.py:1812-1814", "SkyRL ppo_utils.py compute_policy_loss_clip_cov", "verl#1527",
           "bug-catalogue class 32"),
    signature={"clip_cov_mask": ("property", "golden", "invariant:mask")},  # property: a one-keyword-at-a-time case triggers it
    replace={"clip_cov_mask": clip_cov_mask},
)
