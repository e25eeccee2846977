"""REINFORCE++ return-to-go run over the flattened batch: the running return is not restarted at a row
boundary, so the last valid tokens of row b collect the (discounted) rewards of row b + 1. A vectorised
implementation that treats the batch as one long packed sequence (``returns`` over ``view(1, B*T)``)
makes this mistake; with right padding the carry skips the pads and reaches row b's last token.

Bug-catalogue class 17 (packing: cross-contamination at sequence boundaries, verl#6475 for labels) and
class 11 (returns leaking across masked positions); the catalogue vector
``reinforce_pp_advantages/rows-independent`` (returns [1, 0] and [5, 5, 0], not [6, 5] for the first
row) shows it.
"""

import refimpl
from conformance.mutants.base import Mutant


def reinforce_pp_advantages(token_rewards, mask, **kwargs):
    B, T = mask.shape
    # the batch as one sequence: row b + 1's first valid token follows row b's last one
    A, G = refimpl.reinforce_pp_advantages(token_rewards.reshape(1, B * T), mask.reshape(1, B * T), **kwargs)
    return A.reshape(B, T), G.reshape(B, T)


MUTANT = Mutant(
    name="reinforce_pp_return_crosses_rows",
    bug_class="REINFORCE++ return-to-go carried across a sequence boundary (the batch treated as one sequence)",
    catalogue=17,
    cites=("verl#6475", "bug-catalogue classes 11, 17 [U]"),
    signature={"reinforce_pp_advantages": ("property", "golden", "preset:openrlhf")},
    replace={"reinforce_pp_advantages": reinforce_pp_advantages},
)
