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

from conformance.records import Quantity, cases
from conformance.records.cases import seeded_upstream
from conformance.runner.compare import Mismatch, compare, differences, greatest
from conformance.runner.protocol import Adapter, LoadedAdapter
from conformance.tolerances import Tol, tolerance

NUMPY_DTYPES = {"float64": np.float64, "float32": np.float32}


# Precision classes, finest first: the tolerance classes of `conformance.tolerances`, plus BELOW for
# outputs that miss even the bfloat16 class. The precision an outcome *meets* is the finest class
# whose tolerance every one of its comparisons passes.
PRECISIONS = ("float64", "float32", "bfloat16")
BELOW = "below_bfloat16"
RANK = {"float64": 0, "float32": 1, "bfloat16": 2, BELOW: 3}


def precision_label(precision: str) -> str:
    return precision.replace("_", " ")


def coarser(a: str, b: str) -> str:
    """The coarser of two precision classes."""
    return a if RANK[a] >= RANK[b] else b


@dataclass
class Outcome:
    """The result of one (quantity, adapter, dtype, case) comparison.

    `status` is judged at the tolerance class `judged_at` (default: the input dtype's); `precision`
    is the finest class the adapter's outputs meet on this case (whatever `judged_at` is), so that
    the conformance run can judge semantics at the precision an adapter actually computes in."""

    status: str  # "pass", "fail", "error", "not_implemented", "ill_conditioned", "unsupported"
    record: Quantity
    adapter: str
    dtype: str
    case: cases.Case
    kwargs: dict[str, Any]
    mismatches: list[Mismatch] = field(default_factory=list)
    max_abs: float = 0.0
    max_rel: float = float("nan")  # NaN: no element where |expected| > atol (see compare.differences)
    message: str = ""
    grad_checked: bool = False
    # What the adapter returned on this trial (outputs, then gradients), as float64 arrays: the
    # evidence `conformance.runner.diagnosis` replays a known bug against. Empty when the call raised.
    observed: tuple[np.ndarray, ...] = ()
    kind: str = "property"  # the check: "property", "golden", "invariant:<name>", "preset:<name>"
    ref: str | None = None  # how the user named the adapter (reproduce lines); default its name
    judged_at: str | None = None  # tolerance class of `status` and `mismatches`; None: the dtype's
    oracle_kwargs: dict[str, Any] | None = None  # the oracle's keywords when they differ from `kwargs`
    precision: str | None = None  # finest class met (PRECISIONS or BELOW); None: nothing compared
    contract: bool = False  # failed by breaking the calling contract (in-place edit, dtype, arity)
    no_graph: bool = False  # a torch output with no autograd graph at all: its gradient is 0 everywhere
    absent: str = ""  # for "not_implemented": the keyword values not offered, and the adapter's reason
    # For re-judging the same call against other oracle keywords (`rejudge`): the adapter's values,
    # its gradients (None: none given) and the upstream the gradients were taken with.
    values: tuple[np.ndarray, ...] = ()
    grads: tuple[np.ndarray, ...] | None = None
    upstream: Any = None
    # the oracle's outputs and gradients the last judgement compared with (the report shows small ones)
    expected: tuple[np.ndarray, ...] = ()
    expected_grads: tuple[np.ndarray, ...] = ()

    @property
    def tol_class(self) -> str:
        return self.judged_at or self.dtype

    def header(self) -> str:
        return (
            f"[{self.record.function} | spec {self.record.spec_id} | adapter={self.adapter} | "
            f"{self.dtype}" + (f" | judged at {precision_label(self.tol_class)} precision" if self.tol_class != self.dtype else "")
            + "]"
        )

    def repro(self) -> str:
        """The `rlspec repro` line that re-runs exactly this comparison (same adapter reference,
        case, dtype, keywords, check and precision class)."""
        fn, ref = self.record.function, self.ref or self.adapter
        if self.kind == "golden":
            words = ["rlspec", "repro", fn, "--vector", self.case.note, "--adapter", ref]
            if self.dtype != "float64":
                words += ["--dtype", self.dtype]
        elif self.case.seed is None:  # a hand-built case of a framework's own row
            where = f" (case {self.case.note})" if self.case.note else ""
            return f"rlspec check --adapter {ref} --only {fn}{where}"
        else:
            words = ["rlspec", "repro", fn, "--seed", str(self.case.seed), "--dtype", self.dtype, "--adapter", ref]
            if self.kind.startswith("invariant:"):
                words += ["--invariant", self.kind.split(":", 1)[1]]
            if not self.kwargs and self.record.question_kwargs(self.record.make_case(self.case.seed).kwargs):
                words.append("--canonical")  # the case that varies no keyword: the seed alone would pass its drawn ones
        for k, v in self.kwargs.items():
            words += ["--kw", f"{k}={v!r}"]
        for k, v in (self.oracle_kwargs or {}).items():  # the oracle's own keywords, on top of --kw
            if k not in self.kwargs or self.kwargs[k] != v:
                words += ["--oracle-kw", f"{k}={v!r}"]
        if self.tol_class != self.dtype:
            words += ["--precision", self.tol_class]
        return " ".join(_shell_word(w) for w in words)

    def report(self) -> str:
        lines = [
            self.header(),
            f"inputs: {self.case.shapes()}; keywords: {self.kwargs}"
            + (f"; oracle keywords: {self.oracle_kwargs}" if self.oracle_kwargs not in (None, self.kwargs) else ""),
        ]
        lines += [m.describe() for m in self.mismatches]
        if self.message:
            lines.append(self.message)
        lines += self.small_values()
        lines.append(f"Reproduce: {self.repro()}")
        return "\n".join(lines)

    def small_values(self) -> list[str]:
        """The inputs (as the adapter saw them, rounded to the dtype), expected and actual outputs and
        gradients, when every one of them has at most SMALL elements: a failing case a reader can check by hand."""
        if not self.mismatches:
            return []
        inputs = cases.rounded_args(self.case, self.dtype)
        names = ("advantages", "returns") if self.record.output == "pair" else ("value",)
        shown = [(f"input {k}", v) for k, v in inputs.items() if isinstance(v, np.ndarray)]
        shown += [(f"expected {n}", e) for n, e in zip(names, self.expected)]
        shown += [(f"actual {n}", a) for n, a in zip(names, self.values)]
        if self.grads is not None and self.expected_grads:
            shown += [(f"expected grad[{n}]", e) for n, e in zip(self.record.grad_args, self.expected_grads)]
            shown += [(f"actual grad[{n}]", a) for n, a in zip(self.record.grad_args, self.grads)]
        if not shown or any(np.asarray(v).size > SMALL for _, v in shown):
            return []
        return [f"{label}: {_array_text(v)}" for label, v in shown]


