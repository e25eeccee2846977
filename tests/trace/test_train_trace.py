"""`rlspec train --trace DIR` then `rlspec replay DIR`: one process, two ranks under torchrun (each rank writes
its own rows), and the asynchronous trainer (Ray actors, behaviour log-probs recorded as rollout_logp)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

TRAIN = ["train", "--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--grad-accum", "2", "--no-progress",
         "--checkpoint-every", "0"]


def _run(cmd, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _replay_ok(trace, tmp_path):
    out = tmp_path / "replay.json"
    _run([sys.executable, "-m", "conformance.cli", "replay", str(trace), "--json", str(out)])
    report = json.loads(out.read_text())
    statuses = {c["function"]: c["status"] for c in report["checks"]}
    assert report["ok"] and statuses["trace.grad"] == "pass" and statuses["trace.probe"] == "pass", statuses
    return report


def test_single_process(tmp_path):
    trace = tmp_path / "trace"
    _run([sys.executable, "-m", "conformance.cli", *TRAIN, "--kl-coef", "0.05", "--out", str(tmp_path / "run"),
          "--trace", str(trace)])
    assert sorted(p.name for p in trace.glob("step-*")) == ["step-000000", "step-000001", "step-000002", "step-000003"]
    _replay_ok(trace, tmp_path)


@pytest.mark.distributed
def test_two_ranks_under_torchrun(tmp_path):
    trace = tmp_path / "trace"
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "conformance.cli",
          *TRAIN, "--out", str(tmp_path / "run"), "--trace", str(trace)])
    step = trace / "step-000000"
    assert (step / "part-dp0-cp0.json").exists() and (step / "part-dp1-cp0.json").exists()
    assert json.loads((step / "manifest.json").read_text())["layout"]["dp"] == 2
    _replay_ok(trace, tmp_path)


@pytest.mark.distributed
def test_asynchronous_trainer(tmp_path):
    pytest.importorskip("ray")
    trace = tmp_path / "trace"
    _run([sys.executable, "-m", "conformance.cli", *TRAIN, "--async", "--max-staleness", "1", "--actor-dtype", "bfloat16",
          "--out", str(tmp_path / "run"), "--trace", str(trace)])
    from safetensors.torch import load_file

    assert "rollout_logp" in load_file(str(trace / "step-000001" / "dp0-cp0-mb0.safetensors"))
    _replay_ok(trace, tmp_path)


@pytest.mark.distributed
def test_context_parallel_two_ranks_replays_and_matches_one_process(tmp_path):
    """cp_size 2 under torchrun: each rank holds half the columns of every row; replay merges the parts, and the
    step's loss and gradient norm equal the one-process run's (same seed, same rows: the CP group is the data)."""
    agg = ["--agg", "seq_mean_token_mean", "--steps", "1"]
    one, two, trace = tmp_path / "one", tmp_path / "two", tmp_path / "trace"
    _run([sys.executable, "-m", "conformance.cli", *TRAIN, *agg, "--out", str(one)])
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "conformance.cli",
          *TRAIN, *agg, "--cp-size", "2", "--out", str(two), "--trace", str(trace)])
    step = trace / "step-000000"
    layout = json.loads((step / "manifest.json").read_text())["layout"]
    assert (layout["dp"], layout["cp"]) == (1, 2)
    assert (step / "part-dp0-cp0.json").exists() and (step / "part-dp0-cp1.json").exists()
    _replay_ok(trace, tmp_path)
    m1, m2 = (json.loads((d / "metrics.jsonl").read_text().splitlines()[0]) for d in (one, two))
    assert m1["reward_mean"] == m2["reward_mean"]
    for key in ("policy_loss", "grad_norm"):
        assert m2[key] == pytest.approx(m1[key], rel=1e-5, abs=1e-9), key
