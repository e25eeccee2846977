"""Run one quantity on one case through an adapter and compare value and gradient with the oracle.

This is the single mechanism behind the refimpl property tests, the golden-vector checks and
`rlspec check`: the oracle runs in float64 on exactly the rounded inputs the adapter saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from conformance import cases
from conformance.compare import Mismatch, compare
from conformance.registry import QuantityInfo
from conformance.tolerances import tolerance

NUMPY_DTYPES = {"float64": np.float64, "float32": np.float32}


@dataclass
class Outcome:
    """The result of one (quantity, adapter, dtype, case) comparison."""

    status: str  # "pass", "fail", "error", "not_implemented", "ill_conditioned", "unsupported"
    record: QuantityInfo
    adapter: str
    dtype: str
    case: cases.Case
    kwargs: dict[str, Any]
    mismatches: list[Mismatch] = field(default_factory=list)
    max_abs: float = 0.0
    max_rel: float = 0.0
    message: str = ""
    grad_checked: bool = False
    # What the adapter returned on this trial (outputs, then gradients), as float64 arrays: the
    # evidence `conformance.diagnosis` replays a known bug against. Empty when the call raised.
    observed: tuple[np.ndarray, ...] = ()

    def header(self) -> str:
        return (
            f"[{self.record.function} | spec {self.record.spec_id} | adapter={self.adapter} | "
            f"{self.dtype}]"
        )

    def repro(self) -> str:
        if self.case.seed is None:  # a hand-built case (a golden vector, a framework row's batch)
            where = f" (case {self.case.note})" if self.case.note else ""
            return f"rlspec check --adapter {self.adapter} --only {self.record.function}{where}"
        return (
            f"rlspec repro {self.record.function} --seed {self.case.seed} --dtype {self.dtype} "
            f"--adapter {self.adapter}"
            + "".join(f" --kw {k}={v!r}" for k, v in self.kwargs.items())
        )

    def report(self) -> str:
        lines = [
            self.header(),
            f"inputs: {self.case.shapes()}; keywords: {self.kwargs}",
        ]
        lines += [m.describe() for m in self.mismatches]
        if self.message:
            lines.append(self.message)
        lines.append(f"Reproduce: {self.repro()}")
        return "\n".join(lines)


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64).cpu().numpy()
    if isinstance(value, (tuple, list)):
        return tuple(_to_numpy(v) for v in value)
    return np.asarray(value, dtype=np.float64)


def _upstream(shape: tuple[int, ...], seed: int, dtype: str) -> np.ndarray:
    g = np.random.default_rng(seed).normal(0.0, 1.0, size=shape)
    return cases.round_to(g, dtype)


class AdapterMisbehaved(Exception):
    """The adapter broke the calling contract (modified an input in place): a `fail`, not an error."""


def _same(a: Any, b: Any) -> bool:
    """Equal shape, dtype and elements (NaN equal to NaN: poisoned inputs hold NaN)."""
    if isinstance(a, torch.Tensor):
        a, b = a.detach(), b.detach()
        return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | ((a != a) & (b != b))).all())
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | ((a != a) & (b != b))).all())


def _guarded(fn: Any, names: list[str], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`fn(*args, **kwargs)` on inputs that are fresh copies (made by the caller, never the case's own
    arrays), checking afterwards that the adapter left each of them as it was."""
    pristine = [a.detach().clone() if isinstance(a, torch.Tensor) else a.copy() if isinstance(a, np.ndarray) else None
                for a in args]
    out = fn(*args, **kwargs)
    for name, before, after in zip(names, pristine, args):
        if before is not None and not _same(after, before):
            raise AdapterMisbehaved(f"adapter modified its input {name} in place (inputs must be left unchanged)")
    return out


def _call_torch(fn: Any, rounded: dict[str, Any], kwargs: dict[str, Any], dtype: str, grad_args: tuple[str, ...]) -> tuple[Any, dict[str, torch.Tensor]]:
    targs = cases.torch_args(rounded, dtype, grad_args)  # fresh tensors: torch.tensor / from_numpy of a copy
    out = _guarded(fn, list(targs), list(targs.values()), kwargs)
    return out, {name: targs[name] for name in grad_args}


def _numpy_args(rounded: dict[str, Any], dtype: str) -> list[Any]:
    """Fresh copies of every array (floats cast to `dtype`; masks and ids copied too: a case's own
    arrays, e.g. a cached golden vector, never reach an adapter)."""
    np_dtype = NUMPY_DTYPES[dtype]
    return [v.astype(np_dtype) if cases.is_float_array(v) else v.copy() if isinstance(v, np.ndarray) else v
            for v in rounded.values()]


