"""Asynchronous actor-learner training (``rlspec train --async``): Ray rollout actors, bounded staleness,
the off-policy corrections verified update by update, equality with the synchronous trainer at
staleness 0, planted learner bugs caught by ``--verify``, resume, and the CLI.

One local Ray cluster serves the whole module (the pipeline joins it instead of starting its own).
"""

from __future__ import annotations

import json

import pytest
import torch

from conformance.cli import main as cli_main
from conformance.trainer_verify import TrainerVerifier, VerificationError
from refimpl.trainer import TrainConfig, Trainer
from refimpl.trainer.metrics import TIMING_KEYS

ray = pytest.importorskip("ray", reason="asynchronous training needs Ray (the [async] extra, part of [test])")

from refimpl.trainer.async_trainer import AsyncTrainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")

TINY = dict(prompts_per_step=4, group_size=4, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
            checkpoint_every=0)


def tiny(**kw) -> TrainConfig:
    return TrainConfig(**{**TINY, **kw})


@pytest.fixture
def one_thread():
    """Learner and actors on one thread each, so that the two sides compute bit-identically."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.policy.state_dict().items()}


def _untimed(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in history]


# --------------------------------------------------------------------------------------------------
# staleness 0, same precision: the synchronous update


def test_staleness_zero_without_correction_is_the_synchronous_run_bit_for_bit(one_thread):
    kw = dict(steps=4, seed=3)
    sync = Trainer(tiny(**kw))
    sync.train()
    asyn = AsyncTrainer(tiny(asynchronous=True, max_staleness=0, **kw))
    asyn.train()
    a, b = _params(sync), _params(asyn)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    sync_rows = _untimed(sync.history)
    async_rows = [{k: v for k, v in r.items() if k in sync_rows[0]} for r in _untimed(asyn.history)]
    assert async_rows == sync_rows
    assert all(r["staleness"] == 0 for r in asyn.history)
    # the behaviour log-probs come from the decoding steps, the old ones from a full forward: in float32
    # they agree to rounding, not bit for bit
    assert all(abs(r["rho_max"] - 1) < 1e-4 and abs(r["rho_min"] - 1) < 1e-4 for r in asyn.history)


@pytest.mark.parametrize("correction", ["tis_token", "decoupled"])
def test_staleness_zero_with_a_correction_matches_the_synchronous_update(correction, one_thread):
    """At staleness 0 in float32, rho = 1 up to the rounding of the decoding pass (|log rho| < 1e-5 here),
    so a corrected update equals the synchronous one to float32 accuracy: the first update's loss and
    the parameters after it agree to 1e-5 relative (Adam's step divides by sqrt(v), amplifying the
    relative difference of tiny gradient entries, hence parameters within 1e-5 absolute, lr = 1e-3)."""
    kw = dict(steps=1, seed=5, num_minibatches=1)
    sync = Trainer(tiny(**kw))
    sync.train()
    asyn = AsyncTrainer(tiny(asynchronous=True, max_staleness=0, correction=correction, **kw))
    asyn.train()
    assert asyn.history[0]["log_rho_abs_mean"] < 1e-5
    assert asyn.history[0]["policy_loss"] == pytest.approx(sync.history[0]["policy_loss"], rel=1e-5, abs=1e-7)
    a, b = _params(sync), _params(asyn)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-5, msg=k)


# --------------------------------------------------------------------------------------------------
# every correction verified, bfloat16 actors, staleness up to 2

CORRECTIONS = {
    "none": {},
    "tis_token": {},
    "tis_sequence": {},
    "mis_token": dict(correction_low=0.9, correction_high=1.1),
    "rejection": dict(correction_low=0.9, correction_high=1.1),
    "rejection-seq_mean": dict(correction="rejection", rejection_level="seq_mean", correction_low=0.95,
                               correction_high=1.05),
    "decoupled": dict(behav_cap=1.05),
}


@pytest.mark.parametrize("name", sorted(CORRECTIONS))
def test_verify_passes_every_update_of_every_correction(name):
    kw = {"correction": name, **CORRECTIONS[name]}
    cfg = tiny(asynchronous=True, max_staleness=2, actor_dtype="bfloat16", steps=5, entropy_coef=0.01, **kw)
    verifier = TrainerVerifier()
    trainer = AsyncTrainer(cfg, on_step=verifier)
    summary = trainer.train()
    rows = verifier.rows()
    assert rows and all(r.status == "pass" for r in rows), [r.message for r in rows if r.status != "pass"]
    checks = {r.id.split(".", 1)[1] for r in rows}
    assert {"staleness", "behav_logp", "loss", "grad[logp]", "counts", "identities"} <= checks
    if cfg.correction not in ("none", "decoupled"):
        assert {"is_weights", "keep"} <= checks
    # bfloat16 actors: the engine's log-probs differ from the learner's, at every staleness
    assert all(r["rho_max"] != 1.0 or r["rho_min"] != 1.0 for r in trainer.history)
    assert all(0 <= r["staleness"] <= 2 for r in trainer.history)
    assert sum(summary["staleness_histogram"].values()) == 5 * 16
    assert set(summary["staleness_histogram"]) <= {0, 1, 2}
    # the bounds are tight enough that the correction acts
    if cfg.correction == "rejection":
        assert max(r["rejected_frac"] for r in trainer.history) > 0
    if cfg.correction in ("mis_token", "tis_token", "tis_sequence") and "correction_low" in kw:
        assert max(r["is_clipped_frac"] for r in trainer.history) > 0
    if cfg.correction == "decoupled":
        assert max(r["behav_capped_frac"] for r in trainer.history) > 0


def test_two_actors_share_the_steps_within_the_bound():
    cfg = tiny(asynchronous=True, max_staleness=3, num_actors=2, steps=6, correction="tis_token")
    verifier = TrainerVerifier()
    trainer = AsyncTrainer(cfg, on_step=verifier)
    trainer.train()
    assert all(r.status == "pass" for r in verifier.rows())
    assert [r["actor"] for r in trainer.history] == [0, 1, 0, 1, 0, 1]  # step k goes to actor k mod 2
    assert all(0 <= r["staleness"] <= 3 for r in trainer.history)


def test_ppo_with_value_head_and_rejection_verifies():
    cfg = tiny(asynchronous=True, max_staleness=1, actor_dtype="bfloat16", steps=3, algo="ppo",
               correction="rejection", correction_low=0.9, correction_high=1.1)
    verifier = TrainerVerifier()
    AsyncTrainer(cfg, on_step=verifier).train()
    rows = verifier.rows()
    assert all(r.status == "pass" for r in rows), [r.message for r in rows if r.status != "pass"]
    assert {"value", "grad[values]", "counts"} <= {r.id.split(".", 1)[1] for r in rows}


# --------------------------------------------------------------------------------------------------
# planted learner bugs


def _bug_behaviour_as_proximal(monkeypatch):
    """The learner keeps the actor's behaviour log-probs as the old (proximal) ones instead of recomputing."""
    real = Trainer._score

    def score(self, batch):
        real(self, batch)
        batch.old_logp = batch.behav_logp.clone()

    monkeypatch.setattr(Trainer, "_score", score)


