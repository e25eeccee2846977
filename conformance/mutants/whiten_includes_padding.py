"""Whitening statistics taken over the whole tensor, padding included (the output is masked again):
the mean and std are pulled towards the pad values, and a NaN or 1e30 pad poisons every output.

Catalogue class 32 (verl#1527 pads [C]; miles#3229, CP-local statistics; ROLL#475); the catalogue
test: rewards [1,2,3] plus a pad of 100 with mask [1,1,1,0] must whiten over the 3 valid values.
"""

import torch

from conformance.mutants.base import Mutant, upcast


def whiten(x, mask, *, shift_mean=True, std_ddof=1, eps=1e-8):
    m = mask.bool()
    if not m.any():
        return torch.zeros_like(x)
    (xs,), out_dtype = upcast(x)
    mu = xs.mean()  # over every position, padding included
    var = xs.var(correction=std_ddof)
    out = (xs - mu) / torch.sqrt(var + eps)
    return torch.where(m, out if shift_mean else out + mu, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="whiten_includes_padding",
    bug_class="whitening statistics computed over padding as well as valid tokens",
    catalogue=32,
    cites=("verl#1527", "miles#3229", "ROLL#475"),
    signature={
        "whiten": ("property", "golden", "invariant:mask", "preset:openrlhf", "preset:torchtune"),
    },
    replace={"whiten": whiten},
)
