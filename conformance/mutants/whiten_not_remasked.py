"""The whitened output is not re-masked: statistics over the valid tokens are right, but
(x - μ)/σ is also written at padding and prompt positions, which then carry non-zero advantages.

verl 4e9586a / verl#1527 (2025-05-15): the RF++-baseline `masked_whiten` output was not re-masked, so
padding had non-zero advantages.
"""

import torch

from conformance.mutants.base import Mutant, upcast


def whiten(x, mask, *, shift_mean=True, std_ddof=1, eps=1e-8):
    m = mask.bool()
    (xs,), out_dtype = upcast(x)
    n = m.sum()
    mu = torch.where(m, xs, 0.0).sum() / n
    var = torch.where(m, xs - mu, 0.0).square().sum() / (n - std_ddof)
    out = (xs - mu) / torch.sqrt(var + eps)  # every position, masked ones included
    return (out if shift_mean else out + mu).to(out_dtype)


MUTANT = Mutant(
    name="whiten_not_remasked",
    bug_class="whitened values not re-masked: padding gets non-zero advantages",
    catalogue=10,
    cites=("verl#1527 (4e9586a)",),
    signature={
        "whiten": ("property", "golden", "invariant:mask", "preset:openrlhf", "preset:torchtune"),
    },
    replace={"whiten": whiten},
)
