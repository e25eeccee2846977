"""The toy world of the end-to-end runs: a random-weight tiny Llama, a word-level tokenizer built in
memory, and digit-string tasks with a checkable answer and partial credit. Nothing is downloaded.

Vocabulary (14 tokens): ``<pad>`` 0, ``<eos>`` 1, ``<unk>`` 2, ``=`` 3, digits ``0``..``9`` 4..13.
A prompt is the digits followed by ``=`` (``"3 1 4 ="``), left-padded to ``max_digits + 1`` tokens; the
answer is the transformed digits followed by ``<eos>``.

Reward (partial credit, in [0, 1]): with ``c`` the completion's tokens before its first EOS (padding
and ``<unk>`` dropped, as a text decode with ``skip_special_tokens`` drops them) and ``y`` the answer's
digits, ``reward = (#{i < len(y): c[i] == y[i]} + [len(c) == len(y) and an EOS ends c]) / (len(y) + 1)``:
one point per digit in its place plus one for stopping right after the last digit, out of
``len(y) + 1``. Exactly 1 for the exact answer; the stop point makes the length learnable from the
first steps, before the digits are right.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

PAD, EOS, UNK, SEP = "<pad>", "<eos>", "<unk>", "="
PAD_ID, EOS_ID, UNK_ID, SEP_ID = 0, 1, 2, 3
DIGIT0_ID = 4
VOCAB: dict[str, int] = {PAD: PAD_ID, EOS: EOS_ID, UNK: UNK_ID, SEP: SEP_ID, **{str(d): DIGIT0_ID + d for d in range(10)}}
VOCAB_SIZE = len(VOCAB)


class MissingTransformers(RuntimeError):
    """The trainer's model and tokenizer come from transformers (the ``train`` extra)."""


def require_transformers() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingTransformers("training needs transformers: pip install 'rlspec[train]'") from exc


def build_tokenizer():
    """A ``PreTrainedTokenizerFast`` over :data:`VOCAB` (WordLevel, whitespace-split), built in memory."""
    require_transformers()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(dict(VOCAB), unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with single spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left")


def build_model(*, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, intermediate_size: int = 128,
                init_std: float = 0.02, max_positions: int = 64, seed: int = 0):
    """A ``LlamaForCausalLM`` with random weights drawn from ``seed`` (the global RNG is left untouched)."""
    require_transformers()
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        initializer_range=init_std,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=None,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    return model


class Task(Protocol):
    """What the trainer needs of a task (:class:`DigitTask`, or
    :class:`refimpl.trainer.prompt_file.PromptFileTask`): a prompt is any picklable value the task hands out."""

    pad_id: int  # left-pads prompts, right-pads completions
    eos_id: int  # ends a completion (the loss mask covers the completion through it)

    @property
    def prompt_width(self) -> int:
        """Prompts are left-padded to this many tokens."""

    def sample_prompts(self, n: int, rng: np.random.Generator, step: int = 0) -> list[Any]:
        """The ``n`` prompts of rollout step ``step`` (``rng`` is seeded from the run's seed and the step)."""

    def prompt_ids(self, prompt: Any) -> list[int]:
        """The token ids of one prompt (at most ``prompt_width`` of them)."""

    def score_batch(self, prompts: Sequence[Any], completions: Sequence[Sequence[int]]) -> tuple[list[float], list[bool]]:
        """(reward, solved?) of each completion (its token ids through EOS, no padding) of ``prompts[i]``."""


@dataclass(frozen=True)
class DigitTask:
    """Prompts of ``min_digits``..``max_digits`` digits; answer = ``kind`` applied to them."""

    kind: str = "reverse"
    min_digits: int = 3
    max_digits: int = 3
    pad_id = PAD_ID
    eos_id = EOS_ID

    @property
    def prompt_width(self) -> int:
        return self.max_digits + 1

    def answer(self, digits: Sequence[int]) -> list[int]:
        if self.kind == "reverse":
            return list(reversed(digits))
        if self.kind == "sort":
            return sorted(digits)
        if self.kind == "copy":
            return list(digits)
        raise ValueError(f"DigitTask: kind: expected 'reverse', 'sort' or 'copy', got {self.kind!r}")

    def sample_prompts(self, n: int, rng: np.random.Generator, step: int = 0) -> list[list[int]]:
        """``n`` digit lists (each digit 0..9), fresh from ``rng`` at every step."""
        lengths = rng.integers(self.min_digits, self.max_digits + 1, size=n)
        return [[int(d) for d in rng.integers(0, 10, size=int(k))] for k in lengths]

    def prompt_ids(self, digits: Sequence[int]) -> list[int]:
        return [DIGIT0_ID + d for d in digits] + [SEP_ID]

    def prompt_text(self, digits: Sequence[int]) -> str:
        return " ".join(str(d) for d in digits) + " " + SEP

    @staticmethod
    def completion_tokens(ids: Sequence[int]) -> tuple[list[int], bool]:
        """(the completion's token ids before its first EOS with padding and unk dropped, EOS seen?)."""
        out = []
        for t in ids:
            if t == EOS_ID:
                return out, True
            if t not in (PAD_ID, UNK_ID):
                out.append(int(t))
        return out, False

    def score_tokens(self, digits: Sequence[int], completion_ids: Sequence[int]) -> tuple[float, bool]:
        """(reward with partial credit, exact answer?) of one completion given as token ids."""
        target = [DIGIT0_ID + d for d in self.answer(digits)]
        c, stopped = self.completion_tokens(completion_ids)
        matches = sum(1 for i, t in enumerate(target) if i < len(c) and c[i] == t)
        stop = stopped and len(c) == len(target)
        exact = stop and matches == len(target)
        return (matches + stop) / (len(target) + 1), exact

    def score_batch(self, prompts: Sequence[Sequence[int]],
                    completions: Sequence[Sequence[int]]) -> tuple[list[float], list[bool]]:
        """:meth:`score_tokens` of every (prompt, completion) pair: (rewards, exact answers)."""
        scored = [self.score_tokens(d, c) for d, c in zip(prompts, completions, strict=True)]
        return [r for r, _ in scored], [ok for _, ok in scored]

    def score_text(self, prompt_text: str, completion_text: str, *, stopped: bool) -> float:
        """The reward of a completion given as text with its special tokens skipped (what a text-level
        trainer such as TRL hands over); ``stopped``: whether the completion ended with EOS."""
        digits = [int(x) for x in prompt_text.split() if x.isdigit()]
        ids = [VOCAB.get(word, UNK_ID) for word in completion_text.split()]
        if stopped:
            ids.append(EOS_ID)
        return self.score_tokens(digits, ids)[0]


__all__ = ["DigitTask", "Task", "MissingTransformers", "require_transformers", "build_model", "build_tokenizer", "VOCAB", "VOCAB_SIZE", "PAD_ID", "EOS_ID", "SEP_ID", "DIGIT0_ID"]
