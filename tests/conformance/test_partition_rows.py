"""The ``agg.partition[<mode>]`` rows (conformance/runner/partition.py): the built-in adapters pass every
mode; a third-party ``micro_batched_loss`` with a known normalisation mistake fails and is named;
adapters without the opt-in are ``not implemented``."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import oracle
import refimpl
from conformance.runner.builtin import oracle_adapter, refimpl_adapter
from conformance.runner.run import run, select_records
from conformance.runner.options import RunOptions
from conformance.runner.partition import MODES, partition_row, partition_rows, step_cases


def adapter(name: str, fn=None, array_api: str = "torch", **extra) -> types.SimpleNamespace:
    a = types.SimpleNamespace(name=name, version="0", spec_version="v1", array_api=array_api,
                              dtypes=("float64", "float32"), **extra)
    if fn is not None:
        a.micro_batched_loss = fn
    return a


def per_micro_batch_mean(xs, ms, *, mode, norm_length=None, dp_world_size=1):
    """Each micro-batch normalised by its own counts, divided by the accumulation steps."""
    ga = len(xs) // dp_world_size
    return [refimpl.aggregate(x, m, mode=mode, norm_length=norm_length) / ga for x, m in zip(xs, ms)]


def per_rank_counts(xs, ms, *, mode, norm_length=None, dp_world_size=1):
    """Counts gathered over the rank's own micro-batches only (no all-reduce over ranks)."""
    k = len(xs) // dp_world_size
    out = []
    for r in range(dp_world_size):
        counts = refimpl.step_counts(ms[r * k : (r + 1) * k])
        out += [refimpl.micro_batch_loss(x, m, counts, mode=mode, norm_length=norm_length, dp_world_size=1)
                for x, m in zip(xs[r * k : (r + 1) * k], ms[r * k : (r + 1) * k])]
    return out


def no_world_scale(xs, ms, *, mode, norm_length=None, dp_world_size=1):
    counts = refimpl.step_counts(list(ms))
    return [refimpl.micro_batch_loss(x, m, counts, mode=mode, norm_length=norm_length, dp_world_size=1) for x, m in zip(xs, ms)]


@pytest.mark.parametrize("mode", MODES)
def test_builtin_adapters_pass_every_mode(mode):
    for a in (refimpl_adapter(), oracle_adapter()):
        row = partition_row(a, mode, n_seeds=2)
        assert row.status == "pass", row.message
        assert row.checks == {"invariant:partition": "pass"} and row.n_cases == 2 * 3
        assert row.id == f"agg.partition[{mode}]@{a.name}" and row.spec_id == f"agg.{mode}"


@pytest.mark.parametrize("fn,mode,bug", [
    (per_micro_batch_mean, "token_mean", "bug-catalogue #1"),
    (per_micro_batch_mean, "seq_mean_token_mean", "bug-catalogue #1"),
    (per_rank_counts, "token_mean", "bug-catalogue #12"),
    (no_world_scale, "token_sum", "missing x dp_world_size"),
    (no_world_scale, "seq_mean_token_sum_norm", "missing x dp_world_size"),
])
def test_known_mistakes_fail_and_are_named(fn, mode, bug):
    row = partition_row(adapter("buggy", fn), mode, n_seeds=2)
    assert row.status == "fail" and row.checks["invariant:partition"] == "fail"
    assert "does not give its own whole-batch loss" in row.message
    assert any(bug in c for c in row.consistent_with), row.consistent_with


def test_five_versus_one_case_is_checked():
    step = step_cases("token_mean", 0, n_seeds=0)[-1]
    assert [int(step["mask"][s].sum()) for s in step["slices"]] == [5, 1]
    # the per-rank mistake gives 1/10 and 1/2 instead of 1/6 per token: a failure with only this case
    row = partition_row(adapter("buggy", per_rank_counts), "token_mean", n_seeds=0)
    assert row.status == "fail" and "5 valid tokens on rank 0" in row.message


def test_numpy_adapter_values_and_optional_gradient():
    def values(xs, ms, *, mode, norm_length=None, dp_world_size=1):
        N = sum(float(np.sum(m)) for m in ms)
        S = sum(float(np.shape(m)[0]) for m in ms)
        return [dp_world_size * oracle.aggregate(x, m, mode=mode, norm_length=norm_length, num_tokens=N, num_seqs=S)
                for x, m in zip(xs, ms)]

    def wrong_grad(xs, ms, upstream, **kw):  # ignores the counts and the world size
        return [np.where(m, upstream, 0.0) for m in ms]

    assert partition_row(adapter("np", values, array_api="numpy"), "token_mean", n_seeds=1).status == "pass"
    bad = adapter("np", values, array_api="numpy", micro_batched_loss_grad=wrong_grad)
    row = partition_row(bad, "token_mean", n_seeds=1)
    assert row.status == "fail" and "grad[token_loss]" in row.message


def test_missing_opt_in_and_errors():
    row = partition_row(adapter("none"), "token_mean")
    assert row.status == "not_implemented" and "micro_batched_loss" in row.message

    def boom(xs, ms, **kw):
        raise RuntimeError("framework exploded")

    row = partition_row(adapter("boom", boom), "token_mean")
    assert row.status == "error" and "framework exploded" in row.message
    row = partition_row(adapter("short", lambda xs, ms, **kw: [torch.zeros(())]), "token_mean")
    assert row.status == "error" and "returned 1 losses" in row.message
    rows = partition_rows(adapter("none"), timeout=30.0)
    assert [r.function for r in rows] == [f"agg.partition[{m}]" for m in MODES]


