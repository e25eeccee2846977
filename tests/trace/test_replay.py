"""rlspec replay on hand-written traces (verdicts derived by hand), on traces of the refimpl trainer, and on
those traces edited by hand; the command line's outputs and exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conformance.cli import main
from conformance.mutants.wiring.base import record
from conformance.trace.reader import TraceError, read_trace
from conformance.trace.replay import replay

from tests.trace.hand_traces import write


def rows_of(path) -> dict:
    return {r.function: r for r in replay(str(path))[1]}


def test_step_token_mean_passes(tmp_path):
    rows = rows_of(write(tmp_path))
    assert rows["trace.grad"].status == "pass" and rows["trace.loss"].status == "pass"
    assert rows["trace.mask"].status == "pass"
    assert rows["trace.probe"].status == "not_implemented" and "probe_grad" in rows["trace.probe"].message


def test_per_micro_batch_mean_is_named_and_a_preset_when_claimed(tmp_path):
    row = rows_of(write(tmp_path / "a", weight="micro_mean"))["trace.grad"]
    assert row.status == "fail"
    assert any("of each micro-batch (its own counts), averaged over the accumulation steps" in c for c in row.consistent_with)
    row = rows_of(write(tmp_path / "b", weight="micro_mean", config={"agg_scope": "micro_batch"}))["trace.grad"]
    assert row.status == "preset" and row.matched_preset == "hand: token_mean per micro-batch"


def test_divided_by_the_accumulation_steps_again_is_a_named_factor(tmp_path):
    row = rows_of(write(tmp_path, weight="twice"))["trace.grad"]
    assert row.status == "fail" and any("x1/2" in c and "accumulation steps M" in c for c in row.consistent_with)


def test_two_ranks_are_averaged_by_the_all_reduce(tmp_path):
    rows = rows_of(write(tmp_path, dp=2))
    assert rows["trace.grad"].status == "pass"
    summed = rows_of(write(tmp_path / "sum", dp=2, config={"grad_reduce": "sum"}))["trace.grad"]
    assert summed.status == "fail" and any("x2" in c for c in summed.consistent_with)


def test_prompt_tokens_in_the_loss_mask_are_named(tmp_path):
    def edit(j, t):
        t["loss_mask"] = t["loss_mask"] | (t["prompt_mask"] & (torch.arange(6) > 0))
    row = rows_of(write(tmp_path, edit=edit))["trace.mask"]
    assert row.status == "fail" and "prompt tokens in the loss mask" in row.consistent_with
    assert "4 prompt tokens in the loss mask in 4 rows" in row.message


def test_a_shifted_mask_is_named(tmp_path):
    def edit(j, t):
        m = torch.zeros_like(t["loss_mask"])
        m[:, 1:] = t["loss_mask"][:, :-1]
        t["loss_mask"] = m
    row = rows_of(write(tmp_path, edit=edit))["trace.mask"]
    assert row.status == "fail"
    assert any(c.startswith("loss mask shifted one column late") for c in row.consistent_with)


def test_a_link_whose_tensors_are_missing_is_not_checked_never_passed(tmp_path):
    def edit(j, t):
        del t["grad_logp"]
    rows = rows_of(write(tmp_path, edit=edit))
    assert rows["trace.grad"].status == "not_implemented" and "grad_logp" in rows["trace.grad"].message


# ---- the refimpl trainer, recorded (rlspec train --trace), and edited by hand ---------------------------------


@pytest.fixture(scope="module")
def grpo_trace(tmp_path_factory):
    return record(None, tmp_path_factory.mktemp("grpo") / "trace", overrides=dict(steps=2))


@pytest.fixture(scope="module")
def ppo_trace(tmp_path_factory):
    return record(None, tmp_path_factory.mktemp("ppo") / "trace", overrides=dict(steps=2, algo="ppo", entropy_coef=0.01))


@pytest.mark.parametrize("fixture", ["grpo_trace", "ppo_trace"])
def test_the_refimpl_trainer_passes_every_link_it_records(request, fixture):
    rows = rows_of(request.getfixturevalue(fixture))
    expected_unchecked = {"trace.token_loss"} | ({"trace.rewards", "trace.value"} if fixture == "grpo_trace" else set())
    assert {f for f, r in rows.items() if r.status == "not_implemented"} == expected_unchecked
    assert {f: r.status for f, r in rows.items() if r.status != "not_implemented"} == {
        f: "pass" for f in rows if f not in expected_unchecked}


def _edited(src: Path, dst: Path, change) -> Path:
    shutil.copytree(src, dst)
    for f in sorted(dst.glob("step-*/*.safetensors")):
        t = load_file(str(f))
        change(t)
        save_file(t, str(f))
    return dst


def test_old_and_reference_swapped_by_hand_is_named(grpo_trace, tmp_path):
    def swap(t):
        if "old_logp" in t:
            t["old_logp"], t["ref_logp"] = t["ref_logp"], t["old_logp"]
    row = rows_of(_edited(grpo_trace, tmp_path / "t", swap))["trace.grad"]
    assert row.status == "fail" and any(c.startswith("old and reference log-probs swapped") for c in row.consistent_with)
    assert row.message.startswith("step 1:")  # at step 0 the old policy is the reference: the swap changes nothing


def test_the_probe_halved_by_hand_is_named(grpo_trace, tmp_path):
    def halve(t):
        if "probe_grad" in t:
            t["probe_grad"] = t["probe_grad"] / 2
    row = rows_of(_edited(grpo_trace, tmp_path / "t", halve))["trace.probe"]
    assert row.status == "fail" and any("scaled after the backward: x1/2" in c for c in row.consistent_with)


def test_the_loss_mask_shifted_by_hand_is_named(grpo_trace, tmp_path):
    def shift(t):
        if "loss_mask" in t:
            m = torch.zeros_like(t["loss_mask"])
            m[:, 1:] = t["loss_mask"][:, :-1]
            t["loss_mask"] = m
    rows = rows_of(_edited(grpo_trace, tmp_path / "t", shift))
    assert rows["trace.mask"].status == "fail"
    assert any(c.startswith("loss mask shifted one column late") for c in rows["trace.mask"].consistent_with)
    assert rows["trace.logp"].status == "pass"  # the forward is right; the mask it is used with is not


# ---- the command line -------------------------------------------------------------------------------------


def test_cli_exit_codes_and_outputs(grpo_trace, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["replay", str(grpo_trace), "--json", f"{out}.json", "--junit", f"{out}.xml", "--markdown", f"{out}.md"]) == 0
    report = json.loads(Path(f"{out}.json").read_text())
    assert report["reproduce"] == f"rlspec replay {grpo_trace}" and report["ok"]
    assert {c["function"] for c in report["checks"]} >= {"trace.mask", "trace.grad", "trace.probe"}
    assert "<testsuites" in Path(f"{out}.xml").read_text() and "trace.grad" in Path(f"{out}.md").read_text()
    bad = write(tmp_path / "bad", weight="twice")
    assert main(["replay", str(bad)]) == 1
    assert "x1/2" in capsys.readouterr().out


def test_cli_unreadable_trace_exits_2_naming_the_file(tmp_path, capsys):
    write(tmp_path / "t")
    manifest = tmp_path / "t" / "step-000000" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["version"] = 99
    manifest.write_text(json.dumps(data))
    assert main(["replay", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert "manifest.json: version: this rlspec reads version 1, got 99" in err
    assert main(["replay", str(tmp_path / "nothing")]) == 2
    assert "not a trace folder" in capsys.readouterr().err


def test_reader_refuses_a_missing_rank_part(tmp_path):
    write(tmp_path / "t", dp=2)
    (tmp_path / "t" / "step-000000" / "part-dp1-cp0.json").unlink()
    with pytest.raises(TraceError, match="part-dp1-cp0.json: missing"):
        read_trace(tmp_path / "t")


def test_token_loss_without_a_reference_is_checked(tmp_path):
    """A trace with the trainer's per-token loss and no ref_logp (no KL term): the token-loss link compares it
    (PPO at ratio 1 is -A per token, by hand) and names a wrong one."""
    import torch

    from rlspec.trace import TraceRecorder

    for name, scale in (("right", 1.0), ("wrong", 2.0)):
        torch.manual_seed(0)
        B, T = 4, 6
        ids = torch.randint(0, 10, (B, T))
        mask = torch.zeros(B, T, dtype=torch.bool)
        mask[:, 3:] = True
        logp = torch.where(mask, -torch.rand(B, T), 0.0).requires_grad_()
        adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
        rec = TraceRecorder(tmp_path / name, config={"algorithm": "grpo", "loss": "ppo", "agg": "token_mean", "group_size": 4})
        rec.begin_step(0)
        rec.watch("logp", logp)
        token_loss = torch.where(mask, -adv[:, None] * torch.exp(logp - logp.detach()), 0.0)
        loss = token_loss.sum() / mask.sum()
        rec.micro_batch(input_ids=ids, loss_mask=mask, completion_mask=mask, logp=logp, old_logp=logp.detach(),
                        advantages=adv, token_loss=token_loss * scale, loss=loss)
        loss.backward()
        rec.end_step()
    assert rows_of(tmp_path / "right")["trace.token_loss"].status == "pass"
    wrong = rows_of(tmp_path / "wrong")["trace.token_loss"]
    assert wrong.status == "fail" and "token loss" in wrong.message
