"""Machinery shared by the verl and OpenRLHF framework rows (``verl_checks.py``, ``openrlhf_checks.py``).

Two kinds of rows:

- ``fixed_row``: a core-API function checked exactly like ``rlspec check`` does (seeded property cases,
  golden vectors, masked-position and on-policy invariants, variant fingerprinting), but with some of
  the case's keywords fixed, for framework functions that compute one setting of a spec function
  (verl's GRPO with ``norm_adv_by_std_in_grpo=False`` is ``grpo_advantages(scale="none")``; there is no
  verl setting for ``scale="batch"``, so the core ``grpo_advantages`` row cannot be offered).
- ``composition_row``: a framework result that is a composition of spec quantities (an aggregated
  loss: value and gradient), compared with candidate compositions in order: the canonical one
  (``pass``), then named variants (``preset``), else ``fail`` with the canonical mismatch.

What both frameworks' loss rows use: ``loss_call`` / ``mean_over_ranks`` (an aggregation call, whole or
split over data-parallel ranks), the oracle pieces and their aggregation (``policy_piece``,
``value_piece``, ``compose``, ``aggregate_eval``, ``value_loss_candidates``) and the seeded loss batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import oracle
from conformance.records import cases
from conformance.runner.compare import Mismatch, compare, differences, greatest
from conformance.records import BY_FUNCTION
from conformance.runner.rows import RowResult, match_status, seeds_for
from conformance.runner.verdict import check_row
from conformance.tolerances import Tol, tolerance

# ---------------------------------------------------------------------------------------------
# Spec pieces with their vector-Jacobian products, and the comparison of a framework's result
# ---------------------------------------------------------------------------------------------


@dataclass
class Piece:
    """A per-token array of the spec composition and its VJP w.r.t. logp: ``vjp(u) = u · d value / d logp``."""

    value: np.ndarray
    vjp: Callable[[np.ndarray], np.ndarray]


def scaled(piece: Piece, factor: np.ndarray) -> Piece:
    """A piece times a constant [B, T] factor (no gradient through the factor)."""
    return Piece(piece.value * factor, lambda u: piece.vjp(u * factor))


@dataclass
class Comparison:
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


# ---------------------------------------------------------------------------------------------
# Fixed-keyword function rows
# ---------------------------------------------------------------------------------------------


class FunctionView:
    """An adapter-shaped object that exposes one spec function (and its ``_grad``) through callables."""

    def __init__(self, adapter: Any, function: str, fn: Callable[..., Any], grad: Callable[..., Any] | None = None,
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
    try:
        from conformance.vectors.golden import cases_for
    except ImportError:
        return []
    return list(cases_for(function))


def fixed_row(view: Any, function: str, *, row_id: str, fixed: dict[str, Any], seed: int, n_seeds: int = 8,
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


# ---------------------------------------------------------------------------------------------
# Composition rows
# ---------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """One formula a framework result may equal: ``evaluate() -> {"value": ..., "grad[x]": ...}``."""

    label: str  # "canonical" or the variant's description
    formula: str
    evaluate: Callable[[], dict[str, Any]]
    preset: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


def composition_row(row_id: str, spec_id: str, function: str, adapter: Any, got: Callable[[], dict[str, Any]],
                    candidates: list[Candidate], tol: dict[str, Tol], *, seed: int | None = None, note: str = "") -> RowResult:
    """Compare the framework's results ``got()`` (keys like ``"value"``, ``"grad[logp]"``) with each
    candidate in turn; the first that matches every key decides the status."""
    t0 = time.perf_counter()
    row = RowResult(id=row_id, spec_id=spec_id, function=function, adapter=adapter.name, status="pass",
                    seeds=[] if seed is None else [seed], n_cases=1)
    try:
        actual = got()
        first: tuple[Candidate, Comparison] | None = None
        for cand in candidates:
            expected = cand.evaluate()
            c = Comparison()
            for key, value in expected.items():
                c.add(key, actual[key], value, tol.get(key.split("[")[0], tol["value"]))
            if first is None:
                first = (cand, c)
            if c.ok:
                row.max_abs_err, row.max_rel_err, row.checks = c.max_abs, c.max_rel, dict(c.checks)
                if cand.label == "canonical":
                    row.message = f"= {cand.formula}"
                else:
                    row.status = match_status(cand.preset)
                    row.matched_preset = cand.preset
                    row.matched_kwargs = dict(cand.kwargs) or None
                    what = f"preset {cand.preset}" if cand.preset else "variant"
                    row.message = f"matches {what} ({cand.label}), not canonical: {cand.formula}"
                break
        else:
            cand, c = first
            row.status = "fail"
            row.max_abs_err, row.max_rel_err, row.checks = c.max_abs, c.max_rel, dict(c.checks)
            row.message = "\n".join([f"{cand.label} {cand.formula}:"] + [m.describe() for m in c.mismatches]
                                    + [f"no variant matched either ({', '.join(x.label for x in candidates[1:]) or 'none tried'})"])
    except Exception as exc:  # a framework failure is a row, not a crash
        row.status = "error"
        row.message = f"{type(exc).__name__}: {exc}"
    if note:
        row.message = f"{row.message} {note}".strip()
    row.seconds = time.perf_counter() - t0
    return row


def not_implemented_row(row_id: str, spec_id: str, function: str, adapter: Any, message: str) -> RowResult:
    return RowResult(id=row_id, spec_id=spec_id, function=function, adapter=adapter.name, status="not_implemented",
                     message=message)


def loss_tolerances(dtype: str, spec_id: str = "loss.ppo") -> dict[str, Tol]:
    return {"value": tolerance("agg", dtype, "value"), "grad": tolerance(spec_id, dtype, "grad")}


def value_and_grad_tolerances(spec_id: str, dtype: str) -> dict[str, Tol]:
    return {"value": tolerance(spec_id, dtype, "value"), "grad": tolerance(spec_id, dtype, "grad")}


def fmt(kw: dict[str, Any]) -> str:
    """``k=v, ...`` for a row's formula and labels."""
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


