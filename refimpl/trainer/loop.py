"""The train loop: rollout, scoring (old, reference and value), advantages, then epochs x minibatches x
micro-batches of updates, with a per-update hook that sees the batch and every computed tensor.

Runs on one process, or under ``torchrun`` when ``torch.distributed`` is initialised (the policy is
wrapped in DistributedDataParallel; gloo on CPU, NCCL on GPU). Every rank samples its share of the
step's prompts; rewards (and PPO's advantages, for whitening) are gathered so that advantages equal
those of the whole batch; each update's loss uses the global token and sequence counts of the update
(``step_counts``, one all_reduce) times the world size (``micro_batch_loss``), so DDP's gradient average
of the summed micro-batch backward is exactly the gradient of the whole batch's aggregate.

Determinism: the prompts and the sampling of step ``k`` on rank ``r`` are drawn from seeds derived
from ``(seed, k)`` and ``(seed, k, r)``; the model is initialised from ``seed``. A run resumed from a
checkpoint therefore replays the uninterrupted run exactly (same parameters, bit for bit, on the same
machine and thread count).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import refimpl
from refimpl.trainer import _dist
from refimpl.trainer.checkpoint import load_checkpoint, save_checkpoint
from refimpl.trainer.config import TrainConfig
from refimpl.trainer.correction import Correction, corrected_objective, correction_stats, rollout_correction
from refimpl.trainer.metrics import (
    JsonlWriter,
    MissingPlotDependency,
    plot_curves,
    read_jsonl,
    require_matplotlib,
    summarize,
)
from refimpl.trainer.rollout import Batch, derived_seed, generate, sample_prompts
from refimpl.trainer.step import (
    PolicyModel,
    clip_masks,
    gae_advantages,
    objective_token_loss,
    run_policy,
    sequence_advantages,
)
from refimpl.trainer.sources import model_for, task_for
from refimpl.trainer.task import EOS_ID, PAD_ID, Task

# Config fields a resumed run may change (anything else must match the checkpoint's config).
RESUME_OVERRIDES = ("steps", "out_dir", "checkpoint_every", "keep_checkpoints", "target_reward", "device")


# ------------------------------------------------------------------------------------------------
# What the per-update hook receives
# ------------------------------------------------------------------------------------------------


@dataclass
class MicroRecord:
    """One micro-batch of one update (tensors detached, on CPU; [b, T] unless noted)."""

    rows: tuple[int, int]  # [start, stop) in the rank's rollout batch
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor  # bool
    logp: torch.Tensor  # current policy, as computed by the fused path
    old_logp: torch.Tensor
    ref_logp: torch.Tensor
    advantages: torch.Tensor  # [b] or [b, T], as the loss used them
    entropy: torch.Tensor
    policy_loss: float  # this micro-batch's aggregated objective (global counts, times world size)
    grad_logp: torch.Tensor  # d(total loss)/d logp (the value loss does not depend on logp)
    clipped: dict[str, torch.Tensor]  # "high", "low", "dual" 0/1 masks and the token "ratio"
    values: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    value_loss: float | None = None
    grad_values: torch.Tensor | None = None
    hidden: torch.Tensor | None = None  # [b, T, D] final hidden states (when the hook wants them)
    behav_logp: torch.Tensor | None = None  # asynchronous mode: the actor's log-probs at sampling time
    is_weights: torch.Tensor | None = None  # the rollout correction's constant weights (weighted corrections)
    keep: torch.Tensor | None = None  # bool: the tokens the rejection keeps (weighted corrections)
    cp_columns: torch.Tensor | None = None  # context parallelism: this rank's token columns (the loss's shard)
    support: torch.Tensor | None = None  # keep_sampling_mask: [b, T, V] the sets the tokens were drawn from


@dataclass
class RolloutRecord:
    """The step's rollout on this rank, and what the advantages were computed from."""

    rewards_global: torch.Tensor  # [B_global] every rank's rewards, in rank order
    rank_offset: int  # this rank's first row in the global batch
    input_ids: torch.Tensor
    mask: torch.Tensor
    prompt_width: int
    old_logp: torch.Tensor
    ref_logp: torch.Tensor
    advantages: torch.Tensor  # this rank's advantages ([B] or [B, T])
    old_values: torch.Tensor | None = None
    token_rewards: torch.Tensor | None = None
    advantages_raw: torch.Tensor | None = None  # GAE before whitening
    returns: torch.Tensor | None = None
    behav_logp: torch.Tensor | None = None  # asynchronous mode: log-probs recorded by the actor
    behav_version: torch.Tensor | None = None  # [B] the weights version that sampled each row
    behav_check_logits: torch.Tensor | None = None  # engine_check: the actor's float32 forward of the batch [B, T, V]
    behav_check_logits_half: torch.Tensor | None = None  # ... and its bfloat16 forward
    support: torch.Tensor | None = None  # [B, T, V] the sets the tokens were drawn from (recorded by the actor)
    is_weights: torch.Tensor | None = None
    keep: torch.Tensor | None = None
    # when the hook wants hidden states: the forwards that produced old_logp and ref_logp, and their LM heads
    old_hidden: torch.Tensor | None = None
    ref_hidden: torch.Tensor | None = None
    old_weight: torch.Tensor | None = None
    ref_weight: torch.Tensor | None = None