SMALL = 24  # elements: the largest array `Outcome.small_values` prints


def _array_text(value: Any) -> str:
    a = np.asarray(value)
    if a.dtype == bool:
        a = a.astype(int)
    text = np.array2string(a if a.dtype.kind in "iu" else a.astype(np.float64), precision=6, separator=", ",
                           max_line_width=10**6, floatmode="maxprec", suppress_small=False)
    return " ".join(text.split())  # one line: rows of a matrix as nested brackets


def _shell_word(word: str) -> str:
    """`word` as one POSIX shell word: as is when safe, else in double quotes (Python reprs of
    strings use single quotes, so scale='batch' reads "scale='batch'")."""
    if word and all(c.isalnum() or c in "@%+=:,./-_" for c in word):
        return word
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in word) + '"'


def to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64).cpu().numpy()
    if isinstance(value, (tuple, list)):
        return tuple(to_numpy(v) for v in value)
    return np.asarray(value, dtype=np.float64)


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


def call_torch(fn: Any, rounded: dict[str, Any], kwargs: dict[str, Any], dtype: str, grad_args: tuple[str, ...]) -> tuple[Any, dict[str, torch.Tensor]]:
    targs = cases.torch_args(rounded, dtype, grad_args)  # fresh tensors: torch.tensor / from_numpy of a copy
    out = _guarded(fn, list(targs), list(targs.values()), kwargs)
    return out, {name: targs[name] for name in grad_args}


def _numpy_args(rounded: dict[str, Any], dtype: str) -> list[Any]:
    """Fresh copies of every array (floats cast to `dtype`; masks and ids copied too: a case's own
    arrays, e.g. a cached golden vector, never reach an adapter)."""
    np_dtype = NUMPY_DTYPES[dtype]
    return [v.astype(np_dtype) if cases.is_float_array(v) else v.copy() if isinstance(v, np.ndarray) else v
            for v in rounded.values()]


def call_numpy(fn: Any, rounded: dict[str, Any], kwargs: dict[str, Any], dtype: str) -> Any:
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


