"""GMPO's sequence ratio taken as the arithmetic mean of the clipped token ratios instead of their
geometric mean: one outlier token then dominates the sequence's weight, which is what the geometric
mean exists to prevent (GMPO arXiv:2507.20673 §3: the arithmetic mean is GRPO's sensitivity).

verl core_algos.py:1928 `geo_mean` (exp of the masked mean of the clipped log-ratios).
"""

import torch

from conformance.mutants.base import Mutant, upcast
from refimpl.masking import masked_advantages


def gmpo_token_loss(logp, old_logp, advantages, mask, *, eps_low=0.4, eps_high=0.4):
    m = mask.bool()
    (lp, old), out_dtype = upcast(logp, old_logp)
    d = torch.where(m, lp - torch.where(m, old, 0.0), 0.0)
    A = masked_advantages(advantages, m, d.dtype).detach()
    sign = torch.sign(A)
    s = sign * torch.minimum(sign * d, sign * d.clamp(-eps_low, eps_high))
    n = m.sum(dim=1, keepdim=True)
    rho = torch.where(m, torch.exp(s), 0.0).sum(dim=1, keepdim=True) / n.clamp(min=1)  # arithmetic mean
    A_bar = A.sum(dim=1, keepdim=True) / n.clamp(min=1)
    return torch.where(m, -A_bar * rho, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="gmpo_arithmetic_mean",
    bug_class="GMPO sequence ratio is the arithmetic mean of token ratios instead of the geometric mean",
    catalogue=27,
    cites=("arXiv:2507.20673", "verl core_algos.py:1928"),
    signature={"gmpo_token_loss": ("property", "golden", "preset:verl")},
    replace={"gmpo_token_loss": gmpo_token_loss},
)
