"""The framework presets of each quantity, found by discovery in the framework homes.

A *preset* names the keyword values with which a public trainer computes a spec quantity wherever its
default differs from the canonical definition (api.md). It uses only keywords of the quantity's record and
lists only those whose value differs from the canonical default. Presets are framework knowledge: each lives
in its framework's home, ``conformance/frameworks/<name>/presets.py``, which defines

- ``VERSION``: the version (a release, or a commit for a framework read from its source) they were read for;
- ``PRESETS``: a tuple of `Preset` (function, keywords, where it was read);
- ``SCOPE``: the functions read, or None for all of them (outside it a function is "not read", not
  "canonical");
- ``REQUIRED_DEFAULTS``: the framework's defaults of keywords that have no canonical default (documentation);
- ``NOT_EXPRESSIBLE``: the default behaviours no keyword expresses, one line each (documentation).

A home may hold only presets (a framework read from its source, without an adapter: ``open_instruct``,
``rlhf_book``, ``oat``). The records find the homes here by folder and import them by name: the records layer
imports nothing of the frameworks layer statically. Homes are taken in name order; a row that several
presets explain equally well is named after the framework's own preset first (`verdict.check_row`'s
``prefer``).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

FRAMEWORKS_DIR = Path(__file__).resolve().parent.parent / "frameworks"


@dataclass(frozen=True)
class Preset:
    """One function's preset in one framework: the keywords that differ from canonical, and where they
    were read (file:lines at the framework's `VERSION`, and what the code does there)."""

    function: str
    keywords: dict[str, Any]
    source: str


@functools.lru_cache(maxsize=1)
def homes() -> dict[str, ModuleType]:
    """{framework: its presets module}, for every home with a ``presets.py``, in name order."""
    return {p.parent.name: importlib.import_module(f"conformance.frameworks.{p.parent.name}.presets")
            for p in sorted(FRAMEWORKS_DIR.glob("*/presets.py"))}


def presets(framework: str) -> dict[str, Preset]:
    """{function: Preset} of one framework (KeyError naming the known ones for an unknown framework)."""
    table = homes()
    if framework not in table:
        raise KeyError(f"no presets for {framework!r}; known: {', '.join(table)}")
    return {p.function: p for p in table[framework].PRESETS}


def presets_of(function: str) -> dict[str, dict[str, Any]]:
    """{framework: keywords} of every preset that names `function`, in framework name order."""
    return {name: p.keywords for name in homes() if (p := presets(name).get(function)) is not None}


def preset_kwargs(framework: str, function: str) -> dict[str, Any]:
    """A copy of `framework`'s preset for `function` ({} when its default is canonical)."""
    preset = presets(framework).get(function)
    return dict(preset.keywords) if preset is not None else {}


def scope(framework: str) -> tuple[str, ...] | None:
    """The functions `framework`'s presets were read for (None: all of them)."""
    return homes()[framework].SCOPE


def version(framework: str) -> str:
    """The version `framework`'s presets were read for."""
    return homes()[framework].VERSION


__all__ = ["FRAMEWORKS_DIR", "Preset", "homes", "presets", "presets_of", "preset_kwargs", "scope", "version"]
