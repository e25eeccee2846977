"""DPPO's truncated ratio left on the graph: L = −A·min(r, c)·logπ·keep with the gradient flowing through
r as well as logπ, so dL/dlogπ = −A·r·(1 + logπ) where it should be −A·sg(min(r, c)) — the sign flips
for logπ < −1, as the CISPO weight bug does.

verl core_algos.py:1412 (`truncated_ratio = truncated_ratio.detach()`); bug-catalogue class 28.
"""

import torch

from conformance.mutants.base import Mutant, upcast
from refimpl.masking import masked_advantages


def dppo_token_loss(logp, old_logp, advantages, mask, *, divergence="tv", delta_low=0.2, delta_high=0.2,
                    ratio_cap=None, log_ratio_clamp=None):
    import refimpl

    m = mask.bool()
    (lp, old), out_dtype = upcast(logp, old_logp)
    lp, old = torch.where(m, lp, 0.0), torch.where(m, old, 0.0)
    # the keep mask and the value from the refimpl; the weight recomputed with its graph
    A = masked_advantages(advantages, m, lp.dtype).detach()
    kept = refimpl.dppo_token_loss(logp.detach(), old_logp, A, mask, divergence=divergence, delta_low=delta_low,
                                   delta_high=delta_high, ratio_cap=ratio_cap, log_ratio_clamp=log_ratio_clamp) != 0
    d = lp - old if log_ratio_clamp is None else (lp - old).clamp(-log_ratio_clamp, log_ratio_clamp)
    r = torch.exp(d)
    r = r if ratio_cap is None else r.clamp(max=ratio_cap)  # no detach
    return torch.where(m & kept, -A * r * lp, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="dppo_ratio_attached",
    bug_class="DPPO truncated ratio not detached (gradient flows through the ratio)",
    catalogue=28,
    cites=("verl core_algos.py:1412", "bug-catalogue class 28"),
    signature={"dppo_token_loss": ("property", "golden", "invariant:on_policy", "preset:verl")},
    replace={"dppo_token_loss": dppo_token_loss},
)
