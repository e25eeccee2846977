"""An rlspec trace of verl 0.9.1's real actor update (``rlspec replay DIR/<scenario>``).

Run in verl's environment, with the rlspec checkout on ``PYTHONPATH``::

    PYTHONPATH=/work/main /root/.cache/rlspec/frameworks/verl/bin/python \\
        conformance/frameworks/verl/recorder.py --out DIR [--scenario NAME ...] [--steps N] [--seed S]

Which update. verl 0.9.1 no longer ships ``verl/workers/actor/dp_actor.py`` (``DataParallelPPOActor``): the
actor update of the PPO trainer is the engine path. ``RayPPOTrainer._update_actor`` (trainer/ppo/ray_trainer.py:1327;
the v1 trainer's ``_update_actor``, trainer/ppo/v1/trainer_base.py:1827, passes the same keys) converts the
``DataProto`` to a no-padding ``TensorDict`` (``left_right_2_no_padding``, workers/utils/padding.py:23), sets
``global_batch_size = mini_batch_size = ppo_mini_batch_size x rollout.n`` (ray_trainer.py:1352-1366) and calls
``ActorRolloutRefWorker.update_actor`` (workers/engine_workers.py:713) -> ``TrainingWorker.train_mini_batch``
(:243, one ``train_batch`` per mini-batch, ``tu.make_iterator`` over ``ppo_epochs``) -> ``BaseEngine.train_batch``
(workers/engine/base.py:113: zero_grad, ``forward_backward_batch``, ``optimizer_step``) on the FSDP engine
``FSDPEngineWithLMHead`` (workers/engine/fsdp/transformer_impl.py). The loss is ``ppo_loss``
(workers/utils/losses.py:57, bound at engine_workers.py:643), which calls ``compute_policy_loss_vanilla``
(trainer/ppo/core_algos.py:1286) and ``agg_loss`` (core_algos.py:1140).

What runs (CPU, one process, offline). The trainer's own functions are called unbound on a stand-in ``self`` that
holds the Hydra config (``verl/trainer/config/ppo_trainer.yaml`` composed with the overrides below) and the real
workers: ``_balance_batch`` (ray_trainer.py:1182; ``trainer.balance_batch`` is on by default), the
``global_token_num`` meta key (:1553), ``_compute_old_log_prob`` (:1290), ``_compute_ref_log_prob`` (:1266, KL
scenario: a second ``ActorRolloutRefWorker`` with role ``ref``), ``compute_advantage`` (:187, GRPO:
``core_algos.compute_grpo_outcome_advantage``, :268) and ``_update_actor``. The workers are built by
``ActorRolloutRefWorker(config.actor_rollout_ref, role="actor").init_model()`` (engine_workers.py:539), which
loads the model from a folder written here: ``refimpl.trainer.task.build_model`` (random-weight
``LlamaForCausalLM``, 2 layers, hidden 32, vocabulary 14, untied head) and ``build_tokenizer``. The batch is built
here as verl's rollout hands it over: prompts left-padded, responses right-padded with the pad token (ending
with EOS or at the response width), ``attention_mask`` = cat(prompt mask, response mask), ``position_ids`` from
``verl.utils.model.compute_position_id_with_mask``, ``response_mask`` = ``compute_response_mask`` (:120), ``uid``
per prompt (the rows of a prompt repeated ``rollout.n`` times, interleaved, as ray_trainer.py:1540 repeats
them); the reward is a rule score placed on each row's last valid response token (``token_level_rewards``).
One batch is 2 prompts x ``rollout.n`` 4 = 8 rows, ``ppo_mini_batch_size`` 2 (one mini-batch: every group is in
the optimizer step, as the advantages link needs), ``ppo_micro_batch_size_per_gpu`` 2 (4 micro-batches per step,
gradient accumulation 4) and ``ppo_epochs`` 2: two optimizer steps on the same rows, the second off-policy (its
ratios move off 1 and the clip acts). ``--steps N`` trains ceil(N / 2) batches.

What had to be set for CPU (none of it changes a value the update computes):

- verl has no CPU platform (verl/plugin/platform: cuda, npu, rocm; without a GPU it falls back to cuda). A
  ``PlatformBase`` for ``cpu`` is registered through verl's own ``PlatformRegistry`` / ``set_platform``
  (plugin/platform/platform_manager.py:29, :150) before verl's workers are imported, and
  ``VERL_ENGINE_DEVICE=cuda`` (workers/engine/base.py:405) selects the FSDP engine, which is registered for cuda
  and npu only (transformer_impl.py:1143). torch.distributed is initialised here: gloo, one rank.
- ``strategy=fsdp2``: FSDP1 (the yaml default, trainer/config/actor/dp_actor.yaml:26) is built with
  ``sync_module_states=True`` (transformer_impl.py:444), which torch refuses for CPU parameters. FSDP2 on one
  rank is the plain model (one shard).
- ``mixed_precision`` fp32 (the default param dtype is bf16, transformer_impl.py:391-398, under ``torch.autocast``),
  ``attn_implementation=eager`` (workers/config/model.py:185 defaults to flash_attention_2) and
  ``use_remove_padding=false`` (trainer/config/model/hf_model.yaml:40 defaults to true, the packed flash-attention
  path): the padded path (transformer_impl.py:1274-1310) feeds each sequence without its left padding.
- ``use_torch_compile=false`` (the entropy is computed eagerly).
- The reference worker (KL scenario): ``ref.fsdp_config.forward_only=false``. A forward-only FSDP2 engine takes
  ``CPUOffloadPolicy(pin_memory=True)`` (transformer_impl.py:459-463), and pinning needs an accelerator; without it
  the engine also builds an optimizer (``ref.optim`` = the actor's settings), which is never stepped. Its weights
  are the same saved initial weights, in fp32.
- The environment: the worker and trainer modules import verl's runtime dependencies beyond the CPU import set of
  ``requirements.txt`` (peft, accelerate, datasets, pandas, pyarrow, pillow, torchdata, cachetools, psutil,
  fastapi, uvicorn); without them the recorder stops at the import.

Where the trace is taken. Every probe calls the original and changes no value.

- The loss function: the worker's ``loss_fn`` (``partial(ppo_loss, config=actor_config)``) is wrapped; one call
  per micro-batch, from ``forward_step`` (transformer_impl.py:1549-1593) inside ``forward_backward_batch``
  (:724), which then calls ``loss.backward()`` on exactly what it returns (:767; no grad scaler in fp32). While
  it runs, ``verl.workers.utils.losses.no_padding_2_padding`` (the name ``ppo_loss`` looks up, losses.py:59, :62)
  is wrapped: its [b, R] result for ``model_output["log_probs"]`` is the tensor the loss differentiates, and a
  tensor hook on it catches d(backward scalar)/d logp; its result for ``model_output["entropy"]`` is the entropy
  (``calculate_entropy=True``). A tensor hook on the returned loss gives c = d(backward scalar)/d(loss) (1 here);
  the trace's ``loss`` is c x loss.
- A forward hook on the final norm ``model.norm`` keeps the hidden states of each forward: the loss forward's
  (``hidden``), the old-log-prob forward's (``old_hidden``, in ``compute_log_prob``'s micro-batch order) and the
  reference's (``ref_hidden``). Each is [b, S, D] with each row's tokens from column 0 (the padded path drops the
  left padding); they go back to the row's attended columns.
- ``engine.optimizer_step`` (transformer_impl.py:788, called by base.py:128 after the mini-batch's last backward,
  before ``fsdp2_clip_grad_norm_``, :808): the probe ``lm_head.weight.grad`` (accumulated, before clipping; one
  rank, nothing to all-reduce) and ``lm_head.weight``; the step ends there.

How verl's tensors map to the trace. verl keeps [b, R] response tensors (``no_padding_2_padding``, padding.py:97:
the log-prob of response token j is the model output at the token before it); with prompts left-padded to P
columns they go to columns P .. P + R - 1 of the [b, T = P + R] ``input_ids``, 0 / False elsewhere: ``logp``,
``grad_logp``, ``entropy``, ``old_logp`` (``old_log_probs``), ``ref_logp`` (``ref_log_prob``), ``advantages`` and
``loss_mask`` (``response_mask``, what ``agg_loss`` counts). ``completion_mask`` = the response columns through
the first EOS, ``prompt_mask`` = the prompt's attended columns. ``row_ids`` = a row's index in the step's
mini-batch (after ``_balance_batch``'s reordering), ``group_ids`` = its ``uid``.

Manifest ``config``: what verl's code says the update computes. ``compute_policy_loss_vanilla``: PPO clip with
``clip_ratio_low`` / ``clip_ratio_high`` (0.2) and the dual clip ``clip_ratio_c`` = 3 for negative advantages
(core_algos.py:1323-1361). ``agg_loss`` with the global batch info ``ppo_loss`` sets (losses.py:65-68):
``batch_num_tokens`` = the mini-batch's loss tokens all-reduced over the data-parallel group
(transformer_impl.py:730-735) and ``global_batch_size`` = ppo_mini_batch_size x n, times ``dp_size`` (1):

- ``token-mean``: Σ_mb masked sum / batch_num_tokens (core_algos.py:1175): ``token_mean`` over the step.
- ``seq-mean-token-mean``: Σ_mb Σ_rows (row token mean) / global_batch_size (:1194-1202): ``seq_mean_token_mean``
  over the step.
- ``seq-mean-token-sum-norm``: Σ_mb Σ_rows (row token sum) / global_batch_size / loss_scale_factor, which is None
  here, so the response width R (``loss_mask.shape[-1]``, :1189-1193; the micro-batch keeps the batch's width):
  ``seq_mean_token_sum_norm``, ``norm_length`` R.

So ``agg_scope`` is ``step`` (one optimizer step = one mini-batch). KL (``use_kl_loss``): ``kl_loss_coef`` x
``agg_loss`` of ``kl_penalty(logp, ref, "low_var_kl")`` in the same mode (losses.py:132-141): k3 with the log-ratio
clamped to ±20 and the value to ±10 (core_algos.py:2239-2245), claimed as ``kl_estimator`` k3 with
``kl_log_ratio_clamp`` 20 and ``kl_clamp`` 10 (where the value clamp binds the gradient is 0). At ``optim.lr`` 0.02
(here) the largest k3 over 4 steps is about 1.6, so the clamps do not act in this scenario.
GRPO: (score - group mean) / (unbiased std + 1e-6) (core_algos.py:268-330). verl's own settings are kept under
``config["verl"]``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import types
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conformance.frameworks.recorder_cli import recorder_main
from rlspec.trace import TraceRecorder

GROUP = 4  # rollout.n
PROMPTS = 2  # prompts per batch = ppo_mini_batch_size: one mini-batch per batch
MICRO = 2  # ppo_micro_batch_size_per_gpu: 4 micro-batches per optimizer step
EPOCHS = 2  # ppo_epochs: every batch trains two optimizer steps; the second one's ratios move off 1
PROMPT_LEN, RESPONSE_LEN = 5, 6
TEMPERATURE = 0.7
LR = 0.02
KL_COEF = 0.1

COMMON: list[str] = [
    f"actor_rollout_ref.rollout.n={GROUP}",
    f"actor_rollout_ref.rollout.temperature={TEMPERATURE}",
    f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={2 * MICRO}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
    f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={MICRO}",
    f"actor_rollout_ref.actor.ppo_epochs={EPOCHS}",
    f"actor_rollout_ref.actor.optim.lr={LR}",
    "actor_rollout_ref.actor.calculate_entropy=true",
    # CPU (see the module docstring)
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "actor_rollout_ref.actor.use_torch_compile=false",
    "actor_rollout_ref.model.use_remove_padding=false",
    "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    "algorithm.adv_estimator=grpo",
]
REF: list[str] = [
    f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={2 * MICRO}",
    "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2",
    "+actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "actor_rollout_ref.ref.use_torch_compile=false",
    # forward_only makes FSDP2 use CPUOffloadPolicy(pin_memory=True) (transformer_impl.py:459-463), which needs an
    # accelerator; without it the engine also builds an optimizer (the actor's settings; the reference never steps)
    "actor_rollout_ref.ref.fsdp_config.forward_only=false",
    "+actor_rollout_ref.ref.optim=${actor_rollout_ref.actor.optim}",
]

SCENARIOS: dict[str, dict[str, Any]] = {
    "token_mean": dict(loss_agg_mode="token-mean"),
    "seq_mean_token_mean": dict(loss_agg_mode="seq-mean-token-mean"),
    "seq_mean_token_sum_norm": dict(loss_agg_mode="seq-mean-token-sum-norm"),
    "token_mean_kl": dict(loss_agg_mode="token-mean", use_kl_loss=True, kl_loss_coef=KL_COEF),
}
AGG = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean",
       "seq-mean-token-sum-norm": "seq_mean_token_sum_norm"}
VERL_KEYS = ("loss_agg_mode", "loss_scale_factor", "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c",
             "use_kl_loss", "kl_loss_coef", "kl_loss_type", "entropy_coeff", "ppo_mini_batch_size",
             "ppo_micro_batch_size_per_gpu", "ppo_epochs", "shuffle", "strategy")


def overrides_of(scenario: str, model_dir: str) -> list[str]:
    """The Hydra overrides of ``scenario`` (on verl's ppo_trainer.yaml)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: {scenario!r} not one of {', '.join(SCENARIOS)}")
    out = [f"actor_rollout_ref.model.path={model_dir}", *COMMON]
    for key, value in SCENARIOS[scenario].items():
        out.append(f"actor_rollout_ref.actor.{key}={str(value).lower() if isinstance(value, bool) else value}")
    if SCENARIOS[scenario].get("use_kl_loss"):
        out += REF
    return out


def claims(actor: Any, *, temperature: float, response_len: int, eos_token_id: int) -> dict[str, Any]:
    """The manifest ``config``: what verl's code says its actor update computes (``actor``: the actor config)."""
    mode = str(actor.loss_agg_mode)
    low = actor.clip_ratio_low if actor.clip_ratio_low is not None else actor.clip_ratio
    high = actor.clip_ratio_high if actor.clip_ratio_high is not None else actor.clip_ratio
    out = {"algorithm": "grpo", "loss": "ppo", "agg": AGG[mode], "agg_scope": "step",
           "eps_low": float(low), "eps_high": float(high), "dual_clip": float(actor.get("clip_ratio_c", 3.0)),
           "kl_coef": float(actor.kl_loss_coef) if actor.use_kl_loss else 0.0, "kl_estimator": "k3",
           "kl_gradient": "estimator", "kl_log_ratio_clamp": 20.0, "kl_clamp": 10.0, "entropy_coef": float(actor.entropy_coeff), "temperature": float(temperature),
           "kl_reward_coef": 0.0, "group_size": GROUP, "grpo_scale": "group", "grpo_std_ddof": 1, "grpo_eps": 1e-6,
           "grad_reduce": "mean", "eos_token_id": int(eos_token_id), "verl": {k: _plain(actor.get(k)) for k in VERL_KEYS}}
    if mode == "seq-mean-token-sum-norm":
        out["norm_length"] = int(actor.loss_scale_factor or response_len)
    return out


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


# -- CPU and one process --------------------------------------------------------------------------------------------

def _setup_process() -> None:
    """Offline, one thread, a CPU platform for verl, and a one-rank gloo process group."""
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(k, "1")
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"  # the FSDP engine's registry key (workers/engine/base.py:405)
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1"),
                 ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "0")):
        os.environ.setdefault(k, v)  # Worker.__init__ reads them (single_controller/base/worker.py:194-203)
    torch.set_num_threads(1)
    _register_cpu_platform()
    if not torch.distributed.is_initialized():
        import socket

        with socket.socket() as sock:  # a free port for the one-rank store
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def _register_cpu_platform() -> None:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform

    if _PLATFORM.get("set"):
        return

    class _CPUDevice(types.ModuleType):
        """torch.cpu plus the memory-statistics calls verl logs (0 on CPU)."""

        def __getattr__(self, name: str) -> Any:
            if hasattr(torch.cpu, name):
                return getattr(torch.cpu, name)
            if name == "mem_get_info":
                return lambda *a, **k: (0, 0)
            if "memory" in name:
                return lambda *a, **k: 0
            if name in ("empty_cache", "reset_peak_memory_stats", "manual_seed", "manual_seed_all", "set_device",
                        "ipc_collect"):
                return lambda *a, **k: None
            raise AttributeError(name)

    device = _CPUDevice("rlspec_verl_cpu")
    device.is_available = lambda: True
    device.current_device = lambda: torch.device("cpu")
    device.device_count = lambda: 1
    device.get_device_name = lambda *a: "CPU"

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = device

        def is_available(self) -> bool: return True
        def current_device(self) -> Any: return torch.device("cpu")
        def device_count(self) -> int: return 1
        def set_device(self, device_index: int) -> None: pass
        def synchronize(self, device_index: int | None = None) -> None: pass
        def manual_seed(self, seed: int) -> None: torch.manual_seed(seed)
        def manual_seed_all(self, seed: int) -> None: torch.manual_seed(seed)
        def set_allocator_settings(self, settings: str) -> None: pass
        def empty_cache(self) -> None: pass
        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]: return None, None
        def communication_backend_name(self) -> str: return "gloo"
        def visible_devices_envvar(self) -> str: return "CUDA_VISIBLE_DEVICES"
        def nvtx_range(self, msg: str) -> Any: return nullcontext()
        def profiler_start(self) -> None: pass
        def profiler_stop(self) -> None: pass
        def ray_resource_name(self) -> str: return "CPU"
        def ray_noset_envvars(self) -> list[str]: return []
        def is_ipc_supported(self) -> bool: return False
        def cudart(self) -> None: return None

    set_platform(PlatformCPU())
    _PLATFORM["set"] = True


