"""The mutation catalogue: the refimpl with one real-world RL-trainer bug injected per module.

`rlspec mutants` runs the conformance suite against every mutant and proves each is caught and
diagnosed; `conformance.runner.diagnosis` uses the same catalogue to name the known bugs a failing adapter
is consistent with. Any mutant can also be checked like an adapter:

    rlspec check --adapter conformance.mutants.adapters:kl_sign_flipped
"""

from __future__ import annotations

from conformance.mutants.base import Mutant, all_mutants, by_name, discover, mutants_table_markdown

__all__ = ["Mutant", "all_mutants", "by_name", "discover", "mutants_table_markdown"]
