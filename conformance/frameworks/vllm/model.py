"""The model the vLLM checks run: a tiny random-weight Llama built from a config (no download), saved as a
model folder vLLM loads by path, and the trainer-side forward of the same weights (transformers, float32).

vLLM's CPU attention needs a head size in {32, 64, 80, 96, 112, 128, ...}: 2 heads of 32 on a hidden size
of 64. Weights are drawn with std 0.3 so that the next-token distributions are neither flat nor one-hot
(mean entropy about 2.8 nats over 128 tokens), which gives the top-k / top-p / min-p cuts something to cut.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

VOCAB = 128
MAX_LEN = 64


def build(folder: str | Path, *, seed: int = 0) -> Path:
    """Write the model folder (``config.json`` + ``model.safetensors``, float32) and return its path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=MAX_LEN,
                         initializer_range=0.3, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None, attention_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    folder = Path(folder)
    model.save_pretrained(folder)
    return folder


def forward_logits(folder: str | Path, sequences: list[list[int]], *, weights: str = "float32",
                   compute: str = "float32") -> list[np.ndarray]:
    """The trainer's forward of each sequence (alone, no padding) with the folder's causal LM (any transformers
    ``AutoModelForCausalLM``): logits [len, V] in float64.
    ``weights="bfloat16"`` rounds the weights to bfloat16 first (what a bfloat16 engine holds);
    ``compute="bfloat16"`` runs the whole forward in bfloat16 (what a bfloat16 trainer computes)."""
    import torch

    model = _load(str(folder), weights, compute)
    with torch.no_grad():
        return [model(torch.tensor([seq])).logits[0].double().numpy() for seq in sequences]


@lru_cache(maxsize=4)
def _load(folder: str, weights: str, compute: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    if weights == "bfloat16" or compute == "bfloat16":
        model = model.to(torch.bfloat16)
    if compute == "float32":
        model = model.to(torch.float32)
    return model