# ---------------------------------------------------------------------------------------------
# Aggregated losses: the framework's call and the oracle's composition
# ---------------------------------------------------------------------------------------------


def loss_call(adapter: Any, op: str, loss_name: str, x: np.ndarray, m: np.ndarray, params: dict[str, Any]) -> dict[str, Any]:
    """The framework's aggregation ``op`` on float32 (``loss_name`` = ``x``, ``loss_mask`` = ``m``):
    ``{"value": loss, "grad[token_loss]": d loss / d x}``."""
    r = adapter.call(op, {loss_name: x.astype(np.float32), "loss_mask": m.astype(np.float32)}, params,
                     wrt=[loss_name], upstream={"loss": 1.0})
    return {"value": r["outputs"]["loss"], "grad[token_loss]": r["grads"][loss_name]}


def mean_over_ranks(call: Callable[[np.ndarray], dict[str, Any]], m: np.ndarray, dp: int) -> dict[str, Any]:
    """The batch's rows split over ``dp`` data-parallel ranks, ``call(rows)`` per rank (a ``loss_call``);
    DDP averages the ranks' gradients, so the effective loss is the mean of the rank losses."""
    value, grad = 0.0, np.zeros(m.shape)
    for rows in np.array_split(np.arange(m.shape[0]), dp):
        r = call(rows)
        value += float(r["value"]) / dp
        grad[rows] = r["grad[token_loss]"] / dp
    return {"value": value, "grad[token_loss]": grad}


