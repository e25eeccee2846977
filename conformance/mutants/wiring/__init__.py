"""Wiring mutants: the refimpl trainer with one real-world *training-step* bug planted, each a module here
defining ``MUTANT = WiringMutant(...)``. Each function the trainer calls is right on its own; what is wrong is
what the trainer passes where, or how it normalises a step's loss across micro-batches, ranks and shards.
``rlspec mutants`` records a trace of each (``rlspec train --trace``) and proves that ``rlspec replay``
FAILs the mutant's link and names the bug (``base.py``)."""

from conformance.mutants.wiring.base import WiringMutant, discover

__all__ = ["WiringMutant", "discover"]