_PLATFORM: dict[str, bool] = {}


def _quiet() -> None:
    import logging

    import transformers

    warnings.filterwarnings("ignore")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    for name in ("verl", "torch.distributed", "torch.fx"):
        logging.getLogger(name).setLevel(logging.ERROR)


# -- the batch ------------------------------------------------------------------------------------------------------

def digit_score(response: list[int], digit0: int, response_len: int) -> float:
    """The rule reward of one response: its digit tokens' values summed, over 9 x the response width."""
    return sum(t - digit0 for t in response if digit0 <= t <= digit0 + 9) / (9.0 * response_len)


def make_batch(g: torch.Generator, *, pad: int, eos: int, digit0: int) -> dict[str, Any]:
    """One rollout batch as verl's rollout hands it over (see the module docstring)."""
    B = PROMPTS * GROUP
    prompts = torch.full((B, PROMPT_LEN), pad, dtype=torch.long)
    pmask = torch.zeros(B, PROMPT_LEN, dtype=torch.long)
    for p in range(PROMPTS):
        k = int(torch.randint(2, PROMPT_LEN + 1, (), generator=g))
        ids = torch.randint(digit0, digit0 + 10, (k,), generator=g)
        rows = slice(p * GROUP, (p + 1) * GROUP)  # interleaved repeat: a prompt's n rows are adjacent
        prompts[rows, PROMPT_LEN - k:] = ids
        pmask[rows, PROMPT_LEN - k:] = 1
    responses = torch.full((B, RESPONSE_LEN), pad, dtype=torch.long)
    rmask = torch.zeros(B, RESPONSE_LEN, dtype=torch.long)
    scores = torch.zeros(B)
    for i in range(B):
        n = int(torch.randint(1, RESPONSE_LEN + 1, (), generator=g))
        responses[i, :n] = torch.randint(digit0, digit0 + 10, (n,), generator=g)
        if n < RESPONSE_LEN or bool(torch.rand((), generator=g) < 0.5):
            responses[i, n - 1] = eos  # stopped at EOS; else truncated at the response width
        rmask[i, :n] = 1
        scores[i] = digit_score(responses[i, :n].tolist(), digit0, RESPONSE_LEN)
    uid = np.array([f"prompt-{p}" for p in range(PROMPTS) for _ in range(GROUP)], dtype=object)
    return dict(prompts=prompts, responses=responses, attention_mask=torch.cat([pmask, rmask], 1), scores=scores, uid=uid)