def aggregate_eval(x: np.ndarray, m: np.ndarray, agg: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """``aggregate(x, m, **agg)`` and its gradient w.r.t. ``token_loss``, as a candidate's ``evaluate``."""
    return lambda: {"value": oracle.aggregate(x, m, **agg), "grad[token_loss]": oracle.aggregate_grad(x, m, 1.0, **agg)}


def broadcast_advantages(batch: dict[str, np.ndarray]) -> np.ndarray:
    """The batch's advantages as ``[B, T]`` (``[B]`` ones broadcast over the tokens)."""
    a = batch["advantages"]
    return a if a.ndim == 2 else np.broadcast_to(a[:, None], batch["mask"].shape).copy()


def policy_piece(function: str, lp: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Piece:
    """The oracle's ``function`` (``ppo_token_loss``, ...) on the batch ``b`` at ``lp``, with its VJP."""
    loss, grad = getattr(oracle, function), getattr(oracle, f"{function}_grad")
    A, m, old = b["advantages"], b["mask"], b["old_logp"]
    return Piece(loss(lp, old, A, m, **kw), lambda u: grad(lp, old, A, m, u, **kw))


def value_piece(v: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Piece:
    """The oracle's ``value_token_loss`` on the batch ``b`` at ``v``, with its VJP."""
    m, old, R = b["mask"], b["old_values"], b["returns"]
    return Piece(oracle.value_token_loss(v, old, R, m, **kw), lambda u: oracle.value_token_loss_grad(v, old, R, m, u, **kw))


def compose(piece: Piece, m: np.ndarray, agg: dict[str, Any], grad_key: str) -> dict[str, Any]:
    """``{"value": aggregate(piece), grad_key: its gradient}`` (the chain through ``piece.vjp``)."""
    value = oracle.aggregate(piece.value, m, **agg)
    w = oracle.aggregate_grad(piece.value, m, 1.0, **agg)
    return {"value": value, grad_key: piece.vjp(w)}


def value_loss_candidates(framework: str, batch: dict[str, np.ndarray], agg: dict[str, Any],
                          asked: dict[str, Any]) -> list[Candidate]:
    """An aggregated value loss: ``aggregate(value_token_loss(**asked), **agg)`` (canonical), then with
    ``framework``'s value preset (value and gradient w.r.t. ``values``)."""
    m = batch["mask"]

    def ev(kwargs: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        return lambda: compose(value_piece(batch["values"], batch, **kwargs), m, agg, "grad[values]")

    preset = {**oracle.presets.preset_kwargs(framework, "value_token_loss"), **asked}
    cands = [Candidate("canonical", f"aggregate(value_token_loss({fmt(asked)}), {fmt(agg)})", ev(asked))]
    if preset != asked:
        cands.append(Candidate(fmt(preset), f"aggregate(value_token_loss({fmt(preset)}), {fmt(agg)})", ev(preset),
                               preset=framework, kwargs=preset))
    return cands


# ---------------------------------------------------------------------------------------------
# The loss batch: token-aligned [B, T], ragged, with finite garbage at every masked position
# ---------------------------------------------------------------------------------------------

B, T = 6, 9
# (first completion column, completion length, masked tool column or None) per row
ROWS = ((2, 7, None), (5, 4, None), (7, 1, None), (2, 6, 4), (3, 0, None), (4, 5, None))
ADVANTAGE_SIGNS = np.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0])


def loss_mask() -> np.ndarray:
    m = np.zeros((B, T), dtype=bool)
    for b, (start, n, tool) in enumerate(ROWS):
        m[b, start:start + n] = True
        if tool is not None:
            m[b, tool] = False
    return m


def _far(x: float, kinks: tuple[float, ...], margin: float) -> bool:
    return all(abs(x - k) > margin for k in kinks)


def log_ratios(rng: np.random.Generator, mask: np.ndarray, kinks: tuple[float, ...], margin: float = 0.03,
               seq_kinks: tuple[float, ...] = ()) -> np.ndarray:
    """Per-token log(pi/pi_old): inside, just outside and far outside every clip range, including
    ratios above 3 (verl's dual-clip constant) and below 0.2; each kept ``margin`` from every kink (and
    each row's mean log-ratio from ``seq_kinks``)."""
    d = np.zeros(mask.shape)
    for b in range(mask.shape[0]):
        while True:
            for t in range(mask.shape[1]):
                while True:
                    u = rng.random()
                    if u < 0.35:
                        x = float(rng.uniform(-0.15, 0.15))
                    elif u < 0.7:
                        x = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 0.8))
                    else:
                        x = float(rng.choice([-1.0, 1.0]) * rng.uniform(1.3, 2.3))
                    if _far(x, kinks, margin):
                        d[b, t] = x
                        break
            n = mask[b].sum()
            if n == 0 or _far(float(d[b][mask[b]].mean()), seq_kinks, margin):
                break
    return d


