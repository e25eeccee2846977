"""The dual-clip region is never counted as clipped (verl's `pg_clipfrac_lower` was always 0): the
tokens capped at -c·A (A < 0, ratio > c) carry no gradient but the metric says they are unclipped.

verl 88db554 / verl#972 (2025-04-09): `pg_clipfrac_lower` was always 0; verl#784 added dual clip.
"""

import refimpl
from conformance.mutants.base import Mutant


def ppo_clipped_mask(logp, old_logp, advantages, mask, *, dual_clip=None, **kwargs):
    return refimpl.ppo_clipped_mask(logp, old_logp, advantages, mask, **kwargs)  # dual region dropped


MUTANT = Mutant(
    name="clipfrac_dual_missing",
    bug_class="clip fraction misses the dual-clip region (lower clip fraction always 0)",
    catalogue=21,
    cites=("verl#972 (88db554)", "verl#784"),
    signature={"ppo_clipped_mask": ("property", "golden")},
    replace={"ppo_clipped_mask": ppo_clipped_mask},
)