def _full(x: torch.Tensor | None, P: int, T: int, fill: Any = 0) -> torch.Tensor | None:
    """[b, R] response columns -> [b, T] (columns P .. P + R - 1), ``fill`` elsewhere."""
    if x is None:
        return None
    x = x.detach().cpu()
    out = torch.full((x.shape[0], T), fill, dtype=x.dtype)
    out[:, P:P + x.shape[1]] = x
    return out


def _through_eos(responses: torch.Tensor, rmask: torch.Tensor, eos: int) -> torch.Tensor:
    """[b, R] bool: each row's response columns through its first EOS (all its attended ones when it has none)."""
    is_eos = (responses == eos) & rmask
    last = rmask.long().sum(1) - 1
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), last)
    return (torch.arange(responses.shape[1])[None, :] <= first[:, None]) & rmask


def _to_columns(packed: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[b, S, D] hidden states with each row's tokens from column 0 -> [b, T, D] at the row's attended columns."""
    b, T = attention_mask.shape
    out = torch.zeros(b, T, packed.shape[-1], dtype=packed.dtype)
    for i in range(b):
        cols = torch.nonzero(attention_mask[i]).squeeze(1)
        out[i, cols] = packed[i, :cols.numel()]
    return out


def _full_tensor(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu().clone()


# -- the wrappers ---------------------------------------------------------------------------------------------------

class _Capture:
    """The wrappers on the workers and the trace they write (see the module docstring)."""

    def __init__(self, actor_worker: Any, ref_worker: Any, rec: TraceRecorder, *, eos: int) -> None:
        from verl.workers.utils import losses

        self.rec, self.eos, self.losses = rec, eos, losses
        self.actor, self.ref = actor_worker, ref_worker
        engine = actor_worker.actor.engine
        self.module = engine.module
        self.head = self.module.get_output_embeddings().weight
        self.norm_out: list[torch.Tensor] = []
        self.hooks = [self.module.model.norm.register_forward_hook(self._keep_norm)]
        if ref_worker is not None:
            self.ref_module = ref_worker.ref.engine.module
            self.hooks.append(self.ref_module.model.norm.register_forward_hook(self._keep_norm))
        self.original_loss = actor_worker.actor.loss_fn
        actor_worker.actor.loss_fn = self._loss_fn
        self.original_step = engine.optimizer_step
        engine.optimizer_step = self._optimizer_step
        self.batch: dict[str, Any] | None = None  # the current batch, in the order the update sees it
        self.pending: list[dict[str, Any]] = []
        self.in_step = False
        self.step = 0
        self.steps: list[int] = []
        self.step_extra: dict[str, list[Any]] = {}

    def _keep_norm(self, module: Any, args: Any, output: torch.Tensor) -> None:
        self.norm_out.append(output.detach().cpu())

    # -- the batch's forwards before the update ----------------------------------------------------------------------
    def forward_hidden(self, call: Any, attention_mask: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """Run ``call()`` (a log-prob computation) and return its result and its forwards' hidden states [B, T, D]."""
        self.norm_out = []
        out = call()
        chunks, self.norm_out = self.norm_out, []
        rows, pos = [], 0
        for h in chunks:
            rows.append(_to_columns(h, attention_mask[pos:pos + h.shape[0]]))
            pos += h.shape[0]
        if pos != attention_mask.shape[0]:
            raise RuntimeError(f"the log-prob forwards covered {pos} rows of {attention_mask.shape[0]}")
        return out, torch.cat(rows, 0)

    def set_batch(self, batch: Any, old_hidden: torch.Tensor, old_head: torch.Tensor,
                  ref_hidden: torch.Tensor | None, ref_head: torch.Tensor | None) -> None:
        b = batch.batch
        self.batch = {"prompts": b["prompts"].clone(), "responses": b["responses"].clone(),
                      "advantages": b["advantages"].clone(), "scores": b["token_level_rewards"].sum(-1).clone(),
                      "token_rewards": b["token_level_rewards"].clone(),
                      "uid": list(batch.non_tensor_batch["uid"]), "old_hidden": old_hidden, "old_head": old_head,
                      "ref_hidden": ref_hidden, "ref_head": ref_head}

    def _rows_of(self, prompts: torch.Tensor, responses: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        """Each micro-batch row's index in the batch (identical rows are interchangeable for every link)."""
        bt = self.batch
        assert bt is not None, "a micro-batch before any batch"
        rows = []
        for i in range(prompts.shape[0]):
            match = next((j for j in range(bt["prompts"].shape[0]) if j not in self.used
                          and torch.equal(bt["prompts"][j], prompts[i]) and torch.equal(bt["responses"][j], responses[i])
                          and torch.equal(bt["advantages"][j], advantages[i])), None)
            if match is None:
                raise RuntimeError(f"micro-batch row {i} matches no unused row of the batch")
            self.used.add(match)
            rows.append(match)
        return torch.tensor(rows)

    # -- one micro-batch ---------------------------------------------------------------------------------------------
    def _loss_fn(self, model_output: Any, data: Any, dp_group: Any = None) -> Any:
        self._flush()  # the previous micro-batch's backward has run
        if not self.in_step:
            self.rec.begin_step(self.step)
            self.in_step, self.used, self.step_extra = True, set(), {}
        cur: dict[str, Any] = {"hidden_packed": self.norm_out[-1] if self.norm_out else None}
        self.norm_out = []
        original_pad = self.losses.no_padding_2_padding

        def no_padding_2_padding(tensor: torch.Tensor, data_: Any) -> torch.Tensor:
            out = original_pad(tensor, data_)
            if tensor is model_output.get("log_probs") and "logp" not in cur:
                cur["logp"] = out.detach().cpu()
                if out.requires_grad:
                    out.register_hook(lambda g: cur.__setitem__("grad_logp", g.detach().cpu() + cur.get("grad_logp", 0)))
            elif tensor is model_output.get("entropy") and "entropy" not in cur:
                cur["entropy"] = out.detach().cpu()
            return out

        self.losses.no_padding_2_padding = no_padding_2_padding
        try:
            loss, metrics = self.original_loss(model_output=model_output, data=data, dp_group=dp_group)
        finally:
            self.losses.no_padding_2_padding = original_pad
        loss.register_hook(lambda g: cur.__setitem__("scale", g.detach().cpu()))
        get = lambda k: data[k].detach().cpu() if k in data.keys() else None  # noqa: E731
        meta = lambda k: data[k] if k in data.keys() else None  # noqa: E731
        cur.update(loss=loss.detach().cpu(), prompts=get("prompts"), responses=get("responses"),
                   attention_mask=get("attention_mask"), response_mask=get("response_mask"),
                   old_log_probs=get("old_log_probs"), ref_log_prob=get("ref_log_prob"), advantages=get("advantages"),
                   batch_num_tokens=meta("batch_num_tokens"), global_batch_size=meta("global_batch_size"),
                   dp_size=meta("dp_size"))
        self.pending.append(cur)
        return loss, metrics

    def _flush(self) -> None:
        for cur in self.pending:
            self._record(cur)
        self.pending = []

    def _record(self, cur: dict[str, Any]) -> None:
        bt = self.batch
        prompts, responses, am = cur["prompts"], cur["responses"], cur["attention_mask"].bool()
        P, R = prompts.shape[1], responses.shape[1]
        T = P + R
        rmask = cur["response_mask"].bool()
        rows = self._rows_of(prompts, responses, cur["advantages"])
        uid_index = {u: k for k, u in enumerate(dict.fromkeys(bt["uid"]))}
        if "scale" not in cur:
            raise RuntimeError("the micro-batch's loss had no backward")
        c = float(cur["scale"])
        grad = cur.get("grad_logp")
        groups = torch.tensor([uid_index[bt["uid"][j]] for j in rows])
        has_ref = bt["ref_hidden"] is not None and cur["ref_log_prob"] is not None
        self.rec.micro_batch(
            input_ids=torch.cat([prompts, responses], 1), attention_mask=am,
            prompt_mask=torch.cat([am[:, :P], torch.zeros(am.shape[0], R, dtype=torch.bool)], 1),
            completion_mask=_full(_through_eos(responses, rmask, self.eos), P, T, False),
            loss_mask=_full(rmask, P, T, False), logp=_full(cur["logp"], P, T),
            grad_logp=_full(grad if grad is not None else torch.zeros_like(cur["logp"]), P, T),
            entropy=_full(cur.get("entropy"), P, T), old_logp=_full(cur["old_log_probs"], P, T),
            ref_logp=_full(cur["ref_log_prob"], P, T), advantages=_full(cur["advantages"], P, T),
            rewards=bt["scores"][rows], token_rewards=_full(bt["token_rewards"][rows], P, T), row_ids=rows,
            group_ids=groups,
            hidden=_to_columns(cur["hidden_packed"], am) if cur["hidden_packed"] is not None else None,
            old_hidden=bt["old_hidden"][rows],
            ref_hidden=bt["ref_hidden"][rows] if has_ref else None,
            loss=cur["loss"] * c,
        )
        for key, value in (("backward_scale", c), ("loss_fn_value", float(cur["loss"])),
                           ("batch_num_tokens", cur["batch_num_tokens"]), ("global_batch_size", cur["global_batch_size"]),
                           ("dp_size", cur["dp_size"])):
            self.step_extra.setdefault(key, []).append(_plain(value))

    # -- the step's end ----------------------------------------------------------------------------------------------
    def _optimizer_step(self) -> Any:
        self._flush()
        bt = self.batch
        self.rec.probe("lm_head.weight", _full_tensor(self.head.grad), lm_head_weight=_full_tensor(self.head))
        self.rec.lm_head(bt["old_head"], role="old")
        if bt["ref_head"] is not None:
            self.rec.lm_head(bt["ref_head"], role="ref")
        self.rec.end_step(**self.step_extra)
        self.steps.append(self.step)
        self.step += 1
        self.in_step = False
        return self.original_step()

    def close(self) -> None:
        for h in self.hooks:
            h.remove()


def _rollout_batch(raw: dict[str, Any], cfg: Any) -> Any:
    """The ``DataProto`` the trainer holds after rollout and reward (ray_trainer.py:1479-1553): tensors, ``uid``,
    the temperature, ``response_mask`` and the score on each row's last valid response token."""
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_response_mask
    from verl.utils.model import compute_position_id_with_mask

    am = raw["attention_mask"]
    batch = DataProto.from_dict(
        tensors=dict(prompts=raw["prompts"], responses=raw["responses"], attention_mask=am,
                     input_ids=torch.cat([raw["prompts"], raw["responses"]], 1),
                     position_ids=compute_position_id_with_mask(am)),
        non_tensors=dict(uid=raw["uid"]))
    batch.meta_info["temperature"] = cfg.actor_rollout_ref.rollout.temperature
    batch.batch["response_mask"] = compute_response_mask(batch)
    scores = torch.zeros(batch.batch["responses"].shape, dtype=torch.float32)
    scores[torch.arange(scores.shape[0]), batch.batch["response_mask"].sum(1) - 1] = raw["scores"]
    batch.batch["token_level_scores"] = scores
    return batch


def _train_on(batch: Any, trainer: Any, capture: _Capture, cfg: Any, *, use_ref: bool) -> None:
    """The trainer's step on one batch (ray_trainer.py:1549-1690, without a critic or KL in the reward)."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage

    if cfg.trainer.balance_batch:
        RayPPOTrainer._balance_batch(trainer, batch, metrics={})
    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
    am = batch.batch["attention_mask"].bool()
    (old, _), old_hidden = capture.forward_hidden(lambda: RayPPOTrainer._compute_old_log_prob(trainer, batch), am)
    old_head = _full_tensor(capture.head)
    old.batch.pop("entropys")
    batch = batch.union(old)
    ref_hidden = ref_head = None
    if use_ref:
        ref, ref_hidden = capture.forward_hidden(lambda: RayPPOTrainer._compute_ref_log_prob(trainer, batch), am)
        ref_head = _full_tensor(capture.ref_module.get_output_embeddings().weight)
        batch = batch.union(ref)
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    algo = cfg.algorithm
    batch = compute_advantage(batch, adv_estimator=algo.adv_estimator, gamma=algo.gamma, lam=algo.lam, num_repeat=GROUP,
                              norm_adv_by_std_in_grpo=algo.get("norm_adv_by_std_in_grpo", True), config=algo)
    capture.set_batch(batch, old_hidden, old_head, ref_hidden, ref_head)
    RayPPOTrainer._update_actor(trainer, batch)


# -- one scenario ---------------------------------------------------------------------------------------------------

def record(out_dir: str | os.PathLike[str], scenario: str, steps: int = 2, seed: int = 0) -> Path:
    """Run verl's actor update for ``steps`` optimizer steps (rounded up to a multiple of ppo_epochs) under
    ``SCENARIOS[scenario]`` and write the trace to ``out_dir/scenario``; returns that folder."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: {scenario!r} not one of {', '.join(SCENARIOS)}")
    with tempfile.TemporaryDirectory(prefix="rlspec-verl-") as tmp:
        _setup_process()
        _quiet()
        import verl
        from hydra import compose, initialize_config_dir
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.engine_workers import ActorRolloutRefWorker

        from refimpl.trainer.task import DIGIT0_ID, EOS_ID, PAD_ID, build_model, build_tokenizer

        model_dir = os.path.join(tmp, "model")
        build_model(hidden_size=32, intermediate_size=64, seed=seed).save_pretrained(model_dir)
        build_tokenizer().save_pretrained(model_dir)
        with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                                   version_base=None):
            cfg = compose("ppo_trainer", overrides=overrides_of(scenario, model_dir) +
                          [f"actor_rollout_ref.actor.optim.total_training_steps={max(steps, 1)}"])
        actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
        torch.manual_seed(seed)
        actor = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
        actor.init_model()
        use_ref = bool(cfg.actor_rollout_ref.actor.use_kl_loss)
        ref = None
        if use_ref:
            ref = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="ref")
            ref.init_model()
        trace_dir = Path(out_dir) / scenario
        temperature = float(cfg.actor_rollout_ref.rollout.temperature)
        rec = TraceRecorder(trace_dir, config=claims(actor_cfg, temperature=temperature, response_len=RESPONSE_LEN,
                                                     eos_token_id=EOS_ID),
                            trainer={"name": "verl", "version": verl.__version__, "scenario": scenario, "seed": seed,
                                     "update": "RayPPOTrainer._update_actor -> ActorRolloutRefWorker.update_actor -> "
                                               "TrainingWorker.train_mini_batch -> FSDPEngineWithLMHead (fsdp2) + ppo_loss",
                                     "model": "random LlamaForCausalLM (refimpl.trainer.task.build_model: 2 layers, "
                                              "hidden 32, vocab 14, untied head)"})
        capture = _Capture(actor, ref, rec, eos=EOS_ID)
        wg = types.SimpleNamespace(compute_log_prob=actor.compute_log_prob, update_actor=actor.update_actor,
                                   compute_ref_log_prob=ref.compute_ref_log_prob if ref is not None else None,
                                   _dispatch_info={"actor": [0]})
        trainer = types.SimpleNamespace(config=cfg, actor_rollout_wg=wg, ref_policy_wg=wg, ref_in_actor=False,
                                        use_prefix_grouper=False)
        trainer._get_dp_size = types.MethodType(RayPPOTrainer._get_dp_size, trainer)
        g = torch.Generator().manual_seed(seed)
        try:
            for _ in range(-(-steps // EPOCHS)):
                batch = _rollout_batch(make_batch(g, pad=PAD_ID, eos=EOS_ID, digit0=DIGIT0_ID), cfg)
                _train_on(batch, trainer, capture, cfg, use_ref=use_ref)
        finally:
            capture.close()
        n_steps = -(-steps // EPOCHS) * EPOCHS
        if capture.steps != list(range(n_steps)):
            raise RuntimeError(f"{scenario}: recorded steps {capture.steps}, expected 0..{n_steps - 1}")
        return trace_dir


def _destroy_group() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return recorder_main(argv, description=__doc__.splitlines()[0], scenarios=SCENARIOS, record=record,
                         default_steps=2, steps_help="optimizer steps (rounded up to a multiple of ppo_epochs, 2)", after=_destroy_group)


if __name__ == "__main__":
    sys.exit(main())
