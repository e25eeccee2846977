"""`rlspec bench`: refimpl's fused log-probs and vectorized GAE side by side with their peers.

- :mod:`conformance.bench.impls`: the implementations (refimpl, naive, TRL, TRL's fused LM head,
  Liger-Kernel, Cut Cross-Entropy; GAE: refimpl and verl's reversed loop) and their inputs;
- :mod:`conformance.bench.worker`: one measurement in a fresh process (timing, or peak memory);
- :mod:`conformance.bench.runner`: the plan (shapes, dtypes, modes) and the run;
- :mod:`conformance.bench.table`: the tables (:func:`bench_table_markdown`) and the issue's targets
  (:func:`target_checks`).

JSON written by ``rlspec bench --json PATH``::

    {"schema_version": 1, "command": str, "quick": bool, "wall_s": float,
     "machine": {"cores", "threads", "torch", "cpu", "gemm_gflops": {dtype: GFLOP/s}, ...},
     "gemm":    [{N, D, V, dtype, median_s, gflops, times}],
     "logprob": [{impl, N, D, V, dtype, mode, median_s, peak_extra_mb, gemm_efficiency, status,
                  times, first_s, max_abs_err}],
     "gae":     [{impl, B, T, dtype, gamma, lam, median_s, max_rel_err, status, times}],
     "not_installed": {impl: reason}}

``mode`` is ``fwd``, ``fwd+bwd`` or ``fwd+bwd+entropy``; rows that were not measured have
``median_s`` None and a ``status`` ("not installed", "skipped: ...", "failed: ...").
"""

from conformance.bench.runner import Plan, Shape, default_plan, run
from conformance.bench.table import bench_table_markdown, target_checks

LOGPROB_ROW_KEYS = ("impl", "N", "D", "V", "dtype", "mode", "median_s", "peak_extra_mb", "gemm_efficiency")
GAE_ROW_KEYS = ("impl", "B", "T", "dtype", "median_s", "max_rel_err")

__all__ = ["Plan", "Shape", "default_plan", "run", "bench_table_markdown", "target_checks", "LOGPROB_ROW_KEYS", "GAE_ROW_KEYS"]
