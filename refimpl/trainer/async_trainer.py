"""Asynchronous actor-learner training: the refimpl trainer's learner fed by Ray rollout actors.

:class:`AsyncTrainer` is the :class:`~refimpl.trainer.loop.Trainer` with one change of data source:
the batch of step ``k`` comes from a :class:`~refimpl.trainer.actors.RolloutPipeline` (sampled by an
actor with weights ``v >= k - max_staleness``, behaviour log-probs recorded at sampling), and after
every step the new weights are published to the actors. Everything else is the synchronous learner:
old (proximal) and reference log-probs recomputed with the learner's weights in the partition of the
first update, advantages, the loss with ``TrainConfig.correction``
(:mod:`refimpl.trainer.correction`), the ``on_step`` hook and the checkpoints.

Checkpoints and ``resume``: a checkpoint holds the learner (weights, optimizer, step, clock); actor
versions and in-flight rollouts are not saved. They are *discarded deterministically*: a resumed run
starts a fresh pipeline at the checkpoint's version, so its first batch is sampled with the
checkpoint's weights (staleness 0) and the bound holds from there. With ``max_staleness=0`` every
batch is sampled with the learner's current weights, so a resumed run replays the uninterrupted one
bit for bit (as the synchronous trainer does); with a positive bound the versions that sample each
batch depend on timing, in an uninterrupted run as in a resumed one.

One learner process: asynchronous mode does not combine with ``torchrun`` data parallelism (scale the
sampling with ``num_actors``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from refimpl.trainer.actors import RolloutPipeline
from refimpl.trainer.loop import Trainer
from refimpl.trainer.rollout import Batch


class AsyncTrainer(Trainer):
    """:class:`Trainer` with its batches sampled by Ray actors (``config.asynchronous`` must be True).

    ``ray_address``: None starts a private local Ray cluster for the run; ``"auto"`` (or an address)
    joins a running one, whose nodes then host the actors. ``rollout_worker``: the actor class (default
    :class:`~refimpl.trainer.actors.RolloutWorker`, transformers); another engine's class takes the same
    constructor ``(config_dict, lm, store, index)`` and methods ``ready()`` and ``rollout(step)``."""

    def __init__(self, config: Any, *, ray_address: str | None = None, rollout_worker: type | None = None,
                 **kwargs: Any) -> None:
        if not config.asynchronous:
            raise ValueError("AsyncTrainer: config.asynchronous: expected True (use Trainer for synchronous runs)")
        super().__init__(config, **kwargs)
        if self.world > 1:
            raise ValueError(f"AsyncTrainer: one learner process only, got a world of {self.world} (torchrun); "
                             "scale the sampling with num_actors instead")
        self.ray_address = ray_address
        self.rollout_worker = rollout_worker
        self.pipeline: RolloutPipeline | None = None
        self.staleness_counts: Counter[int] = Counter()

    def train(self, steps: int | None = None, *, stop_after: int | None = None) -> dict[str, Any]:
        total = self.cfg.steps if steps is None else steps
        if stop_after is not None:
            total = min(total, self.step + stop_after)
        self.pipeline = RolloutPipeline(self.cfg, self.policy.lm, version=self.step, total_steps=total,
                                        ray_address=self.ray_address, worker_cls=self.rollout_worker)
        try:
            return super().train(steps, stop_after=stop_after)
        finally:
            self.pipeline.close()
            self.pipeline = None

    def _next_batch(self) -> tuple[Batch, dict[str, Any]]:
        assert self.pipeline is not None, "AsyncTrainer: _next_batch outside train()"
        batch, info = self.pipeline.take(self.step, self.device)
        self.staleness_counts[info["staleness"]] += batch.size
        return batch, info

    def _one_step(self) -> dict[str, Any]:
        metrics = super()._one_step()
        assert self.pipeline is not None
        self.pipeline.publish(self.step + 1, self.policy.lm)  # the weights after this step: version step + 1
        return metrics

    def _summary_extras(self) -> dict[str, Any]:
        # samples per staleness, over this process's steps
        return {"asynchronous": True,
                "staleness_histogram": {int(k): int(v) for k, v in sorted(self.staleness_counts.items())}}


__all__ = ["AsyncTrainer"]
