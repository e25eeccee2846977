"""`rlspec bench`: the quick run works end to end and writes the documented JSON; the tables and the
target checks read it. (Unmarked: part of the default run; the quick run takes ~10-20 s.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.bench import GAE_ROW_KEYS, LOGPROB_ROW_KEYS, bench_table_markdown, target_checks
from conformance.bench.table import flop_floors
from conformance.bench.impls import GAE_IMPLS, LOGPROB_IMPLS, available


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
    for row in data["gae"]:
        assert set(GAE_ROW_KEYS) <= set(row)
        assert row["median_s"] > 0 and row["max_rel_err"] < 1e-5
    text = bench_table_markdown(out)
    assert "**refimpl**" in text and "GAE" in text and "Command: `rlspec bench --quick" in text
    assert "rlspec bench" in proc.stdout


def _row(impl, t, mb, eff=None, **kw):
    base = {"impl": impl, "N": 8192, "D": 512, "V": 32000, "dtype": "float32", "mode": "fwd+bwd",
            "median_s": t, "peak_extra_mb": mb, "gemm_efficiency": eff, "status": "ok"}
    return {**base, **kw}


def test_target_checks_read_ratios_from_the_same_run():
    result = {
        "quick": False,
        "logprob": [
            _row("refimpl", 2.0, 100.0, 0.85),
            _row("naive", 3.0, 3000.0),
            _row("trl", 7.0, 2000.0),
            _row("trl_fused", 12.0, 4000.0),
            _row("liger", 4.0, 120.0),
            _row("cce", None, None, status="not installed"),
        ],
        "gae": [
            {"impl": "refimpl", "B": 512, "T": 4096, "dtype": "float32", "lam": 0.95, "mask": "gaps",
             "median_s": 0.004, "max_rel_err": 3e-7},
            {"impl": "loop", "B": 512, "T": 4096, "dtype": "float32", "lam": 0.95, "mask": "gaps",
             "median_s": 0.1, "max_rel_err": 4e-7},
        ],
    }
    checks = {c["what"]: c for c in target_checks(result)}
    assert checks["time / fastest other (naive)"]["ok"] and checks["time / fastest other (naive)"]["value"] == pytest.approx(2 / 3)
    assert checks["peak / leanest other (liger)"]["value"] == pytest.approx(100 / 120)
    assert checks["peak / naive peak"]["ok"]
    assert checks["trl time / refimpl time"]["value"] == pytest.approx(3.5) and checks["trl time / refimpl time"]["ok"]
    assert checks["trl_fused peak / refimpl peak"]["ok"]
    assert checks["GEMM efficiency (6NDV)"]["ok"]
    assert checks["GAE speed-up vs loop (T=4096, gaps, γλ=0.95)"]["value"] == pytest.approx(25.0)
    result["logprob"][0]["median_s"] = 5.0
    checks = {c["what"]: c for c in target_checks(result)}
    assert checks["time / fastest other (naive)"]["ok"] is False
    assert checks["trl time / refimpl time"]["ok"] is False
    text = bench_table_markdown({**result, "machine": {"cores": 2, "threads": 2, "torch": "x"}})
    assert "not installed" in text and "**no**" in text


def test_every_peer_reports_whether_it_is_installed():
    for impl in LOGPROB_IMPLS:
        ok, why = available(impl)
        assert ok or why.startswith("not installed")


def test_flop_floors_use_the_gemm_rate_of_the_same_run():
    # 8192·512·32000 = 1.342e11; at 100 GFLOP/s 6NDV takes 8.05 s and 8NDV 10.74 s (by hand)
    result = {
        "quick": False,
        "gemm": [{"N": 8192, "D": 512, "V": 32000, "dtype": "float32", "gflops": 100.0}],
        "logprob": [_row("refimpl", 11.0, 90.0), _row("naive", 9.0, 3000.0), _row("liger", 12.0, 240.0)],
        "updates": [{"command": "rlspec bench --update --json x.json"}],
        "machine": {"cores": 2, "threads": 2, "torch": "x"},
    }
    (floor,) = flop_floors(result)
    assert floor["floor6_s"] == pytest.approx(8.0530, rel=1e-4)
    assert floor["floor8_s"] == pytest.approx(10.7374, rel=1e-4)
    assert (floor["fastest"], floor["fastest_s"], floor["fastest_mb"]) == ("naive", 9.0, 3000.0)
    text = bench_table_markdown(result)
    assert "| N=8192, V=32000 | fp32 | 8.05 s | 10.74 s | 11.00 s | 9.00 s (naive, 3000 MB) |" in text
    assert "`rlspec bench --update --json x.json`" in text
    result["gemm"] = []
    assert flop_floors(result) == []
