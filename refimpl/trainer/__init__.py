"""The refimpl trainer: RL fine-tuning of a Hugging Face causal LM with the verified refimpl math.

``Trainer(TrainConfig(...)).train()`` samples groups of completions, scores them with a verifiable
reward, computes old and reference log-probs (fused path), advantages (REINFORCE, RLOO, GRPO, PPO with
GAE), the PPO/GSPO/CISPO loss with distributed-exact aggregation, and updates with AdamW; one process
or DDP under ``torchrun``; :class:`AsyncTrainer` takes its batches from Ray rollout actors sampling
with stale weights (bounded by ``max_staleness``) and applies an off-policy correction
(docs/async.md). A per-update hook (``on_step``) receives a :class:`StepRecord`;
``conformance.trainer_verify`` is the hook behind ``rlspec train --verify``.

This package is not part of ``refimpl.__all__`` (it is not a spec'd quantity); import it as
``refimpl.trainer``. It never imports ``oracle`` or ``conformance``.
"""

from refimpl.trainer.async_trainer import AsyncTrainer
from refimpl.trainer.config import TrainConfig
from refimpl.trainer.loop import MicroRecord, RolloutRecord, StepRecord, Trainer, train
from refimpl.trainer.task import DigitTask, build_model, build_tokenizer

__all__ = [
    "TrainConfig",
    "Trainer",
    "AsyncTrainer",
    "StepRecord",
    "MicroRecord",
    "RolloutRecord",
    "train",
    "DigitTask",
    "build_model",
    "build_tokenizer",
]
