"""Training a local model on your own prompts: ``rlspec train --model DIR --prompts FILE.jsonl --reward SPEC``.

**Model** (``DIR``): any transformers causal-LM folder with its tokenizer (``save_pretrained`` of both), loaded
with ``AutoModelForCausalLM`` in float32 and ``AutoTokenizer``; nothing is downloaded. Completions end at the
tokenizer's ``eos_token_id``; prompts are left-padded (and completions right-padded) with its ``pad_token_id``,
or with the EOS id when it has none.

**Prompts** (``FILE.jsonl``): one JSON object per line, with either ``"prompt"`` (text, tokenized as it is, the
tokenizer's special tokens added) or ``"messages"`` (a chat, ``[{"role": ..., "content": ...}, ...]``,
tokenized with the tokenizer's chat template and its generation prompt). Every other key is a column handed to
the reward function. Each step takes the next ``prompts_per_step`` rows of a shuffled order of the file (a new
shuffle, seeded by the run's seed, each pass over it).

**Reward** (``SPEC``): ``module:function`` (importable, or ``module.py`` in the current directory) or
``path/to/file.py:function``, with TRL's reward-function signature::

    def reward(prompts, completions, completion_ids, **columns) -> list[float]

called once per rollout batch with one entry per completion: ``prompts`` (the row's ``"prompt"`` text or
``"messages"`` list), ``completions`` (the completion decoded with special tokens skipped, up to its EOS),
``completion_ids`` (its token ids through EOS), and each other column of the rows as a list. A completion
whose reward is at least 1 counts as solved (the ``accuracy`` metric).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

RewardFn = Callable[..., Sequence[float]]


def resolve_reward_spec(spec: str, *, cwd: Path | None = None) -> str:
    """``spec`` with its file made absolute (``module:function`` becomes ``/abs/module.py:function`` when
    ``module.py`` is in ``cwd``), so that a rollout actor in another process finds the same function."""
    module, function = _split_reward_spec(spec)
    cwd = cwd or Path.cwd()
    if module.endswith(".py"):
        return f"{(cwd / module).resolve()}:{function}"
    local = cwd / (module.replace(".", "/") + ".py")
    return f"{local.resolve()}:{function}" if local.is_file() else spec


def _split_reward_spec(spec: str) -> tuple[str, str]:
    module, sep, function = spec.rpartition(":")
    if not sep or not module or not function.isidentifier():
        raise ValueError(f"TrainConfig: reward: expected 'module:function' or 'path/to/file.py:function', got {spec!r}")
    return module, function


def load_reward(spec: str) -> RewardFn:
    """The reward function ``spec`` names (see the module docstring); ValueError naming ``reward`` otherwise."""
    module_name, function = _split_reward_spec(spec)
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ValueError(f"TrainConfig: reward: {spec!r}: no file {path}")
        loader_spec = importlib.util.spec_from_file_location(f"rlspec_reward_{path.stem}", path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[loader_spec.name] = module
        loader_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"TrainConfig: reward: {spec!r}: cannot import {module_name!r} ({exc})") from exc
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ValueError(f"TrainConfig: reward: {spec!r}: {module_name} has no function {function!r}")
    return fn


def load_tokenizer(model_dir: str) -> Any:
    """The tokenizer saved in ``model_dir`` (local files only)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def load_model(model_dir: str, *, min_positions: int) -> torch.nn.Module:
    """The causal LM saved in ``model_dir``, in float32 and eval mode; ValueError naming ``model`` when its
    context is shorter than ``min_positions`` (the prompt width plus the completion budget)."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    limit = getattr(lm.config, "max_position_embeddings", None)
    if limit is not None and limit < min_positions:
        raise ValueError(f"TrainConfig: model: {model_dir} has max_position_embeddings {limit}, fewer than the "
                         f"longest prompt plus max_new_tokens ({min_positions})")
    return lm.eval()


class PromptFileTask:
    """The rows of a prompts file, tokenized by the model's tokenizer and scored by a reward function (see the
    module docstring). A prompt is its row index in the file."""

    def __init__(self, prompts_path: str, tokenizer: Any, reward: RewardFn, *, seed: int = 0) -> None:
        self.path = prompts_path
        self.tokenizer = tokenizer
        self.reward = reward
        self.seed = int(seed)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("TrainConfig: model: its tokenizer has no eos_token_id (completions could never end)")
        self.eos_id = int(eos)
        self.pad_id = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else self.eos_id
        self.rows: list[dict[str, Any]] = []
        self.ids: list[list[int]] = []
        for n, line in enumerate(Path(prompts_path).read_text().splitlines(), start=1):
            if not line.strip():
                continue
            where = f"TrainConfig: prompts: {prompts_path}, line {n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc.msg})") from exc
            if not isinstance(row, dict) or ("prompt" in row) == ("messages" in row):
                raise ValueError(f'{where}: expected an object with exactly one of "prompt" (text) or "messages" (a chat)')
            ids = self._tokenize(row, where)
            if not ids:
                raise ValueError(f"{where}: the prompt tokenizes to no tokens")
            self.rows.append(row)
            self.ids.append(ids)
        if not self.rows:
            raise ValueError(f"TrainConfig: prompts: {prompts_path} holds no prompt")
        self.columns = sorted({k for row in self.rows for k in row} - {"prompt", "messages"})

    def _tokenize(self, row: dict[str, Any], where: str) -> list[int]:
        if "prompt" in row:
            if not isinstance(row["prompt"], str):
                raise ValueError(f'{where}: "prompt": expected text, got {type(row["prompt"]).__name__}')
            return list(self.tokenizer(row["prompt"])["input_ids"])
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(f'{where}: "messages" needs a tokenizer with a chat template (this one has none): '
                             'give "prompt" text instead')
        out = self.tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=True)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    @property
    def prompt_width(self) -> int:
        return max(len(ids) for ids in self.ids)

    def sample_prompts(self, n: int, rng: np.random.Generator, step: int = 0) -> list[int]:
        """Rows ``step * n ... step * n + n - 1`` of the run's order: pass ``e`` over the file is the permutation
        drawn from (seed, e). ``rng`` is not used: the order depends on the seed and the step only."""
        N = len(self.rows)
        out = []
        for pos in range(step * n, step * n + n):
            order = np.random.default_rng([self.seed, pos // N]).permutation(N)
            out.append(int(order[pos % N]))
        return out

    def prompt_ids(self, prompt: int) -> list[int]:
        return self.ids[prompt]

    def score_batch(self, prompts: Sequence[int], completions: Sequence[Sequence[int]]) -> tuple[list[float], list[bool]]:
        rows = [self.rows[i] for i in prompts]
        texts = [self.tokenizer.decode([t for t in c if t != self.eos_id], skip_special_tokens=True) for c in completions]
        columns = {k: [row.get(k) for row in rows] for k in self.columns}
        given = [row.get("prompt", row.get("messages")) for row in rows]
        out = self.reward(prompts=given, completions=texts, completion_ids=[list(c) for c in completions], **columns)
        name = getattr(self.reward, "__qualname__", repr(self.reward))
        try:
            rewards = [float(r) for r in out]
        except TypeError as exc:
            raise ValueError(f"reward function {name}: expected a list of {len(rows)} numbers, got {out!r:.200}") from exc
        if len(rewards) != len(rows):
            raise ValueError(f"reward function {name}: returned {len(rewards)} rewards for {len(rows)} completions")
        bad = [i for i, r in enumerate(rewards) if not math.isfinite(r)]
        if bad:
            raise ValueError(f"reward function {name}: reward {rewards[bad[0]]} (not finite) for completion {bad[0]} "
                             f"({texts[bad[0]]!r:.80})")
        return rewards, [r >= 1.0 for r in rewards]


__all__ = ["PromptFileTask", "load_model", "load_reward", "load_tokenizer", "resolve_reward_spec"]
