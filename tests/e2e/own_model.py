"""A local model folder as a user brings one to ``rlspec train --model DIR``: a byte-level BPE tokenizer trained
here on a small corpus (with ``<pad>``, ``<eos>`` and a chat template) and a random-weight Llama over its
vocabulary, both written with ``save_pretrained``. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import torch

CORPUS = ["the cat sat on the mat", "a dog ran in the park", "one two three four five six seven eight nine ten",
          "red green blue yellow", "yes no maybe", "hello world", "answer: 42"] * 4
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def write_model(folder: Path, *, seed: int = 0, hidden_size: int = 32, num_heads: int = 2, tied: bool = False) -> Path:
    """Write the tokenizer and a random-weight 1-layer Llama into ``folder`` (``tied``: its LM head is its input
    embedding, as in Qwen2.5-0.5B or Llama-3.2-1B); returns it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=160, special_tokens=["<pad>", "<eos>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=1, num_attention_heads=num_heads, num_key_value_heads=num_heads,
                         max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=tied)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