def test_rlspec_check_shows_the_rows_per_mode():
    report = run(["refimpl"], select_records(["agg"]), RunOptions(seed=0, n_seeds=1, timeout=60.0))
    labels = {r.function: r.status for r in report.rows}
    assert all(labels[f"agg.partition[{m}]"] == "pass" for m in MODES)
    from conformance.runner.report import render_table

    table = render_table(report)
    assert "agg.partition[token_mean]" in table and "agg.seq_mean_token_sum_norm" in table
    other = run(["refimpl"], select_records(["adv.gae"]), RunOptions(seed=0, n_seeds=1, timeout=60.0))
    assert not any(r.function.startswith("agg.partition") for r in other.rows)


def test_consistent_non_canonical_normaliser_is_partition_invariant():
    """S = rows with a valid token on the whole step (OpenRLHF's sample level): not canonical, but
    every split gives the same loss; the row passes with a note."""
    def fn(xs, ms, *, mode, norm_length=None, dp_world_size=1):
        N = float(sum(m.sum() for m in ms))
        S = float(sum((m.sum(dim=1) > 0).sum() for m in ms))
        return [dp_world_size * refimpl.aggregate(x, m, mode=mode, norm_length=norm_length, num_tokens=N, num_seqs=S)
                for x, m in zip(xs, ms)]

    row = partition_row(adapter("nonempty", fn), "seq_mean_token_mean", n_seeds=2)
    assert row.status == "pass" and "not the canonical" in row.message
    assert partition_row(adapter("nonempty", fn), "token_mean", n_seeds=2).message == ""


# ---------------------------------------------------------------------------------------------
# the verl and OpenRLHF adapters' micro_batched_loss: plumbing with a fake worker here, the real
# frameworks under the `frameworks` marker
# ---------------------------------------------------------------------------------------------


class FakeWorker:
    """Answers ``agg_loss`` (verl) / ``aggregate_loss`` + ``loss_batch_info`` (OpenRLHF) with the
    formulas agg.md states for them, through refimpl (gradients by autograd)."""

    def call(self, op, arrays, params=None, wrt=None, upstream=None):
        params = params or {}
        if op == "loss_batch_info":
            m = arrays["loss_mask"]
            return {"outputs": {"dp_size": 1, "batch_num_tokens": float(m.sum()),
                                "global_batch_size": float((m.sum(axis=1) > 0).sum())}}
        if op == "agg_loss":
            x, m = torch.tensor(arrays["loss_mat"], requires_grad=True), torch.tensor(arrays["loss_mask"]) > 0
            mode = params["loss_agg_mode"].replace("-", "_")
            loss = params["dp_size"] * refimpl.aggregate(x, m, mode=mode, norm_length=params["loss_scale_factor"],
                                                         num_tokens=params["batch_num_tokens"], num_seqs=params["global_batch_size"])
        else:
            x, m = torch.tensor(arrays["loss"], requires_grad=True), torch.tensor(arrays["loss_mask"]) > 0
            mode = "token_mean" if params["token_level_loss"] else "seq_mean_token_mean"
            loss = params["dp_size"] * refimpl.aggregate(x, m, mode=mode, num_tokens=params["batch_num_tokens"],
                                                         num_seqs=params["global_batch_size"])
        out = {"outputs": {"loss": float(loss)}}
        if wrt:
            (g,) = torch.autograd.grad(loss * upstream["loss"], x)
            out["grads"] = {wrt[0]: g.numpy()}
        return out


def _with_fake_worker(cls):
    a = object.__new__(cls)
    a._worker = FakeWorker()
    a.version = "fake"
    return a


@pytest.mark.parametrize("mode", MODES)
def test_verl_adapter_plumbing(mode):
    from conformance.frameworks.verl.adapter import VerlAdapter

    row = partition_row(_with_fake_worker(VerlAdapter), mode, n_seeds=1)
    assert row.status == "pass", row.message


@pytest.mark.parametrize("mode", MODES)
def test_openrlhf_adapter_plumbing(mode):
    from conformance.frameworks.openrlhf.adapter import OpenRLHFAdapter

    row = partition_row(_with_fake_worker(OpenRLHFAdapter), mode, n_seeds=1)
    if mode in ("token_mean", "seq_mean_token_mean"):
        assert row.status == "pass", row.message
    else:
        assert row.status == "not_implemented" and "OpenRLHF aggregates by token" in row.message


@pytest.mark.frameworks
@pytest.mark.parametrize("name", ["verl", "openrlhf"])
def test_real_frameworks_are_partition_invariant(name):
    from conformance.frameworks import subprocess_worker as sw
    from conformance.runner.loading import load_adapter

    if sw.python_for(name)[0] is None:
        pytest.skip(f"{name} is not installed: run `rlspec frameworks install {name}`")
    rows = {r.function: r for r in partition_rows(load_adapter(name), timeout=300.0)}
    supported = MODES if name == "verl" else ("token_mean", "seq_mean_token_mean")
    for mode in MODES:
        row = rows[f"agg.partition[{mode}]"]
        assert row.status == ("pass" if mode in supported else "not_implemented"), (mode, row.message)
