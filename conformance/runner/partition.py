"""Partition invariance of a training step, per aggregation mode: the ``agg.partition[<mode>]`` rows
of ``rlspec check`` (bug-catalogue classes 1, 12 and 26).

A framework passes when splitting one optimizer step's batch over data-parallel ranks and
gradient-accumulation micro-batches gives exactly the loss and gradient of the whole batch on one
device, in that mode. The core ``aggregate`` row's ``invariant:partition`` check asks whether the
*function* sums correctly when handed global counts; these rows ask whether the *framework's
micro-batch loss* does, counts, DDP averaging and empty micro-batches included.

The opt-in contract. An adapter that exposes ::

    micro_batched_loss(token_loss_chunks, mask_chunks, *, mode, norm_length=None, dp_world_size=1)
        -> sequence of scalars, one per chunk

is checked; any other adapter gets ``not implemented`` rows, and so does a mode for which
``micro_batched_loss`` raises ``NotImplementedError`` (a framework without that mode). ``token_loss_chunks[i]`` and
``mask_chunks[i]`` (``[b_i, T]``, the adapter's array type: torch tensors for ``array_api =
"torch"``, NumPy arrays otherwise) are micro-batch ``i`` of one step; the chunks belong to
``dp_world_size`` data-parallel ranks in order, ``len(chunks) // dp_world_size`` consecutive chunks
per rank. The adapter returns the loss its framework would call ``backward()`` on for each chunk,
doing whatever the framework does to get there (count tokens per micro-batch, all-reduce counts
over the ranks, scale by the world size, ...); being one process, it simulates the framework's
collectives with the chunks of the other ranks. The check assumes what DDP and gradient
accumulation do with those losses: gradients summed over a rank's micro-batches and averaged over
the ranks, i.e. the effective objective ``Σ_i loss_i / dp_world_size``, which must equal
``aggregate(whole batch, mode=mode, norm_length=norm_length)`` in value and in gradient w.r.t.
every token loss. The row is metamorphic, like ``invariant:partition``: the split step is compared
with the adapter's own result for the same batch as one micro-batch on one rank (``dp_world_size=1``),
so a framework with a non-canonical but consistent normaliser (e.g. a sequence count that skips empty
rows) is partition-invariant; whether its whole-batch value is canonical is the other rows' question
(a note says so). Torch adapters get gradients by autograd (the chunks are leaves); NumPy adapters
may expose ``micro_batched_loss_grad(token_loss_chunks, mask_chunks, upstream, *, <same keywords>)``
returning ``dL/d token_loss_chunks[i]`` for ``L = upstream · Σ_i loss_i`` (values only otherwise).

The step checked: a seeded ragged batch plus one fully masked row, cut into 4 micro-batches of
uneven token counts over 2 ranks (the fully masked row is the second rank's last micro-batch), and
the fixed case of bug-catalogue class 12 (rank 0 holds 5 valid tokens, rank 1 holds 1); float64 and
float32. A failing row names the known mistakes whose numbers it reproduces (bug-catalogue #1: local
counts per micro-batch; #12: local counts per rank; a missing ``x dp_world_size``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import oracle
from conformance.records import Quantity, cases, inputs
from conformance.records.keywords import AGG_MODE
from conformance.runner.compare import compare
from conformance.runner.protocol import Adapter, LoadedAdapter
from conformance.runner.rows import RowResult, seeds_for
from conformance.runner.timeout import run_with_timeout
from conformance.tolerances import tolerance

__all__ = ["MODES", "applies", "partition_rows", "partition_row", "step_cases"]

MODES = AGG_MODE.choices
DP = 2
N_SEEDS = 3


def applies(records: Sequence[Quantity]) -> bool:
    """The rows belong to a run that checks the aggregation family (spec ids ``agg.*``): they are its
    ``agg.partition[<mode>]`` rows."""
    return any(r.spec_id.split(".")[0] == "agg" for r in records)


# ---------------------------------------------------------------------------------------------
# the steps
# ---------------------------------------------------------------------------------------------


def step_cases(mode: str, seed: int, n_seeds: int = N_SEEDS) -> list[dict[str, Any]]:
    """Whole batches with their cut into chunks (``slices``, rank-major) and ``dp_world_size``."""
    out = []
    for s in seeds_for(f"agg.partition[{mode}]", seed, n_seeds):
        rng = np.random.default_rng(s)
        B, T = int(rng.integers(3, 7)), int(rng.integers(3, 11))
        mask = np.concatenate([inputs.ragged_mask(rng, B, T), np.zeros((1, T), dtype=bool)])  # + an empty micro-batch
        loss = rng.normal(0.0, 1.0, size=(B + 1, T))
        loss[~mask] = rng.choice([np.nan, np.inf, 1e30], size=int((~mask).sum()))  # never read
        counts = mask[:B].sum(axis=1)
        # 3 cuts of rows 0..B-1 into micro-batches, the most uneven in token counts of a few tries
        tries = [np.sort(rng.choice(np.arange(1, B), size=2, replace=False)) for _ in range(6)]
        a, b = max(tries, key=lambda c: np.ptp([counts[: c[0]].sum(), counts[c[0] : c[1]].sum(), counts[c[1]:].sum()]))
        slices = [slice(0, int(a)), slice(int(a), int(b)), slice(int(b), B), slice(B, B + 1)]
        out.append({"seed": s, "mask": mask, "token_loss": loss, "slices": slices, "dp": DP,
                    "norm_length": float(T), "label": f"seed {s}: rows {[(x.start, x.stop) for x in slices]} over {DP} ranks"})
    mask = np.zeros((2, 7), dtype=bool)
    mask[0, 1:6] = True
    mask[1, 3] = True
    loss = np.where(mask, np.arange(14, dtype=np.float64).reshape(2, 7) / 7.0 - 0.5, np.nan)
    out.append({"seed": 0, "mask": mask, "token_loss": loss, "slices": [slice(0, 1), slice(1, 2)], "dp": DP, "norm_length": 7.0,
                "label": "5 valid tokens on rank 0, 1 on rank 1 (bug-catalogue class 12)"})
    return out


def _expected(step: dict[str, Any], mode: str, x: np.ndarray) -> tuple[float, np.ndarray]:
    kw = {"mode": mode, "norm_length": step["norm_length"]}
    return oracle.aggregate(x, step["mask"], **kw), oracle.aggregate_grad(x, step["mask"], 1.0, **kw)


def _alternatives(step: dict[str, Any], mode: str, x: np.ndarray) -> dict[str, tuple[float, np.ndarray]]:
    """Effective (value, gradient) of the known mistakes, for the diagnosis of a failing row."""
    m, dp, slices = step["mask"], step["dp"], step["slices"]
    per_rank = len(slices) // dp
    kw = {"mode": mode, "norm_length": step["norm_length"]}

    def effective(loss_kw: Callable[[int, slice], tuple[dict[str, Any], float]]) -> tuple[float, np.ndarray]:
        value, grad = 0.0, np.zeros(m.shape)
        for i, s in enumerate(slices):
            extra, scale = loss_kw(i, s)
            value += scale * oracle.aggregate(x[s], m[s], **kw, **extra) / dp
            grad[s] = scale * oracle.aggregate_grad(x[s], m[s], 1.0, **kw, **extra) / dp
        return value, grad

    def rank_counts(i: int) -> dict[str, Any]:
        rows = slices[(i // per_rank) * per_rank : (i // per_rank + 1) * per_rank]
        return {"num_tokens": float(sum(m[s].sum() for s in rows)), "num_seqs": float(sum(m[s].shape[0] for s in rows))}

    N, S = float(m.sum()), float(m.shape[0])
    return {
        "local counts per micro-batch, divided by the accumulation steps (bug-catalogue #1)":
            effective(lambda i, s: ({}, 1.0 / per_rank)),
        "local counts per rank, averaged over ranks by DDP (bug-catalogue #12)":
            effective(lambda i, s: (rank_counts(i), 1.0)),
        "global counts, but DDP's averaging over ranks not undone (missing x dp_world_size)":
            effective(lambda i, s: ({"num_tokens": N, "num_seqs": S}, 1.0)),
    }


# ---------------------------------------------------------------------------------------------
# calling an adapter
# ---------------------------------------------------------------------------------------------


def _observe(adapter: LoadedAdapter, step: dict[str, Any], mode: str, dtype: str) -> tuple[float, np.ndarray | None, np.ndarray]:
    """(effective value, effective gradient or None, the float64 inputs the adapter saw)."""
    x = cases.round_to(np.where(step["mask"], step["token_loss"], 0.0), dtype)
    x = np.where(step["mask"], x, step["token_loss"])  # garbage stays at masked positions
    m, dp, slices = step["mask"], step["dp"], step["slices"]
    kw = {"mode": mode, "norm_length": step["norm_length"], "dp_world_size": dp}
    if adapter.array_api == "torch":
        import torch

        tdt = cases.TORCH_DTYPES[dtype]
        leaves = [torch.tensor(x[s], dtype=tdt, requires_grad=True) for s in slices]
        masks = [torch.tensor(m[s]) for s in slices]
        losses = list(adapter.micro_batched_loss(leaves, masks, **kw))
        if len(losses) != len(slices):
            raise ValueError(f"micro_batched_loss returned {len(losses)} losses for {len(slices)} micro-batches")
        total = sum(losses) / dp
        value = float(total.detach().double())
        if not adapter.grad_for("micro_batched_loss") or not total.requires_grad:
            return value, None, x
        grads = torch.autograd.grad(total, leaves, allow_unused=True)
        grad = np.concatenate([np.zeros(m[s].shape) if g is None else g.detach().double().numpy() for s, g in zip(slices, grads)])
        return value, grad, x
    npdt = np.float64 if dtype == "float64" else np.float32
    chunks = [x[s].astype(npdt) for s in slices]
    masks = [m[s].copy() for s in slices]
    losses = list(adapter.micro_batched_loss(chunks, masks, **kw))
    if len(losses) != len(slices):
        raise ValueError(f"micro_batched_loss returned {len(losses)} losses for {len(slices)} micro-batches")
    value = float(sum(float(np.reshape(v, ())) for v in losses)) / dp
    grad_fn = adapter.micro_batched_loss_grad
    if grad_fn is None:
        return value, None, x
    grads = grad_fn(chunks, masks, 1.0, **kw)
    return value, np.concatenate([np.asarray(g, dtype=np.float64) for g in grads]) / dp, x


def partition_row(adapter: Adapter, mode: str, *, seed: int = 0, n_seeds: int = N_SEEDS) -> RowResult:
    """The ``agg.partition[<mode>]`` row of one adapter: metamorphic (the adapter against itself),
    the split step against the same batch as one micro-batch on one rank."""
    adapter = LoadedAdapter.of(adapter)
    t0 = time.perf_counter()
    label = f"agg.partition[{mode}]"
    steps = step_cases(mode, seed, n_seeds)
    row = RowResult(id=f"{label}@{adapter.name}", spec_id=f"agg.{mode}", function=label, adapter=adapter.name,
                    status="pass", seeds=[s["seed"] for s in steps])
    if adapter.micro_batched_loss is None:
        row.status = "not_implemented"
        row.message = (f"adapter {adapter.name!r} exposes no micro_batched_loss(token_loss_chunks, mask_chunks, *, mode, "
                       "norm_length=None, dp_world_size=1) (the opt-in of conformance/runner/partition.py)")
        row.seconds = time.perf_counter() - t0
        return row
    dtypes = [d for d in ("float64", "float32") if d in adapter.dtypes_for("micro_batched_loss")]
    failures: list[str] = []
    explained: dict[str, int] = {}
    not_canonical = 0
    for step in steps:
        whole_step = {**step, "slices": [slice(0, step["mask"].shape[0])], "dp": 1}
        for dtype in dtypes:
            row.n_cases += 1
            try:
                whole_value, whole_grad, x = _observe(adapter, whole_step, mode, dtype)
                value, grad, _ = _observe(adapter, step, mode, dtype)
            except NotImplementedError as exc:  # the framework has no such mode
                row.status, row.message = "not_implemented", f"{type(exc).__name__}: {exc}"
                row.seconds = time.perf_counter() - t0
                return row
            except Exception as exc:  # noqa: BLE001 - an adapter failure is the row's verdict
                row.status = "error"
                row.message = f"{step['label']}, {dtype}: {type(exc).__name__}: {exc}"
                row.checks["invariant:partition"] = "error"
                row.seconds = time.perf_counter() - t0
                return row
            tol_v, tol_g = tolerance("agg", dtype, "value"), tolerance("agg", dtype, "grad")
            mismatches = [compare(value, whole_value, tol_v, what="value (split step vs the whole batch as one micro-batch)")]
            row.max_abs_err = max(row.max_abs_err, abs(value - whole_value))
            if grad is not None and whole_grad is not None:
                mismatches.append(compare(grad, whole_grad, tol_g, what="grad[token_loss] (split step vs whole batch)"))
                diff = np.nan_to_num(np.abs(grad - whole_grad), nan=np.inf)
                row.max_abs_err = max(row.max_abs_err, float(diff.max(initial=0.0)))
            mismatches = [mm for mm in mismatches if mm is not None]
            exp_value, exp_grad = _expected(step, mode, x)
            canonical_whole = compare(whole_value, exp_value, tol_v) is None and (
                whole_grad is None or compare(whole_grad, exp_grad, tol_g) is None)
            not_canonical += int(not canonical_whole)
            if not mismatches:
                continue
            failures.append(f"{step['label']}, {dtype}:\n" + "\n".join("  " + mm.describe() for mm in mismatches))
            if canonical_whole:  # the known mistakes are stated against the canonical whole batch
                for name, (alt_value, alt_grad) in _alternatives(step, mode, x).items():
                    ok = compare(value, alt_value, tol_v) is None and (grad is None or compare(grad, alt_grad, tol_g) is None)
                    explained[name] = explained.get(name, 0) + int(ok)
    row.checks["invariant:partition"] = "pass" if not failures else "fail"
    note = (f"\n(note: in {not_canonical} of {row.n_cases} cases the whole-batch loss itself is not the canonical "
            f"aggregate(mode={mode!r}); the aggregate rows report that)") if not_canonical else ""
    if failures:
        row.status = "fail"
        row.message = (f"micro_batched_loss over {DP} ranks x micro-batches does not give its own whole-batch loss "
                       f"(mode={mode!r}; {len(failures)} of {row.n_cases} cases):\n" + "\n".join(failures[:2]) + note)
        row.consistent_with = [name for name, k in explained.items() if k == len(failures)]
    else:
        row.message = note.strip()
    row.seconds = time.perf_counter() - t0
    return row


def partition_rows(adapter: Adapter, *, seed: int = 0, n_seeds: int = N_SEEDS, timeout: float = 120.0) -> list[RowResult]:
    """One row per aggregation mode; a row that outlives ``timeout`` becomes an error row."""
    adapter = LoadedAdapter.of(adapter)
    rows = []
    for mode in MODES:
        def on_timeout(mode: str = mode) -> RowResult:
            return RowResult(id=f"agg.partition[{mode}]@{adapter.name}", spec_id=f"agg.{mode}",
                             function=f"agg.partition[{mode}]", adapter=adapter.name, status="error",
                             message=f"timed out after {timeout:g}s (per-row limit, --timeout)")

        rows.append(run_with_timeout(lambda mode=mode: partition_row(adapter, mode, seed=seed, n_seeds=n_seeds),
                                     timeout, on_timeout))
    return rows
