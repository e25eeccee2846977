"""Tables of a `rlspec bench` result: plain text for the terminal, Markdown for the README
(:func:`bench_table_markdown`), and the issue's targets evaluated on the result (:func:`target_checks`)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.bench.impls import LOGPROB_IMPLS

_COLUMNS = (("float32", "fwd+bwd"), ("bfloat16", "fwd+bwd"), ("float32", "fwd"), ("bfloat16", "fwd"))
_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
CONTENDED_CORES = 0.3  # as conformance.bench.worker.MAX_OTHER_CORES


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def _rows(result: dict, **where) -> list[dict]:
    return [r for r in result.get("logprob", []) if all(r.get(k) == v for k, v in where.items())]


def _shapes(result: dict) -> list[tuple[int, int, int]]:
    seen: list[tuple[int, int, int]] = []
    for r in result.get("logprob", []):
        key = (r["N"], r["D"], r["V"])
        if key not in seen:
            seen.append(key)
    return seen


def _cell(r: dict | None) -> str:
    if r is None:
        return "–"
    if r.get("median_s") is None:
        status = r.get("status") or "–"
        return "not installed" if status == "not installed" else ("skipped" if status.startswith("skipped") else "failed")
    eff = r.get("gemm_efficiency")
    mark = " †" if _contended(r) else ""
    return f"{r['median_s']:.2f} s / {r['peak_extra_mb']:.0f} MB" + (f" ({eff:.2f})" if eff is not None else "") + mark


def _contended(r: dict) -> bool:
    return any(o > CONTENDED_CORES for o in (r.get("other_cores") or []))


def _fmt_err(x: float | None) -> str:
    return "–" if x is None else f"{x:.1e}"


def target_checks(result: dict) -> list[dict]:
    """The issue's targets for refimpl, forward + backward, per shape and dtype: each check has
    ``what``, ``N``, ``V``, ``dtype``, ``value``, ``limit`` and ``ok`` (None when a peer is missing)."""
    checks: list[dict] = []
    if result.get("quick"):
        return checks
    for N, D, V in _shapes(result):
        for dtype in ("float32", "bfloat16"):
            rows = {r["impl"]: r for r in _rows(result, N=N, D=D, V=V, dtype=dtype, mode="fwd+bwd")}
            ref = rows.get("refimpl")
            if ref is None or ref.get("median_s") is None:
                continue
            others = [r for k, r in rows.items() if k != "refimpl" and r.get("median_s") is not None]

            def add(what, value, limit, ge=False):
                ok = None if value is None else (value >= limit if ge else value <= limit)
                checks.append({"what": what, "N": N, "D": D, "V": V, "dtype": dtype, "value": value, "limit": limit,
                               "op": ">=" if ge else "<=", "ok": ok})

            if others:
                fastest = min(others, key=lambda r: r["median_s"])
                leanest = min(others, key=lambda r: r["peak_extra_mb"])
                add(f"time / fastest other ({fastest['impl']})", ref["median_s"] / fastest["median_s"], 1.0)
                add(f"peak / leanest other ({leanest['impl']})",
                    ref["peak_extra_mb"] / max(leanest["peak_extra_mb"], 1e-9), 1.0)
            naive = rows.get("naive")
            if naive is not None and naive.get("median_s") is not None:
                add("peak / naive peak", ref["peak_extra_mb"] / max(naive["peak_extra_mb"], 1e-9), 0.1)
            for trl in ("trl", "trl_fused"):
                r = rows.get(trl)
                if r is not None and r.get("median_s") is not None:
                    add(f"{trl} time / refimpl time", r["median_s"] / ref["median_s"], 3.0, ge=True)
                    add(f"{trl} peak / refimpl peak", r["peak_extra_mb"] / max(ref["peak_extra_mb"], 1e-9), 10.0, ge=True)
            add("GEMM efficiency (6NDV)", ref.get("gemm_efficiency"), 0.8, ge=True)
    gae = result.get("gae", [])
    for key in dict.fromkeys((r["B"], r["T"], r.get("mask", "gaps"), r["lam"]) for r in gae):
        B, T, mask_kind, lam = key
        rows = {r["impl"]: r for r in gae if (r["B"], r["T"], r.get("mask", "gaps"), r["lam"]) == key}
        ref, loop = rows.get("refimpl"), rows.get("loop")
        if ref is None or ref.get("median_s") is None:
            continue
        base = {"N": None, "D": None, "V": None, "dtype": ref["dtype"], "T": T, "B": B, "lam": lam, "mask": mask_kind}
        where = f"T={T}, {mask_kind}, γλ={lam}"
        if loop is not None and loop.get("median_s") is not None and T >= 4096:
            sp = loop["median_s"] / ref["median_s"]
            checks.append({**base, "what": f"GAE speed-up vs loop ({where})", "value": sp, "limit": 20.0, "op": ">=", "ok": sp >= 20.0})
        checks.append({**base, "what": f"GAE max rel err ({where})", "value": ref["max_rel_err"], "limit": 1e-5,
                       "op": "<", "ok": ref["max_rel_err"] < 1e-5})
    return checks


def flop_floors(result: dict) -> list[dict]:
    """Per shape and dtype with a refimpl forward + backward row and a measured GEMM rate: the time of
    6·N·D·V and 8·N·D·V FLOPs at that rate, refimpl's time and the fastest other implementation."""
    rates = {(g["N"], g["D"], g["V"], g["dtype"]): g.get("gflops") for g in result.get("gemm", [])}
    floors = []
    for N, D, V in _shapes(result):
        for dtype in ("float32", "bfloat16"):
            rate = rates.get((N, D, V, dtype))
            rows = [r for r in _rows(result, N=N, D=D, V=V, dtype=dtype, mode="fwd+bwd") if r.get("median_s") is not None]
            ref = next((r for r in rows if r["impl"] == "refimpl"), None)
            if not rate or ref is None:
                continue
            others = [r for r in rows if r["impl"] != "refimpl"]
            fastest = min(others, key=lambda r: r["median_s"]) if others else None
            flops = N * D * V / (rate * 1e9)
            floors.append({
                "N": N, "V": V, "dtype": dtype, "floor6_s": 6 * flops, "floor8_s": 8 * flops,
                "refimpl_s": ref["median_s"], "fastest": None if fastest is None else fastest["impl"],
                "fastest_s": None if fastest is None else fastest["median_s"],
                "fastest_mb": None if fastest is None else fastest["peak_extra_mb"],
            })
    return floors


