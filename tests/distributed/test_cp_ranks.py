"""Context parallelism on real processes (4 gloo ranks; refimpl.context_parallel): a step's micro-batches
sharded over CP ranks along the sequence, contiguous and zigzag, padded rows and packed rows, every aggregation
mode, under DP 2 × CP 2 and DP 1 × CP 4. Each shard's loss is backpropagated to the logits; the gradient summed
over the ranks and divided by the world size (the data-parallel all-reduce) must equal the float64 oracle's
gradient of the unsharded step's loss (``aggregate`` of ``ppo_token_loss`` of ``token_logprobs`` over the whole
batch, packed sequences as rows of their own), and the ranks' losses summed over the world size that loss.
The workers are in ``_cp_workers.py``."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

import oracle
from tests.distributed import _cp_workers as W

pytestmark = pytest.mark.distributed

WORLD = 4
SPAWN_TIMEOUT_S = 240.0
F64 = dict(rtol=1e-10, atol=1e-12)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    if not torch.distributed.is_gloo_available():
        pytest.skip("gloo is not available")
    tmp = str(tmp_path_factory.mktemp("cp"))
    ctx = mp.start_processes(W.run_rank, args=(WORLD, os.path.join(tmp, "rdzv"), tmp), nprocs=WORLD, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{WORLD} ranks did not finish in {SPAWN_TIMEOUT_S:.0f}s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)
    results = [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=True) for r in range(WORLD)]
    errors = [f"rank {r}:\n{res['__error__']}" for r, res in enumerate(results) if "__error__" in res]
    assert not errors, "\n".join(errors)
    return results


def _whole(data: list[list[dict[str, np.ndarray]]]) -> tuple[dict[str, np.ndarray], list[tuple[int, int, int, int, int]]]:
    """The unsharded step as rows (a packed sequence is a row of its own, its tokens from column 0) and where each
    row came from: (dp, micro-batch, row, first column, last column + 1)."""
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("ids", "logits", "mask", "old_logp", "advantages")}
    where = []
    for d, mbs in enumerate(data):
        for j, mb in enumerate(mbs):
            spans = [(0, a, e) for a, e in zip(mb["cu_seqlens"][:-1], mb["cu_seqlens"][1:])] if "cu_seqlens" in mb \
                else [(i, 0, W.T) for i in range(mb["ids"].shape[0])]
            for i, a, e in spans:
                for k in rows:
                    x = np.zeros_like(mb[k][i, :W.T])
                    x[:e - a] = mb[k][i, a:e]
                    rows[k].append(x)
                where.append((d, j, i, int(a), int(e)))
    return {k: np.stack(v) for k, v in rows.items()}, where


def _reference(data: list[list[dict[str, np.ndarray]]], mode: str) -> tuple[float, list[list[np.ndarray]], float, float]:
    """The oracle's loss of the unsharded step, its gradient w.r.t. every micro-batch's logits, N and S."""
    w, where = _whole(data)
    lp = oracle.token_logprobs(w["logits"], w["ids"], w["mask"])
    ell = oracle.ppo_token_loss(lp, w["old_logp"], w["advantages"], w["mask"], eps_low=W.EPS, eps_high=W.EPS)
    loss = oracle.aggregate(ell, w["mask"], mode=mode, norm_length=W.NORM)
    d_ell = oracle.aggregate_grad(ell, w["mask"], 1.0, mode=mode, norm_length=W.NORM)
    d_lp = oracle.ppo_token_loss_grad(lp, w["old_logp"], w["advantages"], w["mask"], d_ell, eps_low=W.EPS, eps_high=W.EPS)
    d_z = oracle.token_logprobs_grad(w["logits"], w["ids"], w["mask"], d_lp)
    grads = [[np.zeros_like(mb["logits"]) for mb in mbs] for mbs in data]
    for r, (d, j, i, a, e) in enumerate(where):
        grads[d][j][i, a:e] = d_z[r, :e - a]
    return float(loss), grads, float(w["mask"].sum()), float(len(where))


CASES = [(dp, cp, layout, zz, mode) for dp, cp in W.MESHES for layout in W.LAYOUTS for zz in ("contiguous", "zigzag")
         for mode in W.MODES]


@pytest.mark.parametrize("dp,cp,layout,zigzag,mode", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_sharded_step_equals_unsharded(ranks: list[dict[str, Any]], dp: int, cp: int, layout: str, zigzag: str,
                                       mode: str) -> None:
    key = f"{dp}x{cp}/{layout}/{zigzag}/{mode}"
    data = W.case_data(dp, layout)
    loss, grads, N, S = _reference(data, mode)
    world = dp * cp
    got_loss = sum(res[key][f"loss{j}"] for res in ranks for j in range(2)) / world
    np.testing.assert_allclose(got_loss, loss, **F64)
    for rank, res in enumerate(ranks):
        assert (res[key]["num_tokens"], res[key]["num_seqs"]) == (N, S), "counts over DP x CP, sequences once"
        for j in range(2):
            np.testing.assert_allclose(res[key][f"grad{j}"].numpy(), grads[rank // cp][j], **F64,
                                       err_msg=f"rank {rank} micro-batch {j}")

