"""`rlspec replay` at the issue's scale: one step of 256 sequences x 4096 tokens (8 micro-batches, PPO + k3 KL,
token mean), every per-token tensor recorded. Timed with pytest-benchmark (`pytest -m benchmark`), never
asserted against a clock: the figures go to docs/replay.md. Three traces: a correct step (every link passes);
the same step with every recorded d loss/d logp halved (the worst case: no claimed configuration explains it,
so every wiring x normalisation x mode is tried before "x1/2" is named); and a step with hidden states
(D 64, V 512) and the LM head, where the log-prob link runs on a sample of 8 rows and the probe on every row."""

from __future__ import annotations

import glob

import pytest
from safetensors.torch import load_file, save_file

from conformance.bench.trace_scale import write_step
from conformance.trace.replay import replay

pytestmark = pytest.mark.benchmark


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    ok = write_step(root / "ok")
    halved = write_step(root / "halved")
    for f in glob.glob(str(halved / "step-*" / "dp*.safetensors")):
        t = load_file(f)
        t["grad_logp"] = t["grad_logp"] / 2
        save_file(t, f)
    hidden = write_step(root / "hidden", hidden=(64, 512))
    return {"ok": ok, "halved": halved, "hidden": hidden}


def _statuses(rows):
    return {r.function: r.status for r in rows}


def test_replay_of_a_correct_256x4096_step(benchmark, traces):
    _, rows = benchmark.pedantic(replay, args=(str(traces["ok"]),), rounds=1, iterations=1)
    assert _statuses(rows)["trace.grad"] == "pass" and _statuses(rows)["trace.loss"] == "pass"


def test_replay_of_a_256x4096_step_whose_gradient_no_claim_explains(benchmark, traces):
    _, rows = benchmark.pedantic(replay, args=(str(traces["halved"]),), rounds=1, iterations=1)
    grad = next(r for r in rows if r.function == "trace.grad")
    assert grad.status == "fail" and any(c.endswith("x1/2") for c in grad.consistent_with)


def test_replay_of_a_256x4096_step_with_hidden_states(benchmark, traces):
    _, rows = benchmark.pedantic(replay, args=(str(traces["hidden"]),), rounds=1, iterations=1)
    assert _statuses(rows)["trace.logp"] == "pass" and _statuses(rows)["trace.probe"] == "pass"