def _call_numpy(fn: Any, rounded: dict[str, Any], kwargs: dict[str, Any], dtype: str) -> Any:
    return _guarded(fn, list(rounded), _numpy_args(rounded, dtype), kwargs)


def _nan_note(name: str, actual: Any, expected: Any) -> str:
    """'value: NaN at index (i, j) where the spec's value is x' for the first such element, else ''."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape:
        return ""
    bad = np.isnan(a) & ~np.isnan(e)
    if not bad.any():
        return ""
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{name}: NaN at index {idx} where the spec's value is {float(e[idx])!r} ({int(bad.sum())} NaN in all)"


def _output_dtype_problem(raw: Any, dtype: str) -> str | None:
    """Torch adapters keep the input dtype (api.md "Robustness and numerical extremes"): every tensor
    output is a float tensor of the input dtype; float32 is also accepted for bfloat16 inputs
    (float32 accumulation returned without the final rounding, as TRL's fused head does)."""
    expected = cases.TORCH_DTYPES[dtype]
    allowed = {expected, torch.float32} if expected == torch.bfloat16 else {expected}
    for i, item in enumerate(_as_tuple(raw)):
        if isinstance(item, torch.Tensor) and item.dtype not in allowed:
            which = "output" if not isinstance(raw, (tuple, list)) else f"output {i}"
            return f"{which} dtype {item.dtype}, expected {expected} (the dtype of the {dtype} inputs)"
    return None


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def run_case(
    record: QuantityInfo,
    adapter: Any,
    case: cases.Case,
    dtype: str,
    kwargs: dict[str, Any] | None = None,
    oracle_kwargs: dict[str, Any] | None = None,
) -> Outcome:
    """Compare `adapter.<function>(**kwargs)` with `oracle.<function>(**oracle_kwargs)` on `case`
    rounded to `dtype` (both keyword sets default to the case's own)."""
    kw = dict(case.kwargs if kwargs is None else kwargs)
    okw = dict(kw if oracle_kwargs is None else oracle_kwargs)
    outcome = Outcome("pass", record, getattr(adapter, "name", "?"), dtype, case, kw)
    fn = adapter_function(outcome, adapter)
    if fn is None:
        return outcome
    rounded = cases.rounded_args(case, dtype)
    if record.well_conditioned is not None and not record.well_conditioned(rounded, okw):
        outcome.status = "ill_conditioned"
        return outcome

    expected = _as_tuple(record.oracle(*rounded.values(), **okw))
    upstream = seeded_upstream(record, expected, case.upstream_seed, dtype) if record.grad_args else None
    return check_adapter(
        outcome,
        adapter,
        fn,
        rounded,
        expected,
        upstream,
        lambda: _as_tuple(record.oracle_grad(*rounded.values(), upstream, **okw)),
    )


def adapter_function(outcome: Outcome, adapter: Any) -> Any:
    """`adapter.<function>` for `outcome.record`, or None after setting `outcome.status` to
    "not_implemented" (no such attribute) or "unsupported" (`outcome.dtype` not among its dtypes)."""
    record = outcome.record
    fn = getattr(adapter, record.function, None)
    if fn is None:
        outcome.status = "not_implemented"
        outcome.message = f"{record.function} is not implemented by adapter {outcome.adapter!r}"
        return None
    default_dtypes = ("float64", "float32", "bfloat16") if adapter.array_api == "torch" else ("float64", "float32")
    if outcome.dtype not in getattr(adapter, "dtypes", default_dtypes):
        outcome.status = "unsupported"
        return None
    return fn


def seeded_upstream(record: QuantityInfo, expected: tuple[Any, ...], seed: int, dtype: str) -> Any:
    """dL/d(output) for the gradient check: seeded normal noise with the shape of the (first)
    output, rounded to `dtype`; a float for a scalar output."""
    upstream = _upstream(np.shape(expected[0]), seed, dtype)
    # `cases.round_to` returns a 1-element 1-D array for a 0-D shape; NumPy 2 refuses float() on it.
    return float(np.reshape(upstream, ())) if record.output == "scalar" else upstream


def check_adapter(
    outcome: Outcome,
    adapter: Any,
    fn: Any,
    rounded: dict[str, Any],
    expected: tuple[Any, ...],
    upstream: Any,
    expected_grads: Callable[[], tuple[np.ndarray, ...]],
) -> Outcome:
    """Call `fn` (from `adapter_function`) on the `rounded` inputs with `outcome.kwargs`; compare its
    outputs with `expected` and, when the record has gradient arguments and the adapter gives
    gradients, its dL/d(grad args) for `upstream` with `expected_grads()` (evaluated only then).
    The expectations come from the oracle (`run_case`) or from a golden vector."""
    record, dtype, kw = outcome.record, outcome.dtype, outcome.kwargs
    wants_grad = bool(record.grad_args) and getattr(adapter, "supports_grad", True)
    try:
        if adapter.array_api == "torch":
            raw, grad_inputs = _call_torch(fn, rounded, kw, dtype, record.grad_args if wants_grad else ())
        else:
            raw, grad_inputs = _call_numpy(fn, rounded, kw, dtype), {}
        actual = _as_tuple(_to_numpy(raw))
    except AdapterMisbehaved as exc:
        outcome.status = "fail"
        outcome.message = str(exc)
        return outcome
    except Exception as exc:  # an adapter error is a result, not a crash of the suite
        outcome.status = "error"
        outcome.message = f"{type(exc).__name__}: {exc}"
        return outcome

    outcome.observed = actual
    names = ("advantages", "returns") if record.output == "pair" else ("value",)
    if len(actual) != len(expected):
        outcome.status = "fail"
        outcome.message = f"returned {len(actual)} outputs, the spec has {len(expected)}"
        return outcome
    if adapter.array_api == "torch" and (problem := _output_dtype_problem(raw, dtype)) is not None:
        outcome.status = "fail"
        outcome.message = problem
        return outcome
    tol = tolerance(record.spec_id, dtype, "value")
    for name, a, e in zip(names, actual, expected):
        _record(outcome, compare(a, e, tol, what=name), a, e)
        if not outcome.message:
            outcome.message = _nan_note(name, a, e)

    if wants_grad:
        grads_expected = expected_grads()
        try:
            actual_grads = _adapter_grads(adapter, fn, raw, grad_inputs, rounded, kw, upstream, dtype, record)
        except AdapterMisbehaved as exc:
            outcome.status = "fail"
            outcome.message = f"gradient: {exc}"
            return outcome
        except Exception as exc:
            outcome.status = "error"
            outcome.message = f"gradient: {type(exc).__name__}: {exc}"
            return outcome
        if actual_grads is not None:
            outcome.grad_checked = True
            outcome.observed = outcome.observed + tuple(actual_grads)
            gtol = tolerance(record.spec_id, dtype, "grad")
            for name, a, e in zip(record.grad_args, actual_grads, grads_expected):
                _record(outcome, compare(a, e, gtol, what=f"grad[{name}]"), a, e)
    if outcome.mismatches:
        outcome.status = "fail"
    return outcome


def _adapter_grads(adapter: Any, fn: Any, raw: Any, grad_inputs: dict[str, torch.Tensor], rounded: dict[str, Any], kw: dict[str, Any], upstream: Any, dtype: str, record: QuantityInfo) -> tuple[np.ndarray, ...] | None:
    if adapter.array_api == "torch":
        out = raw
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"expected a torch.Tensor output, got {type(out).__name__}")
        inputs = [grad_inputs[n] for n in record.grad_args]
        if not out.requires_grad:  # no graph at all: the gradient the caller would get is zero
            return tuple(np.zeros(t.shape) for t in inputs)
        g = torch.as_tensor(upstream, dtype=out.dtype)
        grads = torch.autograd.grad(out, inputs, grad_outputs=g, allow_unused=True)
        return tuple(
            np.zeros(t.shape) if d is None else d.detach().to(torch.float64).numpy()
            for t, d in zip(inputs, grads)
        )
    grad_fn = getattr(adapter, f"{record.function}_grad", None)
    if grad_fn is None:
        return None
    args = _numpy_args(rounded, dtype)
    u = upstream.copy() if isinstance(upstream, np.ndarray) else upstream
    grads = _guarded(grad_fn, [*rounded, "upstream"], [*args, u], kw)
    return tuple(np.asarray(g, dtype=np.float64) for g in _as_tuple(grads))


def _record(outcome: Outcome, mismatch: Mismatch | None, actual: Any, expected: Any) -> None:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape == e.shape and a.size:
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a - e)
            diff = np.where(np.isnan(a) & np.isnan(e), 0.0, diff)
            rel = np.where(diff == 0, 0.0, diff / np.maximum(np.abs(e), 1e-300))
        outcome.max_abs = max(outcome.max_abs, float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))))
        outcome.max_rel = max(outcome.max_rel, float(np.nanmax(np.where(np.isnan(rel), np.inf, rel))))
    if mismatch is not None:
        outcome.mismatches.append(mismatch)
