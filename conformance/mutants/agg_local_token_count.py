"""Data-parallel ranks (or micro-batches) each divide by their *local* token count.

prime-rl#1957 (2026-03-05): "if rank 0 has 5 unmasked tokens and rank 1 has 1, that single token gets
5x the influence"; the same class in verl#5993 (context-parallel counts), torchtitan#2206, trl#3231.
The global `num_tokens` / `num_seqs` are accepted and ignored, so every part is a local mean; the
whole batch alone is still correct, which is why only the partition check sees it.
"""

import refimpl
from conformance.mutants.base import Mutant


def aggregate(token_loss, mask, *, mode, norm_length=None, num_tokens=None, num_seqs=None):
    return refimpl.aggregate(token_loss, mask, mode=mode, norm_length=norm_length)  # local counts


MUTANT = Mutant(
    name="agg_local_token_count",
    bug_class="each data-parallel rank or micro-batch normalises by its local token count (global counts ignored)",
    catalogue=12,
    cites=("prime-rl#1957", "verl#5993", "torchtitan#2206", "trl#3231"),
    signature={"aggregate": ("invariant:partition",)},
    replace={"aggregate": aggregate},
)
