"""rlspec.trace.TraceRecorder: what it writes, and the errors it raises (naming the method and argument)."""

from __future__ import annotations

import re

import json

import pytest
import torch
from safetensors.torch import load_file

from rlspec.trace import TRACE_FORMAT, TRACE_VERSION, TraceRecorder


def _ids(b=2, t=5):
    return torch.arange(b * t).reshape(b, t) % 7


def _mask(b=2, t=5):
    m = torch.zeros(b, t, dtype=torch.bool)
    m[:, 2:] = True
    return m


def test_writes_header_manifest_parts_and_tensors(tmp_path):
    rec = TraceRecorder(tmp_path, config={"loss": "pg"}, trainer={"name": "mine", "version": "1"})
    rec.begin_step(3)
    for _ in range(2):
        rec.micro_batch(input_ids=_ids(), loss_mask=_mask(), rewards=torch.tensor([1.0, 0.0]), loss=0.5)
    rec.probe("head.weight", torch.ones(4, 3))
    folder = rec.end_step(note="x")
    head = json.loads((tmp_path / "trace.json").read_text())
    assert head == {"format": TRACE_FORMAT, "version": TRACE_VERSION, "trainer": {"name": "mine", "version": "1"}}
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["step"] == 3 and manifest["layout"] == {"dp": 1, "cp": 1, "micro_batches": 2}
    assert manifest["config"] == {"loss": "pg"} and manifest["probe"] == "head.weight"
    part = json.loads((folder / "part-dp0-cp0.json").read_text())
    assert [e["file"] for e in part["micro_batches"]] == ["dp0-cp0-mb0.safetensors", "dp0-cp0-mb1.safetensors"]
    assert part["extra"] == {"note": "x"}
    t = load_file(str(folder / "dp0-cp0-mb1.safetensors"))
    assert torch.equal(t["input_ids"], _ids()) and torch.equal(t["loss_mask"], _mask())
    assert float(t["loss"]) == 0.5
    assert torch.equal(load_file(str(folder / "step.safetensors"))["probe_grad"], torch.ones(4, 3))


def test_watch_records_the_gradient_of_each_micro_batch_and_sums_repeated_backwards(tmp_path):
    rec = TraceRecorder(tmp_path)
    rec.begin_step(0)
    logps = []
    for j in range(2):
        logp = torch.zeros(2, 5, requires_grad=True)
        rec.watch("logp", logp)
        rec.micro_batch(input_ids=_ids(), loss_mask=_mask(), logp=logp)
        loss = (logp * (j + 1)).sum()
        loss.backward(retain_graph=True)
        if j == 1:
            loss.backward()  # a second backward through the same tensor adds up
        logps.append(logp)
    folder = rec.end_step()
    g0 = load_file(str(folder / "dp0-cp0-mb0.safetensors"))["grad_logp"]
    g1 = load_file(str(folder / "dp0-cp0-mb1.safetensors"))["grad_logp"]
    assert torch.equal(g0, torch.ones(2, 5)) and torch.equal(g1, torch.full((2, 5), 4.0))


def test_copies_are_taken_when_handed_over(tmp_path):
    rec = TraceRecorder(tmp_path)
    rec.begin_step(0)
    ids = _ids()
    rec.micro_batch(input_ids=ids, loss_mask=_mask())
    ids += 100  # the trainer reuses its buffer
    folder = rec.end_step()
    assert torch.equal(load_file(str(folder / "dp0-cp0-mb0.safetensors"))["input_ids"], _ids())


def test_only_the_first_rank_writes_the_manifest(tmp_path):
    for dp in (1, 0):
        rec = TraceRecorder(tmp_path, dp_rank=dp, dp_size=2)
        rec.begin_step(0)
        rec.micro_batch(input_ids=_ids(), loss_mask=_mask())
        rec.end_step()
        written = (tmp_path / "step-000000" / "manifest.json").exists()
        assert written == (dp == 0)
    assert (tmp_path / "step-000000" / "part-dp1-cp0.json").exists()


@pytest.mark.parametrize("call, text", [
    (lambda r: r.micro_batch(input_ids=_ids(), loss_mask=_mask()), "TraceRecorder.micro_batch: no step begun"),
    (lambda r: (r.begin_step(0), r.begin_step(1)), "TraceRecorder.begin_step: step 0 was begun"),
    (lambda r: r.begin_step(-1), "TraceRecorder.begin_step: step: expected an int >= 0"),
    (lambda r: (r.begin_step(0), r.micro_batch(input_ids=_ids(), loss_mask=_mask(), logits=torch.zeros(1))),
     "TraceRecorder.micro_batch: logits: not a trace tensor name"),
    (lambda r: (r.begin_step(0), r.micro_batch(input_ids=_ids())), "TraceRecorder.micro_batch: loss_mask: required"),
    (lambda r: (r.begin_step(0), r.micro_batch(input_ids=_ids(), loss_mask=_mask(), logp=[1.0])),
     "TraceRecorder.micro_batch: logp: expected a torch.Tensor"),
    (lambda r: (r.begin_step(0), r.watch("logp", torch.zeros(2))), "TraceRecorder.watch: tensor: logp does not require grad"),
    (lambda r: (r.begin_step(0), r.watch("advantages", torch.zeros(2, requires_grad=True))),
     "TraceRecorder.watch: name: 'advantages' has no gradient tensor"),
    (lambda r: (r.begin_step(0), r.probe("w", None)), "TraceRecorder.probe: grad: w has no gradient"),
    (lambda r: (r.begin_step(0), r.end_step()), "TraceRecorder.end_step: step 0: no micro_batch() recorded"),
    (lambda r: r.lm_head(torch.zeros(3, 2)), "TraceRecorder.lm_head: no step begun"),
    (lambda r: (r.begin_step(0), r.lm_head(torch.zeros(3, 2), role="critic")),
     "TraceRecorder.lm_head: role: 'critic' not one of policy, old, ref"),
    (lambda r: (r.begin_step(0), r.lm_head(torch.zeros(3), role="old")), "TraceRecorder.lm_head: weight: expected a [V, D] tensor"),
])
def test_misuse_raises_naming_method_and_argument(tmp_path, call, text):
    with pytest.raises((ValueError, TypeError, RuntimeError), match=re.escape(text)):
        call(TraceRecorder(tmp_path))


def test_bad_layout_and_config_are_refused(tmp_path):
    with pytest.raises(ValueError, match="TraceRecorder: dp_rank: 2 not in"):
        TraceRecorder(tmp_path, dp_rank=2, dp_size=2)
    with pytest.raises(ValueError, match="TraceRecorder: cp_rank: 1 not in"):
        TraceRecorder(tmp_path, cp_rank=1, cp_size=1)
    with pytest.raises(TypeError, match="TraceRecorder: config: not JSON-serialisable"):
        TraceRecorder(tmp_path, config={"x": object()})
