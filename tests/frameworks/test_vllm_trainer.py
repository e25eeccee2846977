"""vLLM rollout actors for the asynchronous trainer (``rlspec train --async --engine vllm``,
conformance/frameworks/vllm/rollout.py) and ``--verify``'s check of the engine's behaviour log-probs.

The run tests need vLLM's environment (``rlspec frameworks install vllm``, marked ``frameworks``) and Ray (the
``[async]`` extra); the configuration and verifier tests need neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import oracle
from conformance.frameworks import subprocess_worker as sw
from conformance.trainer_verify import TrainerVerifier
from refimpl.trainer import TrainConfig

TINY = dict(prompts_per_step=4, group_size=4, hidden_size=64, num_layers=1, num_heads=2, intermediate_size=64,
            checkpoint_every=0, asynchronous=True, engine="vllm")


@pytest.mark.parametrize("kw, match", [
    (dict(asynchronous=False), "engine: 'vllm' samples in the asynchronous mode"),
    (dict(num_heads=4), r"num_heads: engine 'vllm' needs a head size .* got 64 / 4"),
    (dict(engine="sglang"), "engine"),
])
def test_bad_engine_configuration_is_a_clear_error(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**{**TINY, **kw}).resolved()


def _record(behav: np.ndarray, logits: np.ndarray, mask: np.ndarray, ids: np.ndarray, *, dtype: str = "float32",
            half: np.ndarray | None = None) -> SimpleNamespace:
    rollout = SimpleNamespace(input_ids=torch.from_numpy(ids), behav_check_logits=torch.from_numpy(logits),
                              behav_check_logits_half=None if half is None else torch.from_numpy(half), support=None)
    return SimpleNamespace(config=SimpleNamespace(temperature=0.7, actor_dtype=dtype), rollout=rollout, step=0)


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.0, size=(3, 6, 14)).astype(np.float32)
    ids = rng.integers(0, 14, size=(3, 6))
    mask = np.zeros((3, 6), dtype=bool)
    mask[:, 3:] = True
    return logits, ids, mask


def test_engine_check_passes_the_sampling_logprobs_and_catches_raw_ones():
    """The behaviour log-probs of an engine that samples at T = 0.7: sampling_logprobs(T) of the actor's forward
    passes; the untempered log-softmax (vLLM's raw_logprobs) fails the engine_logp check."""
    logits, ids, mask = _batch()
    right = oracle.sampling_logprobs(logits, ids, mask, temperature=0.7).astype(np.float32)
    raw = oracle.token_logprobs(logits, ids, mask).astype(np.float32)
    v = TrainerVerifier(raise_on_fail=False)
    v._check_engine_logp(_record(right, logits, mask, ids), "here", mask, right)
    assert v.stats["engine_logp"].failures == []
    v._check_engine_logp(_record(raw, logits, mask, ids), "here", mask, raw)
    assert v.stats["engine_logp"].failures and "behaviour log-probs" in v.stats["engine_logp"].failures[0]


def test_engine_check_of_a_bfloat16_engine_is_held_to_twice_the_bfloat16_forward_gap():
    logits, ids, mask = _batch(1)
    half = logits + np.random.default_rng(2).normal(0.0, 0.01, size=logits.shape).astype(np.float32)
    exp = oracle.sampling_logprobs(logits, ids, mask, temperature=0.7)
    gap = np.max(np.abs(oracle.sampling_logprobs(half, ids, mask, temperature=0.7) - exp)[mask])
    v = TrainerVerifier(raise_on_fail=False)
    within = np.where(mask, exp + 1.5 * gap, 0.0)
    v._check_engine_logp(_record(within, logits, mask, ids, dtype="bfloat16", half=half), "a", mask, within)
    assert v.stats["engine_logp"].failures == []
    beyond = np.where(mask, exp + 3.0 * gap, 0.0)
    v._check_engine_logp(_record(beyond, logits, mask, ids, dtype="bfloat16", half=half), "b", mask, beyond)
    assert v.stats["engine_logp"].failures


needs_vllm = pytest.mark.skipif(sw.python_for("vllm")[0] is None,
                                reason="vLLM is not installed: run `rlspec frameworks install vllm`")


@pytest.mark.frameworks
@needs_vllm
@pytest.mark.parametrize("dtype, correction", [("float32", "none"), ("bfloat16", "decoupled")])
def test_cli_async_vllm_verify(tmp_path, dtype, correction):
    """`rlspec train --async --engine vllm --verify` in its own process (its own Ray cluster): every check
    passes, the engine's behaviour log-probs included, rows sampled up to the staleness bound, the weights
    reloaded into the running engine and the timings recorded."""
    pytest.importorskip("ray")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "conformance.cli", "train", "--async", "--engine", "vllm", "--num-heads", "2",
           "--actor-dtype", dtype, "--correction", correction, "--max-staleness", "1", "--verify", "--steps", "4",
           "--prompts-per-step", "4", "--group-size", "4", "--no-progress", "--out", str(out),
           "--json", str(tmp_path / "summary.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {r["id"]: r for r in summary["verify"]}
    assert rows["train.engine_logp"]["status"] == "pass" and rows["train.engine_logp"]["n_cases"] == 4
    assert all(r["status"] == "pass" for r in rows.values()), [r for r in rows.values() if r["status"] != "pass"]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[0]["engine_start_s"] > 0 and any("weight_reload_s" in s for s in steps)
    assert (out / "engine" / "actor0" / "model.safetensors").exists()


@pytest.mark.frameworks
@needs_vllm
def test_cli_verify_catches_an_engine_reporting_raw_logprobs(tmp_path):
    """vLLM's default raw_logprobs at temperature 0.7 (finding raw-logprobs-ignore-temperature) as behaviour
    log-probs: --verify stops at the first step with the engine_logp check (logprob.sampling)."""
    pytest.importorskip("ray")
    cmd = [sys.executable, "-m", "conformance.cli", "train", "--async", "--engine", "vllm", "--num-heads", "2",
           "--engine-logprobs", "raw_logprobs", "--temperature", "0.7", "--verify", "--steps", "2",
           "--prompts-per-step", "4", "--group-size", "4", "--no-progress", "--out", str(tmp_path / "run")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "engine_logp (logprob.sampling)" in proc.stderr + proc.stdout, proc.stderr[-3000:]


@pytest.mark.frameworks
@needs_vllm
def test_cli_async_vllm_verify_on_a_local_model(tmp_path):
    """`--engine vllm --model DIR --prompts F --reward SPEC`: the engine loads the user's own architecture and
    vocabulary (a BPE tokenizer trained here, a 258-token Llama) and every check passes."""
    pytest.importorskip("ray")
    from tests.e2e.own_model import write_model

    write_model(tmp_path / "model", hidden_size=64, num_heads=2)
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "the cat"}\n{"prompt": "one two three four"}\n')
    (tmp_path / "r.py").write_text("def reward(completions, **kw):\n    return [len(c) / 10 for c in completions]\n")
    cmd = [sys.executable, "-m", "conformance.cli", "train", "--async", "--engine", "vllm", "--model",
           str(tmp_path / "model"), "--prompts", str(tmp_path / "prompts.jsonl"), "--reward", f"{tmp_path / 'r.py'}:reward",
           "--actor-dtype", "bfloat16", "--correction", "decoupled", "--verify", "--steps", "2", "--max-new-tokens", "8",
           "--prompts-per-step", "2", "--group-size", "4", "--no-progress", "--out", str(tmp_path / "run"),
           "--json", str(tmp_path / "summary.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["id"]: r for r in json.loads((tmp_path / "summary.json").read_text())["verify"]}
    assert rows["train.engine_logp"]["status"] == "pass"
    assert all(r["status"] == "pass" for r in rows.values()), [r for r in rows.values() if r["status"] != "pass"]


def test_engine_check_under_truncation_renormalises_over_the_recorded_support():
    """With a support recorded (truncated sampling), the engine's log-probs are held to support_logprobs of the
    actor's forward over that support: the sampling-form values pass, the full-support ones (log S off) fail."""
    logits, ids, mask = _batch(3)
    support = np.random.default_rng(4).random(logits.shape) < 0.5
    support[np.arange(3)[:, None], np.arange(6)[None, :], ids] = True
    shifted = np.zeros_like(support)  # the set of token t, recorded at t (the logits row t-1 predicts it)
    shifted[:, 1:] = support[:, 1:]
    sampling = oracle.support_logprobs(logits, ids, mask, shifted, temperature=0.7).astype(np.float32)
    full = oracle.token_logprobs(logits, ids, mask, temperature=0.7).astype(np.float32)
    v = TrainerVerifier(raise_on_fail=False)
    rec = _record(sampling, logits, mask, ids)
    rec.rollout.support = torch.from_numpy(shifted)
    v._check_engine_logp(rec, "a", mask, sampling)
    assert v.stats["engine_logp"].failures == []
    v._check_engine_logp(rec, "b", mask, full)
    assert v.stats["engine_logp"].failures


@pytest.mark.frameworks
@needs_vllm
def test_cli_async_vllm_truncated_with_the_keep_sampling_mask(tmp_path):
    """vLLM sampling with top-k 5 and top-p 0.9: the engine records each token's support (its finite
    processed log-probs), the learner renormalises over it, and --verify passes the engine_logp and logp rows."""
    pytest.importorskip("ray")
    cmd = [sys.executable, "-m", "conformance.cli", "train", "--async", "--engine", "vllm", "--num-heads", "2",
           "--top-k", "5", "--top-p", "0.9", "--keep-sampling-mask", "--temperature", "0.8", "--max-staleness", "0",
           "--verify", "--steps", "2",
           "--prompts-per-step", "4", "--group-size", "4", "--no-progress", "--out", str(tmp_path / "run"),
           "--json", str(tmp_path / "summary.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["id"]: r for r in json.loads((tmp_path / "summary.json").read_text())["verify"]}
    assert all(r["status"] == "pass" for r in rows.values()), [r for r in rows.values() if r["status"] != "pass"]
    assert rows["train.engine_logp"]["status"] == "pass" and rows["train.logp"]["spec_id"] == "logprob.sampling"
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # staleness 0, float32 engine and learner, same support: rho = 1 up to the engine/trainer float32 gap (3.7e-6 per
    # token measured); without the mask it would be the dropped mass, |log S| ~ 0.1-1 at top-k 5
    assert all(s["log_rho_abs_mean"] < 1e-4 for s in steps), [s["log_rho_abs_mean"] for s in steps]
