"""Diagnosis: which known bugs (mutants) a failing row is consistent with.

For a row that fails (or errors), a mutant of `conformance.mutants` is *consistent* with it when

1. **its failure pattern fits** (`signature_fits`): the mutant replaces the row's function, and on
   the checks the row ran, the metamorphic checks that broke (`invariant:mask`, `:partition`,
   `:detached`) are exactly the ones the mutant's signature declares, and the row fails some
   oracle-compared check (`property`, `golden`, `invariant:on_policy`, `preset:*`) if and only if
   the mutant declares one. Which oracle-compared checks fail depends on whether the seeded inputs
   trigger the bug, so only their presence is compared; the metamorphic ones are input-independent
   and must match exactly;
2. **it reproduces the adapter's outputs** (`reproduces`): every failing trial of the row (up to
   `MAX_TRIALS`) is replayed with the mutant's implementation on the same inputs, keywords and
   dtype, and the mutant returns what the adapter returned (outputs and gradients within the
   check's tolerance, NaN where the adapter had NaN), or raises where the adapter raised.

Only value and gradient mismatches are evidence: a row that errored, or failed by breaking the
calling contract, gets no hypothesis, and neither does a difference within the precision the adapter
meets (those rows are not FAILs: `conformance.runner.verdict` reports the precision apart). The replay
compares at that precision too (`RowResult.precision`), so a float32 framework's bug is still
recognised. Rows that match a preset or variant are diagnosed too (strong matches only). Both together
is the only verdict a row shows (`consistent_with`): the mutants' `Mutant.label()` ("temperature not
applied when recomputing log-probs [mutant logprob_temperature_missing, bug-catalogue #4]"). When no
mutant reproduces the outputs, the mutants whose failure pattern alone fits are kept apart
(`pattern_hints`, each label with the suffix `PATTERN_ONLY`): a weaker hint (same kind of failure,
different numbers), often unrelated, shown only by `rlspec check --explain` and on the site's cell page.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records import Quantity, cases
from conformance.runner.differential import Outcome, adapter_function, coarser, tolerance_dtype
from conformance.runner.discovery import mutants as discovered_mutants
from conformance.runner.invariants import METAMORPHIC, observe
from conformance.runner.protocol import LoadedAdapter
from conformance.runner.rows import RowResult
from conformance.tolerances import Tol, tolerance

__all__ = ["MAX_TRIALS", "PATTERN_ONLY", "diagnose", "pattern_hints", "reproduces", "signature_fits"]

MAX_TRIALS = 12
PATTERN_ONLY = " (failure pattern only: the outputs differ)"
FAILED = ("fail", "error")


def _metamorphic(kinds: set[str]) -> set[str]:
    return {k for k in kinds if k in METAMORPHIC}


def _oracle_compared(kinds: set[str]) -> set[str]:
    return {k for k in kinds if k not in METAMORPHIC}


def signature_fits(row: RowResult, declared: tuple[str, ...]) -> bool:
    """The row's failing checks fit a mutant's declared failing checks (see the module docstring)."""
    ran = {k for k, v in row.checks.items() if v in ("pass", *FAILED)}
    failing = {k for k, v in row.checks.items() if v in FAILED}
    expected = set(declared) & ran
    if _metamorphic(failing) != _metamorphic(expected):
        return False
    return bool(_oracle_compared(failing)) == bool(_oracle_compared(expected))


def _same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...], tol: Tol) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.shape != y.shape:
            return False
        with np.errstate(invalid="ignore", over="ignore"):
            same_nonfinite = (np.isnan(x) & np.isnan(y)) | (np.isinf(x) & np.isinf(y) & (np.sign(x) == np.sign(y)))
            diff = np.where(same_nonfinite, 0.0, np.abs(x - y))
            diff = np.where(np.isnan(diff), np.inf, diff)
            scale = np.where(np.isfinite(y), np.abs(y), 0.0)
        if np.any(diff > tol.atol + tol.rtol * scale):
            return False
    return True


def _replay(trial: Any, record: Quantity, adapter: LoadedAdapter) -> tuple[str, tuple[np.ndarray, ...]]:
    """("ok" | "error", observations) of `adapter` on the trial's inputs (no oracle needed)."""
    if trial.kind in METAMORPHIC:
        outcome = trial.run(record, adapter)
        return ("error" if outcome.status == "error" else "ok"), outcome.observed
    probe = Outcome("pass", record, adapter.name, trial.dtype, trial.case, trial.adapter_kwargs)
    fn = adapter_function(probe, adapter)
    if fn is None:
        return "error", ()
    try:
        values, grads = observe(record, adapter, fn, cases.rounded_args(trial.case, trial.dtype),
                                trial.adapter_kwargs, trial.dtype, trial.case.upstream_seed)
    except Exception:  # the mutant raises on these inputs, as the adapter may have
        return "error", ()
    return "ok", values + (grads or ())


def reproduces(mutant: Any, record: Quantity, evidence: tuple[tuple[Any, Any], ...],
               precision: dict[str, str] | None = None) -> bool:
    """The mutant returns what the adapter returned on every failing trial (or raises where it
    raised), within the tolerance of the precision class the adapter meets for the trial's dtype."""
    if not evidence:
        return False
    adapter = LoadedAdapter.of(mutant.adapter())
    for trial, outcome in evidence[:MAX_TRIALS]:
        status, observed = _replay(trial, record, adapter)
        if outcome.status == "error" or not outcome.observed:
            if status != "error":
                return False
            continue
        if status == "error":
            return False
        klass = tolerance_dtype(coarser((precision or {}).get(trial.dtype, trial.dtype), trial.dtype))
        value_tol = tolerance(record.spec_id, klass, "value")
        grad_tol = tolerance(record.spec_id, klass, "grad")
        tol = Tol(max(value_tol.rtol, grad_tol.rtol), max(value_tol.atol, grad_tol.atol))
        n = min(len(observed), len(outcome.observed))  # an adapter may give values without gradients
        if n == 0 or not _same(outcome.observed[:n], observed[:n], tol):
            return False
    return True


def _fitting(record: Quantity, row: RowResult, mutants: list[Any] | None) -> list[Any]:
    if row.status not in ("fail", "error", "preset", "variant") or not row.evidence:
        return []
    if mutants is None:
        mutants = discovered_mutants()
    return [m for m in mutants if record.function in m.replace and signature_fits(row, m.signature.get(record.function, ()))]


def diagnose(record: Quantity, row: RowResult, mutants: list[Any] | None = None) -> list[str]:
    """The labels of the mutants consistent with a failing row (empty for a passing row): the mutants
    that fit the failure pattern and reproduce the outputs (exact pattern first). A row that matches a
    preset is diagnosed the same way (an adapter that ignores `estimator` and always computes k3 also
    "matches preset trl": both statements are true)."""
    fitting = _fitting(record, row, mutants)
    failing = {k for k, v in row.checks.items() if v in FAILED}
    strong = [m for m in fitting if reproduces(m, record, row.evidence, row.precision)]
    strong.sort(key=lambda m: failing != set(m.signature.get(record.function, ())) & set(row.checks))
    return [m.label() for m in strong]


def pattern_hints(record: Quantity, row: RowResult, mutants: list[Any] | None = None) -> list[str]:
    """For a FAIL or ERROR row no mutant reproduces: the mutants whose failure pattern alone fits, each
    label marked `PATTERN_ONLY` (empty when `diagnose` found a reproducing one, or for a preset row)."""
    if row.status not in ("fail", "error") or row.consistent_with:
        return []
    return [m.label() + PATTERN_ONLY for m in _fitting(record, row, mutants)]
