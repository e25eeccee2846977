"""Framework rows: a framework result judged against compositions of spec quantities, and a core quantity
checked with some of its keywords pinned. Every framework home builds its own rows from these two (its
knowledge: which framework call, which composition, which preset); how a row is judged lives here.

- `composition_row`: the framework's outputs (`got()`, keyed like ``"value"``, ``"grad[logp]"``) against
  candidate compositions in order: the canonical one (``pass``), then named presets and variants
  (``preset`` / ``variant``), else ``fail`` showing the canonical mismatch. Each key is compared with the
  tolerance given for it (by full key, else by its prefix before ``[``, else ``"value"``'s), from the one
  table (`conformance.tolerances`). A candidate's `contrasts` are compared too and reported in the message:
  for the matched candidate, whether this input tells them apart from it; for a FAIL, the canonical
  candidate's contrasts that the result equals (what the framework computes instead).
- `fixed_row`: `verdict.check_row` for a framework callable exposed as one spec function (`FunctionView`),
  with some of the case's keywords fixed (the framework computes one setting of the quantity).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conformance.records import BY_FUNCTION, cases, presets
from conformance.records.pieces import fmt
from conformance.runner.compare import Mismatch, compare, differences, greatest
from conformance.runner.protocol import Adapter
from conformance.runner.rows import RowResult, match_status, seeds_for
from conformance.runner.verdict import check_row
from conformance.tolerances import Tol, tolerance


@dataclass
class Comparison:
    """Keyed comparisons of one framework result with one candidate's expectations."""

    mismatches: list[Mismatch] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)
    max_abs: float = 0.0
    max_rel: float = 0.0

    def add(self, what: str, actual: Any, expected: Any, tol: Tol) -> None:
        a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
        mm = compare(a, e, tol, what=what)
        self.checks[what] = "pass" if mm is None else "fail"
        if mm is not None:
            self.mismatches.append(mm)
        if a.shape == e.shape and a.size:
            diff, rel = differences(a, e, tol.atol)
            self.max_abs = max(self.max_abs, greatest(diff)[0])
            self.max_rel = max(self.max_rel, np.nan_to_num(greatest(rel)[0]))

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass
class Candidate:
    """One composition a framework result may equal: ``evaluate() -> {"value": ..., "grad[x]": ...}``.

    `label` is "canonical" or the variant's description; `preset` names the framework whose preset it is
    (None: a variant no preset uses); `kwargs` are the keywords the row reports as matched; `spec_id`, when
    set, replaces the row's spec id when this candidate matches (the quantities it is made of);
    `not_compared`, when set, says why the match is partial (the row is then "not implemented": e.g. a
    value that is no spec quantity, only its gradient compared); `contrasts` are compositions told apart
    from this one in the message."""

    label: str
    formula: str
    evaluate: Callable[[], dict[str, Any]]
    preset: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    spec_id: str | None = None
    not_compared: str = ""
    contrasts: Sequence[Candidate] = ()


def _tolerance(tol: dict[str, Tol], key: str) -> Tol:
    return tol.get(key) or tol.get(key.split("[")[0]) or tol["value"]


def compare_candidate(actual: dict[str, Any], candidate: Candidate, tol: dict[str, Tol]) -> Comparison:
    """The framework's keyed outputs against one candidate's expectations (every key it states)."""
    c = Comparison()
    for key, value in candidate.evaluate().items():
        c.add(key, actual[key], value, _tolerance(tol, key))
    return c


def _contrast_summary(actual: dict[str, Any], matched: Candidate, tol: dict[str, Tol]) -> str:
    """One line per contrast of the matched candidate: told apart from it on this input (which keys differ,
    by how much) or not."""
    lines = []
    for contrast in matched.contrasts:
        result = compare_candidate(actual, contrast, tol)
        if result.ok:
            lines.append(f"not told apart from '{contrast.label}' on this batch")
        else:
            failed = ", ".join(k for k, v in result.checks.items() if v == "fail")
            lines.append(f"not '{contrast.label}': {failed} differ (max |diff| {result.max_abs:.3g})")
    return "\n".join(lines)


def _equals(actual: dict[str, Any], canonical: Candidate, tol: dict[str, Tol]) -> str:
    """For a FAIL: the canonical candidate's contrasts that the result equals."""
    return "\n".join(f"equals {c.label}: {c.formula}" for c in canonical.contrasts
                     if compare_candidate(actual, c, tol).ok)


def preset_candidates(framework: str, function: str, asked: dict[str, Any],
                      evaluate: Callable[[dict[str, Any]], Callable[[], dict[str, Any]]],
                      formula: Callable[[dict[str, Any]], str]) -> list[Candidate]:
    """A framework row's own presets of `function` (over the `asked` keywords) as candidates: the pinned
    version's (named after the framework), then each other version's its presets were read for whose keywords
    differ (``<framework>@<version>``), newest first. `evaluate(kw)` gives a candidate's results, `formula(kw)`
    its description."""
    out: list[Candidate] = []
    for version in (presets.version(framework), *reversed(presets.read_versions(framework))):
        kw = {**presets.preset_kwargs(framework, function, version), **asked}
        diff = {k: v for k, v in kw.items() if asked.get(k, object()) != v}
        if diff and not any(c.kwargs == diff for c in out):
            name = framework if version == presets.version(framework) else f"{framework}@{version}"
            out.append(Candidate(fmt(diff), formula(kw), evaluate(kw), preset=name, kwargs=diff))
    return out


