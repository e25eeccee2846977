"""The `Mutant` record, the adapter that injects it into the refimpl, and discovery.

A mutant is the refimpl with exactly one real-world bug injected: one module in this package that
defines `MUTANT = Mutant(...)`. Its `replace` maps core-API function names to re-creations of the
bug (built from refimpl pieces or plain torch, never random noise); its `signature` declares which
checks of `rlspec check` the bug makes fail, per function (`RowResult.checks` keys: `property`,
`golden`, `invariant:mask`, `invariant:on_policy`, `invariant:partition`, `invariant:detached`,
`preset:<name>`). `rlspec mutants` verifies that the observed failures equal the declaration, and
`conformance.runner.diagnosis` uses the declarations and the replacement functions to say which known bugs
a failing adapter is consistent with.

Adding a mutant is adding one file here (see README.md); discovery is automatic.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from conformance.records import BY_FUNCTION

__all__ = [
    "Mutant",
    "discover",
    "all_mutants",
    "by_name",
    "mutants_table_markdown",
    "upcast",
]

CHECK_KINDS = ("property", "golden", "invariant:mask", "invariant:on_policy", "invariant:partition",
               "invariant:detached")


@dataclass(frozen=True)
class Mutant:
    """One known bug, injected into the refimpl.

    - `name`: the module name (`kl_sign_flipped`);
    - `bug_class`: one human sentence, printed after "consistent with:" (unique across mutants);
    - `catalogue`: the class number in `reference/bug-catalogue.md`;
    - `cites`: where it happened (`"verl#179 (a65c915)"`, a paper, a blog);
    - `signature`: function -> the check kinds that fail (and only those);
    - `replace`: function -> the buggy implementation (same signature as the spec function).
    """

    name: str
    bug_class: str
    catalogue: int
    cites: tuple[str, ...]
    signature: dict[str, tuple[str, ...]]
    replace: dict[str, Callable[..., Any]]
    doc: str = field(default="", compare=False)
    # True for a bug that *is* a missing stop-gradient on an output the spec makes constant (the
    # adapter then does not detach the replacement's outputs for it)
    attaches_gradient: bool = False

    @property
    def functions(self) -> tuple[str, ...]:
        return tuple(self.replace)

    @property
    def declared(self) -> frozenset[tuple[str, str]]:
        """{(function, check kind)} that must fail."""
        return frozenset((fn, kind) for fn, kinds in self.signature.items() for kind in kinds)

    def label(self) -> str:
        """The text `consistent with:` lists: the sentence, then the mutant and catalogue class."""
        return f"{self.bug_class} [mutant {self.name}, bug-catalogue #{self.catalogue}]"

    def adapter(self) -> types.SimpleNamespace:
        """The refimpl adapter with this mutant's functions swapped in (name `mutant:<name>`)."""
        return _adapter(self)


def upcast(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], torch.dtype]:
    """Half-precision tensors in float32 (others unchanged), and the output dtype to cast back to:
    mutants compute like the refimpl so that their only deviation is the bug."""
    out_dtype = tensors[0].dtype
    up = [t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in tensors]
    return up, out_dtype


def _constant_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Detach the outputs of a function whose outputs the spec makes constants (advantages, returns,
    rewards, whitening): a mutant injects one bug, never also a missing stop-gradient."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in out)
        return out.detach() if isinstance(out, torch.Tensor) else out

    return wrapper


@functools.lru_cache(maxsize=None)
def _cached_adapter(mutant: Mutant) -> types.SimpleNamespace:
    from conformance.runner.builtin import refimpl_adapter

    ns = types.SimpleNamespace(**vars(refimpl_adapter()))
    ns.name = f"mutant:{mutant.name}"
    ns.mutant = mutant.name
    for function, impl in mutant.replace.items():
        record = BY_FUNCTION.get(function)
        constant = (record is not None and not record.grad_args and bool(record.stop_grad_args)
                    and not mutant.attaches_gradient)
        setattr(ns, function, _constant_outputs(impl) if constant else impl)
    return ns


def _adapter(mutant: Mutant) -> types.SimpleNamespace:
    return _cached_adapter(mutant)


# Mutant holds dicts, so it is not hashable by value; identity is what the cache needs.
Mutant.__hash__ = object.__hash__  # type: ignore[method-assign]


def _check(mutant: Mutant, module: str) -> None:
    problems = []
    if mutant.name != module.rsplit(".", 1)[-1]:
        problems.append(f"name {mutant.name!r} is not the module name")
    if not mutant.replace:
        problems.append("replaces nothing")
    for fn in mutant.replace:
        if fn not in BY_FUNCTION:
            problems.append(f"replaces {fn!r}, which is not a registry function")
    for fn, kinds in mutant.signature.items():
        if fn not in mutant.replace:
            problems.append(f"declares failures of {fn!r}, which it does not replace")
        for kind in kinds:
            if kind not in CHECK_KINDS and not kind.startswith("preset:"):
                problems.append(f"unknown check kind {kind!r}")
    if not mutant.cites:
        problems.append("cites nothing")
    if problems:
        raise ValueError(f"mutant module {module}: " + "; ".join(problems))


def discover(package: str = "conformance.mutants") -> list[Mutant]:
    """Every `MUTANT` of the modules of `package` (its whole `__path__`), sorted by name. A module
    without `MUTANT` (helpers) is skipped; a malformed mutant raises ValueError."""
    pkg = importlib.import_module(package)
    found: list[Mutant] = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_") or info.name in ("base", "adapters"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        mutant = getattr(module, "MUTANT", None)
        if mutant is None:
            continue
        if not isinstance(mutant, Mutant):
            raise ValueError(f"mutant module {module.__name__}: MUTANT is a {type(mutant).__name__}, not a Mutant")
        _check(mutant, module.__name__)
        if not mutant.doc and module.__doc__:
            object.__setattr__(mutant, "doc", module.__doc__.strip())
        found.append(mutant)
    found.sort(key=lambda m: m.name)
    names = [m.name for m in found]
    classes = [m.bug_class for m in found]
    if len(set(classes)) != len(classes):
        dup = sorted({c for c in classes if classes.count(c) > 1})
        raise ValueError(f"mutants share a bug_class sentence (diagnosis could not tell them apart): {dup}")
    assert len(set(names)) == len(names)
    return found


@functools.lru_cache(maxsize=1)
def _all() -> tuple[Mutant, ...]:
    return tuple(discover())


def all_mutants() -> list[Mutant]:
    """The packaged mutants (discovered once per process)."""
    return list(_all())


def by_name(name: str) -> Mutant:
    for m in _all():
        if m.name == name:
            return m
    raise KeyError(f"no mutant named {name!r}; known: {', '.join(m.name for m in _all())}")


def mutants_table_markdown(mutants: Iterable[Mutant] | None = None) -> str:
    """The README table: one row per mutant (name, catalogue class, bug, functions, failing checks,
    public instances)."""
    rows = ["| mutant | class | bug | replaces | fails | where it happened |", "|---|---|---|---|---|---|"]
    for m in sorted(mutants if mutants is not None else _all(), key=lambda m: (m.catalogue, m.name)):
        fails = "; ".join(f"`{fn}`: " + ", ".join(kinds) for fn, kinds in m.signature.items())
        rows.append(
            f"| `{m.name}` | {m.catalogue} | {m.bug_class} | "
            + ", ".join(f"`{f}`" for f in m.functions)
            + f" | {fails} | {'; '.join(m.cites)} |"
        )
    return "\n".join(rows) + "\n"
