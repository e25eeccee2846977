"""The framework presets of each quantity, found by discovery.

A preset is the keyword set with which a public trainer computes a quantity where it differs from the
canonical definition. Presets are framework knowledge: they live with their framework, and the records find
them here by name.
"""

from __future__ import annotations

from typing import Any

import oracle


def presets_of(function: str) -> dict[str, dict[str, Any]]:
    """{framework: keywords} of every preset that names `function`."""
    return {name: table[function] for name, table in oracle.PRESETS.items() if function in table}


def preset_kwargs(framework: str, function: str) -> dict[str, Any]:
    """A copy of `framework`'s preset for `function` ({} when its default is canonical)."""
    return dict(presets_of(function).get(framework, {}))