@dataclass
class StepRecord:
    """Everything about one optimizer update, handed to ``on_step`` after the backward pass(es) and
    before ``optimizer.step()``."""

    step: int
    epoch: int
    minibatch: int
    update: int  # global optimizer-update index
    rank: int
    world_size: int
    config: TrainConfig  # resolved
    num_tokens: float  # global valid tokens of this update (all micro-batches, all ranks)
    num_seqs: float  # global rows of this update
    micro: list[MicroRecord]
    grad_norm: float
    weight: torch.Tensor | None = None  # LM-head weight [V, D] used by the forward (when hidden is captured)
    rollout: RolloutRecord | None = None  # set on the first update of each step
    fused: bool = True  # log-probs through the fused hidden-state path (else from materialised logits)
    prompt_width: int = 0  # columns [0, prompt_width) hold the (left-padded) prompt
    head_grad: torch.Tensor | None = None  # LM-head weight gradient after accumulation and all-reduce, before clipping (with weight)
    eos_id: int = EOS_ID  # the task's end-of-completion token
    pad_id: int = PAD_ID  # ... and its padding token

    @property
    def first_of_step(self) -> bool:
        return self.epoch == 0 and self.minibatch == 0


Hook = Callable[[StepRecord], Any]


def _device(spec: str) -> torch.device:
    if spec == "auto":
        if torch.cuda.is_available():
            import os

            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        return torch.device("cpu")
    return torch.device(spec)


