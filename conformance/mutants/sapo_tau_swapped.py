"""SAPO's temperatures are picked with the advantage sign reversed: τ_neg gates the positive-advantage
tokens and τ_pos the negative ones, so the asymmetry that makes negative updates decay faster (the
paper's τ_neg > τ_pos) is inverted.

SAPO arXiv:2511.20347 eq. for τ_{i,t}; verl core_algos.py:1663 (`torch.where(advantages > 0, tau_pos,
tau_neg)`), TRL grpo_trainer.py:3119.
"""

import refimpl
from conformance.mutants.base import Mutant


def sapo_token_loss(logp, old_logp, advantages, mask, *, tau_pos=1.0, tau_neg=1.05, **kwargs):
    return refimpl.sapo_token_loss(logp, old_logp, advantages, mask, tau_pos=tau_neg, tau_neg=tau_pos, **kwargs)


MUTANT = Mutant(
    name="sapo_tau_swapped",
    bug_class="SAPO temperatures chosen by the wrong advantage sign (tau_pos and tau_neg swapped)",
    catalogue=22,
    cites=("arXiv:2511.20347", "verl core_algos.py:1663", "trl grpo_trainer.py:3119"),
    signature={
        "sapo_token_loss": ("property", "golden", "invariant:on_policy", "preset:skyrl", "preset:verl"),
    },
    replace={"sapo_token_loss": sapo_token_loss},
)
