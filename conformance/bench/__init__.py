"""`rlspec bench`: refimpl's fused log-probs and vectorized GAE side by side with their peers.

- :mod:`conformance.bench.impls`: the implementations (refimpl, naive, TRL, TRL's fused LM head,
  Liger-Kernel, Cut Cross-Entropy; GAE: refimpl, verl's reversed loop, torchrl's loop and vectorized
  functions) and their inputs;
- :mod:`conformance.bench.worker`: one measurement in a fresh process (timing, peak memory, or the
  copy bandwidth that gives GAE's memory floor);
- :mod:`conformance.bench.runner`: the plan (shapes, dtypes, modes) and the run;
- :mod:`conformance.bench.table`: the tables (:func:`bench_table_markdown`) and the issue's targets
  (:func:`target_checks`).

JSON written by ``rlspec bench --json PATH``::

    {"schema_version": 2, "command": str, "quick": bool, "wall_s": float,
     "machine": {"cores", "threads", "torch", "cpu", "gemm_gflops": {dtype: GFLOP/s}, ...},
     "gemm":    [{shape, N, D, V, dtype, median_s, gflops, times}],
     "logprob": [{impl, N, D, V, dtype, mode, memory_budget_mb, median_s, peak_extra_mb, gemm_efficiency,
                  floor_gflops, floor_6ndv_s, floor_8ndv_s (fwd+bwd) or floor_fwd_s (fwd), status,
                  times, first_s, max_abs_err}],
     "gae":     [{impl, B, T, dtype, gamma, lam, mask, median_s, max_rel_err, status, times, batch,
                  faults_per_call, bytes, floor_ms, call_s, call_times, versions (torchrl rows)}],
     "copy":    {mb, times, gbps},
     "not_installed": {impl: reason}}

``mode`` is ``fwd``, ``fwd+bwd`` or ``fwd+bwd+entropy``; rows that were not measured have
``median_s`` None and a ``status`` ("not installed", "skipped: ...", "failed: ...").
``memory_budget_mb`` is refimpl's ``memory_budget`` in MiB (null: the lean default, and for peers).
A GAE row's ``times`` are per call (each the mean of ``batch`` back-to-back calls);
``floor_ms`` is ``bytes`` (what the call must read and write) over the ``copy`` bandwidth of the run
(``machine.copy_gbps``); ``call_s`` is torchrl's function alone, without the mapping.
``shape`` of a GEMM row is ``logits``, ``dhidden``, ``dweight`` or ``tile`` (:func:`conformance.bench.runner.gemm_floors`).
"""

from conformance.bench.runner import Plan, Shape, default_plan, run
from conformance.bench.table import bench_table_markdown, target_checks

LOGPROB_ROW_KEYS = ("impl", "N", "D", "V", "dtype", "mode", "memory_budget_mb", "median_s", "peak_extra_mb",
                    "gemm_efficiency", "floor_gflops")
GAE_ROW_KEYS = ("impl", "B", "T", "dtype", "mask", "median_s", "max_rel_err", "bytes", "floor_ms")

__all__ = ["Plan", "Shape", "default_plan", "run", "bench_table_markdown", "target_checks", "LOGPROB_ROW_KEYS", "GAE_ROW_KEYS"]
