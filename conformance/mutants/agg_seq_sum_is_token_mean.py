"""`seq-mean-token-sum` divides each row's sum by its length: it computes `seq-mean-token-mean`.

verl 4d722b1 / verl#931 (2025-04-06), a copy-paste bug in `agg_loss`: the mode label says
token-*sum* per sequence but the code divided by the sequence length. Dr. GRPO (arXiv:2503.20783)
explains why the length normaliser matters (longer wrong answers).
"""

import refimpl
from conformance.mutants.base import Mutant


def aggregate(token_loss, mask, *, mode, **kwargs):
    if mode == "seq_mean_token_sum":
        mode = "seq_mean_token_mean"  # the mislabelled branch
    return refimpl.aggregate(token_loss, mask, mode=mode, **kwargs)


MUTANT = Mutant(
    name="agg_seq_sum_is_token_mean",
    bug_class="aggregation mode mislabelled: seq-mean-token-sum divides by the sequence length",
    catalogue=2,
    cites=("verl#931 (4d722b1)", "Dr. GRPO arXiv:2503.20783"),
    signature={"aggregate": ("property", "golden")},
    replace={"aggregate": aggregate},
)