def _cpu(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.detach().to("cpu", copy=True)


# ------------------------------------------------------------------------------------------------
# The trainer
# ------------------------------------------------------------------------------------------------


class Trainer:
    """RL fine-tuning of a causal LM on a verifiable task (see :class:`TrainConfig` for every knob).

    ``model``: a Hugging Face causal LM (default: the config's: ``model``'s folder, or the tiny random-weight
    Llama); ``task``: the prompt sampler and reward (:class:`~refimpl.trainer.task.Task`; default: the config's,
    :func:`~refimpl.trainer.sources.task_for`); ``on_step``: called with
    a :class:`StepRecord` after every update's backward (set ``on_step.wants_hidden = True`` to get the
    final hidden states and LM-head weight too); ``progress``: show a progress bar on rank 0.
    """

    def __init__(self, config: TrainConfig, *, model: torch.nn.Module | None = None, task: Task | None = None,
                 on_step: Hook | None = None, progress: bool = False, log: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg = config.resolved()
        self.rank, self.world = _dist.rank(), _dist.world_size()
        self.cp = cfg.cp_size
        if self.world % self.cp:
            raise ValueError(f"TrainConfig: cp_size: {self.cp} does not divide the world size {self.world}")
        # data-parallel ranks sample different rows; the cp ranks of one group hold the same rows and split the loss
        self.dp, self.dp_rank, self.cp_rank = self.world // self.cp, self.rank // self.cp, self.rank % self.cp
        self.cp_group = _dist.cp_group(self.cp)
        self.rows_per_micro = cfg.rows_per_micro_batch(self.dp)
        self.device = _device(cfg.device)
        self.task = task or task_for(cfg)
        lm = model if model is not None else model_for(cfg, self.task)
        ref_lm = copy.deepcopy(lm)  # the reference: a frozen copy of the initial policy
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derived_seed(cfg.seed, 0x7A1E))
            self.policy = PolicyModel(lm, value_head=cfg.algo == "ppo").to(self.device)
        self.ref = PolicyModel(ref_lm).to(self.device).requires_grad_(False)
        # RL fine-tuning runs without dropout: old, reference and current log-probs are the same function
        self.policy.eval()
        self.ref.eval()
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.model = DDP(self.policy, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        else:
            self.model = self.policy
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=1e-8,
            weight_decay=cfg.weight_decay,
        )
        self.on_step = on_step
        self.progress = progress
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.step = 0
        self.update = 0
        self.elapsed = 0.0
        self.idle = 0.0  # seconds of the loop not spent training: generating (sync) or waiting for a batch (async)
        self.history: list[dict[str, Any]] = []
        self._resumed_from: str | None = None

    # -------------------------------------------------------------------------------------------
    # checkpoints
    # -------------------------------------------------------------------------------------------

    @classmethod
    def resume(cls, path: str, *, overrides: dict[str, Any] | None = None, **kwargs: Any) -> "Trainer":
        """A trainer in the state of the checkpoint at ``path`` (a run directory or a checkpoint)."""
        ck = load_checkpoint(path)
        saved = TrainConfig.from_dict(ck["state"]["config"])
        overrides = dict(overrides or {})
        bad = sorted(k for k, v in overrides.items() if k not in RESUME_OVERRIDES and getattr(saved, k) != v)
        if bad:
            raise ValueError(
                f"resume: {', '.join(bad)}: cannot change on resume (the checkpoint's config holds "
                + ", ".join(f"{k}={getattr(saved, k)!r}" for k in bad) + f"); changeable: {', '.join(RESUME_OVERRIDES)}"
            )
        for k, v in overrides.items():
            setattr(saved, k, v)
        trainer = cls(saved, **kwargs)
        trainer._restore(ck)
        return trainer

    def _restore(self, ck: dict[str, Any]) -> None:
        self.policy.load_state_dict(ck["model"])
        self.ref.load_state_dict(ck["ref_model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        state = ck["state"]
        self.step = int(state["step"])
        self.update = int(state["update"])
        self.elapsed = float(state["elapsed_s"])
        self.idle = float(state.get("idle_s", 0.0))
        torch.set_rng_state(ck["rng"]["torch_cpu"])
        self._resumed_from = str(ck["dir"])
        if self.cfg.out_dir:
            path = Path(self.cfg.out_dir) / "metrics.jsonl"
            if path.exists():
                self.history = [r for r in read_jsonl(path) if r.get("step", -1) < self.step]

    def replica_digest(self) -> int:
        """A 63-bit digest of every parameter's bytes (equal on every DDP rank when replicas agree)."""
        import hashlib

        h = hashlib.blake2b(digest_size=8)
        for name, p in self.policy.state_dict().items():
            h.update(name.encode())
            h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        return int.from_bytes(h.digest(), "little") >> 1

    def check_replicas(self) -> bool:
        """Under DDP: raise when the ranks' parameters differ (bitwise); True otherwise."""
        if self.world == 1:
            return True
        mine = torch.tensor([self.replica_digest()], dtype=torch.int64, device=self.device)
        every = _dist.all_gather_rows(mine).tolist()
        if len(set(every)) != 1:
            raise RuntimeError(f"train: step {self.step}: the DDP replicas' parameters differ (digests {every})")
        return True

    def save(self) -> Path | None:
        """Write a checkpoint of the current state (rank 0 writes; every rank waits for it). Under DDP
        the ranks' parameters are first checked to be bitwise identical."""
        self.check_replicas()
        out = None
        if self.cfg.out_dir and self.rank == 0:
            out = save_checkpoint(
                self.cfg.out_dir, step=self.step, policy=self.policy, ref=self.ref, optimizer=self.optimizer,
                trainer_state={"update": self.update, "elapsed_s": self.elapsed, "idle_s": self.idle, "config": self.cfg.to_dict(),
                               "world_size": self.world, "torch": torch.__version__},
                keep=self.cfg.keep_checkpoints,
            )
        _dist.barrier()
        return out

    # -------------------------------------------------------------------------------------------
    # the loop
    # -------------------------------------------------------------------------------------------

    def train(self, steps: int | None = None, *, stop_after: int | None = None) -> dict[str, Any]:
        """Train until ``steps`` (default: config.steps) steps are done, or for ``stop_after`` more steps
        (to simulate an interrupted run). Returns the summary (also written to summary.json)."""
        cfg = self.cfg
        total = cfg.steps if steps is None else steps
        main = self.rank == 0
        writer = None
        if cfg.out_dir and main:
            Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
            # lines of steps >= the current one are dropped: a fresh run (step 0) starts an empty log, a
            # resumed or continued run keeps the steps before it and replaces any written after its checkpoint
            writer = JsonlWriter(Path(cfg.out_dir) / "metrics.jsonl", resume_step=self.step)
            (Path(cfg.out_dir) / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
        bar = None
        if self.progress and main:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=self.step, desc=f"{cfg.algo}/{cfg.loss}", unit="step", dynamic_ncols=True)
        done = 0
        try:
            while self.step < total and (stop_after is None or done < stop_after):
                t0 = time.perf_counter()
                metrics = self._one_step()
                self.elapsed += time.perf_counter() - t0
                metrics["time_s"] = round(self.elapsed, 3)
                # throughput since the run began: samples trained per second, and the share of the loop the
                # learner spent not training (sampling itself when synchronous, waiting for actors when not)
                metrics["samples_per_s"] = (self.step + 1) * cfg.prompts_per_step * cfg.group_size / max(self.elapsed, 1e-9)
                metrics["learner_idle_frac"] = self.idle / max(self.elapsed, 1e-9)
                self.history.append(metrics)
                if writer is not None:
                    writer.write(metrics)
                self.step += 1
                done += 1
                t1 = time.perf_counter()
                if cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0 and self.step < total:
                    self.save()
                self.elapsed += time.perf_counter() - t1
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.2f}",
                                    kl=f"{metrics['kl_ref']:.3f}", refresh=False)
        finally:
            if bar is not None:
                bar.close()
        if self.step >= total and cfg.out_dir:
            self.save()  # the final state, always
        return self.finish(write=self.step >= total)

    def finish(self, *, write: bool = True) -> dict[str, Any]:
        summary = summarize(self.history, self.cfg.target_reward)
        summary.update({"algo": self.cfg.algo, "loss": self.cfg.loss, "world_size": self.world,
                        "replicas_identical": self.check_replicas() if write else None,
                        "resumed_from": self._resumed_from, "config": self.cfg.to_dict(), **self._summary_extras()})
        if write and self.cfg.out_dir and self.rank == 0:
            out = Path(self.cfg.out_dir)
            (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            try:
                require_matplotlib()
            except MissingPlotDependency as exc:
                self.log(f"[train] no plot: {exc}")
            else:
                plot_curves({f"{self.cfg.algo} ({self.cfg.loss})": self.history}, out / "curves.png",
                            target=self.cfg.target_reward,
                            title=f"rlspec train: {self.cfg.task} {self.cfg.min_digits}-{self.cfg.max_digits} digits")
        return summary

    def _summary_extras(self) -> dict[str, Any]:
        """Entries a subclass adds to the summary (the asynchronous trainer's staleness histogram)."""
        return {}

    # -------------------------------------------------------------------------------------------

    def _score(self, batch: Batch) -> None:
        """old (and value) and reference log-probs, computed micro-batch by micro-batch in exactly the
        partition the first update uses, so the first update's ratio is exactly 1."""
        outs, refs = [], []
        temp = self.cfg.temperature
        with torch.no_grad():
            for start in range(0, batch.size, self.rows_per_micro):
                mb = batch.rows(start, start + self.rows_per_micro)
                args = (mb.input_ids, mb.attention_mask, mb.position_ids, mb.mask, temp,
                        mb.support if self.cfg.keep_sampling_mask else None)
                outs.append(run_policy(self.model, *args))
                refs.append(run_policy(self.ref, *args))
        batch.old_logp = torch.cat([o.logp for o in outs])
        batch.old_entropy = torch.cat([o.entropy for o in outs])
        batch.ref_logp = torch.cat([r.logp for r in refs])
        self._scored = None
        if self.on_step is not None and bool(getattr(self.on_step, "wants_hidden", False)):
            self._scored = dict(old_hidden=_cpu(torch.cat([o.hidden for o in outs])),
                                ref_hidden=_cpu(torch.cat([r.hidden for r in refs])),
                                old_weight=_cpu(self.policy.lm.get_output_embeddings().weight),
                                ref_weight=_cpu(self.ref.lm.get_output_embeddings().weight))
        if self.policy.value_head is not None:
            batch.old_values = torch.cat([o.values for o in outs])

    def _next_batch(self) -> tuple[Batch, dict[str, Any]]:
        """This rank's rollout batch of the current step, and metrics about getting it. Synchronous:
        sampled here with the current weights (the asynchronous trainer takes it from its actors)."""
        cfg = self.cfg
        n_local = cfg.prompts_per_step // self.dp
        prompts = sample_prompts(self.task, cfg.seed, self.step, cfg.prompts_per_step)
        prompts = prompts[self.dp_rank * n_local:(self.dp_rank + 1) * n_local]
        batch = generate(self.policy.lm, self.task, prompts, group_size=cfg.group_size, temperature=cfg.temperature,
                         max_new_tokens=cfg.max_new_tokens, seed=derived_seed(cfg.seed, self.step, self.dp_rank, 0x5A3),
                         device=self.device)
        return batch, {}

    def _one_step(self) -> dict[str, Any]:
        cfg, dev = self.cfg, self.device
        t_wait = time.perf_counter()
        batch, batch_metrics = self._next_batch()
        wait_s = time.perf_counter() - t_wait
        self.idle += wait_s
        self._score(batch)
        correction = None
        if batch.behav_logp is not None:
            correction = rollout_correction(cfg, batch.old_logp, batch.behav_logp, batch.mask)
            if correction is not None:
                batch.is_weights, batch.keep = correction.is_weights, correction.keep
            batch_metrics.update(correction_stats(cfg, batch.old_logp, batch.behav_logp, batch.mask, correction))
        B = batch.size
        rewards_global = _dist.all_gather_dp_rows(batch.rewards, self.cp)
        offset = self.dp_rank * B
        rollout = None
        if cfg.algo == "ppo":
            g = gae_advantages(cfg, batch.rewards, batch.old_logp, batch.ref_logp, batch.old_values, batch.mask)
            batch.advantages, batch.returns = g.advantages, g.returns
        else:
            g = None
            batch.advantages = sequence_advantages(cfg, rewards_global)[offset:offset + B]
        if self.on_step is not None:
            rollout = RolloutRecord(
                rewards_global=_cpu(rewards_global), rank_offset=offset, input_ids=_cpu(batch.input_ids),
                mask=_cpu(batch.mask), prompt_width=batch.prompt_width, old_logp=_cpu(batch.old_logp),
                ref_logp=_cpu(batch.ref_logp), advantages=_cpu(batch.advantages), old_values=_cpu(batch.old_values),
                token_rewards=_cpu(g.token_rewards) if g else None, advantages_raw=_cpu(g.advantages_raw) if g else None,
                returns=_cpu(g.returns) if g else None, behav_logp=_cpu(batch.behav_logp),
                behav_version=_cpu(batch.behav_version), behav_check_logits=_cpu(batch.behav_check_logits),
                behav_check_logits_half=_cpu(batch.behav_check_logits_half), support=_cpu(batch.support),
                is_weights=_cpu(batch.is_weights),
                keep=_cpu(batch.keep),
                **(self._scored or {}),
            )

        # token statistics of the rollout (sums; reduced over ranks below)
        m = batch.mask
        n_tok = m.sum().double()
        k3_ref = refimpl.kl_penalty(batch.old_logp, batch.ref_logp, m, estimator="k3").double().sum()
        k1_ref = refimpl.kl_penalty(batch.old_logp, batch.ref_logp, m, estimator="k1").double().sum()
        ent = batch.old_entropy.double().sum()
        stats = {"n_tok": n_tok, "kl_ref": k3_ref, "kl_ref_k1": k1_ref, "entropy": ent,
                 "correct": batch.correct.double().sum(), "len": batch.completion_lengths.double().sum(),
                 "truncated": batch.truncated.double().sum(), "rows": torch.tensor(float(B), dtype=torch.float64, device=dev)}
        if self.cp_rank:  # the group's rows are counted once, on its CP rank 0
            stats = {k: torch.zeros_like(v) for k, v in stats.items()}
        upd = {k: torch.zeros((), dtype=torch.float64, device=dev) for k in
               ("u_tok", "clip_high", "clip_low", "clip_dual", "ratio_sum", "approx_kl", "policy_loss", "value_loss", "first_ratio_dev")}
        ratio_max = torch.tensor(-math.inf, dtype=torch.float64, device=dev)
        ratio_min = torch.tensor(math.inf, dtype=torch.float64, device=dev)
        grad_norms: list[float] = []

        rows_mb = B // cfg.num_minibatches
        for epoch in range(cfg.epochs):
            for mb_idx in range(cfg.num_minibatches):
                lo = mb_idx * rows_mb
                slices = [(s, s + self.rows_per_micro) for s in range(lo, lo + rows_mb, self.rows_per_micro)]
                if self.cp > 1:
                    tok = self._token_columns(batch.input_ids.shape[1])
                    counts = _dist.cp_step_counts([batch.loss_mask[a:b][:, tok] for a, b in slices], cp_rank=self.cp_rank)
                else:
                    counts = _dist.step_counts([batch.loss_mask[a:b] for a, b in slices])
                self.optimizer.zero_grad(set_to_none=True)
                records: list[MicroRecord] = []
                for j, (a, b) in enumerate(slices):
                    sync = self.world == 1 or j == len(slices) - 1
                    ctx = contextlib.nullcontext() if sync else self.model.no_sync()
                    with ctx:
                        micro_stats, rec = self._micro(batch, a, b, counts, capture=self.on_step is not None)
                    for k, v in micro_stats.items():
                        if k == "ratio_max":
                            ratio_max = torch.maximum(ratio_max, v)
                        elif k == "ratio_min":
                            ratio_min = torch.minimum(ratio_min, v)
                        elif k == "first_ratio_dev":
                            if epoch == 0 and mb_idx == 0:
                                upd[k] = torch.maximum(upd[k], v)
                        else:
                            upd[k] = upd[k] + v
                    if rec is not None:
                        records.append(rec)
                wants_hidden = self.on_step is not None and bool(getattr(self.on_step, "wants_hidden", False))
                # the LM head's accumulated, all-reduced gradient before clipping (a trace's probe)
                head_grad = _cpu(self.policy.lm.get_output_embeddings().weight.grad) if wants_hidden else None
                max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else math.inf
                norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), max_norm)
                if not torch.isfinite(norm):
                    raise FloatingPointError(
                        f"train: step {self.step} epoch {epoch} minibatch {mb_idx}: non-finite gradient norm {float(norm)}"
                    )
                grad_norms.append(float(norm))
                if self.on_step is not None:
                    self.on_step(StepRecord(
                        step=self.step, epoch=epoch, minibatch=mb_idx, update=self.update, rank=self.rank,
                        world_size=self.world, config=cfg, num_tokens=float(counts.num_tokens),
                        num_seqs=float(counts.num_seqs), micro=records, grad_norm=float(norm),
                        weight=_cpu(self.policy.lm.get_output_embeddings().weight) if wants_hidden else None,
                        rollout=rollout if (epoch == 0 and mb_idx == 0) else None, fused=self.policy.fused,
                        prompt_width=batch.prompt_width, head_grad=head_grad, eos_id=self.task.eos_id,
                        pad_id=self.task.pad_id,
                    ))
                self.optimizer.step()
                self.update += 1

        # reduce over ranks: sums, then max/min
        keys = list(stats) + list(upd)
        sums = torch.stack([stats[k] for k in stats] + [upd[k] for k in upd]).to(torch.float64)
        _dist.all_reduce_(sums, "sum")
        S = dict(zip(keys, sums.tolist()))
        ext = torch.stack([ratio_max, -ratio_min, upd["first_ratio_dev"]])
        _dist.all_reduce_(ext, "max")
        r_all = rewards_global.double()
        n_updates = cfg.epochs * cfg.num_minibatches
        tok = max(S["n_tok"], 1.0)
        utok = max(S["u_tok"], 1.0)
        metrics: dict[str, Any] = {
            "step": self.step,
            "reward_mean": float(r_all.mean()),
            "reward_std": float(r_all.std(unbiased=False)) if r_all.numel() > 1 else 0.0,
            "accuracy": S["correct"] / S["rows"],
            "kl_ref": S["kl_ref"] / tok,
            "kl_ref_k1": S["kl_ref_k1"] / tok,
            "entropy": S["entropy"] / tok,
            "completion_len_mean": S["len"] / S["rows"],
            "truncated_frac": S["truncated"] / S["rows"],
            "clip_frac_high": S["clip_high"] / utok,
            "clip_frac_low": S["clip_low"] / utok,
            "clip_frac_dual": S["clip_dual"] / utok,
            "approx_kl_old": S["approx_kl"] / utok,
            "ratio_mean": S["ratio_sum"] / utok,
            "ratio_max": float(ext[0]),
            "ratio_min": float(-ext[1]),
            "first_update_max_ratio_dev": float(ext[2]),
            "policy_loss": S["policy_loss"] / self.world / n_updates,
            "grad_norm": sum(grad_norms) / len(grad_norms),
            "grad_norm_max": max(grad_norms),
            "lr": cfg.lr,
            "updates": self.update,
            "wait_s": wait_s,
            **batch_metrics,
        }
        if cfg.algo == "ppo":
            metrics["value_loss"] = S["value_loss"] / self.world / n_updates
        lens = _dist.all_gather_rows(batch.completion_lengths)
        metrics["completion_len_min"] = int(lens.min())
        metrics["completion_len_max"] = int(lens.max())
        return metrics

    def _micro(self, batch: Batch, a: int, b: int, counts: Any, *, capture: bool) -> tuple[dict[str, torch.Tensor], MicroRecord | None]:
        cfg = self.cfg
        mb = batch.rows(a, b)
        support = mb.support if cfg.keep_sampling_mask else None  # (an engine check may record it alone)
        out = run_policy(self.model, mb.input_ids, mb.attention_mask, mb.position_ids, mb.mask, cfg.temperature,
                         support)
        if capture:
            out.logp.retain_grad()
            if out.values is not None:
                out.values.retain_grad()
        tok = None
        if self.cp > 1:  # the token loss of the whole rows, this rank's token columns of it in the loss
            tok = self._token_columns(mb.input_ids.shape[1])
            ell = objective_token_loss(cfg, out, mb.old_logp, mb.ref_logp, mb.advantages, mb.mask)[:, tok]
            m_tok = mb.mask[:, tok]
            n_s = (refimpl.cp_sequence_counts(m_tok, tok, cp_group=self.cp_group) if cfg.agg == "seq_mean_token_mean"
                   else None)
            policy_loss = _dist.cp_micro_batch_loss(ell, m_tok, counts, mode=cfg.agg, token_columns=tok,
                                                    sequence_counts=n_s, norm_length=cfg.norm_length,
                                                    world_size=self.world)
        elif cfg.correction == "none":
            ell = objective_token_loss(cfg, out, mb.old_logp, mb.ref_logp, mb.advantages, mb.mask)
            policy_loss = _dist.micro_batch_loss(ell, mb.mask, counts, mode=cfg.agg, norm_length=cfg.norm_length,
                                                 dp_world_size=self.world)
        else:
            corr = None if mb.is_weights is None else Correction(mb.is_weights, mb.keep)
            policy_loss = corrected_objective(cfg, out.logp, out.entropy, mb.old_logp, mb.behav_logp, mb.ref_logp,
                                              mb.advantages, mb.mask, corr, counts, self.world)
        loss = policy_loss
        value_loss = None
        if out.values is not None:
            vt = refimpl.value_token_loss(out.values, mb.old_values, mb.returns, mb.mask, clip=cfg.value_clip)
            # over the tokens the policy loss keeps (a rejected token leaves both, and the update's counts)
            value_loss = _dist.micro_batch_loss(vt, mb.loss_mask, counts, mode=cfg.value_agg, norm_length=cfg.norm_length,
                                                dp_world_size=self.world)
            loss = loss + cfg.vf_coef * value_loss
        loss.backward()
        with torch.no_grad():
            masks = clip_masks(cfg, out.logp.detach(), mb.old_logp, mb.advantages, mb.mask)
            m = mb.mask
            if tok is not None:  # statistics over this rank's token columns (summed over the CP group)
                own = torch.zeros(m.shape[1], dtype=torch.bool, device=m.device)
                own[tok] = True
                m = m & own
                masks = {k: torch.where(own, v, torch.zeros_like(v)) for k, v in masks.items()}
            ratio = masks["ratio"].double()
            d = torch.where(m, out.logp.detach().double() - mb.old_logp.double(), 0.0)
            stats = {
                "u_tok": m.sum().double(),
                "clip_high": masks["high"].double().sum(),
                "clip_low": masks["low"].double().sum(),
                "clip_dual": masks["dual"].double().sum(),
                "ratio_sum": ratio.sum(),
                "ratio_max": torch.where(m, ratio, -math.inf).max() if m.any() else torch.tensor(-math.inf, dtype=torch.float64, device=m.device),
                "ratio_min": torch.where(m, ratio, math.inf).min() if m.any() else torch.tensor(math.inf, dtype=torch.float64, device=m.device),
                "approx_kl": refimpl.kl_penalty(out.logp.detach(), mb.old_logp, m, estimator="k3").double().sum(),
                "policy_loss": policy_loss.detach().double(),
                "first_ratio_dev": d.abs().max() if m.any() else torch.zeros((), dtype=torch.float64, device=m.device),
            }
            if value_loss is not None:
                stats["value_loss"] = value_loss.detach().double()
        rec = None
        if capture:
            wants_hidden = bool(getattr(self.on_step, "wants_hidden", False))
            rec = MicroRecord(
                rows=(a, b), input_ids=_cpu(mb.input_ids), attention_mask=_cpu(mb.attention_mask), mask=_cpu(mb.mask),
                logp=_cpu(out.logp), old_logp=_cpu(mb.old_logp), ref_logp=_cpu(mb.ref_logp),
                advantages=_cpu(mb.advantages), entropy=_cpu(out.entropy), policy_loss=float(policy_loss.detach()),
                grad_logp=_cpu(out.logp.grad) if out.logp.grad is not None else torch.zeros_like(_cpu(out.logp)),
                clipped={k: _cpu(v) for k, v in masks.items()},
                values=_cpu(out.values), old_values=_cpu(mb.old_values), returns=_cpu(mb.returns),
                value_loss=None if value_loss is None else float(value_loss.detach()),
                grad_values=_cpu(out.values.grad) if out.values is not None and out.values.grad is not None else None,
                hidden=_cpu(out.hidden) if wants_hidden else None, behav_logp=_cpu(mb.behav_logp),
                is_weights=_cpu(mb.is_weights), keep=_cpu(mb.keep), cp_columns=_cpu(tok), support=_cpu(support),
            )
        return stats, rec

    def _token_columns(self, width: int) -> torch.Tensor:
        """This CP rank's token columns of rows ``width`` columns wide (contiguous shards of the model columns)."""
        cols = refimpl.cp_columns(width, self.cp, self.cp_rank)
        return refimpl.cp_token_columns(cols, width).to(self.device)


def train(config: TrainConfig, **kwargs: Any) -> dict[str, Any]:
    """Build a :class:`Trainer` and train it; returns the summary."""
    progress = kwargs.pop("progress", False)
    return Trainer(config, progress=progress, **kwargs).train()


__all__ = ["Trainer", "StepRecord", "MicroRecord", "RolloutRecord", "train", "RESUME_OVERRIDES"]