def loss_batch(seed: int, *, per_token_advantages: bool = False, kinks: tuple[float, ...] = (),
               seq_kinks: tuple[float, ...] = ()) -> dict[str, np.ndarray]:
    """Seeded float64 batch: ``logp``, ``old_logp`` (= logp - d), ``ref_logp``, ``advantages`` ([B] or
    [B, T]), ``values``, ``old_values``, ``returns``, ``token_loss``, ``mask``. Masked positions hold
    finite garbage (what padding holds in a real batch), never zeros."""
    rng = np.random.default_rng(seed)
    m = loss_mask()
    logp = -np.abs(rng.normal(0.0, 1.5, size=(B, T))) - 1e-3
    d = log_ratios(rng, m, kinks, seq_kinks=seq_kinks)
    k = rng.uniform(-0.6, 0.6, size=(B, T))
    k[0, 3], k[5, 5] = -3.4, 2.5  # ref far above logp (k3 > 10: verl's clamp binds) and below
    if per_token_advantages:
        adv = rng.normal(0.0, 1.0, size=(B, T))
    else:
        adv = ADVANTAGE_SIGNS * (0.3 + np.abs(rng.normal(0.0, 1.0, size=B)))
    values = rng.normal(0.0, 2.0, size=(B, T))
    delta = np.zeros((B, T))
    for idx in np.ndindex(B, T):
        while True:
            x = float(rng.normal(0.0, 0.6))
            if _far(abs(x), (0.2, 0.5), 0.03):
                delta[idx] = x
                break
    garbage = ~m
    out = {
        "logp": logp,
        "old_logp": logp - d,
        "ref_logp": logp - k,
        "advantages": adv,
        "values": values + delta,
        "old_values": values,
        "returns": rng.normal(0.0, 2.0, size=(B, T)),
        "token_loss": rng.normal(0.0, 1.0, size=(B, T)),
        "token_rewards": rng.normal(0.0, 1.0, size=(B, T)),
        "mask": m,
    }
    for name in ("logp", "old_logp", "ref_logp", "values", "old_values", "returns", "token_loss", "token_rewards"):
        out[name] = np.where(garbage, rng.uniform(-3.0, 0.0, size=(B, T)), out[name])
    if per_token_advantages:
        out["advantages"] = np.where(garbage, rng.normal(0.0, 5.0, size=(B, T)), out["advantages"])
    return out


def round_batch(batch: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The batch as the framework sees it in ``dtype``, held in float64 for the oracle."""
    return {k: (cases.round_to(v, dtype) if v.dtype.kind == "f" else v) for k, v in batch.items()}


def upstream_for(shape: tuple[int, ...], seed: int, dtype: str) -> np.ndarray:
    return cases.round_to(np.random.default_rng(seed).normal(0.0, 1.0, size=shape), dtype)


NP = {"float64": np.float64, "float32": np.float32}


__all__ = ["FunctionView", "fixed_row", "Candidate", "composition_row", "not_implemented_row", "loss_batch",
           "round_batch", "upstream_for", "loss_tolerances", "value_and_grad_tolerances", "fmt", "loss_call",
           "mean_over_ranks", "aggregate_eval", "broadcast_advantages", "policy_piece", "value_piece", "compose",
           "value_loss_candidates", "loss_mask", "B", "T", "NP"]