def _output_dtype_problem(raw: Any, dtype: str, output: str, float_inputs: bool = True) -> str | None:
    """Torch adapters return float tensors no wider than the input dtype (api.md "Adapter
    protocol"): float32 is accepted for bfloat16 inputs (float32 accumulation returned without the
    final rounding, as TRL's fused head does); a narrower float (float32 for float64 inputs) is
    accepted too and shows up as the precision the outputs meet. Wider or non-float outputs break
    the contract. Without a float input (`overlong_penalty`'s integer lengths) there is no input
    dtype to be wider than: any float output is accepted, judged at the case dtype's class."""
    expected = cases.TORCH_DTYPES[dtype]
    allowed = {torch.float64: {torch.float64, torch.float32, torch.bfloat16, torch.float16},
               torch.float32: {torch.float32, torch.bfloat16, torch.float16},
               torch.bfloat16: {torch.bfloat16, torch.float32}}[expected]
    if not float_inputs:
        allowed = {torch.float64, torch.float32, torch.bfloat16, torch.float16}
    if output == "mask":  # a keep/reject decision: bool, whatever the input dtype
        expected, allowed = torch.bool, {torch.bool}
    for i, item in enumerate(as_tuple(raw)):
        if isinstance(item, torch.Tensor) and item.dtype not in allowed:
            which = "output" if not isinstance(raw, (tuple, list)) else f"output {i}"
            wanted = "torch.bool" if output == "mask" else f"{expected} (the dtype of the {dtype} inputs) or a narrower float"
            return f"{which} dtype {item.dtype}, expected {wanted}"
    return None


def as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def run_case(
    record: Quantity,
    adapter: Adapter,
    case: cases.Case,
    dtype: str,
    kwargs: dict[str, Any] | None = None,
    oracle_kwargs: dict[str, Any] | None = None,
    *,
    kind: str = "property",
    ref: str | None = None,
    judged_at: str | None = None,
) -> Outcome:
    """Compare `adapter.<function>(**kwargs)` with `oracle.<function>(**oracle_kwargs)` on `case`
    rounded to `dtype` (both keyword sets default to the case's own), judged at the tolerance class
    `judged_at` (default: `dtype`'s)."""
    adapter = LoadedAdapter.of(adapter)
    kw = dict(case.kwargs if kwargs is None else kwargs)
    okw = dict(kw if oracle_kwargs is None else oracle_kwargs)
    outcome = Outcome("pass", record, adapter.name, dtype, case, kw, kind=kind, ref=ref,
                      judged_at=judged_at, oracle_kwargs=None if okw == kw else okw)
    fn = adapter_function(outcome, adapter)
    if fn is None:
        return outcome
    rounded = cases.rounded_args(case, dtype)
    if not record.conditioned(rounded, okw):
        outcome.status = "ill_conditioned"
        return outcome
    expected = as_tuple(record.oracle(*rounded.values(), **okw))
    upstream = seeded_upstream(record.output, expected, case.upstream_seed, dtype) if record.grad_args else None
    return check_adapter(
        outcome,
        adapter,
        fn,
        rounded,
        expected,
        upstream,
        lambda: as_tuple(record.oracle_grad(*rounded.values(), upstream, **okw)),
    )


def rejudge(outcome: Outcome, oracle_kwargs: dict[str, Any] | None = None, judged_at: str | None = None) -> Outcome:
    """The same adapter call (not repeated) judged against the oracle under `oracle_kwargs`
    (default: the call's own keywords) at the tolerance class `judged_at`. Outcomes that compared
    nothing (errors, contract failures, not implemented) come back unchanged."""
    if outcome.status not in ("pass", "fail") or outcome.contract or not outcome.values:
        return outcome
    record, okw = outcome.record, dict(outcome.kwargs if oracle_kwargs is None else oracle_kwargs)
    new = Outcome("pass", record, outcome.adapter, outcome.dtype, outcome.case, outcome.kwargs, kind=outcome.kind,
                  ref=outcome.ref, judged_at=judged_at, oracle_kwargs=None if okw == outcome.kwargs else okw,
                  observed=outcome.observed, values=outcome.values, grads=outcome.grads, upstream=outcome.upstream,
                  no_graph=outcome.no_graph)
    rounded = cases.rounded_args(outcome.case, outcome.dtype)
    if not record.conditioned(rounded, okw):
        new.status = "ill_conditioned"
        return new
    expected = as_tuple(record.oracle(*rounded.values(), **okw))
    grads = (lambda: as_tuple(record.oracle_grad(*rounded.values(), outcome.upstream, **okw))) if outcome.grads is not None else None
    return judge(new, expected, grads)


