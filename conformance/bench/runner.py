"""`rlspec bench`: the side-by-side run. One subprocess per measurement (:mod:`conformance.bench.worker`).

Protocol (shared/reference/perf-anchors.md §6): threads pinned (``torch.set_num_threads`` and
``OMP_NUM_THREADS``); one warm-up call, then the median of ``reps`` calls; peak memory in a separate
process with ``MALLOC_MMAP_THRESHOLD_=131072`` (glibc then returns freed buffers to the OS, so the
resident-set peak is the allocation peak; this slows first touches, hence no timing in that pass).
The three plain GEMMs of each shape and dtype (logits, d hidden, d weight) are measured in the same
run, and the same multiply-adds in cache-sized tiles: the fastest of their rates gives the FLOP
floors of every row (:func:`gemm_floors`), and each implementation's
GEMM efficiency is ``F·N·D·V / (time × logits GEMM FLOP/s)`` with F = 6 for forward + backward and
F = 2 for the forward. After the peers and refimpl's lean row of a forward + backward case, refimpl
runs again with ``memory_budget`` set to the peak of each peer that was faster (``memory_budget_mb``
on the row; null for the lean default): the rows the Pareto table picks from.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from conformance.bench.impls import ENTROPY_IMPLS, GAE_IMPLS, LOGPROB_IMPLS, TORCHRL_GAE, available, gae_bytes

SCHEMA_VERSION = 2
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
# GAE time passes: glibc keeps freed memory (no trimming, no mmap below 32 MiB) so that a timed call
# reuses pages the previous calls touched, as in a training loop; with the default dynamic
# thresholds some calls pay first-touch page faults for their outputs (about 2 ms per 8 MB on the
# 2-core machine) in a pattern set by the harness's frees. The worker records the faults per call.
GAE_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**40)}
COPY_MB = 1024  # each buffer of the copy-bandwidth case (src and dst): far beyond the last-level cache
SLOW_GAE = ("loop", "torchrl_loop", "torchrl_vec")  # per-step loops (and the O(T²) conv at γλ = 1): plan.loop_reps


@dataclass(frozen=True)
class Shape:
    N: int
    D: int
    V: int


@dataclass
class Plan:
    """What one `rlspec bench` run measures."""

    device: str = "cpu"
    logprob_shapes: tuple[Shape, ...] = ()
    dtypes: tuple[str, ...] = ("float32", "bfloat16")
    modes: tuple[str, ...] = ("fwd", "fwd+bwd")
    impls: tuple[str, ...] = LOGPROB_IMPLS
    # (shape, dtype) pairs at which the entropy variant (log-probs + entropies, fwd+bwd) is also run
    entropy_shapes: tuple[Shape, ...] = ()
    gae_shapes: tuple[tuple[int, int], ...] = ()
    gae_c: tuple[float, ...] = (1.0, 0.99, 0.95, 0.5)  # γλ with γ = 1
    gae_masks: tuple[str, ...] = ("gaps", "runs")
    gae_impls: tuple[str, ...] = GAE_IMPLS
    reps: int = 3
    gae_reps: int = 10
    loop_reps: int = 3
    threads: int = 2
    timeout_s: float = 1800.0
    max_mem_gb: float | None = None  # skip cases whose estimated peak exceeds this
    wait_idle_s: float = 0.0  # before each measurement, wait up to this long for other processes to go quiet
    quick: bool = False
    budget_rows: bool = True  # refimpl at the memory of each faster peer (forward + backward)
    extra: dict = field(default_factory=dict)


# A 32k and a 128k vocabulary at about 1 GB of float32 logits each (larger: --shapes, e.g. 8192x512x128256)
FULL_CPU_SHAPES = (Shape(8192, 512, 32000), Shape(2048, 512, 128256))
FULL_CUDA_SHAPES = (Shape(8192, 4096, 128256), Shape(32768, 4096, 128256))
QUICK_SHAPE = Shape(1024, 64, 2000)


def default_plan(device: str = "cpu", quick: bool = False) -> Plan:
    if quick:
        return Plan(
            device=device,
            logprob_shapes=(QUICK_SHAPE,),
            dtypes=("float32",),
            modes=("fwd+bwd",),
            entropy_shapes=(),
            gae_shapes=((64, 256),),
            gae_c=(1.0, 0.95),
            gae_masks=("gaps",),
            reps=1,
            gae_reps=3,
            loop_reps=1,
            timeout_s=300.0,
            quick=True,
        )
    if device == "cuda":
        return Plan(
            device=device,
            logprob_shapes=FULL_CUDA_SHAPES,
            dtypes=("bfloat16",),
            entropy_shapes=(FULL_CUDA_SHAPES[0],),
            gae_shapes=((512, 4096), (512, 512)),
            reps=5,
        )
    return Plan(
        device=device,
        logprob_shapes=FULL_CPU_SHAPES,
        entropy_shapes=(FULL_CPU_SHAPES[0],),
        gae_shapes=((512, 4096), (512, 512)),
    )


# ----------------------------------------------------------------------------------------------
# subprocesses
# ----------------------------------------------------------------------------------------------


def other_load(window_s: float = 1.0) -> float | None:
    """CPU cores busy (all processes, hypervisor steal included) over ``window_s``; None without /proc."""
    def busy() -> int:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields[:3]) + sum(fields[5:8])

    try:
        b0, t0 = busy(), time.perf_counter()
        time.sleep(window_s)
        b1, t1 = busy(), time.perf_counter()
    except OSError:
        return None
    return (b1 - b0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)


def wait_idle(max_wait_s: float, threshold: float = 0.3, log: Callable[[str], None] | None = None) -> float | None:
    """Wait (up to ``max_wait_s``) until the machine's other processes use less than ``threshold``
    cores; returns the last reading."""
    load = other_load()
    deadline = time.time() + max_wait_s
    waited = False
    while load is not None and load > threshold and time.time() < deadline:
        if log is not None and not waited:
            log(f"  (waiting for other processes to go quiet: {load:.1f} cores busy)")
        waited = True
        time.sleep(5.0)
        load = other_load()
    return load


def run_case(case: dict, *, memory: bool = False, timeout_s: float = 1800.0, python: str | None = None,
             malloc: dict | None = None) -> dict:
    """Run one measurement in a fresh interpreter (``python``, default this one; the repository root
    on its path); returns the worker's JSON (``ok`` False on failure). ``malloc``: glibc allocator
    settings for the worker (the memory pass sets :data:`MALLOC_ENV`)."""
    env = dict(os.environ)
    threads = str(case.get("threads", 2))
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    if memory:
        env.update(MALLOC_ENV)
    env.update(malloc or {})
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [python or sys.executable, "-m", "conformance.bench.worker", json.dumps(case)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"ok": False, "error": f"worker exited {proc.returncode}: {tail[:300]}"}


def gae_python(impl: str) -> tuple[str | None, str]:
    """(the interpreter that runs ``impl``'s GAE cases, or None; why not): this one, except for the
    torchrl rows, which run where :func:`conformance.frameworks.subprocess_worker.python_for` finds
    torchrl (``$RLSPEC_TORCHRL_PYTHON``, the environment of ``rlspec frameworks install torchrl``, or
    this interpreter)."""
    if impl not in TORCHRL_GAE:
        return sys.executable, ""
    from conformance.frameworks.subprocess_worker import python_for

    python, _ = python_for("torchrl")
    return (python, "") if python is not None else (None, "not installed (rlspec frameworks install torchrl)")


# ----------------------------------------------------------------------------------------------
# estimates and machine facts
# ----------------------------------------------------------------------------------------------


def estimated_peak_gb(impl: str, s: Shape, dtype: str, mode: str) -> float:
    """A rough upper estimate of the extra memory of one call, to skip cases that cannot fit."""
    logits = s.N * s.V * 4 / 1e9
    if impl in ("naive", "trl"):
        return (3.2 if mode == "fwd+bwd" else 2.2) * logits
    if impl == "cce":
        return 1.3 * logits if mode == "fwd+bwd" else 1.1 * logits
    if impl == "trl_fused":
        return 4.6
    return 0.6


def mem_available_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024**2
    except OSError:
        return None
    return None


def machine_info(device: str, threads: int) -> dict:
    import torch

    info = {
        "device": device,
        "cpu": _cpu_model(),
        "cpu_features": _cpu_features(),
        "cores": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        info["loadavg_start"] = list(os.getloadavg())
    except OSError:
        pass
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    for mod in ("trl", "liger_kernel", "cut_cross_entropy", "triton"):
        info[f"{mod}_version"] = _version(mod)
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_features() -> list[str]:
    """The SIMD features that decide GEMM speed (from /proc/cpuinfo)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [w for w in wanted if w in flags]
    except OSError:
        pass
    return []


def _version(mod: str) -> str | None:
    from importlib import metadata

    dist = {"liger_kernel": "liger-kernel", "cut_cross_entropy": "cut-cross-entropy"}.get(mod, mod)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------------


def _median(times: Iterable[float]) -> float:
    return float(statistics.median(list(times)))


def run(plan: Plan, log: Callable[[str], None] = print) -> dict:
    """Run the plan; returns the results dict (schema: see :mod:`conformance.bench`)."""
    t_start = time.time()
    result: dict = {
        "schema_version": SCHEMA_VERSION,
        "command": None,
        "quick": plan.quick,
        "machine": machine_info(plan.device, plan.threads),
        "gemm": [],
        "logprob": [],
        "gae": [],
        "not_installed": {},
    }
    base = {"device": plan.device, "threads": plan.threads}
    max_mem = plan.max_mem_gb
    if max_mem is None and plan.device == "cpu":
        avail = mem_available_gb()
        max_mem = None if avail is None else 0.7 * avail
    for impl in plan.impls:
        ok, why = available(impl)
        if not ok:
            result["not_installed"][impl] = why
    # the three GEMMs of every shape and dtype: the FLOP floors
    rates: dict[tuple, float] = {}
    def quiet() -> float | None:
        return wait_idle(plan.wait_idle_s, log=log) if plan.wait_idle_s > 0 else None

    for s in plan.logprob_shapes:
        for dtype in plan.dtypes:
            for gemm_shape in GEMM_SHAPES:
                quiet()
                res = run_case({**base, "kind": "gemm", "shape": gemm_shape, "N": s.N, "D": s.D, "V": s.V, "dtype": dtype,
                                "reps": plan.reps}, timeout_s=plan.timeout_s)
                row = {"shape": gemm_shape, "N": s.N, "D": s.D, "V": s.V, "dtype": dtype}
                if res.get("ok"):
                    med = _median(res["times"])
                    rates[(s.N, s.D, s.V, dtype, gemm_shape)] = 2 * s.N * s.D * s.V / med
                    row.update(median_s=med, gflops=2 * s.N * s.D * s.V / med / 1e9, times=res["times"],
                               other_cores=res.get("other_cores"), blocked_rows=res.get("blocked_rows"))
                else:
                    row.update(median_s=None, gflops=None, error=res.get("error"))
                result["gemm"].append(row)
                log(f"gemm {gemm_shape:8} {s.N}x{s.D}x{s.V} {dtype}: "
                    + (f"{row['gflops']:.0f} GFLOP/s" if row.get("gflops") else f"failed ({row.get('error')})"))
    result["machine"]["gemm_gflops"] = {
        dtype: next((r["gflops"] for r in result["gemm"] if r["dtype"] == dtype and r.get("shape", "logits") == "logits"
                     and r.get("gflops")), None)
        for dtype in plan.dtypes
    }
    # log-probs: per shape, dtype and mode the peers, refimpl lean, then refimpl at the memory of each
    # peer that was faster than its lean row (forward + backward)
    for s in plan.logprob_shapes:
        for dtype in plan.dtypes:
            floors = gemm_floors(rates, s, dtype)
            groups = [(mode, False) for mode in plan.modes]
            if s in plan.entropy_shapes and "fwd+bwd" in plan.modes:
                groups.append(("fwd+bwd", True))
            for mode, entropy in groups:
                impls = [i for i in plan.impls if not entropy or i in ENTROPY_IMPLS]
                group = []
                for impl in impls:
                    group.append(_logprob_row(plan, base, result, max_mem, s, dtype, mode, entropy, impl, None, floors, quiet, log))
                lean = next((r for r in group if r["impl"] == "refimpl" and r.get("median_s") is not None), None)
                if lean is None or mode != "fwd+bwd" or not plan.budget_rows:
                    continue
                budgets = sorted({math.floor(r["peak_extra_mb"]) for r in group if r["impl"] != "refimpl"
                                  and r.get("median_s") is not None and r["median_s"] < lean["median_s"]
                                  and r["peak_extra_mb"] > lean["peak_extra_mb"]})
                for mb in budgets:
                    _logprob_row(plan, base, result, max_mem, s, dtype, mode, entropy, "refimpl", mb, floors, quiet, log)
    # GAE, with the copy bandwidth of the same run for the memory floor of each case
    if plan.gae_shapes:
        pythons = {impl: gae_python(impl) for impl in plan.gae_impls}
        for impl, (python, why) in pythons.items():
            if python is None:
                result["not_installed"][impl] = why
        quiet()
        mb = COPY_MB // 4 if plan.quick else COPY_MB
        res = run_case({**base, "kind": "copy", "mb": mb, "reps": plan.gae_reps}, timeout_s=plan.timeout_s)
        result["copy"] = {"mb": mb, "times": res.get("times"), "other_cores": res.get("other_cores"),
                          "gbps": res["bytes"] / _median(res["times"]) / 1e9 if res.get("ok") else None,
                          **({} if res.get("ok") else {"error": res.get("error")})}
        result["machine"]["copy_gbps"] = result["copy"]["gbps"]
        log("copy bandwidth: " + (f"{result['copy']['gbps']:.1f} GB/s (read + write)" if res.get("ok") else f"failed ({res.get('error')})"))
    for B, T in plan.gae_shapes:
        for mask_kind in plan.gae_masks:
            for c in plan.gae_c:
                for impl in plan.gae_impls:
                    nbytes = gae_bytes(B, T)
                    gbps = result["copy"]["gbps"]
                    row = {"impl": impl, "B": B, "T": T, "dtype": "float32", "gamma": 1.0, "lam": c, "mask": mask_kind,
                           "median_s": None, "max_rel_err": None, "bytes": nbytes,
                           "floor_ms": nbytes / (gbps * 1e9) * 1e3 if gbps else None}
                    python, why = pythons[impl]
                    if python is None:
                        row["status"] = why
                        result["gae"].append(row)
                        continue
                    case = {**base, "kind": "gae", "impl": impl, "B": B, "T": T, "dtype": "float32", "gamma": 1.0,
                            "lam": c, "mask": mask_kind, "reps": plan.loop_reps if impl in SLOW_GAE else plan.gae_reps}
                    quiet()
                    res = run_case(case, timeout_s=plan.timeout_s, python=python, malloc=GAE_MALLOC_ENV)
                    if res.get("ok"):
                        row.update(status="ok", median_s=_median(res["times"]), max_rel_err=res["max_rel_err"],
                                   times=res["times"], other_cores=res.get("other_cores"), batch=res.get("batch"),
                                   faults_per_call=res.get("faults_per_call"))
                        if res.get("call_times"):
                            row.update(call_s=_median(res["call_times"]), call_times=res["call_times"],
                                       versions=res.get("versions"))
                    else:
                        row["status"] = "failed: " + str(res.get("error"))
                    result["gae"].append(row)
                    log(f"gae {impl:12} B={B} T={T} {mask_kind} γλ={c}: "
                        + (f"{row['median_s'] * 1e3:.2f} ms, max rel err {row['max_rel_err']:.1e}" if row["median_s"] else row["status"]))
    try:
        result["machine"]["loadavg_end"] = list(os.getloadavg())
    except OSError:
        pass
    result["wall_s"] = time.time() - t_start
    return result


GEMM_SHAPES = ("logits", "dhidden", "dweight", "tile")


def gemm_floors(rates: dict, s: Shape, dtype: str) -> dict:
    """The FLOPs an exact implementation must do at the fastest GEMM rate measured for this shape and
    dtype in the same run (the plain logits, d hidden and d weight GEMMs, and the same multiply-adds
    in cache-sized tiles): ``floor_fwd_s`` (2·N·D·V, the logits), ``floor_6ndv_s`` (logits, d hidden,
    d weight: keeping the logits) and ``floor_8ndv_s`` (the logits twice: recomputing them), and that
    rate (``floor_gflops``)."""
    best = max((r for (n, d, v, dt, _), r in rates.items() if (n, d, v, dt) == (s.N, s.D, s.V, dtype)), default=None)
    if best is None:
        return {"floor_fwd_s": None, "floor_6ndv_s": None, "floor_8ndv_s": None, "floor_gflops": None}
    ndv = s.N * s.D * s.V / best
    return {"floor_fwd_s": 2 * ndv, "floor_6ndv_s": 6 * ndv, "floor_8ndv_s": 8 * ndv, "floor_gflops": best / 1e9}


def _logprob_row(plan, base, result, max_mem, s, dtype, mode, entropy, impl, budget_mb, floors, quiet, log) -> dict:
    """Measure one log-prob case (time pass, then memory pass) and append its row to ``result``."""
    row = {"impl": impl, "N": s.N, "D": s.D, "V": s.V, "dtype": dtype,
           "mode": mode + ("+entropy" if entropy else ""), "memory_budget_mb": budget_mb, "median_s": None,
           "peak_extra_mb": None, "gemm_efficiency": None,
           "floor_gflops": floors["floor_gflops"],
           **({"floor_fwd_s": floors["floor_fwd_s"]} if mode == "fwd" else
              {"floor_6ndv_s": floors["floor_6ndv_s"], "floor_8ndv_s": floors["floor_8ndv_s"]})}
    if impl in result["not_installed"]:
        row["status"] = "not installed"
        result["logprob"].append(row)
        return row
    est = estimated_peak_gb(impl, s, dtype, mode)
    if max_mem is not None and est > max_mem:
        row["status"] = f"skipped: needs ~{est:.0f} GB, {max_mem:.0f} GB allowed"
        result["logprob"].append(row)
        log(f"{impl:9} {s.N}x{s.D}x{s.V} {dtype:8} {row['mode']:17} {row['status']}")
        return row
    case = {**base, "kind": "logprob", "impl": impl, "N": s.N, "D": s.D, "V": s.V, "dtype": dtype,
            "mode": mode, "entropy": entropy, "reps": plan.reps, "memory_budget_mb": budget_mb}
    t0 = time.time()
    busy_before = quiet()
    tres = run_case({**case, "pass": "time"}, timeout_s=plan.timeout_s)
    mres = run_case({**case, "pass": "mem"}, memory=plan.device == "cpu", timeout_s=plan.timeout_s) if tres.get("ok") else tres
    if tres.get("ok") and mres.get("ok"):
        med = _median(tres["times"])
        rate = result["machine"]["gemm_gflops"].get(dtype)  # the plain logits GEMM
        row.update(
            status="ok",
            median_s=med,
            peak_extra_mb=mres["peak_extra_mb"],
            gemm_efficiency=None if not rate else (6 if mode == "fwd+bwd" else 2) * s.N * s.D * s.V / (med * rate * 1e9),
            times=tres["times"],
            other_cores=tres.get("other_cores"),
            busy_before=busy_before,
            first_s=tres["first_s"],
            max_abs_err=tres.get("max_abs_err"),
        )
        if "max_abs_err_entropy" in tres:
            row["max_abs_err_entropy"] = tres["max_abs_err_entropy"]
    else:
        row["status"] = "failed: " + str((tres if not tres.get("ok") else mres).get("error"))
    result["logprob"].append(row)
    log(_logprob_line(row) + f"  [{time.time() - t0:.0f} s]")
    return row


def _logprob_line(row: dict) -> str:
    impl = row["impl"] + (f"@{row['memory_budget_mb']}MB" if row.get("memory_budget_mb") is not None else "")
    head = f"{impl:9} {row['N']}x{row['D']}x{row['V']} {row['dtype']:8} {row['mode']:17}"
    if row.get("median_s") is None:
        return f"{head} {row.get('status')}"
    eff = row.get("gemm_efficiency")
    return (f"{head} {row['median_s']:8.3f} s {row['peak_extra_mb']:8.0f} MB"
            + (f"  eff {eff:.2f}" if eff is not None else "")
            + (f"  err {row['max_abs_err']:.1e}" if row.get("max_abs_err") is not None else ""))


def _key(kind: str, row: dict) -> tuple:
    if kind == "gemm":
        return (row.get("shape", "logits"), row["N"], row["D"], row["V"], row["dtype"])
    if kind == "gae":
        return (row["impl"], row["B"], row["T"], row.get("mask", "gaps"), row["lam"], row["dtype"])
    return (row["impl"], row["N"], row["D"], row["V"], row["dtype"], row["mode"], row.get("memory_budget_mb"))


def merge_results(old: dict, new: dict) -> dict:
    """``old`` with the rows that ``new`` measured replaced (or appended); the order of ``old`` is
    kept. Efficiencies of replaced log-prob rows use the GEMM rate of their own run; the command
    lines of both runs are kept."""
    out = dict(old)
    for kind in ("gemm", "logprob", "gae"):
        fresh = {_key(kind, r): r for r in new.get(kind, [])}
        rows = [fresh.pop(_key(kind, r), r) for r in old.get(kind, [])]
        out[kind] = rows + list(fresh.values())
    if new.get("copy"):  # the bandwidth of the run whose GAE rows came last (each row keeps its own floor_ms)
        out["copy"] = new["copy"]
        out["machine"] = {**old.get("machine", {}), "copy_gbps": new["copy"].get("gbps")}
    out["updates"] = list(old.get("updates", [])) + [
        {"command": new.get("command"), "machine": new.get("machine"), "wall_s": new.get("wall_s")}
    ]
    return out
