"""VESPO's gamma weight φ(w) left on the graph: the value is right, but the gradient flows through
φ(w(logπ)) as well as logπ, so dL/dlogπ_t = −A·(φ + logπ·φ'(w)·w) instead of −φ·A — a sign and size
error wherever φ is off its peak.

TRL computes the weight under `@torch.no_grad()` ("φ(w) is detached via @torch.no_grad(), only acts as
gradient scaling coefficient", grpo_trainer.py:2972-2990); bug-catalogue class 28 (a weight not detached).
"""

import math

import torch

from conformance.mutants.base import Mutant, upcast
from refimpl.masking import masked_advantages


def vespo_token_loss(logp, old_logp, advantages, mask, *, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0,
                     log_ratio_clamp=None, w_min=None, w_max=None):
    m = mask.bool()
    (lp, old), out_dtype = upcast(logp, old_logp)
    lp, old = torch.where(m, lp, 0.0), torch.where(m, old, 0.0)
    A = masked_advantages(advantages, m, lp.dtype).detach()
    d = lp - old.detach()
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    S = torch.where(m, d, 0.0).sum(dim=1, keepdim=True)
    if w_min is not None or w_max is not None:
        S = S.clamp(min=None if w_min is None else math.log(w_min), max=None if w_max is None else math.log(w_max))
    k = torch.where(A >= 0, k_pos, k_neg).to(lp.dtype)
    lam = torch.where(A >= 0, lambda_pos, lambda_neg).to(lp.dtype)
    phi = torch.exp(lam + k * S - lam * torch.exp(S))  # no torch.no_grad / detach
    return torch.where(m, -phi * A * lp, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="vespo_weight_attached",
    bug_class="VESPO gamma weight not detached (gradient flows through the sequence ratio)",
    catalogue=28,
    cites=("trl grpo_trainer.py:2972-2990", "bug-catalogue class 28"),
    signature={"vespo_token_loss": ("property", "golden", "invariant:on_policy", "preset:trl")},
    replace={"vespo_token_loss": vespo_token_loss},
)