def adapter_function(outcome: Outcome, adapter: LoadedAdapter) -> Any:
    """`adapter.<function>` for `outcome.record`, or None after setting `outcome.status` to
    "not_implemented" (no such attribute, or the case asks for a keyword value the adapter declares
    in `unsupported_kwargs`) or "unsupported" (`outcome.dtype` not among its dtypes)."""
    record = outcome.record
    fn = adapter.function(record.function)
    if fn is None:
        outcome.status = "not_implemented"
        outcome.message = f"{record.function} is not implemented by adapter {outcome.adapter!r}"
        return None
    if outcome.dtype not in adapter.dtypes_for(record.function):
        outcome.status = "unsupported"
        return None
    offending = adapter.unsupported(record.function, outcome.kwargs)
    if offending:
        mark_not_implemented(outcome, _fmt(offending), "declared in unsupported_kwargs")
        return None
    absent = _keywords_not_taken(fn, outcome.kwargs)
    if absent:
        mark_not_implemented(outcome, _fmt(absent), "the function takes no such keyword")
        return None
    return fn


def _keywords_not_taken(fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords of `kwargs` that `fn`'s signature cannot take (no such parameter and no **kwargs): an
    adapter offering only some keywords need not declare the others."""
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or an object without a signature: called as it is
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return {}
    return {k: v for k, v in kwargs.items() if k not in params}


def mark_not_implemented(outcome: Outcome, keywords: str, reason: str) -> Outcome:
    """A case the adapter does not offer: `absent` names the keyword values asked (and why, when the
    adapter said), the label the row lists under "not implemented"."""
    outcome.status = "not_implemented"
    outcome.absent = (keywords or "these inputs") + (f": {reason}" if reason else "")
    outcome.message = f"not implemented ({outcome.absent})"
    return outcome


def _fmt(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def check_adapter(
    outcome: Outcome,
    adapter: LoadedAdapter,
    fn: Any,
    rounded: dict[str, Any],
    expected: tuple[Any, ...],
    upstream: Any,
    expected_grads: Callable[[], tuple[np.ndarray, ...]],
) -> Outcome:
    """Call `fn` (from `adapter_function`) on the `rounded` inputs with `outcome.kwargs`; compare its
    outputs with `expected` and, when the record has gradient arguments and the adapter gives
    gradients, its dL/d(grad args) for `upstream` with `expected_grads()` (evaluated only then).
    The expectations come from the oracle (`run_case`) or from a golden vector. A
    `NotImplementedError` from the adapter marks this case "not implemented" (the keyword values it
    asked for are named), not an error."""
    record, dtype, kw = outcome.record, outcome.dtype, outcome.kwargs
    wants_grad = bool(record.grad_args) and adapter.grad_for(record.function)
    try:
        if adapter.array_api == "torch":
            raw, grad_inputs = call_torch(fn, rounded, kw, dtype, record.grad_args if wants_grad else ())
        else:
            raw, grad_inputs = call_numpy(fn, rounded, kw, dtype), {}
        actual = as_tuple(to_numpy(raw))
    except AdapterMisbehaved as exc:
        return _broken(outcome, str(exc))
    except NotImplementedError as exc:
        return mark_not_implemented(outcome, _fmt(kw), str(exc))
    except Exception as exc:  # an adapter error is a result, not a crash of the suite
        outcome.status = "error"
        outcome.message = f"{type(exc).__name__}: {exc}"
        return outcome

    outcome.observed = outcome.values = actual
    if len(actual) != len(expected):
        return _broken(outcome, f"returned {len(actual)} outputs, the spec has {len(expected)}")
    float_inputs = any(cases.is_float_array(v) for v in rounded.values())
    if adapter.array_api == "torch" and (problem := _output_dtype_problem(raw, dtype, record.output, float_inputs)) is not None:
        return _broken(outcome, problem)
    if wants_grad:
        outcome.upstream = upstream
        outcome.no_graph = isinstance(raw, torch.Tensor) and not raw.requires_grad
        try:
            actual_grads = adapter_grads(adapter, fn, raw, grad_inputs, rounded, kw, upstream, dtype, record)
        except AdapterMisbehaved as exc:
            return _broken(outcome, f"gradient: {exc}")
        except Exception as exc:
            outcome.status = "error"
            outcome.message = f"gradient: {type(exc).__name__}: {exc}"
            return outcome
        if actual_grads is not None:
            outcome.grads = tuple(actual_grads)
            outcome.observed = outcome.observed + outcome.grads
    return judge(outcome, expected, expected_grads if outcome.grads is not None else None)


def _broken(outcome: Outcome, message: str) -> Outcome:
    outcome.status, outcome.message, outcome.contract = "fail", message, True
    return outcome


def judge(outcome: Outcome, expected: tuple[Any, ...], expected_grads: Callable[[], tuple[np.ndarray, ...]] | None) -> Outcome:
    """Compare the adapter's `values` (and `grads`) held by `outcome` with the expectations: the
    mismatches and status at `outcome.tol_class`, and the finest precision class met."""
    record = outcome.record
    names = ("advantages", "returns") if record.output == "pair" else ("value",)
    pairs = [("value", name, a, e) for name, a, e in zip(names, outcome.values, expected)]
    outcome.expected = tuple(np.asarray(e, dtype=np.float64) for e in expected)
    if outcome.grads is not None and expected_grads is not None:
        outcome.grad_checked = True
        outcome.expected_grads = tuple(np.asarray(g, dtype=np.float64) for g in expected_grads())
        pairs += [("grad", f"grad[{name}]", a, e) for name, a, e in zip(record.grad_args, outcome.grads, outcome.expected_grads)]
    outcome.mismatches = []
    outcome.max_abs, outcome.max_rel = 0.0, float("nan")
    for what, name, a, e in pairs:
        tol = tolerance(record.spec_id, tolerance_dtype(outcome.tol_class), what)
        record_comparison(outcome, compare(a, e, tol, what=name), a, e, tol)
        if not outcome.message and what == "value":
            outcome.message = _nan_note(name, a, e)
    outcome.precision = BELOW
    for klass in PRECISIONS:
        if all(compare(a, e, tolerance(record.spec_id, klass, what), what=name) is None for what, name, a, e in pairs):
            outcome.precision = klass
            break
    outcome.status = "fail" if outcome.mismatches else "pass"
    if outcome.status == "pass":
        outcome.message = ""
    elif outcome.no_graph and any(m.what.startswith("grad[") for m in outcome.mismatches):
        outcome.message = NO_GRAPH_HINT.format(function=record.function)
    return outcome


NO_GRAPH_HINT = ("no gradient offered: the output has no autograd graph (computed under torch.no_grad, or from "
                 "detached inputs), so every gradient reaching the inputs is 0. A bug if the framework trains "
                 "through {function}; if it is a metric computed without gradient by design, declare "
                 "supports_grad = {{'{function}': False}} on the adapter (its values are still checked)")


def tolerance_dtype(klass: str) -> str:
    """The tolerance table's dtype for a precision class (BELOW judges at bfloat16's: a check
    judged there only fails on what even the coarsest class rejects)."""
    return "bfloat16" if klass == BELOW else klass


def adapter_grads(adapter: LoadedAdapter, fn: Any, raw: Any, grad_inputs: dict[str, torch.Tensor], rounded: dict[str, Any], kw: dict[str, Any], upstream: Any, dtype: str, record: Quantity) -> tuple[np.ndarray, ...] | None:
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
    grad_fn = adapter.grad_function(record.function)
    if grad_fn is None:
        return None
    args = _numpy_args(rounded, dtype)
    u = upstream.copy() if isinstance(upstream, np.ndarray) else upstream
    grads = _guarded(grad_fn, [*rounded, "upstream"], [*args, u], kw)
    return tuple(np.asarray(g, dtype=np.float64) for g in as_tuple(grads))


def record_comparison(outcome: Outcome, mismatch: Mismatch | None, actual: Any, expected: Any, tol: Tol) -> None:
    """Fold one comparison into the outcome's error figures (relative error only where |expected|
    exceeds the absolute tolerance) and keep its mismatch."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape == e.shape and a.size:
        diff, rel = differences(a, e, tol.atol)
        outcome.max_abs = max(outcome.max_abs, greatest(diff)[0])
        rel_max = greatest(rel)[0]
        if rel_max == rel_max:
            outcome.max_rel = rel_max if outcome.max_rel != outcome.max_rel else max(outcome.max_rel, rel_max)
    if mismatch is not None:
        outcome.mismatches.append(mismatch)
