"""The rollout side of asynchronous training, on Ray: rollout actors, the weight store they read, and
the pipeline through which the learner asks for batches.

- :class:`WeightStore` (a Ray actor) holds the newest published weights as a Ray object reference and
  its version (the number of learner steps behind them). The learner publishes with ``ray.put`` once
  per step; every actor that needs that version fetches the same object, so the weights travel by
  Ray's object store (one transfer per node, shared memory within a node), never through files.
- :class:`RolloutWorker` (a Ray actor per ``num_actors``) keeps a copy of the policy in
  ``actor_dtype``. For the batch of step ``k`` it asks the store for the newest version, loads it when
  it is newer than its own, samples the step's prompts with the step's seed (the same prompts and
  seed as the synchronous trainer), and records the behaviour log-probs at sampling time.
- :class:`RolloutPipeline` (in the learner's process) admits the batch of step ``k`` to an actor only
  once the learner's version ``v`` satisfies ``k - v <= max_staleness``: an actor that would run
  further ahead waits. The batch then samples with a version ``>= v``, so its staleness is at most the
  bound; its rows carry the version that sampled them.

Placement is Ray's: locally ``ray.init`` starts a private cluster on this machine; with
``ray_address="auto"`` (or ``ray://host:port``) the actors go to the nodes of a running cluster
(docs/async.md shows the multi-node launch).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from refimpl.trainer.config import TrainConfig
from refimpl.trainer.rollout import Batch, derived_seed, generate, sample_prompts
from refimpl.trainer.sources import task_for

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class MissingRay(RuntimeError):
    """Asynchronous mode needs Ray (the ``async`` extra)."""


def require_ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingRay("asynchronous training needs Ray: pip install 'rlspec[async]' (or ray>=2.40)") from exc
    return ray


class WeightStore:
    """The newest published weights: (version, [object ref]) (the ref is wrapped in a list so that Ray
    hands it over as a reference, not as the weights)."""

    def __init__(self) -> None:
        self.version = -1
        self.ref: list[Any] = []

    def publish(self, version: int, ref: list[Any]) -> None:
        if version > self.version:
            self.version, self.ref = version, ref

    def latest(self) -> tuple[int, list[Any]]:
        return self.version, self.ref


class RolloutWorker:
    """One rollout actor: a policy copy in ``actor_dtype`` that samples whole step batches."""

    def __init__(self, config: dict[str, Any], lm: torch.nn.Module, store: Any, index: int) -> None:
        torch.set_num_threads(int(config["actor_threads"]))
        self.cfg = TrainConfig.from_dict(config)
        self.task = task_for(self.cfg)
        self.lm = lm.to(DTYPES[self.cfg.actor_dtype]).eval()
        self.store = store
        self.index = index
        self.version = -1

    def _refresh(self) -> None:
        import ray

        version, ref = ray.get(self.store.latest.remote())
        if version > self.version:
            self.lm.load_state_dict(ray.get(ref[0]))  # copies (and casts) into the actor's parameters
            self.version = version

    def ready(self) -> int:
        """The actor's process id, once it is constructed (the learner's clock starts after every actor is)."""
        return os.getpid()

    def rollout(self, step: int) -> dict[str, Any]:
        """The batch of ``step``: its tensors, the version that sampled it and the seconds it took."""
        t0 = time.perf_counter()
        self._refresh()
        cfg = self.cfg
        prompts = sample_prompts(self.task, cfg.seed, step, cfg.prompts_per_step)
        batch = generate(self.lm, self.task, prompts, group_size=cfg.group_size, temperature=cfg.temperature,
                         max_new_tokens=cfg.max_new_tokens, seed=derived_seed(cfg.seed, step, 0, 0x5A3),
                         device=torch.device("cpu"), behaviour_logp=True, top_k=cfg.top_k, top_p=cfg.top_p,
                         behav_form=cfg.behav_logprobs, support=cfg.keep_sampling_mask)
        fields = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "position_ids", "mask", "rewards",
                                                 "correct", "completion_lengths", "truncated", "behav_logp", "support")}
        return {"step": step, "version": self.version, "actor": self.index, "pid": os.getpid(),
                "gen_s": time.perf_counter() - t0, "prompt_width": batch.prompt_width, **fields}


class RolloutPipeline:
    """The learner's handle on the actors: ``publish`` weights, ``take`` the batch of a step."""

    def __init__(self, cfg: TrainConfig, lm: torch.nn.Module, *, version: int, total_steps: int,
                 ray_address: str | None = None, worker_cls: type | None = None) -> None:
        ray = require_ray()
        self.ray = ray
        self.cfg = cfg
        self.total = total_steps
        self._started_ray = False
        if not ray.is_initialized():
            import logging

            kw: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
            if ray_address:
                ray.init(address=ray_address, **kw)
            else:
                ray.init(num_cpus=max(cfg.num_actors, os.cpu_count() or 1),
                         object_store_memory=256 * 1024 ** 2, **kw)
            self._started_ray = True
        self.store = ray.remote(num_cpus=0)(WeightStore).remote()
        self.publish(version, lm)
        cpu_lm = _cpu_copy(lm)
        # the actor class: RolloutWorker (transformers) or another engine's with its constructor and methods
        # (conformance/frameworks/vllm/rollout.py::VllmRolloutWorker)
        worker = ray.remote(num_cpus=1)(worker_cls or RolloutWorker)
        self.actors = [worker.remote(cfg.to_dict(), cpu_lm, self.store, i) for i in range(cfg.num_actors)]
        ray.get([a.ready.remote() for a in self.actors])
        self.version = version
        self.next_step = version  # the first batch still to admit
        self.pending: dict[int, Any] = {}

    def publish(self, version: int, lm: torch.nn.Module) -> None:
        """Make the weights of ``lm`` the newest version (one ``ray.put``; actors fetch it when they next sample)."""
        state = {k: v.detach().to("cpu", copy=True) for k, v in lm.state_dict().items()}
        self.ray.get(self.store.publish.remote(version, [self.ray.put(state)]))
        self.version = version

    def _admit(self) -> None:
        while self.next_step < self.total and self.next_step - self.version <= self.cfg.max_staleness:
            actor = self.actors[self.next_step % len(self.actors)]
            self.pending[self.next_step] = actor.rollout.remote(self.next_step)
            self.next_step += 1

    def take(self, step: int, device: torch.device) -> tuple[Batch, dict[str, Any]]:
        """The batch of ``step`` (waits for it), with its per-row version and the actor's timing."""
        if step != self.version:
            raise RuntimeError(f"RolloutPipeline.take: step {step} asked at learner version {self.version}")
        self._admit()
        out = self.ray.get(self.pending.pop(step))
        self._admit()  # the actor that just finished may start the next admissible batch at once
        B = out["input_ids"].shape[0]
        tensors = {k: out[k].to(device) for k in ("input_ids", "attention_mask", "position_ids", "mask", "rewards",
                                                  "correct", "completion_lengths", "truncated", "behav_logp")}
        for k in ("behav_check_logits", "behav_check_logits_half", "support"):  # engine_check, keep_sampling_mask
            if out.get(k) is not None:
                tensors[k] = out[k].to(device)
        batch = Batch(prompt_width=out["prompt_width"], behav_version=torch.full((B,), out["version"], dtype=torch.long,
                                                                                  device=device), **tensors)
        staleness = step - out["version"]
        info = {"behav_version": out["version"], "staleness": staleness, "actor": out["actor"], "gen_s": out["gen_s"]}
        info.update(out.get("timings", {}))  # an engine's own timings (weight sync, engine start)
        return batch, info

    def close(self) -> None:
        """Stop the actors (in-flight batches are discarded) and the Ray cluster this pipeline started."""
        for a in self.actors:
            self.ray.kill(a)
        self.ray.kill(self.store)
        self.pending.clear()
        if self._started_ray:
            self.ray.shutdown()


def _cpu_copy(lm: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(lm).to("cpu")


__all__ = ["RolloutPipeline", "RolloutWorker", "WeightStore", "MissingRay", "require_ray", "DTYPES"]
