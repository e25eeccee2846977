"""Tables of the README that are generated from code, so they cannot drift.

`rlspec readme --write` rewrites every block between `<!-- BEGIN GENERATED: name -->` and
`<!-- END GENERATED: name -->`; `rlspec readme --check` (run by the tests) fails when one is stale.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import oracle
from conformance import spec
from conformance.registry import REGISTRY
from conformance.tolerances import DEFAULT, OVERRIDES

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
    re.S,
)


def spec_table() -> str:
    lines = ["| spec id | function | what it is | presets that deviate |", "|---|---|---|---|"]
    for q in REGISTRY:
        presets = ", ".join(sorted(q.presets)) or "-"
        lines.append(f"| `{q.spec_id}` | `{q.function}` | {spec.description(q.spec_id)} | {presets} |")
    return "\n".join(lines)


def preset_table() -> str:
    names = list(oracle.PRESETS)
    functions = [q.function for q in REGISTRY if q.presets]
    lines = ["| function | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    for f in dict.fromkeys(functions):
        cells = []
        for n in names:
            kw = oracle.PRESETS[n].get(f)
            cells.append(", ".join(f"{k}={v!r}" for k, v in kw.items()) if kw else "canonical")
        lines.append(f"| `{f}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tolerance_table() -> str:
    lines = ["| spec id | dtype | compared | rtol | atol | reason |", "|---|---|---|---|---|---|"]
    for dtype, tol in DEFAULT.items():
        lines.append(f"| (default) | {dtype} | value, grad | {tol.rtol:g} | {tol.atol:g} | {tol.reason} |")
    for (spec_id, dtype, what), tol in OVERRIDES.items():
        lines.append(f"| `{spec_id}` | {dtype} | {what} | {tol.rtol:g} | {tol.atol:g} | {tol.reason} |")
    return "\n".join(lines)


def command_table() -> str:
    from conformance.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    lines = ["| command | what it does |", "|---|---|"]
    for choice in sub._choices_actions:
        lines.append(f"| `rlspec {choice.dest}` | {choice.help} |")
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[], str]] = {
    "spec": spec_table,
    "presets": preset_table,
    "tolerances": tolerance_table,
    "commands": command_table,
}


def render(text: str) -> str:
    def replace(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise KeyError(f"README block {name!r} has no generator; known: {sorted(GENERATORS)}")
        return f"{m.group(1)}{GENERATORS[name]()}\n{m.group(4)}"

    return BLOCK.sub(replace, text)


def stale_blocks(text: str) -> list[str]:
    fresh = render(text)
    old = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
    new = {m.group("name"): m.group("body") for m in BLOCK.finditer(fresh)}
    return [name for name in old if old[name] != new[name]]