def _bug_behaviour_as_proximal_in_the_loss(monkeypatch):
    """The old log-probs are recomputed, but the decoupled loss is handed the behaviour ones as proximal."""
    from refimpl.trainer import correction

    real = correction.corrected_objective
    monkeypatch.setattr("refimpl.trainer.loop.corrected_objective",
                        lambda cfg, lp, H, old, behav, *rest: real(cfg, lp, H, behav, behav, *rest))


def _bug_rejected_tokens_counted(monkeypatch):
    """The update's token count includes the rejected tokens (their loss is dropped, their count not)."""
    from refimpl.trainer.rollout import Batch

    monkeypatch.setattr(Batch, "loss_mask", property(lambda self: self.mask))


def _bug_weights_inverted(monkeypatch):
    """TIS weights from pi_behav / pi_old (the ratio inverted)."""
    import refimpl

    real = refimpl.rollout_is_weights
    monkeypatch.setattr("refimpl.trainer.correction.refimpl.rollout_is_weights",
                        lambda old, behav, m, **kw: real(behav, old, m, **kw))


BUGS = {
    "behaviour log-probs used as proximal": (_bug_behaviour_as_proximal, dict(correction="decoupled"), "identities"),
    # w * r = pi / pi_behav either way: the swap shows only where the clip or the behaviour cap acts
    "behaviour as proximal in the loss": (_bug_behaviour_as_proximal_in_the_loss,
                                          dict(correction="decoupled", behav_cap=1.02, eps_low=0.02, eps_high=0.02), "loss"),
    "rejected tokens still counted": (_bug_rejected_tokens_counted,
                                      dict(correction="rejection", correction_low=0.95, correction_high=1.05), "counts"),
    "IS ratio inverted": (_bug_weights_inverted, dict(correction="tis_token", correction_high=1.02), "is_weights"),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_verify_catches_planted_learner_bugs(bug, monkeypatch):
    patch, kw, check = BUGS[bug]
    patch(monkeypatch)
    cfg = tiny(asynchronous=True, max_staleness=2, actor_dtype="bfloat16", steps=4, **kw)
    with pytest.raises(VerificationError, match=rf"{check} \("):
        AsyncTrainer(cfg, on_step=TrainerVerifier()).train()


# --------------------------------------------------------------------------------------------------
# checkpoints and resume


def test_resume_at_staleness_zero_replays_the_run_bit_for_bit(tmp_path, one_thread):
    kw = dict(asynchronous=True, max_staleness=0, steps=5, checkpoint_every=2, correction="tis_token")
    full = AsyncTrainer(tiny(out_dir=str(tmp_path / "full"), **kw))
    full.train()
    cut = AsyncTrainer(tiny(out_dir=str(tmp_path / "cut"), **kw))
    cut.train(stop_after=3)  # "killed" after step 3: the checkpoint is at step 2, step 3's batch is discarded
    resumed = AsyncTrainer.resume(str(tmp_path / "cut"))
    assert resumed.step == 2
    resumed.train()
    a, b = _params(full), _params(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    lines = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2, 3, 4]
    assert _untimed(lines) == _untimed([json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()])


def test_resume_with_staleness_restarts_the_actors_at_the_checkpoint(tmp_path):
    kw = dict(asynchronous=True, max_staleness=2, steps=6, checkpoint_every=3, actor_dtype="bfloat16",
              correction="decoupled")
    cut = AsyncTrainer(tiny(out_dir=str(tmp_path), **kw))
    cut.train(stop_after=4)
    verifier = TrainerVerifier()
    resumed = AsyncTrainer.resume(str(tmp_path), on_step=verifier)
    assert resumed.step == 3
    summary = resumed.train()
    assert resumed.history[3]["staleness"] == 0  # the in-flight batches were discarded: fresh weights
    assert summary["resumed_from"] and summary["steps"] == 6
    assert all(r.status == "pass" for r in verifier.rows())


# --------------------------------------------------------------------------------------------------
# configuration errors and the CLI


@pytest.mark.parametrize("kw, match", [
    (dict(correction="tis_token"), "only for the asynchronous mode"),
    (dict(actor_dtype="bfloat16"), "only for the asynchronous mode"),
    (dict(asynchronous=True, correction="tis_token", loss="gspo"), "needs loss 'ppo'"),
    (dict(asynchronous=True, max_staleness=-1), "max_staleness"),
    (dict(asynchronous=True, correction="mis_token", correction_low=3.0), "correction_low"),
    (dict(asynchronous=True, correction="bogus"), "correction"),
])
def test_bad_configuration_is_a_clear_error(kw, match):
    with pytest.raises(ValueError, match=match):
        tiny(**kw).resolved()


def test_async_trainer_refuses_a_synchronous_configuration():
    with pytest.raises(ValueError, match="asynchronous"):
        AsyncTrainer(tiny())


def test_cli_async_verify_and_resume(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--async", "--max-staleness", "2", "--verify", "--no-progress", "--out", str(out),
            "--actor-dtype", "bfloat16", "--correction", "tis_token", "--steps", "3", "--checkpoint-every", "2",
            "--prompts-per-step", "4", "--group-size", "4", "--hidden-size", "32", "--num-layers", "1",
            "--num-heads", "2", "--intermediate-size", "64", "--json", str(tmp_path / "s.json")]
    assert cli_main(args) == 0
    text = capsys.readouterr().out
    assert "asynchronous:" in text and "train.is_weights" in text and "FAIL" not in text
    payload = json.loads((tmp_path / "s.json").read_text())
    assert payload["summary"]["asynchronous"] is True
    assert all(r["status"] == "pass" for r in payload["verify"])
    assert cli_main(["train", "--resume", str(out), "--steps", "4", "--no-progress", "--verify"]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


def test_cli_ray_address_without_async_is_a_usage_error(tmp_path, capsys):
    assert cli_main(["train", "--ray-address", "auto", "--steps", "1", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "--ray-address: only with --async" in capsys.readouterr().err


def test_cli_without_ray_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # `import ray` raises ImportError
    code = cli_main(["train", "--async", "--steps", "1", "--out", str(tmp_path), "--no-progress", "--prompts-per-step", "4",
                     "--group-size", "4"])
    assert code == 2
    assert "pip install 'rlspec[async]'" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# the study


def test_async_study_quick_writes_json_table_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "study.json", tmp_path / "study.png"
    assert cli_main(["async-study", "--quick", "--steps", "3", "--staleness", "1", "--corrections", "none,decoupled",
                     "--seeds", "0", "--json", str(out), "--plot", str(png), "--quiet"]) == 0
    table = capsys.readouterr().out
    study = json.loads(out.read_text())
    names = [c["name"] for c in study["configurations"]]
    assert names == ["sync", "async S=1 none", "async S=1 decoupled"]
    for c in study["configurations"]:
        assert len(c["runs"]) == 1 and len(c["runs"][0]["reward_curve"]) == 3
        assert c["name"] in table
    assert png.stat().st_size > 10_000


def test_async_study_rejects_unknown_corrections(capsys):
    with pytest.raises(SystemExit):
        cli_main(["async-study", "--corrections", "none,bogus"])
    assert "expected comma-separated corrections" in capsys.readouterr().err


def test_async_study_configurations_cap_the_decoupled_ones_and_may_leave_sync_out():
    from conformance.experiments.async_study import configurations

    confs = configurations((1, 4), ("none", "decoupled"), behav_cap=2.0, sync=False)
    assert [c["name"] for c in confs] == ["async S=1 none", "async S=1 decoupled cap 2", "async S=4 none",
                                         "async S=4 decoupled cap 2"]
    assert [c.get("behav_cap") for c in confs] == [None, 2.0, None, 2.0]
    assert configurations((2,), ("decoupled",))[0] == {"name": "sync", "asynchronous": False}


def test_async_study_rejects_a_non_positive_cap(capsys):
    assert cli_main(["async-study", "--behav-cap", "0", "--quick"]) == 2
    assert "--behav-cap: expected > 0" in capsys.readouterr().err
