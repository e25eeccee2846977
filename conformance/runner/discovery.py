"""How the runner finds what lives above it: the framework homes and the mutants, by folder and by name.

The runner never imports a framework or a mutant statically (the layers import only downward: records <
runner < frameworks, mutants < CLI). It discovers them as plugins: a framework is a folder
`conformance/frameworks/<name>/` whose `__init__.py` names its adapter class (`ADAPTER`); the mutants are
the modules of the package `conformance.mutants`. Both are imported by name, only when asked for, so a
missing optional framework breaks nothing else.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

FRAMEWORKS_PACKAGE = "conformance.frameworks"
FRAMEWORKS_DIR = Path(__file__).resolve().parent.parent / "frameworks"
MUTANTS_PACKAGE = "conformance.mutants"


def framework_names() -> tuple[str, ...]:
    """Every framework home with an adapter (a folder with an ``adapter.py``), sorted."""
    return tuple(sorted(p.parent.name for p in FRAMEWORKS_DIR.glob("*/adapter.py")))


def framework_adapter_path(name: str) -> str:
    """``module:Class`` of framework ``name``'s adapter (imports only the home's light ``__init__``)."""
    home = importlib.import_module(f"{FRAMEWORKS_PACKAGE}.{name}")
    return f"{FRAMEWORKS_PACKAGE}.{name}.adapter:{home.ADAPTER}"


def mutants() -> list[Any]:
    """The packaged mutants (`conformance.mutants.all_mutants()`, discovered once per process)."""
    return importlib.import_module(MUTANTS_PACKAGE).all_mutants()


__all__ = ["FRAMEWORKS_DIR", "framework_names", "framework_adapter_path", "mutants"]
