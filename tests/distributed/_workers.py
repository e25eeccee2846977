"""What each spawned rank runs for ``test_multiprocess.py``, and the whole-batch data both sides
build from the same seeds (the parent computes the single-process references).

One process group per world size runs every sub-case (process start-up is the cost on 2 cores):

- ``agg``: for every aggregation mode and dtype, a DDP-wrapped model (``nn.Linear``) gives the token
  losses ``softplus(feat @ w + b)``; each rank runs its micro-batches (``no_sync`` for all but the
  last) with ``step_counts`` + ``micro_batch_loss``; recorded: the per-token gradient dL/d(token
  loss) (÷ W, the whole-batch weight), DDP's averaged parameter gradients and the step loss value.
  Layouts: ``general`` (ragged rows, a fully masked row, an empty micro-batch with 0 rows, the last
  rank with zero valid tokens, uneven micro-batch counts) and ``five_one`` (bug-catalogue class 12:
  rank 0 holds 5 valid tokens, rank 1 holds 1, other ranks none).
- ``vp``: vocabulary-parallel log-probs/entropy from logits shards and from hidden + weight shards
  (uneven vocabulary shards, small chunks), values and gradients.
- ``errors``: a rank with a bad shard or ``vocab_start`` makes every rank raise (no hang).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import traceback
from typing import Any

import numpy as np
import torch

MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")
NORM = 6.0
T, D_FEAT = 7, 3
V, D = 13, 5
DTYPES = {"float64": torch.float64, "float32": torch.float32}


# ----------------------------------------------------------------------------------------------
# shared data (deterministic from the world size)
# ----------------------------------------------------------------------------------------------


def agg_batch(world: int, layout: str) -> dict[str, Any]:
    """Whole-batch mask [B, T], features [B, T, D_FEAT], model init, and ``parts[rank]`` = list of
    micro-batches, each a list of row indices."""
    rng = np.random.default_rng(1000 * world + (0 if layout == "general" else 1))
    if layout == "five_one":
        B = max(2, world)
        mask = np.zeros((B, T), dtype=bool)
        mask[0, 1:6] = True  # 5 valid tokens on rank 0
        mask[1, 3] = True  # 1 valid token on rank 1
        parts = [[[0]], [[1]]] + [[[r]] for r in range(2, world)]  # other ranks: one fully masked row
    else:
        B = 3 * world + 1
        lengths = rng.integers(1, T, size=B)
        mask = np.zeros((B, T), dtype=bool)
        for b, n in enumerate(lengths):
            start = int(rng.integers(1, T - n + 1))
            mask[b, start : start + n] = True
        mask[1] = False  # a fully masked row
        rows = list(range(B))
        # the last rank: only fully masked rows (zero valid tokens), and one empty micro-batch
        dead = [B - 1, B - 2]
        mask[dead] = False
        live = [r for r in rows if r not in dead]
        chunks = np.array_split(np.array(live), world - 1) if world > 1 else [np.array(live)]
        parts = []
        for r in range(world - 1 if world > 1 else 1):
            c = chunks[r].tolist()
            k = max(1, len(c) // 3)
            parts.append([c[:k], c[k:]] if r % 2 == 0 else [c[:k], [], c[k:]])  # uneven micro-batch counts
        if world > 1:
            parts.append([[dead[0]], [], [dead[1]]])
        else:
            parts[0].append(dead)
    feat = rng.normal(size=(B, T, D_FEAT))
    feat[~mask] = rng.normal(size=(int((~mask).sum()), D_FEAT)) * 1e3  # masked tokens: large but finite
    return {"mask": mask, "feat": feat, "parts": parts, "w": rng.normal(size=(1, D_FEAT)), "b": rng.normal(size=(1,))}


def token_loss(model: torch.nn.Module, feat: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.softplus(model(feat).squeeze(-1))


def make_model(data: dict[str, Any], dtype: torch.dtype) -> torch.nn.Linear:
    model = torch.nn.Linear(D_FEAT, 1).to(dtype)
    with torch.no_grad():
        model.weight.copy_(torch.as_tensor(data["w"]))
        model.bias.copy_(torch.as_tensor(data["b"]))
    return model


def vp_batch(world: int) -> dict[str, Any]:
    rng = np.random.default_rng(77 + world)
    B = 3
    mask = rng.random((B, T)) < 0.7
    mask[:, 0] = False
    mask[2] = False  # a row with no valid token
    ids = rng.integers(0, V, size=(B, T))
    b, t = np.argwhere(mask)[0]
    ids[b, t], ids[b, -1] = 0, V - 1  # a target on the first and on the last shard
    mask[b, -1] = True
    cuts = np.array_split(np.arange(V), world)
    return {
        "mask": mask,
        "ids": ids,
        "logits": 3.0 * rng.normal(size=(B, T, V)),
        "hidden": rng.normal(size=(B, T, D)),
        "weight": rng.normal(size=(V, D)),
        "g_lp": rng.normal(size=(B, T)),
        "g_ent": rng.normal(size=(B, T)),
        "shards": [(int(c[0]), int(c[-1]) + 1) for c in cuts],
    }


# ----------------------------------------------------------------------------------------------
# the rank's work
# ----------------------------------------------------------------------------------------------


def _agg_case(data: dict[str, Any], mode: str, dtype: torch.dtype, rank: int, world: int, device: torch.device) -> dict[str, Any]:
    import refimpl
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = make_model(data, dtype).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    mask = torch.as_tensor(data["mask"], device=device)
    feat = torch.as_tensor(data["feat"], dtype=dtype, device=device)
    micro = data["parts"][rank]
    counts = refimpl.step_counts([mask[rows] for rows in micro])
    token_grads: dict[int, torch.Tensor] = {}
    step_loss = torch.zeros((), dtype=torch.float64, device=device)
    for i, rows in enumerate(micro):
        sync = i == len(micro) - 1
        with contextlib.nullcontext() if sync else ddp.no_sync():
            tl = token_loss(ddp, feat[rows])
            leaf = tl.detach().requires_grad_()
            loss = refimpl.micro_batch_loss(leaf, mask[rows], counts, mode=mode, norm_length=NORM)
            (g,) = torch.autograd.grad(loss, leaf)
            tl.backward(g)
            step_loss += loss.detach().double()
            for j, row in enumerate(rows):
                token_grads[row] = (g[j] / world).double().cpu()
    torch.distributed.all_reduce(step_loss)
    return {
        "counts": (counts.num_tokens, counts.num_seqs),
        "token_grads": token_grads,
        "weight_grad": model.weight.grad.double().cpu(),
        "bias_grad": model.bias.grad.double().cpu(),
        "loss": float(step_loss) / world,
    }


def _vp_case(data: dict[str, Any], dtype: torch.dtype, rank: int, device: torch.device, tau: float) -> dict[str, Any]:
    import refimpl

    lo, hi = data["shards"][rank]
    mask = torch.as_tensor(data["mask"], device=device)
    ids = torch.as_tensor(data["ids"], device=device)
    g_lp = torch.as_tensor(data["g_lp"], dtype=dtype, device=device)
    g_ent = torch.as_tensor(data["g_ent"], dtype=dtype, device=device)
    out: dict[str, Any] = {}
    shard = torch.as_tensor(data["logits"][:, :, lo:hi], dtype=dtype, device=device).requires_grad_()
    lp = refimpl.vocab_parallel_token_logprobs(shard, ids, mask, vocab_start=lo, temperature=tau, chunk_size=2)
    ent = refimpl.vocab_parallel_token_entropy(shard, mask, temperature=tau, chunk_size=4)
    (d_shard,) = torch.autograd.grad((lp * g_lp + ent * g_ent).sum(), shard)
    out["logits"] = {"lp": lp.detach().double().cpu(), "ent": ent.detach().double().cpu(), "d_logits": d_shard.double().cpu()}
    hidden = torch.as_tensor(data["hidden"], dtype=dtype, device=device).requires_grad_()
    w = torch.as_tensor(data["weight"][lo:hi], dtype=dtype, device=device).requires_grad_()
    lp2, ent2 = refimpl.vocab_parallel_token_logprobs_and_entropy_from_hidden(
        hidden, w, ids, mask, vocab_start=lo, temperature=tau, chunk_size=2, vocab_chunk_size=3)
    d_h, d_w = torch.autograd.grad((lp2 * g_lp + ent2 * g_ent).sum(), (hidden, w))
    lp3 = refimpl.vocab_parallel_token_logprobs_from_hidden(hidden, w, ids, mask, vocab_start=lo, temperature=tau)
    ent3 = refimpl.vocab_parallel_token_entropy_from_hidden(hidden, w, mask, temperature=tau, vocab_chunk_size=2)
    d_h3, d_w3 = torch.autograd.grad((lp3 * g_lp + ent3 * g_ent).sum(), (hidden, w))
    out["hidden"] = {k: v.detach().double().cpu() for k, v in
                     {"lp": lp2, "ent": ent2, "d_hidden": d_h, "d_weight": d_w, "lp_single": lp3, "ent_single": ent3,
                      "d_hidden_single": d_h3, "d_weight_single": d_w3}.items()}
    return out


def _errors_case(data: dict[str, Any], rank: int, world: int, device: torch.device) -> dict[str, str]:
    """Each rank with a bad input of its own: the whole group must raise, not hang."""
    import refimpl

    lo, hi = data["shards"][rank]
    mask = torch.as_tensor(data["mask"], device=device)
    ids = torch.as_tensor(data["ids"], device=device)
    hidden = torch.as_tensor(data["hidden"], device=device)
    seen = {}
    w = torch.as_tensor(data["weight"][lo:hi], device=device)
    if rank == world - 1:
        w = w.clone()
        w[0, 0] = float("nan")
    try:
        refimpl.vocab_parallel_token_logprobs_from_hidden(hidden, w, ids, mask, vocab_start=lo)
        seen["nan_weight"] = "no error"
    except ValueError as exc:
        seen["nan_weight"] = str(exc)
    shard = torch.as_tensor(data["logits"][:, :, lo:hi], device=device)
    try:
        refimpl.vocab_parallel_token_logprobs(shard, ids, mask, vocab_start=-1 if rank == world - 1 else lo)
        seen["bad_vocab_start"] = "no error"
    except (TypeError, ValueError) as exc:
        seen["bad_vocab_start"] = str(exc)
    try:  # shards that do not cover the vocabulary: the hit count is wrong on every rank
        refimpl.vocab_parallel_token_logprobs(shard, ids, mask, vocab_start=lo + (1000 if rank == 0 else 0))
        seen["gap"] = "no error"
    except ValueError as exc:
        seen["gap"] = str(exc)
    counts = refimpl.step_counts([] if rank == 0 else [mask])  # a rank without any micro-batch
    seen["counts_no_masks"] = repr((counts.num_tokens, counts.num_seqs))
    return seen


def run_rank(rank: int, world: int, backend: str, rdzv: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    import torch.distributed as dist

    device = torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=90))
    results: dict[str, Any] = {}
    try:
        for layout in ("general", "five_one"):
            data = agg_batch(world, layout)
            for dname, dtype in DTYPES.items():
                for mode in MODES:
                    results[("agg", layout, dname, mode)] = _agg_case(data, mode, dtype, rank, world, device)
        vp = vp_batch(world)
        for dname, dtype in DTYPES.items():
            for tau in (1.0, 0.7):
                results[("vp", dname, tau)] = _vp_case(vp, dtype, rank, device, tau)
        results[("errors",)] = _errors_case(vp, rank, world, device)
    except BaseException:  # noqa: BLE001 - reported to the parent through the results file
        results["__error__"] = traceback.format_exc()
    finally:
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
