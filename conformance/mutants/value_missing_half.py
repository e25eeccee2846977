"""The value loss without its 1/2: (V - R)^2 instead of 1/2·(V - R)^2 — twice the critic gradient,
silently changing the effective value-loss coefficient.

verl 6e15bbe / verl#2016 (2025-06-14): the `vf_loss` 0.5 factor was missing. verl and OpenRLHF now
compute 0.5·max((V − R)², (V_clip − R)²) (reference/peer-conventions.md, section 6).
"""

import refimpl
from conformance.mutants.base import Mutant


def value_token_loss(values, old_values, returns, mask, **kwargs):
    return 2.0 * refimpl.value_token_loss(values, old_values, returns, mask, **kwargs)


MUTANT = Mutant(
    name="value_missing_half",
    bug_class="value loss missing its 1/2 factor",
    catalogue=30,
    cites=("verl#2016 (6e15bbe)",),
    signature={
        "value_token_loss": (
            "property", "golden", "preset:areal", "preset:openrlhf", "preset:rlhf_book", "preset:skyrl",
            "preset:torchtune", "preset:trl", "preset:verl",
        ),
    },
    replace={"value_token_loss": value_token_loss},
)