def _machine_line(result: dict) -> str:
    m = result.get("machine", {})
    gemm = ", ".join(f"{_SHORT.get(k, k)} {v:.0f}" for k, v in (m.get("gemm_gflops") or {}).items() if v)
    load = m.get("loadavg_start")
    feats = m.get("cpu_features") or []
    parts = [
        f"{m.get('cpu', '?')}" + (f" ({', '.join(feats)})" if feats else "") + (f" / {m['gpu']}" if m.get("gpu") else ""),
        f"{m.get('cores')} cores, {m.get('threads')} threads",
        f"torch {m.get('torch')}",
        f"trl {m.get('trl_version')}, liger-kernel {m.get('liger_kernel_version') or 'not installed'}, "
        f"cut-cross-entropy {m.get('cut_cross_entropy_version') or 'not installed'}",
        f"plain GEMM {gemm} GFLOP/s" if gemm else "",
        f"load average at start {load[0]:.1f}" if load else "",
    ]
    return "; ".join(p for p in parts if p)


def bench_table_markdown(path: str | Path | dict) -> str:
    """Markdown tables of a `rlspec bench --json` result (a path, or the loaded dict)."""
    result = path if isinstance(path, dict) else load(path)
    out: list[str] = []
    if result.get("command"):
        out.append(f"Command: `{result['command']}`  ")
    for update in result.get("updates", []):
        if update.get("command"):
            out.append(f"then, replacing or adding the rows it measured: `{update['command']}`  ")
    out.append(f"Machine: {_machine_line(result)}.")
    out.append("")
    out.append("Log-probs of N tokens from hidden [N, D] and LM-head weight [V, D]; each cell is the median time / "
               "peak memory above the inputs (gradients included) / GEMM efficiency = F·N·D·V / (time × plain GEMM "
               "FLOP/s of the same shape and dtype), F = 6 for forward + backward and 2 for the forward. bf16 = "
               "bf16 inputs. The error column is max |logp − logp_float64| over 64 tokens on the same rounded "
               "inputs; refimpl and trl return bf16 log-probs for bf16 inputs, so theirs includes the output "
               "rounding (1 ulp = 0.06 at |logp| in [8, 16): random targets give logp ≈ −15), naive, liger "
               "and cce return float32.")
    for N, D, V in _shapes(result):
        out.append("")
        reps = sorted({len(r.get("times") or []) for r in _rows(result, N=N, D=D, V=V) if r.get("median_s") is not None})
        calls = f"; median of {'/'.join(map(str, reps))} timed call{'s' if reps != [1] else ''} after a warm-up" if reps else ""
        out.append(f"**N = {N}, D = {D}, V = {V}** (float32 logits would be {N * V * 4 / 2**20:.0f} MB{calls})")
        out.append("")
        cols = [(dt, mode) for dt, mode in _COLUMNS if _rows(result, N=N, D=D, V=V, dtype=dt, mode=mode)]
        out.append("| impl | " + " | ".join(f"{_SHORT.get(dt, dt)} {mode}" for dt, mode in cols) + " | max abs err logp |")
        out.append("|---|" + "---|" * len(cols) + "---|")
        impls = [i for i in LOGPROB_IMPLS if _rows(result, N=N, D=D, V=V, impl=i)]
        for impl in impls:
            cells = []
            errs = []
            for dt, mode in cols:
                r = next(iter(_rows(result, N=N, D=D, V=V, dtype=dt, mode=mode, impl=impl)), None)
                cells.append(_cell(r))
                if r is not None and r.get("max_abs_err") is not None:
                    errs.append(f"{_SHORT.get(dt, dt)} {_fmt_err(r['max_abs_err'])}")
            name = f"**{impl}**" if impl == "refimpl" else impl
            err = ", ".join(dict.fromkeys(errs)) if errs else "–"
            out.append(f"| {name} | " + " | ".join(cells) + f" | {err} |")
        ent = [r for r in result["logprob"] if (r["N"], r["D"], r["V"]) == (N, D, V) and r["mode"].endswith("+entropy")]
        if ent:
            out.append("")
            out.append("Log-probs and entropies, forward + backward:")
            out.append("")
            dts = [dt for dt in ("float32", "bfloat16") if any(r["dtype"] == dt for r in ent)]
            out.append("| impl | " + " | ".join(_SHORT.get(dt, dt) for dt in dts) + " |")
            out.append("|---|" + "---|" * len(dts))
            for impl in dict.fromkeys(r["impl"] for r in ent):
                cells = [_cell(next((r for r in ent if r["impl"] == impl and r["dtype"] == dt), None)) for dt in dts]
                out.append(f"| {'**refimpl**' if impl == 'refimpl' else impl} | " + " | ".join(cells) + " |")
    if result.get("gae"):
        out.append("")
        out.append("**GAE** (float32, γ = 1; masks: `gaps` = prompt, completion with ~10% masked positions inside, "
                   "padding; `runs` = the same without the gaps. Error: max over rows of max |A − A_oracle| / "
                   "max |A_oracle| at valid positions, oracle in float64):")
        out.append("")
        out.append("| B × T | mask | γλ | refimpl | loop (verl) | speed-up | refimpl max rel err | loop max rel err |")
        out.append("|---|---|---|---|---|---|---|---|")
        gae = result["gae"]
        for key in dict.fromkeys((r["B"], r["T"], r.get("mask", "gaps"), r["lam"]) for r in gae):
            B, T, mask_kind, lam = key
            rows = {r["impl"]: r for r in gae if (r["B"], r["T"], r.get("mask", "gaps"), r["lam"]) == key}
            ref, loop = rows.get("refimpl", {}), rows.get("loop", {})
            t_ref, t_loop = ref.get("median_s"), loop.get("median_s")
            sp = f"{t_loop / t_ref:.0f}×" if t_ref and t_loop else "–"
            mark = " †" if _contended(ref) or _contended(loop) else ""
            out.append(
                f"| {B} × {T} | {mask_kind} | {lam} | {_ms(t_ref)} | {_ms(t_loop)} | {sp}{mark} | "
                f"{_fmt_err(ref.get('max_rel_err'))} | {_fmt_err(loop.get('max_rel_err'))} |"
            )
    checks = target_checks(result)
    if result.get("quick"):
        out.append("")
        out.append("(`--quick`: a smoke run on small shapes; the targets are not evaluated.)")
    if checks:
        out.append("")
        out.append("**Targets** (refimpl, forward + backward unless GAE):")
        out.append("")
        out.append("| target | shape | dtype | value | limit | met |")
        out.append("|---|---|---|---|---|---|")
        for c in checks:
            shape = f"N={c['N']}, V={c['V']}" if c.get("N") else f"B={c['B']}, T={c['T']}, {c.get('mask', 'gaps')}"
            val = "–" if c["value"] is None else (f"{c['value']:.1e}" if "err" in c["what"] else f"{c['value']:.2f}")
            lim = f"{c['limit']:.0e}" if "err" in c["what"] else f"{c['limit']:g}"
            sign = {">=": "≥", "<=": "≤", "<": "<"}[c["op"]]
            met = {True: "yes", False: "**no**", None: "n/a"}[c["ok"]]
            out.append(f"| {c['what']} | {shape} | {_SHORT.get(c['dtype'], c['dtype'])} | {val} | {sign} {lim} | {met} |")
    floors = flop_floors(result)
    if floors:
        out.append("")
        out.append("**FLOP floors** (forward + backward, at the plain GEMM rate measured in the same run): an exact "
                   "implementation does at least the three GEMMs, 6·N·D·V FLOPs; one that keeps no [N, V] tensor "
                   "(a fused path under the memory targets) must recompute the logits in the backward, "
                   "8·N·D·V FLOPs, so its GEMM efficiency is at most 0.75 and its time at least the 8·N·D·V floor.")
        out.append("")
        out.append("| shape | dtype | 6NDV floor | 8NDV floor | refimpl | fastest other |")
        out.append("|---|---|---|---|---|---|")
        for f in floors:
            fastest = "–" if f["fastest"] is None else f"{f['fastest_s']:.2f} s ({f['fastest']}, {f['fastest_mb']:.0f} MB)"
            out.append(f"| N={f['N']}, V={f['V']} | {_SHORT.get(f['dtype'], f['dtype'])} | {f['floor6_s']:.2f} s | "
                       f"{f['floor8_s']:.2f} s | {f['refimpl_s']:.2f} s | {fastest} |")
    if any(_contended(r) for r in result.get("logprob", []) + result.get("gae", [])):
        out.append("")
        out.append("† other processes used more than 0.3 cores during some of the timed calls (no quiet window found).")
    missing = result.get("not_installed") or {}
    if missing:
        out.append("")
        out.append("Not installed: " + ", ".join(f"{k} ({v})" for k, v in missing.items()) + ".")
    return "\n".join(out) + "\n"


def _ms(t: float | None) -> str:
    return "–" if t is None else f"{t * 1e3:.1f} ms"
