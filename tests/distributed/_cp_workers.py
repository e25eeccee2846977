"""What each spawned rank runs for ``test_context_parallel.py``, and the data both sides build from the same
seed (the parent computes the unsharded references with the oracle).

Four gloo ranks run two meshes in turn: DP 2 × CP 2 (CP groups {0, 1} and {2, 3}) and DP 1 × CP 4. Each DP rank
holds two micro-batches of the step, the same on its CP ranks: rows of a padded batch, or one packed row of three
sequences (``cu_seqlens``). The logits of a micro-batch are the leaf (float64): a CP rank takes its model columns
(``cp_columns``, contiguous or zigzag), scores its token columns with ``cp_token_logprobs``, applies the PPO clip
token loss written out below (not a refimpl function: the test is about sharding, and the reference is the
oracle's ``ppo_token_loss``), and backpropagates ``cp_micro_batch_loss`` with the counts of ``cp_step_counts``
over the whole world (DP × CP) and, for ``seq_mean_token_mean``, ``cp_sequence_counts`` over its CP group.
Recorded per micro-batch: the logits' gradient summed over the CP group and divided by the world size (what the
data-parallel all-reduce applies), and the rank's loss scalars.
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
NORM = 5.0
V, T = 7, 12
EPS = 0.2
MESHES = ((2, 2), (1, 4))  # (dp, cp)
LAYOUTS = ("rows", "packed")
PACKED_LENGTHS = ((5, 4, 3), (2, 6, 4))  # the sequences of one packed row, per micro-batch


def case_data(dp: int, layout: str) -> list[list[dict[str, np.ndarray]]]:
    """``data[d][j]``: micro-batch ``j`` of DP rank ``d``: ids [b, T], logits [b, T, V], mask [b, T] (False at
    every sequence's first token and at padding), old_logp and advantages [b, T]; ``cu_seqlens`` when packed."""
    rng = np.random.default_rng(7 * dp + (0 if layout == "rows" else 1))
    out = []
    for d in range(dp):
        mbs = []
        for j in range(2):
            if layout == "rows":
                b = 3
                mask = np.zeros((b, T), dtype=bool)
                for i in range(b):
                    start, stop = int(rng.integers(1, 5)), int(rng.integers(6, T + 1))
                    mask[i, start:stop] = rng.random(stop - start) > 0.15
                if d == 0 and j == 1:
                    mask[2] = False  # a fully masked row
                cu = None
            else:
                b = 1
                lengths = PACKED_LENGTHS[j]
                cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
                mask = np.zeros((1, T), dtype=bool)
                for a, e in zip(cu[:-1], cu[1:]):
                    mask[0, a + 1:e] = rng.random(e - a - 1) > 0.1  # every sequence's first token: no prediction
            mb = {"ids": rng.integers(0, V, size=(b, T)), "logits": rng.normal(size=(b, T, V)), "mask": mask,
                  "old_logp": np.log(rng.uniform(0.05, 0.6, size=(b, T))), "advantages": rng.normal(size=(b, T))}
            if cu is not None:
                mb["cu_seqlens"] = cu
            mbs.append(mb)
        out.append(mbs)
    return out


def _ppo_token_loss(lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r = torch.exp(torch.where(mask, lp - old, torch.zeros_like(lp)))
    return torch.where(mask, -torch.minimum(r * adv, r.clamp(1 - EPS, 1 + EPS) * adv), torch.zeros_like(lp))


def _case(data: list[list[dict[str, np.ndarray]]], dp: int, cp: int, zigzag: bool, mode: str, rank: int,
          cp_group: Any) -> dict[str, Any]:
    import refimpl

    d, c = rank // cp, rank % cp
    world = dp * cp
    shards = []
    for mb in data[d]:
        cu = torch.from_numpy(mb["cu_seqlens"]) if "cu_seqlens" in mb else None
        cols = refimpl.cp_columns(T, cp, c, zigzag=zigzag, cu_seqlens=cu)
        tok = refimpl.cp_token_columns(cols, T, cu_seqlens=cu)
        shards.append((mb, cu, cols, tok, torch.from_numpy(mb["mask"])[:, tok]))
    counts = refimpl.cp_step_counts([s[4] for s in shards], cp_rank=c,
                                    seqs_per_mask=[len(s[1]) - 1 if s[1] is not None else s[4].shape[0] for s in shards])
    out: dict[str, Any] = {"num_tokens": counts.num_tokens, "num_seqs": counts.num_seqs}
    for j, (mb, cu, cols, tok, m) in enumerate(shards):
        z = torch.from_numpy(mb["logits"]).clone().requires_grad_(True)
        ids = torch.from_numpy(mb["ids"])
        lp = refimpl.cp_token_logprobs(z[:, cols], ids, m, cols, cu_seqlens=cu)
        ell = _ppo_token_loss(lp, torch.from_numpy(mb["old_logp"])[:, tok], torch.from_numpy(mb["advantages"])[:, tok], m)
        n_s = refimpl.cp_sequence_counts(m, tok, cp_group=cp_group, cu_seqlens=cu) if mode == "seq_mean_token_mean" else None
        loss = refimpl.cp_micro_batch_loss(ell, m, counts, mode=mode, token_columns=tok, sequence_counts=n_s,
                                           cu_seqlens=cu, norm_length=NORM, world_size=world)
        loss.backward()
        grad = z.grad.clone()
        torch.distributed.all_reduce(grad, group=cp_group)
        out[f"grad{j}"] = grad / world
        out[f"loss{j}"] = float(loss.detach())
    return out


def run_rank(rank: int, world: int, rdzv: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=90))
    results: dict[str, Any] = {}
    try:
        for dp, cp in MESHES:
            groups = [dist.new_group(list(range(g * cp, (g + 1) * cp))) for g in range(dp)]  # every rank creates each
            for layout in LAYOUTS:
                data = case_data(dp, layout)
                for zigzag in (False, True):
                    for mode in MODES:
                        key = f"{dp}x{cp}/{layout}/{'zigzag' if zigzag else 'contiguous'}/{mode}"
                        results[key] = _case(data, dp, cp, zigzag, mode, rank, groups[rank // cp])
    except BaseException:  # noqa: BLE001 - reported to the parent through the results file
        results["__error__"] = traceback.format_exc()
    finally:
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
