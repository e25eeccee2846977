"""vLLM rollout actors for the asynchronous trainer (``rlspec train --async --engine vllm``).

:class:`VllmRolloutWorker` is the Ray actor class the learner's :class:`refimpl.trainer.actors.RolloutPipeline`
starts instead of the transformers :class:`~refimpl.trainer.actors.RolloutWorker` (same constructor, same
``ready`` / ``rollout``): each actor owns a vLLM engine, run in-process by a worker in vLLM's own environment
(``conformance/frameworks/vllm/ops.py``; ``rlspec frameworks install vllm``), on a model folder of its own
(``<out_dir>/engine/actor<i>``). Weights: when the weight store holds a newer version the actor loads it into its
float32 copy of the policy, writes it into the folder (``save_pretrained``, safetensors) and has the running engine
read it (``LLM.collective_rpc("reload_weights")``, no restart); ``timings`` report the write and the reload.
Sampling: the step's prompts (the synchronous trainer's), ``group_size`` requests each, seeded from the step,
temperature ``cfg.temperature`` truncated by ``cfg.top_k`` / ``cfg.top_p`` (none by default), ending at EOS; with
``keep_sampling_mask`` (or ``engine_check`` under truncation) the set each token was drawn from is recorded too;
the behaviour log-probs are vLLM's
``processed_logprobs`` (the log-prob under the distribution each token was drawn from, in the engine's dtype
``actor_dtype``), or with ``engine_logprobs="raw_logprobs"`` vLLM's default raw ones (untempered: wrong at T != 1,
which ``--verify`` reports). With ``engine_check`` the actor also returns its own transformers forward of the batch (float32,
and bfloat16), from which ``--verify`` checks those log-probs against ``logprob.sampling``.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from refimpl.trainer.config import TrainConfig
from refimpl.trainer.rollout import derived_seed, layout_batch, sample_prompts
from refimpl.trainer.sources import task_for


class VllmRolloutWorker:
    """One rollout actor sampling with vLLM (see the module docstring)."""

    def __init__(self, config: dict[str, Any], lm: torch.nn.Module, store: Any, index: int) -> None:
        from conformance.frameworks.vllm.adapter import VllmAdapter

        torch.set_num_threads(int(config["actor_threads"]))
        self.cfg = TrainConfig.from_dict(config)
        self.task = task_for(self.cfg)
        self.lm = lm.to(torch.float32).eval()
        self.store = store
        self.index = index
        self.version = -1
        root = Path(self.cfg.out_dir) / "engine" if self.cfg.out_dir else Path(tempfile.mkdtemp(prefix="rlspec-vllm-"))
        self.folder = root / f"actor{index}"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.engine = VllmAdapter()  # the vLLM worker; AdapterLoadError ("not installed") if there is none
        self.started = False
        self.half: torch.nn.Module | None = None  # engine_check: the bfloat16 copy of the current weights
        self.max_len = self.task.prompt_width + int(self.cfg.max_new_tokens)
        self.timings: dict[str, float] = {}

    def _refresh(self) -> None:
        import ray

        version, ref = ray.get(self.store.latest.remote())
        if version <= self.version:
            return
        t0 = time.perf_counter()
        self.lm.load_state_dict(ray.get(ref[0]))
        self.half = None
        self.lm.save_pretrained(self.folder)
        self.timings["weight_write_s"] = time.perf_counter() - t0
        if self.started:
            self.timings["weight_reload_s"] = self.engine.reload_weights(str(self.folder), version)
        self.version = version

    def ready(self) -> int:
        """The actor's process id, once it is constructed (the learner's clock starts after every actor is)."""
        return os.getpid()

    def rollout(self, step: int) -> dict[str, Any]:
        """The batch of ``step``: its tensors, the version that sampled it, the seconds it took and the engine's
        timings (``engine_start_s`` on the batch that started it, ``weight_write_s``, ``weight_reload_s``)."""
        t0 = time.perf_counter()
        self.timings = {}
        self._refresh()
        cfg = self.cfg
        prompts = sample_prompts(self.task, cfg.seed, step, cfg.prompts_per_step)
        requests = [self.task.prompt_ids(d) for d in prompts for _ in range(cfg.group_size)]
        seed = derived_seed(cfg.seed, step, 0, 0x5A3) % (2 ** 31)
        truncated = cfg.top_k > 0 or cfg.top_p < 1.0
        want_support = cfg.keep_sampling_mask or (cfg.engine_check and truncated)
        out = self.engine.generate(str(self.folder), requests, dtype=cfg.actor_dtype, logprobs_mode=cfg.engine_logprobs,
                                   max_tokens=int(cfg.max_new_tokens), temperature=float(cfg.temperature),
                                   top_k=int(cfg.top_k), top_p=float(cfg.top_p), seed=seed,
                                   stop_token_ids=[self.task.eos_id], weights_version=self.version,
                                   max_model_len=self.max_len, support=want_support)
        self.started = True
        if out["start_s"]:
            self.timings["engine_start_s"] = out["start_s"]
        self.timings["engine_generate_s"] = out["generate_s"]
        n, L = len(requests), int(cfg.max_new_tokens)
        completion = torch.full((n, L), self.task.pad_id, dtype=torch.long)
        behav = torch.zeros((n, L), dtype=torch.float32)
        kept = torch.from_numpy(out["support"]) if want_support else None
        for i, length in enumerate(out["lengths"].tolist()):
            completion[i, :length] = torch.from_numpy(out["token_ids"][i, :length])
            behav[i, :length] = torch.from_numpy(out["logprobs"][i, :length]).float()
        batch = layout_batch(self.task, prompts, cfg.group_size, completion, behav, device=torch.device("cpu"),
                             support=kept)
        fields = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "position_ids", "mask", "rewards",
                                                 "correct", "completion_lengths", "truncated", "behav_logp", "support")}
        if cfg.engine_check:
            fields["behav_check_logits"] = self._forward(self.lm, batch)
            if self.half is None:  # once per weights version, not per batch
                self.half = copy.deepcopy(self.lm).to(torch.bfloat16)
            fields["behav_check_logits_half"] = self._forward(self.half, batch)
        return {"step": step, "version": self.version, "actor": self.index, "pid": os.getpid(),
                "gen_s": time.perf_counter() - t0, "prompt_width": batch.prompt_width, "timings": dict(self.timings),
                **fields}

    @staticmethod
    @torch.no_grad()
    def _forward(lm: torch.nn.Module, batch: Any) -> torch.Tensor:
        """The transformers forward of the batch's left-padded rows: raw logits [B, T, V] in float32."""
        return lm(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                  position_ids=batch.position_ids).logits.float()


__all__ = ["VllmRolloutWorker"]
