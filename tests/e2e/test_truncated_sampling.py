"""Truncated sampling in the asynchronous trainer (``--top-k``, ``--top-p``): the form of the behaviour
log-probs (``--behav-logprobs sampling|full``) and DeepSeek-V3.2's keep sampling mask (``--keep-sampling-mask``).

At staleness 0 with float32 actors the learner's weights are the sampler's, so what ρ = π_old / π_behav must be
follows from the definitions alone: with sampling-form behaviour log-probs and full-support learner log-probs,
log ρ = log S, the log of the kept mass (``oracle.sampling_log_mass`` of the learner's own logits); with the
keep sampling mask, or full-form behaviour log-probs, log ρ = 0.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
import refimpl
from conformance.cli import main as cli_main
from conformance.trainer_verify import TrainerVerifier, VerificationError
from refimpl.trainer import TrainConfig

ray = pytest.importorskip("ray", reason="asynchronous training needs Ray (the [async] extra, part of [test])")

from refimpl.trainer.async_trainer import AsyncTrainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")

TINY = dict(prompts_per_step=4, group_size=4, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
            checkpoint_every=0, asynchronous=True, init_std=0.3)


def tiny(**kw) -> TrainConfig:
    return TrainConfig(**{**TINY, **kw})


@pytest.mark.parametrize("kw, match", [
    (dict(asynchronous=False, top_k=3), "truncated sampling is for the asynchronous mode"),
    (dict(asynchronous=False, keep_sampling_mask=True), "truncated sampling is for the asynchronous mode"),
    (dict(top_k=-1), "top_k, top_p: expected top_k >= 0"),
    (dict(top_p=0.0), "top_k, top_p: expected top_k >= 0 and 0 < top_p <= 1"),
    (dict(keep_sampling_mask=True, behav_logprobs="full"), r"keep_sampling_mask: .*\(behav_logprobs 'sampling'\)"),
    (dict(behav_logprobs="raw"), "behav_logprobs"),
    (dict(engine="vllm", num_heads=1, top_p=0.9, behav_logprobs="full"), "vLLM reports no full-support"),
    (dict(engine="vllm", num_heads=1, top_k=4, engine_logprobs="raw_logprobs"), "vLLM reports no full-support"),
])
def test_bad_truncation_settings_are_clear_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        tiny(**kw).resolved()


class Rollouts:
    """on_step hook keeping each step's rollout record (with the old forward's hidden states)."""

    wants_hidden = True

    def __init__(self) -> None:
        self.records = []

    def __call__(self, rec) -> None:
        if rec.rollout is not None:
            self.records.append(rec.rollout)


def _log_rho_and_mass(**kw) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        hook = Rollouts()
        cfg = tiny(max_staleness=0, steps=2, temperature=0.8, top_k=3, **kw)
        AsyncTrainer(cfg, on_step=hook).train()
    finally:
        torch.set_num_threads(before)
    out = []
    for ro in hook.records:
        m = ro.mask.numpy()
        logits = ro.old_hidden.double().numpy() @ ro.old_weight.double().numpy().T
        log_s = oracle.sampling_log_mass(logits, m, temperature=0.8, top_k=3)
        out.append(((ro.old_logp - ro.behav_logp).double().numpy(), log_s, m))
    return out


def test_sampling_logprobs_against_a_full_support_learner_carry_the_kept_mass():
    for log_rho, log_s, m in _log_rho_and_mass(behav_logprobs="sampling"):
        assert np.max(np.abs(log_rho - log_s)[m]) < 1e-4
        assert log_s[m].mean() < -0.05  # top-3 of the 14-token vocabulary cuts real mass


@pytest.mark.parametrize("kw", [dict(keep_sampling_mask=True), dict(behav_logprobs="full")],
                         ids=["keep_sampling_mask", "full-form"])
def test_the_mask_or_full_form_behaviour_logprobs_leave_rho_one(kw):
    for log_rho, log_s, m in _log_rho_and_mass(**kw):
        assert np.max(np.abs(log_rho)[m]) < 1e-4
        assert log_s[m].mean() < -0.05  # the same truncation: the kept mass is gone from rho, not absent


def test_verify_checks_the_learner_under_the_recorded_support():
    verifier = TrainerVerifier()
    cfg = tiny(max_staleness=1, steps=3, actor_dtype="bfloat16", correction="decoupled", top_k=4, top_p=0.9,
               keep_sampling_mask=True, temperature=0.8)
    AsyncTrainer(cfg, on_step=verifier).train()
    rows = {r.id: r for r in verifier.rows()}
    assert all(r.status == "pass" for r in rows.values()), [r.message for r in rows.values() if r.status != "pass"]
    assert rows["train.logp"].spec_id == "logprob.sampling" and "keep_sampling_mask" in rows["train.logp"].message


def test_verify_catches_a_learner_that_ignores_the_support(monkeypatch):
    """The learner scores the tokens over the full vocabulary though it was asked to re-apply the support (the
    keep sampling mask recorded but dropped): the logp check fails at the first update."""
    monkeypatch.setattr(refimpl, "support_logprobs",
                        lambda logits, ids, mask, support, *, temperature: refimpl.token_logprobs(
                            logits, ids, mask, temperature=temperature))
    cfg = tiny(max_staleness=0, steps=1, top_k=3, keep_sampling_mask=True)
    with pytest.raises(VerificationError, match=r"logp \(logprob.sampling\)"):
        AsyncTrainer(cfg, on_step=TrainerVerifier()).train()


def test_cli_keep_sampling_mask_verifies_and_refuses_a_trace(tmp_path, capsys):
    base = ["train", "--async", "--steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--hidden-size", "32",
            "--num-layers", "1", "--num-heads", "2", "--top-k", "4", "--keep-sampling-mask", "--no-progress"]
    assert cli_main(base + ["--verify", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr()
    assert "0 fail, 0 error" in out.out
    assert "behaviour log-probs: sampling form" in out.err
    assert cli_main(base + ["--trace", str(tmp_path / "t"), "--out", str(tmp_path / "b")]) == 2
    assert "--trace: keep_sampling_mask" in capsys.readouterr().err
