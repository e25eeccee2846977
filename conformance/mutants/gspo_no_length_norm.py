"""The GSPO sequence ratio without its length normalisation: s = exp(Σ_valid (logp - old_logp)), the
sequence-level *importance weight* (a product of token ratios), instead of GSPO's geometric mean.

Catalogue class 27 ("the usual mistakes: ... no length normalisation"); trl#5814 (a maintainer on
sequence-IS using a sum while GSPO uses a mean: two different objects); GSPO arXiv:2507.18071.
"""

import refimpl
from conformance.mutants.base import Mutant


def gspo_token_loss(logp, old_logp, advantages, mask, **kwargs):
    m = mask.bool()
    n = m.sum(dim=1, keepdim=True).to(logp.dtype)
    # refimpl divides the summed log-ratio by n; scaling every valid log-ratio by n undoes it (value
    # and gradient: the scaled old_logp keeps its dependence on logp)
    scaled_old = logp - (logp - old_logp) * n
    return refimpl.gspo_token_loss(logp, scaled_old, advantages, m, **kwargs)


MUTANT = Mutant(
    name="gspo_no_length_norm",
    bug_class="GSPO sequence ratio not length-normalised (sum of log-ratios instead of their mean)",
    catalogue=27,
    cites=("trl#5814", "arXiv:2507.18071"),
    signature={
        "gspo_token_loss": (
            "property", "golden", "invariant:on_policy", "preset:areal", "preset:openrlhf", "preset:rlhf_book",
            "preset:skyrl", "preset:trl", "preset:verl",
        ),
    },
    replace={"gspo_token_loss": gspo_token_loss},
)
