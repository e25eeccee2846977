"""Tables of a `rlspec bench` result: plain text for the terminal, Markdown for the README
(:func:`bench_table_markdown`), and the issue's targets evaluated on the result (:func:`target_checks`)."""

from __future__ import annotations

import json
import statistics
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


# The targets for refimpl's lean (no budget) forward + backward row: its time over the
# 8·N·D·V floor (the GEMMs of a path that keeps no [N, V] state) at most this, per dtype.
LEAN_FLOOR_LIMIT = {"float32": 1.10, "bfloat16": 1.25}


def pareto(result: dict) -> list[dict]:
    """For every measured peer row: the fastest refimpl row of the same shape, dtype and mode (any
    memory budget) that is no slower and no larger (``refimpl``), or None with the ``reason``."""
    out = []
    for r in result.get("logprob", []):
        if r["impl"] == "refimpl" or r.get("median_s") is None:
            continue
        mine = [m for m in _rows(result, impl="refimpl", N=r["N"], D=r["D"], V=r["V"], dtype=r["dtype"], mode=r["mode"])
                if m.get("median_s") is not None]
        dom = [m for m in mine if m["median_s"] <= r["median_s"] and m["peak_extra_mb"] <= r["peak_extra_mb"]]
        best = min(dom, key=lambda m: m["median_s"]) if dom else None
        reason = ""
        if best is None:
            if not mine:
                reason = "no refimpl row measured"
            else:
                fits = [m for m in mine if m["peak_extra_mb"] <= r["peak_extra_mb"]]
                near = min(fits or mine, key=lambda m: m["median_s"])
                reason = (f"refimpl {_label(near)} takes {near['median_s']:.2f} s / {near['peak_extra_mb']:.0f} MB"
                          + ("" if fits else " (no refimpl row within the peer's memory)"))
        out.append({"peer": r, "refimpl": best, "reason": reason})
    return out


def _label(r: dict) -> str:
    mb = r.get("memory_budget_mb")
    return "lean" if mb is None else f"budget {mb} MB"


def target_checks(result: dict) -> list[dict]:
    """The issue's targets evaluated on the result: each check has ``what``, ``N``, ``V``, ``dtype``,
    ``value``, ``limit``, ``op`` and ``ok`` (None when a row is missing)."""
    checks: list[dict] = []
    if result.get("quick"):
        return checks
    dominated = pareto(result)
    for N, D, V in _shapes(result):
        for dtype in ("float32", "bfloat16"):
            def add(what, value, limit, op="<="):
                ok = None if value is None else {"<=": value <= limit, ">=": value >= limit}[op]
                checks.append({"what": what, "N": N, "D": D, "V": V, "dtype": dtype, "value": value, "limit": limit,
                               "op": op, "ok": ok})

            lean = next(iter(_rows(result, impl="refimpl", N=N, D=D, V=V, dtype=dtype, mode="fwd+bwd", memory_budget_mb=None)), None)
            if lean is None or lean.get("median_s") is None:
                continue
            floor8 = lean.get("floor_8ndv_s")
            add("lean time / 8NDV floor", None if not floor8 else lean["median_s"] / floor8, LEAN_FLOOR_LIMIT.get(dtype, 1.25))
            naive = next(iter(_rows(result, impl="naive", N=N, D=D, V=V, dtype=dtype, mode="fwd+bwd")), None)
            if dtype == "bfloat16" and naive is not None and naive.get("median_s") is not None:
                add("lean time / naive time", lean["median_s"] / naive["median_s"], 1.0)
            mine = [d for d in dominated if (d["peer"]["N"], d["peer"]["V"], d["peer"]["dtype"]) == (N, V, dtype)]
            if mine:
                add("peer rows without a dominating refimpl row", sum(d["refimpl"] is None for d in mine), 0)
            budgeted = [r for r in _rows(result, impl="refimpl", N=N, D=D, V=V, dtype=dtype)
                        if r.get("memory_budget_mb") is not None and r.get("median_s") is not None]
            if budgeted:
                add("budget rows whose peak exceeds the budget",
                    sum(r["peak_extra_mb"] > r["memory_budget_mb"] for r in budgeted), 0)
    for case in gae_cases(result):
        ref = case["rows"].get("refimpl")
        if ref is None or ref.get("median_s") is None:
            continue
        base = {"N": None, "D": None, "V": None, "dtype": ref["dtype"], "T": case["T"], "B": case["B"],
                "lam": case["lam"], "mask": case["mask"]}
        where = f"T={case['T']}, {case['mask']}, γλ={case['lam']}"
        for what, peer, limit in ((f"fastest peer ({case['fastest']})", case["fastest_s"], GAE_PEER_LIMIT),
                                  ("verl loop", case["rows"].get("loop", {}).get("median_s"), GAE_LOOP_LIMIT)):
            if peer is not None:
                sp = peer / ref["median_s"]
                checks.append({**base, "what": f"GAE speed-up vs {what} ({where})", "value": sp, "limit": limit,
                               "op": ">=", "ok": sp >= limit})
        checks.append({**base, "what": f"GAE max rel err ({where})", "value": ref["max_rel_err"], "limit": 1e-5,
                       "op": "<", "ok": ref["max_rel_err"] < 1e-5})
    return checks


