"""Where a run's task and model come from: the built-in digit task on the tiny random-weight Llama the
configuration describes, or (``TrainConfig.model``, ``prompts``, ``reward``) a local model folder trained on a
prompts file with a reward function (:mod:`refimpl.trainer.prompt_file`). The learner and every rollout actor
build the task from the configuration alone, so that each process scores with the same function."""

from __future__ import annotations

import torch

from refimpl.trainer.config import TrainConfig
from refimpl.trainer.prompt_file import PromptFileTask, load_model, load_reward, load_tokenizer
from refimpl.trainer.task import DigitTask, Task, build_model


def task_for(cfg: TrainConfig) -> Task:
    """The task of a resolved configuration."""
    if cfg.prompts is None:
        return DigitTask(cfg.task, cfg.min_digits, cfg.max_digits)
    return PromptFileTask(cfg.prompts, load_tokenizer(cfg.model), load_reward(cfg.reward), seed=cfg.seed)


def model_for(cfg: TrainConfig, task: Task) -> torch.nn.Module:
    """The initial policy of a resolved configuration: the model folder's weights, or the random-weight Llama
    drawn from the seed."""
    positions = task.prompt_width + int(cfg.max_new_tokens)
    if cfg.model is not None:
        return load_model(cfg.model, min_positions=positions)
    return build_model(hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                       intermediate_size=cfg.intermediate_size, init_std=cfg.init_std,
                       max_positions=max(64, positions), seed=cfg.seed)


__all__ = ["model_for", "task_for"]
