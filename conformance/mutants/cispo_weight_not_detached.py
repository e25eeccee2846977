"""The CISPO importance weight is not detached: L = -clip(r)·A·logp with the gradient flowing through
r, so dL/dlogp = -r·A·(1 + logp) instead of -sg(w)·A — the sign flips for logp < -1.

MiniMax-M1 (arXiv:2506.13585) eqs. 4-5 put a stop-gradient on the weight; the reference
implementations detach it (Liger#1054 `clamp(max).detach()`, slime#2067, AReaL#1412, NeMo-RL#2531).
A shipped missing-detach bug: none public (catalogue [U]); the catalogue's test: A = 1, logp = -2,
r = 1.1 must give -1.1, the no-detach mutant +1.1.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant, upcast
from refimpl.masking import masked_advantages


def cispo_token_loss(logp, old_logp, advantages, mask, *, eps_low=None, eps_high=0.28, bound="relative",
                     surrogate="logp"):
    if surrogate != "logp":  # torchrl's "ratio" surrogate keeps its weight on the graph by definition
        return refimpl.cispo_token_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high,
                                        bound=bound, surrogate=surrogate)
    m = mask.bool()
    (lp, old), out_dtype = upcast(logp, old_logp)
    lp, old = torch.where(m, lp, 0.0), torch.where(m, old, 0.0)
    high = 1 + eps_high if bound == "relative" else eps_high
    low = None if eps_low is None else 1 - eps_low
    weight = torch.exp(lp - old).clamp(min=low, max=high)  # no torch.no_grad / .detach()
    A = masked_advantages(advantages, m, lp.dtype)
    return torch.where(m, -weight * A * lp, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="cispo_weight_not_detached",
    bug_class="CISPO importance weight not detached (gradient flows through the clipped ratio)",
    catalogue=28,
    cites=("arXiv:2506.13585", "Liger#1054", "slime#2067", "bug-catalogue class 28 [U]"),
    signature={"cispo_token_loss": ("property", "golden", "invariant:on_policy", "preset:trl", "preset:verl",
                                    "preset:open_instruct", "preset:rlhf_book", "preset:skyrl", "preset:skyrl@a956457")},
    replace={"cispo_token_loss": cispo_token_loss},
)
