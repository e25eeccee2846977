"""DRO's quadratic penalty added with the wrong sign: L = −(A·logπ + ½β(logπ − logπ_old)²), which rewards
moving away from the sampling policy instead of penalising it (the same wiring mistake as a KL
penalty with the wrong sign, bug-catalogue class 7).

verl core_algos.py:2034 (`-(log_prob * advantages - 0.5 * beta * log_ratio.square())`).
"""

import refimpl
from conformance.mutants.base import Mutant


def dro_token_loss(logp, old_logp, advantages, mask, *, beta):
    base = refimpl.dro_token_loss(logp, old_logp, advantages, mask, beta=beta)  # −A·logπ + ½βd²
    pg = refimpl.dro_token_loss(logp, logp.detach(), advantages, mask, beta=beta)  # −A·logπ (d = 0)
    return 2 * pg - base  # −A·logπ − ½βd²


MUTANT = Mutant(
    name="dro_penalty_sign",
    bug_class="DRO quadratic penalty with the wrong sign (divergence from the sampler rewarded)",
    catalogue=7,
    cites=("verl core_algos.py:2034", "bug-catalogue class 7"),
    signature={"dro_token_loss": ("property", "golden")},
    replace={"dro_token_loss": dro_token_loss},
)
