"""`rlspec bench`: the side-by-side run. One subprocess per measurement (:mod:`conformance.bench.worker`).

Protocol (shared/reference/perf-anchors.md §6): threads pinned (``torch.set_num_threads`` and
``OMP_NUM_THREADS``); one warm-up call, then the median of ``reps`` calls; peak memory in a separate
process with ``MALLOC_MMAP_THRESHOLD_=131072`` (glibc then returns freed buffers to the OS, so the
resident-set peak is the allocation peak; this slows first touches, hence no timing in that pass).
The plain GEMM of each shape and dtype is measured in the same run, and each implementation's GEMM
efficiency is ``F·N·D·V / (time × GEMM FLOP/s)`` with F = 6 for forward + backward (logits,
dhidden, dweight) and F = 2 for the forward.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from conformance.bench.impls import ENTROPY_IMPLS, GAE_IMPLS, LOGPROB_IMPLS, available

SCHEMA_VERSION = 1
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


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
    extra: dict = field(default_factory=dict)


FULL_CPU_SHAPES = (Shape(8192, 512, 32000), Shape(2048, 512, 128256), Shape(8192, 512, 128256))
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


def run_case(case: dict, *, memory: bool = False, timeout_s: float = 1800.0) -> dict:
    """Run one measurement in a fresh interpreter; returns the worker's JSON (``ok`` False on failure)."""
    env = dict(os.environ)
    threads = str(case.get("threads", 2))
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if memory:
        env.update(MALLOC_ENV)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "conformance.bench.worker", json.dumps(case)]
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
    # plain GEMM of every shape and dtype
    rates: dict[tuple, float] = {}
    def quiet() -> float | None:
        return wait_idle(plan.wait_idle_s, log=log) if plan.wait_idle_s > 0 else None

    for s in plan.logprob_shapes:
        for dtype in plan.dtypes:
            quiet()
            res = run_case({**base, "kind": "gemm", "N": s.N, "D": s.D, "V": s.V, "dtype": dtype, "reps": plan.reps},
                           timeout_s=plan.timeout_s)
            row = {"N": s.N, "D": s.D, "V": s.V, "dtype": dtype}
            if res.get("ok"):
                med = _median(res["times"])
                rates[(s.N, s.D, s.V, dtype)] = 2 * s.N * s.D * s.V / med
                row.update(median_s=med, gflops=2 * s.N * s.D * s.V / med / 1e9, times=res["times"],
                           other_cores=res.get("other_cores"), blocked_rows=res.get("blocked_rows"))
            else:
                row.update(median_s=None, gflops=None, error=res.get("error"))
            result["gemm"].append(row)
            log(f"gemm {s.N}x{s.D}x{s.V} {dtype}: "
                + (f"{row['gflops']:.0f} GFLOP/s" if row.get("gflops") else f"failed ({row.get('error')})"))
    result["machine"]["gemm_gflops"] = {
        dtype: next((r["gflops"] for r in result["gemm"] if r["dtype"] == dtype and r.get("gflops")), None)
        for dtype in plan.dtypes
    }
    # log-probs
    cases = []
    for s in plan.logprob_shapes:
        for dtype in plan.dtypes:
            for mode in plan.modes:
                for impl in plan.impls:
                    cases.append((s, dtype, mode, impl, False))
            if s in plan.entropy_shapes and "fwd+bwd" in plan.modes:
                for impl in plan.impls:
                    if impl in ENTROPY_IMPLS:
                        cases.append((s, dtype, "fwd+bwd", impl, True))
    for s, dtype, mode, impl, entropy in cases:
        row = {"impl": impl, "N": s.N, "D": s.D, "V": s.V, "dtype": dtype,
               "mode": mode + ("+entropy" if entropy else ""), "median_s": None, "peak_extra_mb": None,
               "gemm_efficiency": None}
        if impl in result["not_installed"]:
            row["status"] = "not installed"
            result["logprob"].append(row)
            continue
        est = estimated_peak_gb(impl, s, dtype, mode)
        if max_mem is not None and est > max_mem:
            row["status"] = f"skipped: needs ~{est:.0f} GB, {max_mem:.0f} GB allowed"
            result["logprob"].append(row)
            log(f"{impl:9} {s.N}x{s.D}x{s.V} {dtype:8} {row['mode']:17} {row['status']}")
            continue
        case = {**base, "kind": "logprob", "impl": impl, "N": s.N, "D": s.D, "V": s.V, "dtype": dtype,
                "mode": mode, "entropy": entropy, "reps": plan.reps}
        t0 = time.time()
        busy_before = quiet()
        tres = run_case({**case, "pass": "time"}, timeout_s=plan.timeout_s)
        mres = run_case({**case, "pass": "mem"}, memory=plan.device == "cpu", timeout_s=plan.timeout_s) if tres.get("ok") else tres
        if tres.get("ok") and mres.get("ok"):
            med = _median(tres["times"])
            flops = (6 if mode == "fwd+bwd" else 2) * s.N * s.D * s.V
            rate = rates.get((s.N, s.D, s.V, dtype))
            row.update(
                status="ok",
                median_s=med,
                peak_extra_mb=mres["peak_extra_mb"],
                gemm_efficiency=None if rate is None else flops / (med * rate),
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
    # GAE
    for B, T in plan.gae_shapes:
        for mask_kind in plan.gae_masks:
            for c in plan.gae_c:
                for impl in plan.gae_impls:
                    case = {**base, "kind": "gae", "impl": impl, "B": B, "T": T, "dtype": "float32", "gamma": 1.0,
                            "lam": c, "mask": mask_kind, "reps": plan.gae_reps if impl != "loop" else plan.loop_reps}
                    quiet()
                    res = run_case(case, timeout_s=plan.timeout_s)
                    row = {"impl": impl, "B": B, "T": T, "dtype": "float32", "gamma": 1.0, "lam": c, "mask": mask_kind,
                           "median_s": None, "max_rel_err": None}
                    if res.get("ok"):
                        row.update(status="ok", median_s=_median(res["times"]), max_rel_err=res["max_rel_err"],
                                   times=res["times"], other_cores=res.get("other_cores"), batch=res.get("batch"))
                    else:
                        row["status"] = "failed: " + str(res.get("error"))
                    result["gae"].append(row)
                    log(f"gae {impl:7} B={B} T={T} {mask_kind} γλ={c}: "
                        + (f"{row['median_s'] * 1e3:.2f} ms, max rel err {row['max_rel_err']:.1e}" if row["median_s"] else row["status"]))
    try:
        result["machine"]["loadavg_end"] = list(os.getloadavg())
    except OSError:
        pass
    result["wall_s"] = time.time() - t_start
    return result


def _logprob_line(row: dict) -> str:
    head = f"{row['impl']:9} {row['N']}x{row['D']}x{row['V']} {row['dtype']:8} {row['mode']:17}"
    if row.get("median_s") is None:
        return f"{head} {row.get('status')}"
    eff = row.get("gemm_efficiency")
    return (f"{head} {row['median_s']:8.3f} s {row['peak_extra_mb']:8.0f} MB"
            + (f"  eff {eff:.2f}" if eff is not None else "")
            + (f"  err {row['max_abs_err']:.1e}" if row.get("max_abs_err") is not None else ""))


def _key(kind: str, row: dict) -> tuple:
    if kind == "gemm":
        return (row["N"], row["D"], row["V"], row["dtype"])
    if kind == "gae":
        return (row["impl"], row["B"], row["T"], row.get("mask", "gaps"), row["lam"], row["dtype"])
    return (row["impl"], row["N"], row["D"], row["V"], row["dtype"], row["mode"])


def merge_results(old: dict, new: dict) -> dict:
    """``old`` with the rows that ``new`` measured replaced (or appended); the order of ``old`` is
    kept. Efficiencies of replaced log-prob rows use the GEMM rate of their own run; the command
    lines of both runs are kept."""
    out = dict(old)
    for kind in ("gemm", "logprob", "gae"):
        fresh = {_key(kind, r): r for r in new.get(kind, [])}
        rows = [fresh.pop(_key(kind, r), r) for r in old.get(kind, [])]
        out[kind] = rows + list(fresh.values())
    out["updates"] = list(old.get("updates", [])) + [
        {"command": new.get("command"), "machine": new.get("machine"), "wall_s": new.get("wall_s")}
    ]
    return out
