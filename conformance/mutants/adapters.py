"""`conformance.mutants.adapters:<mutant name>`: a zero-argument factory of that mutant's adapter,
the `module:attribute` form that `rlspec check --adapter` loads, e.g.

    rlspec check --adapter conformance.mutants.adapters:kl_sign_flipped
"""

from __future__ import annotations

from typing import Any

from conformance.mutants.base import by_name


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        mutant = by_name(name)
    except KeyError as exc:
        raise AttributeError(str(exc)) from None

    def factory() -> Any:
        return mutant.adapter()

    factory.__name__ = name
    return factory
