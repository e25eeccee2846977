"""Metamorphic checks: the adapter compared with *itself* on transformed inputs (no oracle).

A metamorphic check fails only when the property it names is broken, whatever the adapter's values
are, so a failing check says *what kind* of bug an implementation has (a wrong value fails only
`property`; a masked value that leaks fails `invariant:mask` as well). That is what makes the
failure signatures of the known bugs (`conformance.mutants`) discriminative.

- `invariant:mask`: NaN, +-inf and +-1e30 planted at every position the spec says is never read
  leave every output and gradient unchanged (compared with the same call on the clean inputs);
- `invariant:partition`: the batch, with one fully-masked row appended (an empty micro-batch), is
  split by rows into micro-batches of uneven token counts; each part is called with the whole
  batch's step statistics (`Quantity.partition_keywords`: `num_tokens` / `num_seqs` by default,
  the pooled valid entropies `pooled_entropy` for `entropy_top_mask`), and the parts' values and
  gradients must sum to the whole batch's (called with the same statistics) for a scalar output, or
  the parts' rows, joined, must be the whole batch's rows for a per-row output (a mask). An adapter
  that rejects those keywords (TypeError) gets the check reported as not implemented. Per mode, and
  for a framework's own micro-batch loss
  (counts, DDP averaging, empty micro-batches), see the `agg.partition[<mode>]` rows of
  `conformance/runner/partition.py` (adapters opt in with `micro_batched_loss`);
- `invariant:detached`: the inputs the spec makes constants (`Quantity.stop_grad_args`) are
  given `requires_grad=True`; no gradient may reach them through any output (torch adapters only).

Every runner returns a `conformance.runner.differential.Outcome` whose `observed` holds what the adapter
returned, for `conformance.runner.diagnosis` to replay known bugs against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from conformance.records import Quantity, cases
from conformance.records.cases import seeded_upstream
from conformance.runner.compare import Mismatch, compare
from conformance.runner.differential import (
    NUMPY_DTYPES,
    Outcome,
    adapter_function,
    adapter_grads,
    as_tuple,
    call_numpy,
    call_torch,
    mark_not_implemented,
    record_comparison,
    to_numpy,
    tolerance_dtype,
)
from conformance.runner.protocol import LoadedAdapter
from conformance.tolerances import Tol, tolerance

__all__ = ["METAMORPHIC", "observe", "partition_case", "run_detached", "run_mask", "run_partition"]


def observe(
    record: Quantity,
    adapter: LoadedAdapter,
    fn: Any,
    rounded: dict[str, Any],
    kwargs: dict[str, Any],
    dtype: str,
    upstream_seed: int,
    upstream: Any = None,
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...] | None]:
    """Call `fn` on `rounded` inputs: (outputs, gradients w.r.t. the record's grad args for a seeded
    upstream of the output's shape, or None when the adapter gives no gradient). Raises what the
    adapter raises."""
    wants_grad = bool(record.grad_args) and adapter.grad_for(record.function)
    if adapter.array_api == "torch":
        raw, grad_inputs = call_torch(fn, rounded, kwargs, dtype, record.grad_args if wants_grad else ())
    else:
        raw, grad_inputs = call_numpy(fn, rounded, kwargs, dtype), {}
    values = as_tuple(to_numpy(raw))
    if not wants_grad:
        return values, None
    if upstream is None:
        upstream = seeded_upstream(record.output, values, upstream_seed, dtype)
    grads = adapter_grads(adapter, fn, raw, grad_inputs, rounded, kwargs, upstream, dtype, record)
    return values, grads


def _names(record: Quantity) -> tuple[str, ...]:
    return ("advantages", "returns") if record.output == "pair" else ("value",)


def _start(record: Quantity, adapter: LoadedAdapter, case: cases.Case, dtype: str, kwargs: dict[str, Any],
           kind: str, tol_class: str | None) -> tuple[Outcome, Any]:
    outcome = Outcome("pass", record, adapter.name, dtype, case, dict(kwargs), kind=kind,
                      judged_at=None if tol_class in (None, dtype) else tol_class)
    return outcome, adapter_function(outcome, adapter)


def _tol(record: Quantity, outcome: Outcome, what: str) -> Tol:
    """The tolerance of a metamorphic comparison: the class the adapter's outputs meet (the
    adapter compared with itself can differ by its own rounding, no more)."""
    return tolerance(record.spec_id, tolerance_dtype(outcome.tol_class), what)


def _not_implemented(outcome: Outcome, exc: NotImplementedError) -> Outcome:
    return mark_not_implemented(outcome, ", ".join(f"{k}={v!r}" for k, v in outcome.kwargs.items()), str(exc))


# ---------------------------------------------------------------------------------------------
# invariant:mask
# ---------------------------------------------------------------------------------------------


def run_mask(record: Quantity, adapter: LoadedAdapter, case: cases.Case, dtype: str, kwargs: dict[str, Any],
             tol_class: str | None = None) -> Outcome:
    """Outputs and gradients with poison at unused positions == those on the clean case."""
    poisoned = cases.plant_masked(case, case.seed or 0)
    outcome, fn = _start(record, adapter, poisoned, dtype, kwargs, "invariant:mask", tol_class)
    if fn is None:
        return outcome
    clean_args = cases.rounded_args(case, dtype)
    if not record.conditioned(clean_args, kwargs):
        outcome.status = "ill_conditioned"
        return outcome
    try:
        ref_values, ref_grads = observe(record, adapter, fn, clean_args, kwargs, dtype, case.upstream_seed)
    except NotImplementedError as exc:
        return _not_implemented(outcome, exc)
    except Exception as exc:  # the clean call itself fails: the property check reports it too
        outcome.status, outcome.message = "error", f"clean inputs: {type(exc).__name__}: {exc}"
        return outcome
    try:
        values, grads = observe(record, adapter, fn, cases.rounded_args(poisoned, dtype), kwargs, dtype, case.upstream_seed)
    except Exception as exc:
        outcome.status = "error"
        outcome.message = f"with NaN/inf/1e30 at masked positions: {type(exc).__name__}: {exc}"
        return outcome
    outcome.observed = values + (grads or ())
    tol = _tol(record, outcome, "value")
    for name, a, e in zip(_names(record), values, ref_values):
        record_comparison(outcome, compare(a, e, tol, what=f"{name} (poisoned vs clean inputs)"), a, e, tol)
    if grads is not None and ref_grads is not None:
        outcome.grad_checked = True
        gtol = _tol(record, outcome, "grad")
        for name, a, e in zip(record.grad_args, grads, ref_grads):
            record_comparison(outcome, compare(a, e, gtol, what=f"grad[{name}] (poisoned vs clean inputs)"), a, e, gtol)
    if outcome.mismatches:
        outcome.status = "fail"
        outcome.message = "values planted at masked positions changed a valid output or gradient"
    return outcome


# ---------------------------------------------------------------------------------------------
# invariant:partition
# ---------------------------------------------------------------------------------------------


def partition_case(case: cases.Case) -> tuple[dict[str, Any], list[slice], int, int]:
    """(whole-batch args with one fully-masked row appended, row slices of the micro-batches,
    global num_tokens, global num_seqs). The slices cover the rows in order: a random cut of the
    original rows (uneven token counts) and the empty micro-batch last."""
    mask = case.args["mask"]
    B = mask.shape[0]
    args: dict[str, Any] = {}
    for name, value in case.args.items():
        if isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == B:
            extra = np.zeros_like(value[:1]) if name == "mask" else value[:1].copy()
            args[name] = np.concatenate([value, extra], axis=0)
        else:
            args[name] = value
    rng = np.random.default_rng((case.seed or 0) + 1)
    if B >= 2:
        counts = mask.sum(axis=1)
        # the cut whose two sides have the most different token counts, or a random one
        cuts = list(range(1, B))
        k = max(cuts, key=lambda c: abs(int(counts[:c].sum()) - int(counts[c:].sum()))) if rng.random() < 0.5 else int(rng.choice(cuts))
        slices = [slice(0, k), slice(k, B)]
    else:
        slices = [slice(0, B)]
    slices.append(slice(B, B + 1))
    return args, slices, int(mask.sum()), B + 1


# The step statistics of `Quantity.partition_keywords`, from the whole batch's (rounded) arguments.
STEP_STATISTICS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "num_tokens": lambda args: int(args["mask"].sum()),
    "num_seqs": lambda args: int(args["mask"].shape[0]),
    "pooled_entropy": lambda args: args["entropy"][args["mask"]],  # every valid entropy of the step
}


def _step_statistics(record: Quantity, adapter: LoadedAdapter, rounded: dict[str, Any], dtype: str) -> dict[str, Any]:
    """The record's step statistics of the whole batch, arrays in the adapter's array type and dtype
    (what an all-gather of the parts would hand each part)."""
    out: dict[str, Any] = {}
    for name in record.partition_keywords:
        value = STEP_STATISTICS[name](rounded)
        if isinstance(value, np.ndarray):
            value = (torch.tensor(value, dtype=cases.TORCH_DTYPES[dtype]) if adapter.array_api == "torch"
                     else value.astype(NUMPY_DTYPES[dtype]))
        out[name] = value
    return out


def _describe_statistics(stats: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" if not hasattr(v, "shape") else f"{k}=<the {int(np.prod(v.shape))} values of the whole batch>"
                     for k, v in stats.items())


def run_partition(record: Quantity, adapter: LoadedAdapter, case: cases.Case, dtype: str, kwargs: dict[str, Any],
                  tol_class: str | None = None) -> Outcome:
    """Σ over micro-batches (the step's statistics) == the whole batch (same statistics), value and
    gradient; for a per-row output, the parts' rows joined == the whole batch's."""
    args, slices, _, _ = partition_case(case)
    whole_case = case.derived(args, "partitioned into micro-batches")
    outcome, fn = _start(record, adapter, whole_case, dtype, kwargs, "invariant:partition", tol_class)
    if fn is None:
        return outcome
    rounded = cases.rounded_args(whole_case, dtype)
    if not record.conditioned(rounded, kwargs):
        outcome.status = "ill_conditioned"
        return outcome
    stats = _step_statistics(record, adapter, rounded, dtype)
    kw = {**kwargs, **stats}
    B1 = args["mask"].shape[0]

    def part(s: slice) -> dict[str, Any]:
        return {k: v[s] if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == B1 else v
                for k, v in rounded.items()}

    upstream = float(np.reshape(cases.round_to(np.random.default_rng(case.upstream_seed).normal(size=()), dtype), ()))
    try:
        whole_values, whole_grads = observe(record, adapter, fn, rounded, kw, dtype, 0, upstream)
        parts = [observe(record, adapter, fn, part(s), kw, dtype, 0, upstream) for s in slices]
    except NotImplementedError as exc:
        return _not_implemented(outcome, exc)
    except TypeError as exc:
        outcome.status = "not_implemented"
        outcome.message = (f"{record.function} does not take {'/'.join(record.partition_keywords)}: "
                           f"{type(exc).__name__}: {exc}")
        return outcome
    except Exception as exc:
        outcome.status, outcome.message = "error", f"micro-batch call: {type(exc).__name__}: {exc}"
        return outcome
    if record.output != "scalar":
        return _joined_rows(record, outcome, whole_values, parts, slices, stats)
    part_values = np.array([float(np.reshape(v[0], ())) for v, _ in parts])
    total = float(part_values.sum())
    whole = float(np.reshape(whole_values[0], ()))
    base = _tol(record, outcome, "value")
    tol = Tol(base.rtol, base.atol + base.rtol * float(np.sum(np.abs(part_values))), base.reason)
    record_comparison(outcome, compare(total, whole, tol, what="value (sum over micro-batches vs whole batch)"), total, whole, tol)
    observed: list[np.ndarray] = [np.asarray(total)]
    if whole_grads is not None and all(g is not None for _, g in parts):
        outcome.grad_checked = True
        gtol = _tol(record, outcome, "grad")
        for i, name in enumerate(record.grad_args):
            joined = np.concatenate([g[i] for _, g in parts], axis=0)
            observed.append(joined)
            record_comparison(outcome, compare(joined, whole_grads[i], gtol, what=f"grad[{name}] (micro-batches vs whole batch)"),
                    joined, whole_grads[i], gtol)
    observed.append(part_values)
    outcome.observed = tuple(observed)
    if outcome.mismatches:
        outcome.status = "fail"
        outcome.message = (
            f"micro-batches of rows {[(s.start, s.stop) for s in slices]} (the last one fully masked), "
            f"each called with {_describe_statistics(stats)}, do not sum to the whole batch"
        )
    return outcome


def _joined_rows(record: Quantity, outcome: Outcome, whole_values: tuple[np.ndarray, ...],
                 parts: list[tuple[tuple[np.ndarray, ...], Any]], slices: list[slice], stats: dict[str, Any]) -> Outcome:
    """A per-row output (entropy_top_mask): the parts' rows, joined in order, == the whole batch's."""
    tol = _tol(record, outcome, "value")
    joined = tuple(np.concatenate([v[i] for v, _ in parts], axis=0) for i in range(len(whole_values)))
    for name, a, e in zip(_names(record), joined, whole_values):
        record_comparison(outcome, compare(a, e, tol, what=f"{name} (micro-batches joined vs whole batch)"), a, e, tol)
    outcome.observed = joined
    if outcome.mismatches:
        outcome.status = "fail"
        outcome.message = (
            f"micro-batches of rows {[(s.start, s.stop) for s in slices]} (the last one fully masked), "
            f"each called with {_describe_statistics(stats)}, do not give the whole batch's rows: a part's "
            "result depends on its own rows beyond the statistics passed (e.g. a quantile of the part's own tokens)"
        )
    return outcome


# ---------------------------------------------------------------------------------------------
# invariant:detached
# ---------------------------------------------------------------------------------------------


def run_detached(record: Quantity, adapter: LoadedAdapter, case: cases.Case, dtype: str, kwargs: dict[str, Any],
                 tol_class: str | None = None) -> Outcome:
    """No gradient reaches the record's `stop_grad_args` through any output (torch adapters)."""
    outcome, fn = _start(record, adapter, case, dtype, kwargs, "invariant:detached", tol_class)
    if fn is None:
        return outcome
    if adapter.array_api != "torch" or not adapter.grad_for(record.function):
        outcome.status = "unsupported"
        return outcome
    rounded = cases.rounded_args(case, dtype)
    targs = cases.torch_args(rounded, dtype, tuple(record.stop_grad_args) + tuple(record.grad_args))
    try:
        outputs = [o for o in as_tuple(fn(*targs.values(), **kwargs)) if isinstance(o, torch.Tensor)]
    except NotImplementedError as exc:
        return _not_implemented(outcome, exc)
    except Exception as exc:
        outcome.status, outcome.message = "error", f"{type(exc).__name__}: {exc}"
        return outcome
    inputs = [targs[n] for n in record.stop_grad_args]
    grads = [torch.zeros_like(t, dtype=torch.float64) for t in inputs]
    rng = np.random.default_rng(case.upstream_seed)
    leaking: list[str] = []
    for out in outputs:
        if not out.requires_grad:
            continue
        g_out = torch.as_tensor(rng.normal(size=tuple(out.shape)), dtype=out.dtype)
        try:
            got = torch.autograd.grad(out, inputs, grad_outputs=g_out, allow_unused=True, retain_graph=True)
        except RuntimeError as exc:
            outcome.status, outcome.message = "error", f"gradient: {type(exc).__name__}: {exc}"
            return outcome
        for i, d in enumerate(got):
            if d is not None:
                grads[i] = grads[i] + d.detach().to(torch.float64)
    observed = tuple(g.numpy() for g in grads)
    outcome.observed = observed
    outcome.grad_checked = True
    for name, g in zip(record.stop_grad_args, observed):
        bad = (g != 0) | np.isnan(g)
        if np.any(bad):
            leaking.append(name)
            size = np.where(np.isnan(g), np.inf, np.abs(g))
            at = np.unravel_index(int(np.argmax(size)), g.shape)
            outcome.mismatches.append(Mismatch(
                what=f"grad[{name}]", shape=g.shape, n_bad=int(bad.sum()), n_total=int(g.size),
                max_abs=float(size[at]), max_abs_index=tuple(int(i) for i in at), max_rel=float("inf"),
                max_rel_index=(), actual_at=float(g[at]), expected_at=0.0, tol=Tol(0.0, 0.0),
                note=f"{int(bad.sum())}/{g.size} elements receive a gradient (must be 0: a constant); "
                     f"largest {float(g[at]):.6g} at index {tuple(int(i) for i in at)}",
            ))
    if outcome.mismatches:
        outcome.status = "fail"
        outcome.message = (
            f"a gradient flows from the outputs into {', '.join(leaking)}, which the spec makes "
            "constants (stop-gradient)"
        )
    return outcome


METAMORPHIC = {
    "invariant:mask": run_mask,
    "invariant:partition": run_partition,
    "invariant:detached": run_detached,
}
