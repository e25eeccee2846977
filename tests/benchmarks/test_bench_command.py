"""`rlspec bench`: the quick run works end to end and writes the documented JSON; the tables and the
target checks read it. (Unmarked: part of the default run; the quick run takes ~10-20 s.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.bench import GAE_ROW_KEYS, LOGPROB_ROW_KEYS, bench_table_markdown, target_checks
from conformance.bench.table import flop_floors, pareto
from conformance.bench.impls import GAE_IMPLS, LOGPROB_IMPLS, TORCHRL_GAE, available
from conformance.bench.runner import SLOW_GAE, default_plan, gae_python


def test_quick_run_writes_the_schema(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "conformance.cli", "bench", "--quick", "--impl", "refimpl,naive",
           "--gae-lam", "0.95", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["quick"] is True and data["command"].startswith("rlspec bench --quick")
    machine = data["machine"]
    assert machine["cores"] >= 1 and machine["torch"] and machine["gemm_gflops"]["float32"] > 0
    assert {r["impl"] for r in data["logprob"]} == {"refimpl", "naive"}
    for row in data["logprob"]:
        assert set(LOGPROB_ROW_KEYS) <= set(row)
        assert row["status"] == "ok", row
        assert row["median_s"] > 0 and row["peak_extra_mb"] >= 0 and row["gemm_efficiency"] > 0
        assert row["max_abs_err"] < 1e-4
    assert {r["impl"] for r in data["gae"]} == set(GAE_IMPLS)
    assert data["copy"]["gbps"] > 0 and data["machine"]["copy_gbps"] == data["copy"]["gbps"]
    torchrl_python, _ = gae_python("torchrl_loop")
    quick = default_plan(quick=True)
    for row in data["gae"]:
        assert set(GAE_ROW_KEYS) <= set(row)
        assert row["bytes"] == 17 * row["B"] * row["T"]
        assert row["floor_ms"] == pytest.approx(row["bytes"] / data["copy"]["gbps"] / 1e6)
        if row["impl"] in TORCHRL_GAE and torchrl_python is None:
            assert row["status"] == "not installed (rlspec frameworks install torchrl)" and row["median_s"] is None
            continue
        assert row["status"] == "ok", row
        assert row["median_s"] > 0 and row["max_rel_err"] < 1e-5
        assert len(row["times"]) == (quick.loop_reps if row["impl"] in SLOW_GAE else quick.gae_reps)
        assert row["faults_per_call"] >= 0
        if row["impl"] in TORCHRL_GAE:  # the call alone, without the mapping, and the versions it ran with
            assert 0 < row["call_s"] and row["versions"]["torchrl"]
    text = bench_table_markdown(out)
    assert "**refimpl**" in text and "GAE" in text and "Command: `rlspec bench --quick" in text
    assert "rlspec bench" in proc.stdout


def _row(impl, t, mb, eff=None, **kw):
    base = {"impl": impl, "N": 8192, "D": 512, "V": 32000, "dtype": "float32", "mode": "fwd+bwd",
            "median_s": t, "peak_extra_mb": mb, "gemm_efficiency": eff, "status": "ok"}
    return {**base, **kw}


def test_target_checks_and_pareto_table_read_the_same_run():
    floors = {"floor_gflops": 100.0, "floor_6ndv_s": 8.0, "floor_8ndv_s": 10.0}
    result = {
        "quick": False,
        "logprob": [
            _row("refimpl", 10.5, 100.0, memory_budget_mb=None, **floors),
            _row("naive", 9.0, 3000.0),
            _row("cce", 8.5, 1100.0),
            _row("liger", 12.0, 120.0),
            _row("trl", None, None, status="not installed"),
            _row("refimpl", 9.0, 2900.0, memory_budget_mb=3000, **floors),
            _row("refimpl", 8.4, 1090.0, memory_budget_mb=1100, **floors),
        ],
        "gae": [
            {"impl": "refimpl", "B": 512, "T": 4096, "dtype": "float32", "lam": 0.95, "mask": "gaps",
             "median_s": 0.004, "max_rel_err": 3e-7},
            {"impl": "loop", "B": 512, "T": 4096, "dtype": "float32", "lam": 0.95, "mask": "gaps",
             "median_s": 0.1, "max_rel_err": 4e-7},
        ],
    }
    front = {d["peer"]["impl"]: d for d in pareto(result)}
    assert set(front) == {"naive", "cce", "liger"}  # measured peers only
    assert front["naive"]["refimpl"]["memory_budget_mb"] == 1100  # the fastest row that fits: 8.4 s / 1090 MB
    assert front["cce"]["refimpl"]["memory_budget_mb"] == 1100
    assert front["liger"]["refimpl"]["memory_budget_mb"] is None
    checks = {c["what"]: c for c in target_checks(result)}
    assert checks["lean time / 8NDV floor"]["value"] == pytest.approx(1.05) and checks["lean time / 8NDV floor"]["ok"] is True
    assert checks["peer rows without a dominating refimpl row"]["value"] == 0
    assert checks["budget rows whose peak exceeds the budget"]["ok"] is True
    result["logprob"][-1]["median_s"] = 8.6  # now slower than cce: cce has no dominating row
    front = {d["peer"]["impl"]: d for d in pareto(result)}
    assert front["cce"]["refimpl"] is None and "8.60 s / 1090 MB" in front["cce"]["reason"]
    assert front["naive"]["refimpl"]["memory_budget_mb"] == 1100
    checks = {c["what"]: c for c in target_checks(result)}
    assert checks["peer rows without a dominating refimpl row"]["ok"] is False
    text = bench_table_markdown({**result, "machine": {"cores": 2, "threads": 2, "torch": "x"}})
    assert "| N=8192, V=32000 | fp32 | fwd+bwd | cce | 8.50 s / 1100 MB | – | **none**: refimpl budget 1100 MB takes 8.60 s / 1090 MB |" in text
    assert "**refimpl**, budget 3000 MB" in text and "not installed" in text and "**no**" in text


def test_gemm_floors_take_the_fastest_rate_of_the_run():
    # 8192·512·32000 = 1.342e11 multiply-adds; at 200 GFLOP/s (the tile rate, the fastest) 6NDV
    # takes 4.03 s and 8NDV 5.37 s (by hand)
    from conformance.bench.runner import Shape, gemm_floors

    s = Shape(8192, 512, 32000)
    rates = {(8192, 512, 32000, "float32", k): r * 1e9 for k, r in
             (("logits", 150.0), ("dhidden", 120.0), ("dweight", 100.0), ("tile", 200.0))}
    rates[(8192, 512, 32000, "bfloat16", "tile")] = 999e9  # another dtype: ignored
    f = gemm_floors(rates, s, "float32")
    assert f["floor_gflops"] == pytest.approx(200.0)
    assert f["floor_6ndv_s"] == pytest.approx(4.0265, rel=1e-4)
    assert f["floor_8ndv_s"] == pytest.approx(5.3687, rel=1e-4)
    assert f["floor_fwd_s"] == pytest.approx(1.3422, rel=1e-4)
    assert gemm_floors({}, s, "float32")["floor_8ndv_s"] is None


def test_every_peer_reports_whether_it_is_installed():
    for impl in LOGPROB_IMPLS:
        ok, why = available(impl)
        assert ok or why.startswith("not installed")


def test_flop_floors_table_reads_the_rows():
    result = {
        "quick": False,
        "logprob": [_row("refimpl", 11.0, 90.0, floor_gflops=100.0, floor_6ndv_s=8.0530, floor_8ndv_s=10.7374),
                    _row("naive", 9.0, 3000.0), _row("liger", 12.0, 240.0)],
        "updates": [{"command": "rlspec bench --update --json x.json"}],
        "machine": {"cores": 2, "threads": 2, "torch": "x"},
    }
    (floor,) = flop_floors(result)
    assert (floor["fastest"], floor["fastest_s"], floor["fastest_mb"]) == ("naive", 9.0, 3000.0)
    text = bench_table_markdown(result)
    assert "| N=8192, V=32000 | fp32 | 100 GFLOP/s | 8.05 s | 10.74 s | 11.00 s | 1.02 | 9.00 s (naive, 3000 MB) |" in text
    assert "`rlspec bench --update --json x.json`" in text
    del result["logprob"][0]["floor_8ndv_s"]
    assert flop_floors(result) == []


def _gae_row(impl, t, mask="runs", T=4096, **kw):
    return {"impl": impl, "B": 512, "T": T, "dtype": "float32", "gamma": 1.0, "lam": 0.95, "mask": mask,
            "median_s": t, "max_rel_err": None if t is None else 4e-7, "bytes": 17 * 512 * T, "floor_ms": 1.8,
            "status": "ok" if t is not None else "not installed (rlspec frameworks install torchrl)", **kw}


def test_gae_targets_compare_with_the_fastest_peer_and_verl_loop():
    result = {
        "quick": False,
        "copy": {"mb": 1024, "gbps": 19.3},
        "gae": [
            _gae_row("refimpl", 0.004, times=[0.0039, 0.004, 0.0052], faults_per_call=0.0),
            _gae_row("loop", 0.1),
            _gae_row("torchrl_loop", 0.05, call_s=0.045, versions={"torchrl": "0.14.1", "torch": "2.13.0"}),
            _gae_row("torchrl_vec", None),
            _gae_row("refimpl", 0.003, mask="gaps", T=512, times=[0.003, 0.003]),
            _gae_row("loop", 0.03, mask="gaps", T=512),
        ],
    }
    checks = {c["what"]: c for c in target_checks(result)}
    peer = checks["GAE speed-up vs fastest peer (torchrl loop) (T=4096, runs, γλ=0.95)"]
    assert peer["value"] == pytest.approx(12.5) and peer["limit"] == 10.0 and peer["ok"] is True
    loop = checks["GAE speed-up vs verl loop (T=4096, runs, γλ=0.95)"]
    assert loop["value"] == pytest.approx(25.0) and loop["ok"] is True
    # T = 512 is a target too (every case of the table): 10× verl's loop, its only peer there, is short of 20×
    assert checks["GAE speed-up vs fastest peer (loop (verl)) (T=512, gaps, γλ=0.95)"]["ok"] is True
    assert checks["GAE speed-up vs verl loop (T=512, gaps, γλ=0.95)"]["ok"] is False
    assert checks["GAE max rel err (T=4096, runs, γλ=0.95)"]["ok"] is True
    text = bench_table_markdown({**result, "machine": {"cores": 2, "threads": 2, "torch": "x"}})
    assert ("| 512 × 4096 | runs | 0.95 | 4.00 ms [3.90–5.20] | 100.0 ms | 50.0 ms (call 45.0 ms) | not installed "
            "| 1.80 ms | 12× (torchrl loop) | 25× | 4.0e-07 / 4.0e-07 / 4.0e-07 / – |") in text
    assert "torchrl 0.14.1 (torch 2.13.0)" in text and "19.3 GB/s" in text
    assert "median 17%, at most 33% (512 × 4096 runs γλ = 0.95); page faults per call at most 0." in text


def test_torchrl_mapping_reproduces_the_spec():
    """The user's mapping of the torchrl rows (done = terminated at each row's last valid token, the
    values shifted by one as the next values, rows with gaps compacted first and scattered back),
    fed to the textbook GAE with done flags (Schulman et al. 2016: δ_t = r_t + γ·(1 − terminated_t)·
    V'_t − V_t, A_t = δ_t + γλ·(1 − done_t)·A_{t+1}), written here, gives the oracle's advantages."""
    import numpy as np
    import torch

    import oracle
    from conformance.bench.impls import compact_rows, gae_inputs, gae_max_rel_err, torchrl_trajectories

    def textbook(v, nxt, r, done):
        going = (~done).to(r.dtype)
        A = torch.zeros_like(r)
        acc = torch.zeros_like(r[:, 0])
        for t in reversed(range(r.shape[1])):
            acc = r[:, t] + gamma * going[:, t] * nxt[:, t] - v[:, t] + gamma * lam * going[:, t] * acc
            A[:, t] = acc
        return A

    gamma, lam = 0.99, 0.9
    for mask_kind in ("runs", "gaps"):
        r, v, m = gae_inputs(8, 64, torch.float64, "cpu", mask_kind=mask_kind)
        ref, _ = oracle.gae(r.numpy(), v.numpy(), m.numpy(), gamma=gamma, lam=lam)
        if mask_kind == "runs":
            A = torch.where(m, textbook(*(x[..., 0] for x in torchrl_trajectories(r, v, m))), 0.0)
        else:
            r_c, v_c, m_c, index = compact_rows(r, v, m)
            A_c = textbook(*(x[..., 0] for x in torchrl_trajectories(r_c, v_c, m_c)))
            A = torch.zeros_like(r).scatter_(1, index, torch.where(m_c, A_c, 0.0))
        assert gae_max_rel_err(A, torch.from_numpy(np.asarray(ref)), m) < 1e-12
