"""The record of one quantity: everything rlspec knows about it, in one object (OpInfo style).

A `Quantity` holds a spec quantity's

- signature: its positional arguments (`Arg`: layout, role, gradient or constant) and keywords
  (`Keyword`: kind, canonical default, choices, out-of-range values), in the oracle's order;
- the question a conformance check asks an adapter (`question`), the fingerprinting grid
  (`variants`), the conditioning rule that keeps compared gradients off kinks (`well_conditioned`);
- its seeded case generator (`inputs`), its golden-vector entries (`golden`, `golden_seeds`,
  `preset_inputs`), its quantity-specific bad inputs (`errors`) and numerical extremes (`extremes`);
- which invariants apply, the dtypes the refimpl is tested in, the output kind, and where its tolerance
  overrides sit in the one table (`conformance.tolerances`, by `spec_id`).

Framework presets and mutants are not written here: they are found by discovery
(`conformance.records.presets`, `conformance.mutants`). Every test and every conformance check
iterates the records; adding a quantity is its spec section, its oracle function, its refimpl function
and its record (docs/contributing.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import oracle
import refimpl
from hypothesis import strategies as st

from conformance.records.cases import Case, strategy

REQUIRED = inspect.Parameter.empty  # a keyword without a canonical default (chosen per call)

INVARIANTS = {
    "mask": "values planted at masked positions (NaN, +-inf, 1e30) change no valid output or gradient",
    "group_permutation": "permuting the members of a group permutes the outputs the same way",
    "on_policy": "old == current log-probs give ratio 1 (no clipping) and ref == current gives KL 0",
    "partition": "splitting the batch into micro-batches with global counts sums to the whole",
    "detached": "no gradient reaches the inputs the spec makes constants (stop_grad_args)",
}

# The global counts the `invariant:partition` check passes on top of the question keywords; a record whose
# step statistic is something else names it in `partition_stats` (entropy_top_mask: the pooled entropies).
PARTITION_KEYWORDS = ("num_tokens", "num_seqs")

# The roles of positional arguments: what the bad-input fuzzer may do to each (tests/robustness).
ROLES = {
    "token": "a [B, T] float array aligned with the mask (masked positions never read)",
    "seq": "a sequence-level float array ([B], [B, K] or [B / G]; every element read)",
    "adv": "advantages: [B] (broadcast over the valid tokens) or [B, T]",
    "logits": "[B, T, V] floats; row t-1 predicts token t",
    "hidden": "[B, T, D] floats; row t-1 predicts token t",
    "weight": "[V, D] floats, the LM head",
    "ids": "[B, T] integer token ids in [0, V) at valid positions",
    "mask": "[B, T] bool (or exact 0/1), mask[:, 0] False",
    "keep": "[B, T] bool keep mask (a subset of the mask)",
    "support": "[B, T, V] bool (or exact 0/1): the set each token was sampled from, non-empty at valid positions",
    "group": "the group size G, an int >= 1 dividing B",
    "weights": "[B, T] non-negative float weights",
    "versions": "the policy version of each row or token (int >= -1)",
    "lengths": "[B] integer completion lengths >= 0",
    "flags": "[B] bool flags (or exact 0/1)",
    "real": "a finite real scalar",
    "count": "an integer count >= 0",
    "state": "a real scalar or +inf (a measurement not taken yet)",
}

KINDS = ("real", "int", "bool", "choice", "weights", "pool")


# The roles of scalar positional arguments (the controllers' state): the only ones with out-of-range values.
SCALAR_ROLES = ("real", "count", "state")


@dataclass(frozen=True)
class Arg:
    """One positional argument: its name, its layout as api.md writes it ("[B, T, V]"), its role, whether
    the spec's gradient is taken with respect to it (`grad`), whether the spec makes it a constant that no
    gradient may reach (`constant`), and whether None is accepted (`optional`).

    `invalid` holds the out-of-range values of a scalar argument (role "real", "count" or "state") that must
    raise a ValueError on top of the generic ones of its role (NaN, inf, str, bool, ...): a range narrower
    than the role's, such as the KL controller's coefficient >= 0. The bad-input fuzzer applies them; an
    array argument's range is its role's (a mask is 0/1, ids lie in [0, V)), so it has none."""

    name: str
    layout: str
    role: str
    grad: bool = False
    constant: bool = False
    optional: bool = False
    invalid: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Arg {self.name!r}: role: expected one of {sorted(ROLES)}, got {self.role!r}")
        if self.invalid and self.role not in SCALAR_ROLES:
            raise ValueError(f"Arg {self.name!r}: invalid: only a scalar argument {SCALAR_ROLES} has out-of-range "
                             f"values, not role {self.role!r}")


@dataclass(frozen=True)
class Keyword:
    """One keyword of a quantity: `kind` ("real", "int", "bool", "choice", "weights"), the canonical
    `default` (`REQUIRED` when there is none), the closed set of `choices` of a choice keyword (the oracle
    and the refimpl accept exactly these), `optional` when None is a valid value, and the out-of-range
    values that must raise a ValueError (`invalid`, on top of the generic NaN / inf / str / bool ones).

    Keywords shared by several quantities are written once (`conformance.records.keywords`) and
    given their default by calling them: ``EPS_LOW(0.2)``."""

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[Any, ...] = ()
    optional: bool = False
    invalid: tuple[Any, ...] = ()
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Keyword {self.name!r}: kind: expected one of {KINDS}, got {self.kind!r}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"Keyword {self.name!r}: a choice keyword needs its choices")

    def __call__(self, default: Any = REQUIRED, **changes: Any) -> Keyword:
        """The same keyword with another canonical default (and any other field changed)."""
        return dataclasses.replace(self, default=default, **changes)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class GoldenCase:
    """One golden-vector entry: a stable id `<function>/<slug>`, a one-line description and a builder of
    the hand-written inputs. `expect` (the output worked out by hand) and `grad_factor` (for element-wise
    losses: dL/d(grad arg) divided by the upstream) are hand checks used by tests only; the files hold the
    oracle's outputs (`conformance.vectors.generate`). Once published an entry is never edited."""

    id: str
    description: str
    build: Callable[[], Case]
    preset: str | None = None
    expect: Any = None
    grad_factor: Any = None

    @property
    def function(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def slug(self) -> str:
        return self.id.split("/", 1)[1]

    @property
    def seed(self) -> int | None:
        return int(self.slug[len("random-"):]) if self.slug.startswith("random-") else None


@dataclass(frozen=True)
class ErrorInput:
    """A quantity-specific bad input: `change(args, kwargs)` returns the broken (args, kwargs) of a valid
    generated case, which must raise `error` with a message starting ``<function>: <argument>:``. The
    generic mutations of every argument and keyword (ranks, dtypes, NaN at valid positions, out-of-range
    numbers, unknown choices) come from the signature and need no entry."""

    description: str
    argument: str
    change: Callable[[dict[str, Any], dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]]
    error: type[Exception] = ValueError


@dataclass(frozen=True)
class Extremes:
    """What a quantity promises at numerical extremes beyond the generic rules (tests/robustness/test_extremes.py).

    A quantity with `log_ratio_keywords` (a policy loss or metric of (logp, old_logp, advantages, mask)) is run
    at log-ratios logp - old_logp of +-100 at valid and masked positions (ratios e^+-100, beyond float32's
    range), once per keyword set there: the clips, clamps and forms that change what can overflow. Its
    advantages are of four kinds, the `advantage_kind` the rules below are asked about: "positive", "negative"
    and "zero" ([B], one sign for the batch) and "mixed [B, T]" (every sign, zeros included). Always: no NaN,
    masked positions change nothing, refimpl equals the oracle rounded to refimpl's dtype; on top of that

    - `log_ratio_bounded(keywords, advantage_kind, dtype)` says whether every value and gradient is also
      finite (a clipped or clamped ratio, the side of the clip that bounds r, float64 where e^100 is
      representable); where it says False an overflow is the oracle's +-inf, never NaN;
    - `zero_advantage_vanishes`: with A = 0 every value and gradient is exactly 0 (an overflowing ratio
      times A = 0 is 0). False for a loss with a term that does not carry A (kl_cov's |d| penalty); its
      `log_ratio_bounded` then says whether that term alone is finite.
    """

    log_ratio_keywords: tuple[dict[str, Any], ...] = ()
    log_ratio_bounded: Callable[[dict[str, Any], str, str], bool] | None = None
    zero_advantage_vanishes: bool = True

    def __post_init__(self) -> None:
        if self.log_ratio_keywords and self.log_ratio_bounded is None:
            raise ValueError("Extremes: log_ratio_keywords without a log_ratio_bounded rule")


def literal(value: Any) -> str:
    """A default as the spec's text writes it: `"group"`, `1e-6`, `0.2`, `None`, `True`."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and value and abs(value) < 1e-3:
        mantissa, exponent = f"{value:.12e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return repr(value)


InputsFn = Callable[[np.random.Generator], tuple[dict[str, Any], dict[str, Any]]]


@dataclass(frozen=True)
class Quantity:
    """Everything about one spec quantity (see the module docstring)."""

    function: str
    spec_id: str
    args: tuple[Arg, ...]
    keywords: tuple[Keyword, ...]
    inputs: InputsFn
    output: str = "array"  # "array", "pair" (gae), "scalar" (aggregate) or "mask" (bool [B, T])
    dtypes: tuple[str, ...] = ("float64", "float32", "bfloat16")
    invariants: tuple[str, ...] = ("mask",)
    question: tuple[str, ...] = ()
    variants: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    well_conditioned: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None
    partition_stats: tuple[str, ...] = PARTITION_KEYWORDS
    golden: tuple[GoldenCase, ...] = ()
    golden_seeds: tuple[int, ...] = ()
    preset_inputs: Callable[..., Callable[[], Case]] | None = None
    errors: tuple[ErrorInput, ...] = ()
    extremes: Extremes = Extremes()
    returns: str = ""  # what it returns, api.md's generated function table ("`[B,T]`; ...")

    def __post_init__(self) -> None:
        names = [a.name for a in self.args] + [k.name for k in self.keywords]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.function}: duplicate argument or keyword names in {names}")
        unknown = [k for k in (*self.question, *self.variants) if k not in {k.name for k in self.keywords}]
        if unknown:
            raise ValueError(f"{self.function}: question/variants name no keyword of the record: {unknown}")
        unknown = sorted({n for kw in self.extremes.log_ratio_keywords for n in kw} - {k.name for k in self.keywords})
        if unknown:
            raise ValueError(f"{self.function}: extremes.log_ratio_keywords name no keyword of the record: {unknown}")
        bad = [i for i in self.invariants if i not in INVARIANTS or i == "detached"]
        if bad:
            raise ValueError(f"{self.function}: unknown invariants {bad} (detached follows from constant args)")

    # --- the signature ----------------------------------------------------------------------------

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    @property
    def grad_args(self) -> tuple[str, ...]:
        """The arguments the spec's gradient is taken with respect to (empty: no gradient)."""
        return tuple(a.name for a in self.args if a.grad)

    @property
    def stop_grad_args(self) -> tuple[str, ...]:
        """The inputs the spec makes constants: no gradient may reach them (`invariant:detached`)."""
        return tuple(a.name for a in self.args if a.constant)

    def conditioned(self, args: dict[str, Any], kwargs: dict[str, Any]) -> bool:
        """Whether a case can be compared across precisions (`well_conditioned`; True when the record has none)."""
        return self.well_conditioned is None or self.well_conditioned(args, kwargs)

    def keyword(self, name: str) -> Keyword:
        for k in self.keywords:
            if k.name == name:
                return k
        raise KeyError(f"{self.function} has no keyword {name!r}")

    def signature_text(self) -> str:
        """`name(arg, ..., *, kw=default, ...)` as api.md writes it: an optional argument `=None`, strings
        in double quotes, small numbers as `1e-6`."""
        args = [f"{a.name}=None" if a.optional else a.name for a in self.args]
        kws = [k.name if k.required else f"{k.name}={literal(k.default)}" for k in self.keywords]
        return f"{self.function}({', '.join([*args, *(['*', *kws] if kws else [])])})"

    # --- the implementations and the presets, found by name --------------------------------------------

    @property
    def oracle(self) -> Callable[..., Any]:
        return getattr(oracle, self.function)

    @property
    def oracle_grad(self) -> Callable[..., Any] | None:
        return getattr(oracle, f"{self.function}_grad", None) if self.grad_args else None

    @property
    def refimpl(self) -> Callable[..., Any]:
        return getattr(refimpl, self.function)

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        """{framework: keywords} of every discovered preset that names this function."""
        from conformance.records.presets import presets_of  # discovery reads the records: imported late

        return presets_of(self.function)

    def preset_kwargs(self, preset: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A case's required keywords with `preset`'s keywords on top (canonical elsewhere)."""
        return {**self.required_kwargs(kwargs), **self.presets[preset]}

    def variant_kwargs(self) -> Iterator[dict[str, Any]]:
        """Every keyword set fingerprinting tries: the presets first, then the grid."""
        yield from self.presets.values()
        yield from self.variant_grid()

    # --- cases -------------------------------------------------------------------------------------

    def make_case(self, seed: int) -> Case:
        """The property case `seed` names (the reproduction entry point)."""
        rng = np.random.default_rng(seed)
        args, kwargs = self.inputs(rng)
        return Case(self.function, args, kwargs, seed=seed, upstream_seed=int(rng.integers(0, 2**31 - 1)))

    def strategy(self) -> st.SearchStrategy[Case]:
        """Hypothesis strategy of this record's cases (drawn through the seed)."""
        return strategy(self.make_case)

    def golden_entries(self, presets: dict[str, dict[str, Any]]) -> list[GoldenCase]:
        """The record's golden entries: the hand-built ones, one per preset of `presets` that names the
        function (on the record's `preset_inputs`, sorted by preset), then the seeded random ones."""
        out = list(self.golden)
        if self.preset_inputs is not None:
            for name in sorted(presets):
                kw = dict(presets[name])
                out.append(GoldenCase(f"{self.function}/preset-{name.replace('_', '-').replace('@', '-')}",
                                      f"preset {name}: " + ", ".join(f"{k}={v!r}" for k, v in kw.items()),
                                      self.preset_inputs(name, **kw), preset=name))
        for seed in self.golden_seeds:
            out.append(GoldenCase(f"{self.function}/random-{seed}",
                                  f"seeded random case: cases.make_case({self.function!r}, {seed})",
                                  lambda seed=seed: self.make_case(seed)))
        return out

    # --- what a conformance check asks -----------------------------------------------------------------

    @property
    def partition_keywords(self) -> tuple[str, ...]:
        """The keywords the `invariant:partition` check passes on top of the question (none for a record
        without that check)."""
        return self.partition_stats if "partition" in self.invariants else ()

    def canonical_keywords(self) -> dict[str, Any]:
        """The keywords that a check never passes an adapter, with their canonical defaults: the adapter
        is held to computing the quantity at these values (only the preset checks of an
        `accepts_variants` adapter pass some of them)."""
        passed = self.question + self.partition_keywords
        return {k.name: k.default for k in self.keywords if not k.required and k.name not in passed}

    def question_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The part of a case's keywords that a conformance check asks an adapter for."""
        return {k: v for k, v in kwargs.items() if k in self.question}

    def required_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keywords of a case that have no canonical default (`mode`, `norm_length`, `kl_coef`): the
        base a preset's keywords are applied on."""
        names = {k.name for k in self.keywords if k.required or k.name == "norm_length"}
        return {k: v for k, v in kwargs.items() if k in names}

    def variant_grid(self) -> Iterator[dict[str, Any]]:
        """Every keyword combination of the fingerprinting grid."""
        names = list(self.variants)
        for values in itertools.product(*(self.variants[n] for n in names)):
            yield dict(zip(names, values))


__all__ = ["REQUIRED", "INVARIANTS", "PARTITION_KEYWORDS", "ROLES", "SCALAR_ROLES", "KINDS", "Arg", "Keyword",
           "GoldenCase", "ErrorInput", "Extremes", "Quantity", "literal"]
