"""One measurement, in a fresh process: ``python -m conformance.bench.worker '<json case>'``.

The last line of stdout is a JSON object: ``{"ok": true, ...}`` with the measurement, or
``{"ok": false, "error": "..."}``. Cases (keys of the JSON object):

- ``{"kind": "logprob", "pass": "time"|"mem", impl, N, D, V, dtype, mode, entropy, device, reps,
  threads}``: the time pass returns ``times`` (seconds of each measured call after one warm-up
  call), ``first_s`` (the warm-up call: compile time included) and ``max_abs_err`` (log-probs of the
  first 64 rows against float64 on the same rounded inputs). The memory pass returns
  ``peak_extra_mb``: on CPU the peak resident set (``VmHWM``, reset by writing 5 to
  ``/proc/self/clear_refs``) during one call minus the resident set just before it, gradients
  cleared (the runner sets ``MALLOC_MMAP_THRESHOLD_`` for this pass so that freed buffers leave the
  process); on CUDA ``torch.cuda.max_memory_allocated`` minus the allocated memory before the call.
- ``{"kind": "gemm", N, D, V, dtype, device, reps, threads}``: ``torch.mm(a [N, D], b [V, D].T,
  out=c)`` into a preallocated output; returns ``times``. When the output would exceed
  ``GEMM_MAX_OUT_BYTES`` it runs as row blocks of ``GEMM_BLOCK_ROWS`` into one reused block.
- ``{"kind": "gae", impl, B, T, dtype, gamma, lam, device, reps, threads}``: ``times`` and
  ``max_rel_err`` against the float64 oracle (:func:`oracle.gae`).
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback

GEMM_MAX_OUT_BYTES = 2_200_000_000
GEMM_BLOCK_ROWS = 2048


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{field} not in /proc/self/status")


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _timed(fn, device: str) -> tuple[float, object]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def run_logprob(case: dict) -> dict:
    import torch

    from conformance.bench import impls

    device = case.get("device", "cpu")
    dtype = getattr(torch, case["dtype"])
    grad = case["mode"] == "fwd+bwd"
    entropy = bool(case.get("entropy", False))
    x = impls.logprob_inputs(case["N"], case["D"], case["V"], dtype, device, case["impl"], grad, seed=case.get("seed", 0))
    step = impls.logprob_step(case["impl"], x, case["mode"], entropy)
    first, out = _timed(step, device)
    del out
    impls.clear_grads(x)
    gc.collect()
    if case["pass"] == "mem":
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out = step()
            torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            base = _status_mb("VmRSS")
            out = step()
            peak = _status_mb("VmHWM") - base
        return {"ok": True, "peak_extra_mb": peak, "first_s": first}
    times = []
    for _ in range(case.get("reps", 3)):
        impls.clear_grads(x)
        dt, out = _timed(step, device)
        times.append(dt)
    lp, ent = out
    ref_lp, ref_ent = impls.logprob_reference(x)
    rows = ref_lp.numel()
    res = {"ok": True, "times": times, "first_s": first}
    res["max_abs_err"] = float((lp[:rows].double().cpu() - ref_lp).abs().max())
    if ent is not None:
        res["max_abs_err_entropy"] = float((ent[:rows].double().cpu() - ref_ent).abs().max())
    return res


def run_gemm(case: dict) -> dict:
    import torch

    device = case.get("device", "cpu")
    dtype = getattr(torch, case["dtype"])
    N, D, V = case["N"], case["D"], case["V"]
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(N, D, generator=gen).to(dtype).to(device)
    b = torch.randn(V, D, generator=gen).to(dtype).to(device)
    blocked = N * V * a.element_size() > GEMM_MAX_OUT_BYTES and device != "cuda"
    rows = GEMM_BLOCK_ROWS if blocked else N
    c = torch.empty(rows, V, dtype=dtype, device=device)

    def gemm():
        for s in range(0, N, rows):
            torch.mm(a[s : s + rows], b.t(), out=c[: min(rows, N - s)])

    first, _ = _timed(gemm, device)
    times = [_timed(gemm, device)[0] for _ in range(case.get("reps", 3))]
    return {"ok": True, "times": times, "first_s": first, "blocked_rows": rows if blocked else None}


def run_gae(case: dict) -> dict:
    import numpy as np
    import torch

    import oracle
    from conformance.bench import impls

    device = case.get("device", "cpu")
    dtype = getattr(torch, case["dtype"])
    r, v, m = impls.gae_inputs(case["B"], case["T"], dtype, device, seed=case.get("seed", 0))
    fn = impls.gae_fn(case["impl"], r, v, m, case["gamma"], case["lam"])
    first, _ = _timed(fn, device)
    times = []
    for _ in range(case.get("reps", 5)):
        dt, out = _timed(fn, device)
        times.append(dt)
    ref, _ = oracle.gae(
        r.double().cpu().numpy(), v.double().cpu().numpy(), m.cpu().numpy(), gamma=case["gamma"], lam=case["lam"]
    )
    err = impls.gae_max_rel_err(out, torch.from_numpy(np.asarray(ref)), m)
    return {"ok": True, "times": times, "first_s": first, "max_rel_err": err}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    case = json.loads(argv[0])
    try:
        import torch

        torch.set_num_threads(int(case.get("threads", 2)))
        kind = case["kind"]
        res = {"logprob": run_logprob, "gemm": run_gemm, "gae": run_gae}[kind](case)
    except Exception as exc:  # reported, not raised: the runner records the failure in the table
        traceback.print_exc()
        msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        res = {"ok": False, "error": msg}
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