# The GAE targets: refimpl at least this many times faster than the fastest peer row and
# than verl's loop, in every case.
GAE_PEER_LIMIT = 10.0
GAE_LOOP_LIMIT = 20.0
GAE_PEERS = ("loop", "torchrl_loop", "torchrl_vec")
_GAE_NAMES = {"loop": "loop (verl)", "torchrl_loop": "torchrl loop", "torchrl_vec": "torchrl vec"}


def gae_cases(result: dict) -> list[dict]:
    """The GAE rows grouped by case (B, T, mask, γλ): ``rows`` by impl, the fastest measured peer
    (``fastest``, ``fastest_s``; None without one) and the memory floor of the case (``floor_ms``)."""
    gae = result.get("gae", [])
    cases = []
    for key in dict.fromkeys((r["B"], r["T"], r.get("mask", "gaps"), r["lam"]) for r in gae):
        rows = {r["impl"]: r for r in gae if (r["B"], r["T"], r.get("mask", "gaps"), r["lam"]) == key}
        peers = [r for k, r in rows.items() if k in GAE_PEERS and r.get("median_s") is not None]
        fastest = min(peers, key=lambda r: r["median_s"]) if peers else None
        floor = next((r["floor_ms"] for r in rows.values() if r.get("floor_ms") is not None), None)
        cases.append({"B": key[0], "T": key[1], "mask": key[2], "lam": key[3], "rows": rows, "floor_ms": floor,
                      "fastest": None if fastest is None else _GAE_NAMES[fastest["impl"]],
                      "fastest_s": None if fastest is None else fastest["median_s"]})
    return cases


def _gae_cell(r: dict | None, spread: bool = False) -> str:
    if r is None:
        return "–"
    if r.get("median_s") is None:
        status = r.get("status") or "–"
        return "not installed" if status.startswith("not installed") else "failed"
    cell = _ms(r["median_s"])
    times = r.get("times") or []
    if spread and len(times) > 1:
        cell += f" [{min(times) * 1e3:.2f}–{max(times) * 1e3:.2f}]"
    if r.get("call_s") is not None:
        cell += f" (call {_ms(r['call_s'])})"
    return cell + (" †" if _contended(r) else "")


