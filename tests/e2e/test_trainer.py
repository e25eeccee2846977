"""End-to-end II: the refimpl trainer (``refimpl.trainer``, ``rlspec train``).

Quick versions (a handful of steps, a 16-row batch) of: a run with every output file; ``--verify`` on
every algorithm / loss / aggregation family, and that it catches real trainer bugs; bit-exact resume
after an interruption; atomic, pickle-free checkpoints; a 2-process gloo run under torchrun; the CLI.
The full default run (learning the task within the stated time) is ``@pytest.mark.slow``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance.cli import main as cli_main
from conformance.trainer_verify import TrainerVerifier, VerificationError
from refimpl.trainer import DigitTask, TrainConfig, Trainer
from refimpl.trainer import step as step_module
from refimpl.trainer.checkpoint import load_checkpoint, resolve_checkpoint
from refimpl.trainer.metrics import TIMING_KEYS

REPO = Path(__file__).resolve().parents[2]
# A small, fast configuration: 4 prompts x 4 samples, a 1-layer model.
TINY = dict(prompts_per_step=4, group_size=4, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
            checkpoint_every=0)


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def tiny(**kw) -> TrainConfig:
    return TrainConfig(**{**TINY, **kw})


# --------------------------------------------------------------------------------------------------
# the task


def test_task_reward_partial_credit():
    task = DigitTask("reverse", 3, 3)
    ids = lambda *ds: [4 + d for d in ds]  # noqa: E731
    assert task.answer([3, 1, 4]) == [4, 1, 3]
    assert task.score_tokens([3, 1, 4], ids(4, 1, 3) + [1]) == (1.0, True)
    assert task.score_tokens([3, 1, 4], ids(4, 1, 3)) == (0.75, False)  # no EOS: no stop point
    assert task.score_tokens([3, 1, 4], ids(4, 0, 3) + [1]) == (0.75, False)  # one digit wrong
    assert task.score_tokens([3, 1, 4], ids(4, 1) + [1]) == (0.5, False)  # stopped early
    assert task.score_tokens([3, 1, 4], [1]) == (0.0, False)
    assert task.score_text("3 1 4 =", "4 1 3", stopped=True) == 1.0
    assert DigitTask("sort", 3, 3).answer([3, 1, 2]) == [1, 2, 3]


# --------------------------------------------------------------------------------------------------
# a run and its outputs


def test_quick_run_writes_metrics_summary_plot_and_checkpoint(tmp_path):
    trainer = Trainer(tiny(steps=3, out_dir=str(tmp_path), num_minibatches=1))
    summary = trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    keys = {"reward_mean", "reward_std", "kl_ref", "clip_frac_high", "clip_frac_low", "approx_kl_old", "entropy",
            "completion_len_mean", "ratio_mean", "ratio_max", "ratio_min", "grad_norm", "time_s", "accuracy"}
    assert keys <= set(rows[0])
    first = rows[0]
    # step 0: the policy is the reference, one update per step: exactly on-policy
    assert first["kl_ref"] == 0.0 and first["kl_ref_k1"] == 0.0
    assert first["clip_frac_high"] == first["clip_frac_low"] == 0.0
    assert first["ratio_mean"] == first["ratio_max"] == first["ratio_min"] == 1.0
    assert all(r["first_update_max_ratio_dev"] == 0.0 for r in rows)
    assert rows[1]["kl_ref"] > 0.0  # the policy moved away from the frozen reference
    assert summary["steps"] == 3 and (tmp_path / "summary.json").exists()
    if _has_matplotlib():  # the optional extra rlspec[plot]
        assert (tmp_path / "curves.png").stat().st_size > 1000
    ckpt = resolve_checkpoint(tmp_path)
    assert ckpt.name == "step-000003"


# --------------------------------------------------------------------------------------------------
# --verify


VERIFY_CASES = {
    "grpo-ppo-token_mean": dict(algo="grpo", loss="ppo", agg="token_mean", epochs=2),
    "grpo-batch-dualclip-token_sum": dict(algo="grpo", grpo_scale="batch", loss="ppo", dual_clip=3.0, eps_high=0.28,
                                         agg="token_sum", kl_estimator="k1", lr=0.01, epochs=2),
    "rloo-cispo-seq_mean_token_mean": dict(algo="rloo", loss="cispo", agg="seq_mean_token_mean", kl_estimator="k2",
                                           grad_accum=2),
    "reinforce-gspo-seq_mean_token_sum": dict(algo="reinforce", loss="gspo", agg="seq_mean_token_sum", entropy_coef=0.01),
    "ppo-gae-drgrpo": dict(algo="ppo", loss="ppo", agg="seq_mean_token_sum_norm", grad_accum=2, epochs=2,
                           entropy_coef=0.01, kl_coef=0.02),
}


@pytest.mark.parametrize("case", sorted(VERIFY_CASES))
def test_verify_passes_every_update(case):
    cfg = tiny(steps=2, temperature=0.8, **VERIFY_CASES[case])
    verifier = TrainerVerifier()
    Trainer(cfg, on_step=verifier).train()
    resolved = cfg.resolved()
    assert verifier.updates == 2 * resolved.epochs * resolved.num_minibatches
    rows = verifier.rows()
    assert rows and all(r.status == "pass" for r in rows), [r.message for r in rows if r.status != "pass"]
    checks = {r.id.split(".", 1)[1] for r in rows}
    assert {"mask", "logp", "entropy", "loss", "grad[logp]", "identities", "advantages"} <= checks
    if resolved.algo == "ppo":
        assert {"value", "grad[values]", "gae", "returns", "token_rewards"} <= checks


def _bug_swap_old_and_ref(monkeypatch):
    real = step_module.objective_token_loss
    monkeypatch.setattr("refimpl.trainer.loop.objective_token_loss",
                        lambda cfg, out, old, ref, adv, mask: real(cfg, out, ref, old, adv, mask))


def _bug_ignore_temperature(monkeypatch):
    import refimpl

    real = refimpl.token_logprobs_and_entropy_from_hidden
    monkeypatch.setattr(step_module.refimpl, "token_logprobs_and_entropy_from_hidden",
                        lambda h, w, ids, m, temperature=1.0: real(h, w, ids, m, temperature=1.0))


def _bug_local_counts(monkeypatch):
    from refimpl.trainer import _dist

    real = _dist.micro_batch_loss
    monkeypatch.setattr(_dist, "micro_batch_loss",
                        lambda tl, m, counts, **kw: real(tl, m, _dist.step_counts([m]), **kw))


def _bug_shifted_mask(monkeypatch):
    from refimpl.trainer import rollout

    real = rollout.generate

    def generate(*a, **kw):
        batch = real(*a, **kw)
        batch.mask = torch.roll(batch.mask, -1, dims=1)  # off by one: the last prompt token trained, EOS not
        return batch

    monkeypatch.setattr("refimpl.trainer.loop.generate", generate)


BUGS = {
    "old/ref swapped": (_bug_swap_old_and_ref, dict(kl_coef=0.1), "loss"),
    "temperature ignored": (_bug_ignore_temperature, dict(temperature=0.7), "logp"),
    "per-micro-batch mean": (_bug_local_counts, dict(grad_accum=2, num_minibatches=1), "loss"),
    "mask off by one": (_bug_shifted_mask, {}, "mask"),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_verify_catches_trainer_bugs(bug, monkeypatch):
    patch, kw, check = BUGS[bug]
    patch(monkeypatch)
    with pytest.raises(VerificationError, match=rf"{check} \("):
        Trainer(tiny(steps=3, **kw), on_step=TrainerVerifier()).train()


# --------------------------------------------------------------------------------------------------
# checkpoints and resume


def _state(trainer: Trainer) -> dict[str, torch.Tensor]:
    out = {f"model.{k}": v for k, v in trainer.policy.state_dict().items()}
    for i, st in trainer.optimizer.state_dict()["state"].items():
        out.update({f"optim.{i}.{k}": v for k, v in st.items()})
    return out


def test_resume_is_bit_exact(tmp_path):
    kw = dict(steps=5, checkpoint_every=2, algo="ppo", epochs=2)
    full = Trainer(tiny(out_dir=str(tmp_path / "full"), **kw))
    full.train()
    cut = Trainer(tiny(out_dir=str(tmp_path / "cut"), **kw))
    cut.train(stop_after=3)  # "killed" after step 3; the last checkpoint is at step 2
    del cut
    resumed = Trainer.resume(str(tmp_path / "cut"))
    assert resumed.step == 2
    resumed.train()
    a, b = _state(full), _state(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    m_full = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    m_cut = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in m_cut] == [0, 1, 2, 3, 4]  # the step written after the checkpoint was replaced
    drop = TIMING_KEYS
    assert [{k: v for k, v in r.items() if k not in drop} for r in m_full] == \
           [{k: v for k, v in r.items() if k not in drop} for r in m_cut]


def test_resume_refuses_changed_math(tmp_path):
    Trainer(tiny(steps=1, out_dir=str(tmp_path))).train()
    with pytest.raises(ValueError, match="lr: cannot change on resume"):
        Trainer.resume(str(tmp_path), overrides={"lr": 0.5})
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer.resume(str(tmp_path / "nothing"))


def test_checkpoint_files_are_safetensors_and_json_and_atomic(tmp_path):
    trainer = Trainer(tiny(steps=2, out_dir=str(tmp_path), checkpoint_every=1, keep_checkpoints=1, algo="ppo"))
    trainer.train()
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000002"]  # pruned to one
    ckpt = root / "step-000002"
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "model.safetensors", "optimizer.safetensors", "ref_model.safetensors", "rng.safetensors", "trainer_state.json"]
    for f in ckpt.glob("*.safetensors"):
        assert f.read_bytes()[8:9] == b"{"  # safetensors: u64 header length, then a JSON header; never a pickle
    loaded = load_checkpoint(tmp_path)
    assert loaded["state"]["step"] == 2 and "value_head.weight" in loaded["model"]
    # a checkpoint cut short (a temporary directory left by a kill) is never picked up
    (root / ".tmp-step-000003-999").mkdir()
    (root / ".tmp-step-000003-999" / "model.safetensors").write_bytes(b"partial")
    assert resolve_checkpoint(tmp_path) == ckpt
    # the reference model in the checkpoint is the initial policy, not the trained one
    fresh = Trainer(tiny(steps=2, algo="ppo"))
    assert all(torch.equal(loaded["ref_model"][k], v) for k, v in fresh.ref.state_dict().items())


# --------------------------------------------------------------------------------------------------
# the command line


def test_cli_train_verify_resume_and_compare(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--hidden-size", "32",
            "--num-layers", "1", "--num-heads", "2", "--intermediate-size", "64", "--verify", "--no-progress",
            "--out", str(out), "--json", str(tmp_path / "s.json")]
    assert cli_main(args) == 0
    text = capsys.readouterr().out
    assert "--verify: 4 optimizer updates checked" in text and "FAIL" not in text
    assert cli_main(["train", "--resume", str(out), "--steps", "3", "--no-progress", "--verify"]) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    payload = json.loads((tmp_path / "s.json").read_text())
    assert all(r["status"] == "pass" for r in payload["verify"])
    assert cli_main(["train", "--resume", str(out), "--lr", "0.5", "--no-progress"]) == 2
    capsys.readouterr()
    if _has_matplotlib():
        assert cli_main(["train", "--compare", str(out), "--plot", str(tmp_path / "c.png")]) == 0
        assert "grpo (ppo loss, kl_coef=0.05)" in capsys.readouterr().out and (tmp_path / "c.png").exists()


# --------------------------------------------------------------------------------------------------
# two processes (gloo)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.distributed
def test_two_process_gloo_run_verifies_and_keeps_replicas_identical(tmp_path):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "conformance.cli", "train", "--steps", "2",
           "--prompts-per-step", "4", "--group-size", "4", "--hidden-size", "32", "--num-layers", "1",
           "--num-heads", "2", "--intermediate-size", "64", "--algo", "ppo", "--grad-accum", "2", "--verify",
           "--no-progress", "--checkpoint-every", "1", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "world size 2" in proc.stderr and "FAIL" not in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["replicas_identical"] is True
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["kl_ref"] == 0.0


# --------------------------------------------------------------------------------------------------
# the full default run


@pytest.mark.slow
def test_default_grpo_run_learns_the_task(tmp_path):
    """`rlspec train` with the defaults: the 10-step mean reward reaches 0.9 (about 300 steps)."""
    summary = Trainer(TrainConfig(out_dir=str(tmp_path))).train()
    assert summary["threshold"] is not None, summary["final"]
    assert summary["final"]["reward_mean"] >= 0.9


# --------------------------------------------------------------------------------------------------
# CUDA and NCCL (skipped without a GPU)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_run_verifies_and_resumes(tmp_path):
    verifier = TrainerVerifier()
    Trainer(tiny(steps=2, device="cuda", algo="ppo", out_dir=str(tmp_path)), on_step=verifier).train()
    assert all(r.status == "pass" for r in verifier.rows()), [r.message for r in verifier.rows() if r.status != "pass"]
    resumed = Trainer.resume(str(tmp_path), overrides={"steps": 3}, on_step=TrainerVerifier())
    assert resumed.step == 2 and next(resumed.policy.parameters()).is_cuda
    resumed.train()


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_process_nccl_run(tmp_path):
    out = tmp_path / "nccl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "conformance.cli", "train", "--steps", "2",
           "--prompts-per-step", "4", "--group-size", "4", "--verify", "--no-progress", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["replicas_identical"] is True