def composition_row(row_id: str, spec_id: str, function: str, adapter: Adapter | str, got: Callable[[], dict[str, Any]],
                    candidates: list[Candidate], tol: dict[str, Tol], *, seed: int | None = None,
                    note: str | Callable[[], str] = "", n_cases: int | Callable[[], int] = 1) -> RowResult:
    """Compare the framework's results ``got()`` with each candidate in turn; the first that matches every
    key decides the status (see the module docstring). `note` (a text, or a function called after the
    comparisons) is appended to the message; `n_cases` is the number of cases `got` ran (or a function
    giving it). `adapter` is the adapter or its name. A framework failure is an error row."""
    t0 = time.perf_counter()
    name = adapter if isinstance(adapter, str) else adapter.name
    row = RowResult(id=row_id, spec_id=spec_id, function=function, adapter=name, status="pass",
                    seeds=[] if seed is None else [seed], n_cases=0 if callable(n_cases) else n_cases)
    try:
        actual = got()
        first: tuple[Candidate, Comparison] | None = None
        for cand in candidates:
            c = compare_candidate(actual, cand, tol)
            if first is None:
                first = (cand, c)
            if not c.ok:
                continue
            row.max_abs_err, row.max_rel_err, row.checks = c.max_abs, c.max_rel, dict(c.checks)
            if cand.label == "canonical":
                row.message = f"= {cand.formula}"
            else:
                row.status = match_status(cand.preset)
                row.matched_preset = cand.preset
                row.matched_kwargs = dict(cand.kwargs) or None
                what = f"preset {cand.preset}" if cand.preset else "variant"
                row.message = f"matches {what} ({cand.label}), not canonical: {cand.formula}"
            if cand.spec_id:
                row.spec_id = cand.spec_id
            if cand.not_compared:
                row.status = "not_implemented"
                row.message = f"{cand.not_compared}; value not compared. Gradient matches {cand.formula}"
            told_apart = _contrast_summary(actual, cand, tol)
            if told_apart:
                row.message += "\n" + told_apart
            break
        else:
            if first is None:
                raise ValueError(f"{row_id}: no candidate composition to compare with")
            cand, c = first
            row.status = "fail"
            row.max_abs_err, row.max_rel_err, row.checks = c.max_abs, c.max_rel, dict(c.checks)
            row.message = "\n".join([f"{cand.label} {cand.formula}:"] + [m.describe() for m in c.mismatches]
                                    + [f"no variant matched either ({', '.join(x.label for x in candidates[1:]) or 'none tried'})"])
            instead = _equals(actual, cand, tol)
            if instead:
                row.message += "\n" + instead
        row.n_cases = n_cases() if callable(n_cases) else n_cases
        text = note() if callable(note) else note
        if text:
            row.message = f"{row.message} {text}".strip()
    except Exception as exc:  # a framework failure is a row, not a crash
        row.status = "error"
        row.message = f"{type(exc).__name__}: {exc}"
        if isinstance(note, str) and note:
            row.message = f"{row.message} {note}".strip()
    row.seconds = time.perf_counter() - t0
    return row


def loss_tolerances(dtype: str, spec_id: str = "loss.ppo") -> dict[str, Tol]:
    """An aggregated loss: the value at `agg`'s tolerance, gradients at the loss's."""
    return {"value": tolerance("agg", dtype, "value"), "grad": tolerance(spec_id, dtype, "grad")}


def value_and_grad_tolerances(spec_id: str, dtype: str) -> dict[str, Tol]:
    return {"value": tolerance(spec_id, dtype, "value"), "grad": tolerance(spec_id, dtype, "grad")}


# ---------------------------------------------------------------------------------------------
# Fixed-keyword function rows
# ---------------------------------------------------------------------------------------------


class FunctionView:
    """An adapter-shaped object that exposes one spec function (and its ``_grad``) through callables."""

    def __init__(self, adapter: Adapter, function: str, fn: Callable[..., Any], grad: Callable[..., Any] | None = None,
                 dtypes: tuple[str, ...] | None = None) -> None:
        self.name = adapter.name
        self.version = adapter.version
        self.spec_version = adapter.spec_version
        self.array_api = "numpy"
        self.dtypes = dtypes or adapter.dtypes
        self.supports_grad = grad is not None or not BY_FUNCTION[function].grad_args
        setattr(self, function, fn)
        if grad is not None:
            setattr(self, f"{function}_grad", grad)


def _golden(function: str) -> list[cases.Case]:
    from conformance.vectors.golden import cases_for

    return list(cases_for(function))


def fixed_row(view: Adapter, function: str, *, row_id: str, fixed: dict[str, Any], seed: int, n_seeds: int = 8,
              note: str = "", skip: Callable[[cases.Case], str | None] | None = None) -> RowResult:
    """``check_row`` for ``view.<function>`` with the case keywords in ``fixed`` pinned (the oracle is
    asked the same), fingerprinting the framework's own preset first. ``skip(case)`` may name a
    reason to leave a case out (reported in the message); ``note`` is appended to it."""
    t0 = time.perf_counter()
    record = BY_FUNCTION[function]
    row = check_row(record, view, seeds=seeds_for(row_id, seed, n_seeds), golden=_golden(function), fixed=fixed,
                    prefer=view.name, skip=skip, row_id=row_id)
    # check_row's reproduce lines name the adapter's own `function`, which is not the framework callable this
    # view checks: drop them; `rlspec check` gives the row `rlspec repro --row <row_id>` instead
    row.reproduce = ""
    row.message = "\n".join(line for line in row.message.split("\n") if not line.startswith("Reproduce: "))
    for finding in row.precision_findings:
        finding["reproduce"] = ""
    row.message = "\n".join(x for x in (row.message, note) if x)
    row.seconds = time.perf_counter() - t0
    return row


__all__ = ["Candidate", "compare_candidate", "composition_row", "loss_tolerances",
           "value_and_grad_tolerances", "FunctionView", "fixed_row"]