def flop_floors(result: dict) -> list[dict]:
    """Per shape and dtype with a lean refimpl forward + backward row: the 6·N·D·V and 8·N·D·V floors
    (the row's ``floor_6ndv_s`` / ``floor_8ndv_s``), refimpl's time and the fastest other row."""
    floors = []
    for N, D, V in _shapes(result):
        for dtype in ("float32", "bfloat16"):
            rows = [r for r in _rows(result, N=N, D=D, V=V, dtype=dtype, mode="fwd+bwd") if r.get("median_s") is not None]
            ref = next((r for r in rows if r["impl"] == "refimpl" and r.get("memory_budget_mb") is None), None)
            if ref is None or not ref.get("floor_8ndv_s"):
                continue
            others = [r for r in rows if r["impl"] != "refimpl"]
            fastest = min(others, key=lambda r: r["median_s"]) if others else None
            floors.append({
                "N": N, "V": V, "dtype": dtype, "floor6_s": ref["floor_6ndv_s"], "floor8_s": ref["floor_8ndv_s"],
                "gflops": ref.get("floor_gflops") or 0.0,
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
        impls = [(i, None) for i in LOGPROB_IMPLS if _rows(result, N=N, D=D, V=V, impl=i)]
        budgets = sorted({r["memory_budget_mb"] for r in _rows(result, N=N, D=D, V=V, impl="refimpl")
                          if r.get("memory_budget_mb") is not None and not r["mode"].endswith("+entropy")})
        impls[1:1] = [("refimpl", mb) for mb in budgets]
        for impl, mb in impls:
            cells = []
            errs = []
            for dt, mode in cols:
                r = next(iter(_rows(result, N=N, D=D, V=V, dtype=dt, mode=mode, impl=impl, memory_budget_mb=mb)), None)
                cells.append(_cell(r))
                if r is not None and r.get("max_abs_err") is not None:
                    errs.append(f"{_SHORT.get(dt, dt)} {_fmt_err(r['max_abs_err'])}")
            name = f"**{impl}**" if impl == "refimpl" else impl
            if mb is not None:
                name = f"**refimpl**, budget {mb} MB"
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
            for impl, mb in dict.fromkeys((r["impl"], r.get("memory_budget_mb")) for r in ent):
                cells = [_cell(next((r for r in ent if r["impl"] == impl and r["dtype"] == dt
                                     and r.get("memory_budget_mb") == mb), None)) for dt in dts]
                name = "**refimpl**" if impl == "refimpl" else impl
                out.append(f"| {name}{'' if mb is None else f', budget {mb} MB'} | " + " | ".join(cells) + " |")
    if result.get("gae"):
        out.extend(_gae_table(result))
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
        out.append("**FLOP floors** (forward + backward): the multiply-adds an exact implementation must do, at "
                   "the fastest GEMM rate measured in the same run for the shape and dtype (plain logits "
                   "[N, D]·[D, V], d hidden [N, V]·[V, D] and d weight [V, N]·[N, D] GEMMs, and the same work in "
                   "1024 × 2048 tiles): 6·N·D·V with the logits kept, 8·N·D·V (the logits GEMM twice) for a path "
                   "that keeps no [N, V] state, as refimpl's lean default.")
        out.append("")
        out.append("| shape | dtype | GEMM rate | 6NDV floor | 8NDV floor | refimpl lean | ÷ 8NDV floor | fastest other |")
        out.append("|---|---|---|---|---|---|---|---|")
        for f in floors:
            fastest = "–" if f["fastest"] is None else f"{f['fastest_s']:.2f} s ({f['fastest']}, {f['fastest_mb']:.0f} MB)"
            out.append(f"| N={f['N']}, V={f['V']} | {_SHORT.get(f['dtype'], f['dtype'])} | {f['gflops']:.0f} GFLOP/s | {f['floor6_s']:.2f} s | "
                       f"{f['floor8_s']:.2f} s | {f['refimpl_s']:.2f} s | {f['refimpl_s'] / f['floor8_s']:.2f} | {fastest} |")
    front = pareto(result)
    if front and not result.get("quick"):
        out.append("")
        out.append("**Pareto table**: for every peer row, the fastest refimpl row (lean, or with `memory_budget` "
                   "set to that peer's peak) that is no slower and no larger, or why none is.")
        out.append("")
        out.append("| shape | dtype | mode | peer | peer time / peak | refimpl row | refimpl time / peak |")
        out.append("|---|---|---|---|---|---|---|")
        for d in front:
            r, m = d["peer"], d["refimpl"]
            mine = f"{m['median_s']:.2f} s / {m['peak_extra_mb']:.0f} MB" if m else "**none**: " + d["reason"]
            out.append(f"| N={r['N']}, V={r['V']} | {_SHORT.get(r['dtype'], r['dtype'])} | {r['mode']} | {r['impl']} | "
                       f"{r['median_s']:.2f} s / {r['peak_extra_mb']:.0f} MB | {_label(m) if m else '–'} | {mine} |")
    if any(_contended(r) for r in result.get("logprob", []) + result.get("gae", [])):
        out.append("")
        out.append("† other processes used more than 0.3 cores during some of the timed calls (no quiet window found).")
    missing = result.get("not_installed") or {}
    if missing:
        out.append("")
        out.append("Not installed: " + ", ".join(f"{k} ({v})" for k, v in missing.items()) + ".")
    return "\n".join(out) + "\n"


def _ms(t: float | None) -> str:
    return "–" if t is None else f"{t * 1e3:.1f} ms" if t >= 0.01 else f"{t * 1e3:.2f} ms"


def _gae_table(result: dict) -> list[str]:
    cases = gae_cases(result)
    copy = result.get("copy") or {}
    versions = next((r["versions"] for r in result.get("gae", []) if r.get("versions")), None)
    out = ["", "**GAE** (float32, γ = 1; masks: `gaps` = prompt, completion with ~10% masked positions inside, "
           "padding; `runs` = the same without the gaps). Peers: verl's reversed loop with mask carry, and "
           "torchrl" + (f" {versions['torchrl']} (torch {versions['torch']})" if versions else "")
           + "'s `generalized_advantage_estimate` (a per-step loop) and `vec_generalized_advantage_estimate` "
           "(`torchrl/objectives/value/functional.py`) on the rows mapped as a user maps them: `done` = "
           "`terminated` at each row's last valid token, values shifted by one as the next values, and for "
           "`gaps` each row's valid tokens compacted to the left first and the results scattered back; their "
           "time is that whole code, the call alone in parentheses. refimpl: median [min–max] of the timings. "
           "Memory floor: the bytes the call must move (read rewards and values, float32, and the bool mask; "
           "write advantages and returns, float32: 17·B·T) ÷ the copy bandwidth of the same run"
           + (f" ({copy['gbps']:.1f} GB/s read + write, `dst.copy_(src)` of {copy['mb']} MiB buffers)"
              if copy.get("gbps") else "") + ".", ""]
    impls = ["refimpl"] + [i for i in GAE_PEERS if any(i in c["rows"] for c in cases)]
    out.append("| B × T | mask | γλ | " + " | ".join("**refimpl**" if i == "refimpl" else _GAE_NAMES[i] for i in impls)
               + " | memory floor | ÷ fastest peer | ÷ verl loop | max rel err (" + " / ".join(
                   "refimpl" if i == "refimpl" else _GAE_NAMES[i].split(" (")[0] for i in impls) + ") |")
    out.append("|---|---|---|" + "---|" * (len(impls) + 4))
    for c in cases:
        ref = c["rows"].get("refimpl", {})
        t_ref = ref.get("median_s")
        loop = c["rows"].get("loop", {}).get("median_s")
        fastest = f"{c['fastest_s'] / t_ref:.0f}× ({c['fastest']})" if t_ref and c["fastest_s"] else "–"
        cells = [_gae_cell(c["rows"].get(i), spread=i == "refimpl") for i in impls]
        errs = " / ".join(_fmt_err(c["rows"].get(i, {}).get("max_rel_err")) for i in impls)
        floor = "–" if c["floor_ms"] is None else f"{c['floor_ms']:.2f} ms"
        out.append(f"| {c['B']} × {c['T']} | {c['mask']} | {c['lam']} | " + " | ".join(cells)
                   + f" | {floor} | {fastest} | "
                   + (f"{loop / t_ref:.0f}×" if t_ref and loop else "–") + f" | {errs} |")
    refs = [c["rows"]["refimpl"] for c in cases if c["rows"].get("refimpl", {}).get("median_s")]
    spreads = [(max(r["times"]) / min(r["times"]) - 1, r) for r in refs if len(r.get("times") or []) > 1]
    if spreads:
        worst, r = max(spreads, key=lambda x: x[0])
        faults = [x.get("faults_per_call") for x in refs if x.get("faults_per_call") is not None]
        out.append("")
        out.append(f"refimpl's spread (slowest ÷ fastest timing − 1): median {statistics.median(s for s, _ in spreads):.0%}, "
                   f"at most {worst:.0%} ({r['B']} × {r['T']} {r.get('mask', 'gaps')} γλ = {r['lam']})"
                   + (f"; page faults per call at most {max(faults):.0f}" if faults else "") + ".")
    return out
