"""The current and behaviour log-probs are swapped in the version interpolation of the proximal
policy: the approximation leans towards the current policy when the sample is stale, the opposite of
log π_prox ≈ log π_behav + α (log π_θ − log π_behav) with α = (v − 1 − v_b)/(v − v_b).

AReaL actor.py compute_prox_logp_approximations (modern-quantities.md §2); bug-catalogue class 14
(policies confused).
"""

import refimpl
from conformance.mutants.base import Mutant


def proximal_logp_interpolation(logp, behav_logp, behav_version, mask, **kwargs):
    return refimpl.proximal_logp_interpolation(behav_logp, logp, behav_version, mask, **kwargs)


MUTANT = Mutant(
    name="proximal_current_behav_swapped",
    bug_class="current and behaviour log-probs swapped in the proximal-policy interpolation",
    catalogue=14,
    cites=("AReaL actor.py compute_prox_logp_approximations", "bug-catalogue class 14"),
    signature={"proximal_logp_interpolation": ("property", "golden")},
    replace={"proximal_logp_interpolation": proximal_logp_interpolation},
)
