"""Real processes: 2 and 4 ranks (gloo on CPU; NCCL with the `gpu` marker when enough GPUs exist)
must give exactly the single-process whole-batch values and gradients.

- every aggregation mode under DDP + gradient accumulation with ``step_counts`` / ``micro_batch_loss``
  (per-token gradients, DDP-averaged parameter gradients, step loss), uneven token counts (5 vs 1
  valid tokens, bug-catalogue class 12), a rank with zero valid tokens, an empty micro-batch;
- vocabulary-parallel log-probs and entropies from logits shards and from hidden + weight shards
  (values, d logits shard, d hidden (all-reduced), d weight shard) against the float64 oracle;
- a bad input on one rank makes every rank raise instead of hanging the group.

float64 must agree to 1e-12; float32 within the tolerance table (``conformance.tolerances``) against
the float64 oracle on the same float32-rounded inputs. One spawn per world size runs every sub-case
(see ``_workers.py``); the spawn is a module-scoped fixture shared by the parametrised tests.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

import oracle
from conformance.tolerances import tolerance
from tests.distributed import _workers as W

pytestmark = pytest.mark.distributed

SPAWN_TIMEOUT_S = 240.0
F64 = dict(rtol=1e-12, atol=1e-12)


def _spawn(world: int, backend: str, tmp: str) -> list[dict[str, Any]]:
    rdzv = os.path.join(tmp, "rdzv")
    ctx = mp.start_processes(W.run_rank, args=(world, backend, rdzv, tmp), nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + SPAWN_TIMEOUT_S
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{world} ranks ({backend}) did not finish in {SPAWN_TIMEOUT_S:.0f}s")
    finally:
        for p in ctx.processes:  # only the processes this test started
            if p.is_alive():
                p.kill()
                p.join(5)
    results = [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=True) for r in range(world)]  # no pickle
    errors = [f"rank {r}:\n{res['__error__']}" for r, res in enumerate(results) if "__error__" in res]
    assert not errors, "\n".join(errors)
    return results


def _available(backend: str, world: int) -> str | None:
    if backend == "gloo":
        return None if torch.distributed.is_gloo_available() else "gloo is not available"
    if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
        return "needs CUDA and NCCL"
    if torch.cuda.device_count() < world:
        return f"needs {world} GPUs (NCCL cannot run two ranks on one device), found {torch.cuda.device_count()}"
    return None


CONFIGS = [
    pytest.param(("gloo", 2), id="gloo-2"),
    pytest.param(("gloo", 4), id="gloo-4"),
    pytest.param(("nccl", 2), id="nccl-2", marks=pytest.mark.gpu),
    pytest.param(("nccl", 4), id="nccl-4", marks=pytest.mark.gpu),
]


@pytest.fixture(scope="module", params=CONFIGS)
def ranks(request, tmp_path_factory):
    backend, world = request.param
    reason = _available(backend, world)
    if reason:
        pytest.skip(reason)
    tmp = str(tmp_path_factory.mktemp(f"{backend}{world}"))
    return world, _spawn(world, backend, tmp)


def _tol(spec_id: str, dtype: str, what: str) -> dict[str, float]:
    if dtype == "float64":
        return F64
    t = tolerance(spec_id, dtype, what)
    return dict(rtol=t.rtol, atol=t.atol)


def _rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64) if dtype == "float32" else x


# ----------------------------------------------------------------------------------------------
# aggregation under DDP + gradient accumulation
# ----------------------------------------------------------------------------------------------


def whole_batch(world: int, layout: str, dtype: str, mode: str) -> dict[str, Any]:
    """Single process, float64, whole batch: token losses by the same model, aggregated by the
    oracle; parameter gradients by the chain rule through the model (autograd)."""
    data = W.agg_batch(world, layout)
    model = W.make_model({**data, "w": _rounded(data["w"], dtype), "b": _rounded(data["b"], dtype)}, torch.float64)
    feat = torch.as_tensor(_rounded(data["feat"], dtype))
    tl = W.token_loss(model, feat)
    x = tl.detach().numpy()
    mask = data["mask"]
    kw = {"mode": mode, "norm_length": W.NORM}
    g = oracle.aggregate_grad(x, mask, 1.0, **kw)
    tl.backward(torch.from_numpy(g))
    return {"loss": oracle.aggregate(x, mask, **kw), "token_grads": g, "weight_grad": model.weight.grad.numpy(),
            "bias_grad": model.bias.grad.numpy(), "counts": (float(mask.sum()), float(mask.shape[0])), "data": data}


@pytest.mark.parametrize("mode", W.MODES)
@pytest.mark.parametrize("dtype", list(W.DTYPES))
@pytest.mark.parametrize("layout", ["general", "five_one"])
def test_aggregation_equals_whole_batch(ranks, layout, dtype, mode):
    world, results = ranks
    ref = whole_batch(world, layout, dtype, mode)
    tol_v, tol_g = _tol("agg", dtype, "value"), _tol("agg", dtype, "grad")
    got = [res[("agg", layout, dtype, mode)] for res in results]
    B = ref["data"]["mask"].shape[0]
    token_grads = np.zeros((B, W.T))
    seen = set()
    for r, g in enumerate(got):
        assert g["counts"] == ref["counts"], f"rank {r}: step_counts {g['counts']} != {ref['counts']}"
        for row, grad in g["token_grads"].items():
            token_grads[row] = grad.numpy()
            seen.add(row)
        # DDP averaged the gradients: every rank holds the whole batch's parameter gradient
        np.testing.assert_allclose(g["weight_grad"].numpy(), ref["weight_grad"], **tol_g, err_msg=f"rank {r} weight grad")
        np.testing.assert_allclose(g["bias_grad"].numpy(), ref["bias_grad"], **tol_g, err_msg=f"rank {r} bias grad")
        np.testing.assert_allclose(g["loss"], ref["loss"], **tol_v, err_msg=f"rank {r} step loss")
    assert seen == set(range(B))
    np.testing.assert_allclose(token_grads, ref["token_grads"], **tol_g, err_msg="dL/d token_loss")
    assert np.all(token_grads[~ref["data"]["mask"]] == 0)


def test_five_versus_one_token_gets_one_sixth_each(ranks):
    """Bug-catalogue class 12: ranks with 5 and 1 valid tokens; under token_mean every token weighs
    1/6 (a per-rank mean averaged by DDP gives 1/10 and 1/2)."""
    world, results = ranks
    mask = W.agg_batch(world, "five_one")["mask"]
    grads = {row: g for res in results for row, g in res[("agg", "five_one", "float64", "token_mean")]["token_grads"].items()}
    np.testing.assert_allclose(grads[0].numpy()[mask[0]], np.full(5, 1 / 6), rtol=1e-15)
    np.testing.assert_allclose(grads[1].numpy()[mask[1]], [1 / 6], rtol=1e-15)


# ----------------------------------------------------------------------------------------------
# vocabulary parallelism
# ----------------------------------------------------------------------------------------------


def _vp_reference(world: int, dtype: str, tau: float) -> dict[str, np.ndarray]:
    data = W.vp_batch(world)
    m, ids = data["mask"], data["ids"]
    z, h, w = (_rounded(data[k], dtype) for k in ("logits", "hidden", "weight"))
    g_lp, g_ent = (_rounded(data[k], dtype) for k in ("g_lp", "g_ent"))
    dh_lp, dw_lp = oracle.token_logprobs_from_hidden_grad(h, w, ids, m, g_lp, temperature=tau)
    dh_ent, dw_ent = oracle.token_entropy_from_hidden_grad(h, w, m, g_ent, temperature=tau)
    return {
        "lp": oracle.token_logprobs(z, ids, m, temperature=tau),
        "ent": oracle.token_entropy(z, m, temperature=tau),
        "d_logits": oracle.token_logprobs_grad(z, ids, m, g_lp, temperature=tau)
        + oracle.token_entropy_grad(z, m, g_ent, temperature=tau),
        "lp_h": oracle.token_logprobs_from_hidden(h, w, ids, m, temperature=tau),
        "ent_h": oracle.token_entropy_from_hidden(h, w, m, temperature=tau),
        "d_hidden": dh_lp + dh_ent,
        "d_weight": dw_lp + dw_ent,
        "shards": data["shards"],
    }


@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("dtype", list(W.DTYPES))
def test_vocab_parallel_logits_shards(ranks, dtype, tau):
    world, results = ranks
    ref = _vp_reference(world, dtype, tau)
    d_logits = np.concatenate([res[("vp", dtype, tau)]["logits"]["d_logits"].numpy() for res in results], axis=2)
    for r, res in enumerate(results):
        got = res[("vp", dtype, tau)]["logits"]
        np.testing.assert_allclose(got["lp"].numpy(), ref["lp"], **_tol("logprob.token", dtype, "value"), err_msg=f"rank {r} lp")
        np.testing.assert_allclose(got["ent"].numpy(), ref["ent"], **_tol("logprob.entropy", dtype, "value"), err_msg=f"rank {r} H")
    np.testing.assert_allclose(d_logits, ref["d_logits"], **_tol("logprob.entropy", dtype, "grad"), err_msg="d logits (shards joined)")


@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("dtype", list(W.DTYPES))
@pytest.mark.parametrize("variant", ["", "_single"])
def test_vocab_parallel_fused_head(ranks, dtype, tau, variant):
    world, results = ranks
    ref = _vp_reference(world, dtype, tau)
    tol_v, tol_g = _tol("logprob.fused", dtype, "value"), _tol("logprob.fused", dtype, "grad")
    d_weight = np.concatenate([res[("vp", dtype, tau)]["hidden"][f"d_weight{variant}"].numpy() for res in results], axis=0)
    np.testing.assert_allclose(d_weight, ref["d_weight"], **tol_g, err_msg="d weight (shards joined)")
    for r, res in enumerate(results):
        got = res[("vp", dtype, tau)]["hidden"]
        np.testing.assert_allclose(got[f"lp{variant}"].numpy(), ref["lp_h"], **tol_v, err_msg=f"rank {r} lp")
        np.testing.assert_allclose(got[f"ent{variant}"].numpy(), ref["ent_h"], **tol_v, err_msg=f"rank {r} H")
        # the backward all-reduced d hidden: every rank holds the full gradient
        np.testing.assert_allclose(got[f"d_hidden{variant}"].numpy(), ref["d_hidden"], **tol_g, err_msg=f"rank {r} d hidden")


def test_bad_input_on_one_rank_raises_on_every_rank(ranks):
    world, results = ranks
    seen = [res[("errors",)] for res in results]
    last = world - 1
    for r, s in enumerate(seen):
        assert "weight_shard: expected finite values" in s["nan_weight"], (r, s["nan_weight"])
        if r == last:
            assert s["bad_vocab_start"].startswith("vocab_parallel_token_logprobs: vocab_start: expected an int >= 0")
        else:
            assert s["bad_vocab_start"].startswith("vocab_parallel_token_logprobs: group: another rank"), s["bad_vocab_start"]
        assert "input_ids: expected token ids in [0, V)" in s["gap"], (r, s["gap"])
    mask = W.vp_batch(world)["mask"]
    expected = (float(mask.sum() * (world - 1)), float(mask.shape[0] * (world - 1)))
    assert all(s["counts_no_masks"] == repr(expected) for s in seen)
