"""The GSPO sequence ratio averages the log-ratio over every position of the row, masked ones
included: s = exp(Σ_all (logp - old_logp) / n). Changing only a masked log-ratio changes the loss.

Soup#723 (2026-09-06): batch-centring leaked masked tokens; changing only a masked log-ratio from
-2 to -6 changed the loss from -0.333 to -0.906; trl#3823; Fast-LLM#544. GSPO: arXiv:2507.18071.
"""

import torch

from conformance.mutants.base import Mutant, upcast
from refimpl.masking import masked_advantages


def gspo_token_loss(logp, old_logp, advantages, mask, *, eps_low=3e-4, eps_high=4e-4, form="sequence"):
    m = mask.bool()
    (lp, old), out_dtype = upcast(logp, old_logp)
    n = m.sum(dim=1, keepdim=True).clamp(min=1).to(lp.dtype)
    log_s = (lp - old).sum(dim=1, keepdim=True) / n  # masked positions enter the sum
    if form == "sequence":
        ratio = torch.exp(log_s).expand(m.shape)
    else:
        ratio = torch.exp(lp - lp.detach() + log_s.detach())
    A = masked_advantages(advantages, m, lp.dtype)
    unclipped, clipped = -A * ratio, -A * ratio.clamp(1 - eps_low, 1 + eps_high)
    return torch.where(m, torch.where(unclipped >= clipped, unclipped, clipped), 0.0).to(out_dtype)


MUTANT = Mutant(
    name="gspo_mean_includes_masked",
    bug_class="GSPO sequence ratio averages masked positions into the log-ratio mean",
    catalogue=27,
    cites=("Soup#723", "trl#3823", "Fast-LLM#544", "arXiv:2507.18071"),
    signature={
        "gspo_token_loss": (
            "property", "golden", "invariant:mask", "invariant:on_policy", "preset:areal", "preset:openrlhf",
            "preset:rlhf_book", "preset:skyrl", "preset:trl", "preset:verl",
        ),
    },
    replace={"gspo_token_loss": gspo_token_loss},
)
