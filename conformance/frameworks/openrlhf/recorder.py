"""An rlspec trace of OpenRLHF 0.11.2's real PPO actor training step (``rlspec replay DIR/<scenario>``).

Run in OpenRLHF's environment, with the rlspec checkout on ``PYTHONPATH``::

    PYTHONPATH=/work/main /root/.cache/rlspec/frameworks/openrlhf/bin/python \\
        conformance/frameworks/openrlhf/recorder.py --out DIR [--scenario NAME ...] [--steps N] [--seed S]

Paths below are in ``openrlhf/`` (0.11.2): ``PA`` = ``trainer/ray/ppo_actor.py``, ``EM`` =
``trainer/ppo_utils/experience_maker.py``, ``SG`` = ``trainer/ppo_utils/samples_generator.py``, ``LU`` =
``utils/loss_utils.py``, ``L`` = ``models/loss.py``, ``A`` = ``models/actor.py``.

What runs (CPU, offline, one process). OpenRLHF's own code, called, for everything from the command line to the
backward scalar:

- the command line: ``cli/train_ppo_ray.py``'s own parser and argument checks (:197-769) run on the scenario's
  flags; they end in ``train(args)``, where ``get_strategy(args)`` (:35) is intercepted to take the parsed
  ``args`` (the DeepSpeed strategy, Ray and vLLM are not started);
- ``models.Actor`` (A:54-300) loads the random-weight model from a folder (``from_pretrained``) with the CLI's
  attention implementation (``eager``), ``packing_samples`` off and ``temperature = --rollout.temperature``;
  the reference model is a second ``Actor`` on the same folder, as ``ReferenceModelActor`` builds it
  (trainer/ray/launcher.py:105-118), and only when ``--algo.kl.init_coef`` > 0 (cli/train_ppo_ray.py:93-103);
- each sample becomes an ``Experience`` through ``SamplesGenerator._process_response_into_experience``
  (SG:243-310) on the response dict vLLM's ``AgentExecutor.execute`` returns (utils/agent.py:207-276:
  ``observation_tokens`` = prompt + generated ids, one action range); ``RemoteExperienceMaker.split_rollout_samples``
  (EM:44-77) concatenates them into ``--rollout.micro_batch_size`` batches (right padding); the old and reference
  log-probs are the ``Actor``'s forward in eval mode under ``no_grad`` (``PolicyModelActor.forward``, PA:618-644);
  ``compute_approx_kl`` and ``masked_mean`` fill ``kl`` / ``base_action_log_probs`` exactly as ``make_experience``
  does (EM:205-227); ``RemoteExperienceMaker.compute_advantages_and_returns`` (EM:238-340) gives the advantages;
  ``NaiveReplayBuffer.append`` (``PolicyModelActor.append``, PA:652-653) stores them;
- ``ActorPPOTrainer.ppo_train`` (PA:153-257): the DataLoader over the replay buffer (micro-batches of
  ``--train.micro_batch_size``, shuffled), ``iter_grad_accum_global_norm`` (LU:80-105: every micro-batch of an
  optimizer step gets the step's global counts divided by the accumulation steps, LU:54-77), and
  ``training_step`` (PA:259-407): the ``Actor`` forward, ``PolicyLoss`` (L:116-259, ``aggregate_loss`` L:11-39),
  the KL loss (``compute_approx_kl``, PA:318-334), ``strategy.backward`` and ``strategy.optimizer_step``.

What stands in for what is not installed (nothing installed is edited; nothing changes a value OpenRLHF computes):

- import placeholders, only when the plain import fails: ``deepspeed`` (empty: imported at the top of
  models/utils.py and PA, used only in ZeRO-3 paths), ``ray`` (``ray.remote`` returns the class unchanged:
  ``@ray.remote`` on ``PolicyModelActor``, PA:493; ``ray.is_initialized`` is True so ``train`` goes straight to
  ``get_strategy``), ``ray.util.placement_group``, ``vllm`` (``SamplingParams``), ``peft`` and ``flash_attn``
  (names imported by A and models/ring_attn_utils.py, used only with LoRA / packed samples; ``flash_attn.ops`` is
  absent, so ``log_probs_from_logits`` takes its pure-torch path, models/utils.py:179-188), ``pylatexenc`` and
  ``PIL.Image`` (math_utils / vlm_utils imports), and the modules ``openrlhf.utils.deepspeed``,
  ``openrlhf.trainer.ray.launcher`` and ``openrlhf.trainer.ray.vllm_engine`` (placeholder classes: the DeepSpeed
  strategy, the Ray actor groups and the vLLM engines are never run). ``openrlhf.trainer.ray`` is a bare package
  (its ``__init__`` imports vLLM). Every placeholder raises if called;
- ``CPUStrategy`` for ``DeepspeedStrategy`` and its DeepSpeed engine (one process, no ZeRO): ``backward`` divides
  the loss by the accumulation steps ``gas`` and calls ``.backward()`` (DeepSpeed's ``engine.backward`` scales every
  loss by 1/gas, ``_scale_loss_by_gas``, as LU:60-65 says); ``optimizer_step`` counts micro-steps and, at every
  ``gas``-th, clips the gradient norm to ``--actor.max_norm``, steps and zeroes the gradients (DeepSpeed's
  ``engine.step`` at the accumulation boundary); ``accumulated_gradient`` = ``train.batch_size //
  train.micro_batch_size`` (utils/deepspeed/deepspeed.py:110-116 with one process); ``all_reduce`` is the
  identity; the optimizer is ``torch.optim.AdamW`` with ``--actor.adam.*`` and a constant learning rate;
- generation (vLLM's job) is ``transformers.generate`` on the actor's model with vLLM's sampling parameters
  (SG:199-207: temperature, ``--rollout.top_p`` (1), no top-k, ``max_new_tokens``, ``min_tokens`` 1), the response kept through
  its first EOS, as vLLM returns it; the reward is the digit task's (``refimpl.trainer.task.DigitTask``, reverse 2-4
  digits) on the generated ids, handed over as the response's ``reward``;
- the model runs in float32: ``Actor`` only loads bf16 / fp16 (``convert_to_torch_dtype``, utils/utils.py:8-22;
  DeepSpeed's bf16 engine), so it loads bf16 weights and the recorder casts them back (the checkpoint is float32,
  so the cast recovers bf16-rounded values; every forward the trace records is float32);
- ``torch.cuda.current_device`` answers 0 while ``ActorPPOTrainer.__init__`` builds its replay buffer
  (replay_buffer.py:40 formats ``cuda:N``, used only by ``sample()``) and ``"cpu"`` while ``ppo_train`` runs
  (PA:171, where it moves each micro-batch); ``torch_dist_barrier_and_cuda_sync`` (PA:106) is a no-op (one process).

Where the trace is taken (wrappers and hooks that call the original and change no value):

- ``ActorPPOTrainer.training_step`` (instance wrapper): the micro-batch's ``Experience`` and its
  ``loss_batch_info`` (the step's counts, LU:77). Each sample's ``label`` is its row in the rollout, so every
  micro-batch row is matched to its prompt, generated ids and reward.
- a forward hook on the ``Actor``: with grad enabled (the loss forward, PA:292-301) a tensor hook on its action
  log-probs [b, A] catches d(backward scalar)/d logp; a forward hook on the final norm ``model.model.norm`` keeps
  ``hidden`` [b, T, D] (the LM head's input). During the rollout a forward hook on each model's final norm keeps
  the old and reference forwards' hidden states (``old_hidden``, ``ref_hidden``, with those forwards' LM heads).
- ``aggregate_loss`` (module globals of models/loss.py and of PA, swapped for a spy during ``training_step``): the
  per-token matrices OpenRLHF aggregates, PolicyLoss's (L:249-256) and the KL's (PA:331). ``token_loss`` = the
  first + ``kl_ctl`` x the second, the per-token form of ``loss = actor_loss + kl_loss * kl_ctl`` (PA:338: both
  aggregated over the same counts).
- ``strategy.backward``: a tensor hook on the loss it receives catches c = d(scalar .backward() ran on)/d(loss)
  (1/gas); the trace's ``loss`` is c x that loss. The micro-batch is recorded after its backward.
- ``strategy.optimizer_step`` at the accumulation boundary, before the stand-in clips: the probe
  ``lm_head.weight.grad`` (accumulated, before clipping; one process) with ``lm_head.weight``; the step ends there.

How OpenRLHF's tensors map to the trace. A sample's ``action_mask`` is its action range shifted by one
(``action_mask[1:]``, SG:263) and every action tensor is [b, A] with A = T - 1 (``log_probs[:, :-1]``, A:289-298:
column j scores token j + 1; ``make_experience_batch`` right-pads every step tensor, experience.py:199-233). They go
to columns T - A .. T - 1 of [b, T] tensors, 0 / False elsewhere: ``logp``, ``grad_logp``, ``old_logp``
(``action_log_probs``), ``ref_logp`` (``base_action_log_probs``), ``advantages`` and ``loss_mask`` (``action_mask``,
what ``PolicyLoss`` and the KL loss count). ``attention_mask`` is OpenRLHF's. ``prompt_mask`` and
``completion_mask`` come from the rollout record: the prompt's ids, then the generated ids through the first EOS.
``group_ids`` = row // ``n_samples_per_prompt`` (the executor returns a prompt's samples together; EM:256 groups
them so), ``row_ids`` = the row in the rollout. One rollout of ``rollout.batch_size x n_samples_per_prompt``
= ``train.batch_size`` rows feeds ``max_epochs`` = 2 optimizer steps (``ppo_train`` loops the epochs over the same
buffer, PA:175): every step holds whole groups, and in the second the policy has moved off the old log-probs.
So ``--steps`` is even (``--steps N`` runs N / 2 rollouts).

Manifest ``config``: OpenRLHF's claims as its code and docs state them.

- ``--actor.loss_agg_mode token-mean`` ("global token mean", the CLI's help): ``PolicyLoss(token_level_loss=True)``
  (PA:80) sums the token losses over the micro-batch and divides by the step's token count over gas (L:29-32,
  LU:54-77), DeepSpeed divides by gas: ``token_mean`` over the ``step``.
- ``seq-mean-token-mean`` ("every sequence weighs the same"): each row's token mean, summed, over the step's rows with
  an action token over gas (L:34-39): ``seq_mean_token_mean`` over the ``step`` (the rows-with-tokens denominator is
  finding sample-level-loss-excludes-empty-rows; every row has tokens here).
- PPO clip ``eps_low``, ``eps_high`` = ``--actor.eps_clip_low_high`` (``--actor.eps_clip`` twice when unset, CLI
  :633-634); ``dual_clip`` = ``--actor.dual_clip``: ``-where(A < 0, max(min(s1, s2), c A), min(s1, s2))`` (L:203-212).
  The log-ratio clamp at +-20 (L:187) never acts here.
- ``--actor.policy_loss_type gspo``: the sequence ratio ``exp(masked mean log-ratio)`` on every action token
  (L:189-196), clipped with the same epsilons, the sample level forced (L:150-152): ``loss`` gspo,
  ``seq_mean_token_mean`` over the ``step``.
- ``--algo.kl.use_loss``: ``kl_ctl.value`` x the KL of ``--algo.kl.estimator`` (``compute_approx_kl``, value clamped
  to [-10, 10]), aggregated with ``aggregate_loss``'s default token level (PA:331) whatever the policy loss's mode:
  ``kl_coef`` = ``--algo.kl.init_coef`` (FixedKLController), ``kl_gradient`` ``estimator`` (no
  ``--algo.kl.unbiased_gradient``). Without it, and ``init_coef`` 0, there is no reference model and no KL.
  The clamp of every KL value to [-10, 10] (models/utils.py:113; the function rows' preset ``kl_penalty`` clamp 10)
  is claimed as ``kl_clamp`` 10 (k3's one-sided log-ratio bound at -10, :106, only acts where the value clamp
  already binds). The learning rate (1e-3) keeps every k3 value below 10. The seq-mean-token-mean policy loss
  with the KL loss (token level, PA:331) has no single ``agg`` either, so no scenario combines them.
- ``--algo.advantage.estimator group_norm``: ``(r - mean_g) / (std_g + 1e-9)`` with torch's unbiased std (EM:273-274),
  then ``compute_reward`` puts it on the last action token and ``get_cumulative_returns`` (gamma 1) spreads it over
  the row (EM:284-317); no whitening for group_norm (EM:325): ``algorithm`` grpo, ``grpo_scale`` group,
  ``grpo_std_ddof`` 1, ``grpo_eps`` 1e-9.
- ``temperature`` = ``--rollout.temperature``: the ``Actor`` divides the logits by it (A:270-271).

OpenRLHF's own settings are kept under ``config["openrlhf"]``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import runpy
import sys
import tempfile
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from conformance.frameworks.recorder_cli import recorder_main
from rlspec.trace import TraceRecorder

COMMON: list[str] = [
    "--rollout.batch_size", "4", "--rollout.n_samples_per_prompt", "4",  # 16 rows per rollout: 4 groups of 4
    "--rollout.micro_batch_size", "4",  # the experience maker's batches (right padding across prompt lengths)
    "--train.batch_size", "16", "--train.micro_batch_size", "4",  # gas 4: 4 micro-batches of 4 rows per step
    "--train.max_epochs", "2",  # each rollout trains two optimizer steps; the second's ratios move off 1
    "--rollout.max_new_tokens", "5", "--rollout.temperature", "0.7", "--data.max_len", "64",
    "--algo.advantage.estimator", "group_norm",
    "--actor.adam.lr", "1e-3", "--actor.max_norm", "1.0",
    "--ds.attn_implementation", "eager", "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",  # one process
]
SCENARIOS: dict[str, list[str]] = {
    "token_mean": ["--algo.kl.init_coef", "0"],
    "seq_mean_token_mean": ["--actor.loss_agg_mode", "seq-mean-token-mean", "--algo.kl.init_coef", "0"],
    "kl_loss_k3": ["--algo.kl.use_loss", "--algo.kl.estimator", "k3", "--algo.kl.init_coef", "0.05",
                   "--actor.eps_clip_low_high", "0.2", "0.28"],
    "dual_clip": ["--actor.dual_clip", "1.1",  # active: a few negative-advantage tokens pass ratio 1.1 in epoch 2
                   "--algo.kl.init_coef", "0"],
    "gspo": ["--actor.policy_loss_type", "gspo", "--actor.eps_clip_low_high", "3e-4", "4e-4", "--algo.kl.init_coef", "0",
             "--actor.adam.lr", "1e-5"],  # the GSPO paper's clip range; a step small enough to leave some rows inside it
}
TASK = ("reverse", 2, 4)
MODEL = dict(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, init_std=0.2, max_positions=64)
AGG = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean"}


# -- importing OpenRLHF on CPU -------------------------------------------------------------------------------------

def _placeholder(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name}: an import placeholder of the rlspec recorder was called")

    call.__name__ = name.rsplit(".", 1)[-1]
    return call


def _placeholder_class(name: str) -> type:
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"{name}: an import placeholder of the rlspec recorder was instantiated")

    return type(name.rsplit(".", 1)[-1], (), {"__init__": init, "__module__": name.rsplit(".", 1)[0]})


def _module(name: str, stubs: list[str], why: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    if "." in name and name.rsplit(".", 1)[0] in sys.modules:
        setattr(sys.modules[name.rsplit(".", 1)[0]], name.rsplit(".", 1)[1], module)
    stubs.append(f"{name} ({why})")
    return module


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


THIRD_PARTY = ("deepspeed", "ray", "vllm", "peft", "flash_attn", "pylatexenc", "PIL")


@contextlib.contextmanager
def third_party_placeholders(placeholders: dict[str, types.ModuleType]) -> Iterator[None]:
    """The third-party placeholder modules in ``sys.modules`` for the duration (imports, the CLI parser) and out
    of it afterwards, so that transformers' package probes (``importlib.util.find_spec``) and
    ``log_probs_from_logits``' ``flash_attn`` import see what is really installed."""
    sys.modules.update(placeholders)
    try:
        yield
    finally:
        for name in placeholders:
            sys.modules.pop(name, None)


def import_openrlhf() -> tuple[dict[str, Any], list[str], dict[str, types.ModuleType]]:
    """OpenRLHF's modules the recorder drives, the import placeholders it needed (module docstring) and the
    third-party ones among them (for :func:`third_party_placeholders`)."""
    import transformers.integrations.deepspeed  # noqa: F401  (transformers' own probes run before any placeholder)
    import transformers.integrations.flash_attention  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401

    stubs: list[str] = []
    before = set(sys.modules)
    if _missing("deepspeed"):
        _module("deepspeed", stubs, "empty")
    if _missing("ray"):
        _module("ray", stubs, "remote() returns the class, is_initialized() is True",
                remote=lambda *a, **k: (lambda cls: cls), is_initialized=lambda: True,
                get=_placeholder("ray.get"), put=_placeholder("ray.put"))
        _module("ray.util", stubs, "empty")
        _module("ray.util.placement_group", stubs, "placeholders", placement_group=_placeholder("ray.util.placement_group"),
                PlacementGroup=_placeholder_class("ray.util.placement_group.PlacementGroup"))
    if _missing("vllm"):
        _module("vllm", stubs, "placeholder SamplingParams", SamplingParams=_placeholder_class("vllm.SamplingParams"))
    if _missing("peft"):
        _module("peft", stubs, "placeholders", LoraConfig=_placeholder_class("peft.LoraConfig"),
                TaskType=_placeholder_class("peft.TaskType"), get_peft_model=_placeholder("peft.get_peft_model"))
        _module("peft.tuners", stubs, "empty")
        _module("peft.tuners.lora", stubs, "placeholder", LoraLayer=_placeholder_class("peft.tuners.lora.LoraLayer"))
    if _missing("flash_attn"):
        _module("flash_attn", stubs, "no ops: log_probs_from_logits takes its torch path")
        _module("flash_attn.bert_padding", stubs, "placeholders",
                **{n: _placeholder(f"flash_attn.bert_padding.{n}") for n in ("index_first_axis", "pad_input", "rearrange", "unpad_input")})
        _module("flash_attn.utils", stubs, "empty")
        _module("flash_attn.utils.distributed", stubs, "placeholder", all_gather=_placeholder("flash_attn.utils.distributed.all_gather"))
    if _missing("pylatexenc"):
        _module("pylatexenc", stubs, "placeholder", latex2text=_placeholder_class("pylatexenc.latex2text"))
    if _missing("PIL"):
        _module("PIL", stubs, "empty")
        _module("PIL.Image", stubs, "placeholder", Image=_placeholder_class("PIL.Image.Image"))
    placeholders = {k: sys.modules[k] for k in set(sys.modules) - before if k.split(".")[0] in THIRD_PARTY}
    with third_party_placeholders(placeholders):
        import openrlhf
        import openrlhf.utils  # noqa: F401  (the real __init__: math_utils, utils)

        if "deepspeed (empty)" in stubs:
            _module("openrlhf.utils.deepspeed", stubs, "placeholder DeepspeedStrategy",
                    DeepspeedStrategy=_placeholder_class("openrlhf.utils.deepspeed.DeepspeedStrategy"))
            _module("openrlhf.utils.deepspeed.deepspeed_utils", stubs, "placeholders",
                    offload_deepspeed_states=_placeholder("offload_deepspeed_states"),
                    reload_deepspeed_states=_placeholder("reload_deepspeed_states"))
        import openrlhf.trainer  # noqa: F401  (its __init__ imports nothing)

        if "vllm (placeholder SamplingParams)" in stubs:
            root = Path(importlib.util.find_spec("openrlhf").submodule_search_locations[0])
            pkg = _module("openrlhf.trainer.ray", stubs, "bare package: __init__ skipped",
                          create_vllm_engines=_placeholder("create_vllm_engines"),
                          batch_vllm_engine_call=_placeholder("batch_vllm_engine_call"))
            pkg.__path__ = [str(root / "trainer" / "ray")]
            _module("openrlhf.trainer.ray.vllm_engine", stubs, "placeholders",
                    batch_vllm_engine_call=_placeholder("batch_vllm_engine_call"),
                    create_vllm_engines=_placeholder("create_vllm_engines"))
            _module("openrlhf.trainer.ray.launcher", stubs, "placeholder actor classes", BaseModelActor=object,
                    **{n: _placeholder_class(f"openrlhf.trainer.ray.launcher.{n}")
                       for n in ("RayActorGroup", "ReferenceModelActor", "RewardModelActor")})
        mods = {name: importlib.import_module(f"openrlhf.{name}") for name in (
            "models", "models.loss", "models.utils", "trainer.ray.ppo_actor", "trainer.ppo_utils.experience",
            "trainer.ppo_utils.experience_maker", "trainer.ppo_utils.samples_generator", "trainer.ppo_utils.kl_controller",
            "utils", "utils.utils")}
    mods["root"] = Path(importlib.util.find_spec("openrlhf").submodule_search_locations[0])
    return mods, stubs, placeholders


class _ArgsParsed(Exception):
    pass


def parse_args(mods: dict[str, Any], placeholders: dict[str, types.ModuleType], argv: list[str]) -> Any:
    """OpenRLHF's own ``train_ppo_ray.py`` parser and checks on ``argv``; the hierarchical ``args`` it builds."""
    utils = mods["utils"]
    real = utils.get_strategy

    def take(args: Any) -> Any:
        raise _ArgsParsed(args)

    utils.get_strategy = take
    saved = sys.argv
    sys.argv = ["train_ppo_ray.py", *argv]
    try:
        with contextlib.redirect_stdout(io.StringIO()), third_party_placeholders(placeholders):
            runpy.run_path(str(mods["root"] / "cli" / "train_ppo_ray.py"), run_name="__main__")
    except _ArgsParsed as parsed:
        return parsed.args[0]
    finally:
        sys.argv = saved
        utils.get_strategy = real
    raise RuntimeError("train_ppo_ray.py returned without calling get_strategy")


# -- the stand-in for the DeepSpeed strategy ------------------------------------------------------------------------

class CPUStrategy:
    """One process, no ZeRO: what ``DeepspeedStrategy`` and its DeepSpeed engine do for the actor (docstring)."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.world_size = 1
        self.accumulated_gradient = int(args.train.batch_size) // int(args.train.micro_batch_size)
        self.ring_attn_group = None
        self.micro_steps = 0
        self.last_grad_norm = 0.0

    def backward(self, loss: torch.Tensor, model: Any, optimizer: Any, **kwargs: Any) -> None:
        (loss / self.accumulated_gradient).backward()

    def is_gradient_accumulation_boundary(self) -> bool:
        return (self.micro_steps + 1) % self.accumulated_gradient == 0

    def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "model", **kwargs: Any) -> None:
        boundary = self.is_gradient_accumulation_boundary()
        self.micro_steps += 1
        if not boundary:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        self.last_grad_norm = float(torch.nn.utils.clip_grad_norm_(params, float(self.args.actor.max_norm)))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()

    def get_grad_norm(self, model: Any) -> float:
        return self.last_grad_norm

    def all_reduce(self, data: Any, op: str = "mean") -> Any:
        return data

    def is_rank_0(self) -> bool:
        return True

    def print(self, *msg: Any) -> None:
        pass


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


# -- the model, the rollout ----------------------------------------------------------------------------------------

def claims(args: Any, eos_token_id: int) -> dict[str, Any]:
    """The manifest ``config``: what OpenRLHF says its actor step computes under ``args``."""
    low, high = (float(x) for x in args.actor.eps_clip_low_high)
    kl_coef = float(args.algo.kl.init_coef) if args.algo.kl.use_loss else 0.0
    mode = args.actor.loss_agg_mode if args.actor.policy_loss_type == "ppo" else "seq-mean-token-mean"
    if args.algo.advantage.estimator != "group_norm" or args.algo.kl.unbiased_gradient or \
            (args.algo.kl.init_coef > 0 and not args.algo.kl.use_loss):
        raise ValueError("claims: only group_norm, the KL as a loss (not in the reward) and the estimator's own KL "
                         "gradient are described")
    return {
        "algorithm": "grpo", "loss": args.actor.policy_loss_type, "agg": AGG[mode], "agg_scope": "step",
        "eps_low": low, "eps_high": high,
        "dual_clip": None if args.actor.dual_clip is None else float(args.actor.dual_clip),
        "kl_coef": kl_coef, "kl_estimator": args.algo.kl.estimator, "kl_gradient": "estimator", "kl_clamp": 10.0,
        "entropy_coef": 0.0,
        "temperature": float(args.rollout.temperature), "group_size": int(args.rollout.n_samples_per_prompt),
        "grpo_scale": "group", "grpo_std_ddof": 1, "grpo_eps": 1e-9, "grad_reduce": "mean", "eos_token_id": eos_token_id,
        # vLLM's SamplingParams (SG:199-207) from the generate kwargs (cli/train_ppo_ray.py:160-164): top_k -1,
        # min_p and repetition_penalty at vLLM's defaults
        "sampling": {"temperature": float(args.rollout.temperature), "top_k": -1, "top_p": float(args.rollout.top_p),
                     "min_p": 0.0, "repetition_penalty": 1.0},
        "openrlhf": {"loss_agg_mode": args.actor.loss_agg_mode, "policy_loss_type": args.actor.policy_loss_type,
                     "dual_clip": args.actor.dual_clip,
                     "eps_clip_low_high": [low, high], "kl.use_loss": bool(args.algo.kl.use_loss),
                     "kl.estimator": args.algo.kl.estimator, "kl.init_coef": float(args.algo.kl.init_coef),
                     "advantage.estimator": args.algo.advantage.estimator,
                     "n_samples_per_prompt": int(args.rollout.n_samples_per_prompt),
                     "train.batch_size": int(args.train.batch_size), "train.micro_batch_size": int(args.train.micro_batch_size),
                     "train.max_epochs": int(args.train.max_epochs), "rollout.temperature": float(args.rollout.temperature),
                     "rollout.max_new_tokens": int(args.rollout.max_new_tokens)},
    }


def _full(x: torch.Tensor | None, T: int, fill: Any = 0) -> torch.Tensor | None:
    """[b, A] (the last A columns) -> [b, T], ``fill`` in the other columns."""
    if x is None:
        return None
    x = x.detach().cpu()
    out = torch.full((x.shape[0], T), fill, dtype=x.dtype)
    out[:, T - x.shape[1]:] = x
    return out


def _pad_rows(rows: list[torch.Tensor], T: int) -> torch.Tensor:
    """Per-row [L_i, D] -> [b, T, D], zeros after each row's end (right padding, as make_experience_batch)."""
    out = torch.zeros(len(rows), T, rows[0].shape[-1], dtype=rows[0].dtype)
    for i, h in enumerate(rows):
        out[i, :h.shape[0]] = h
    return out


def load_actor(mods: dict[str, Any], args: Any, path: str) -> Any:
    """``models.Actor`` as PolicyModelActor / ReferenceModelActor build it (CPU, no DeepSpeed config), in float32."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actor = mods["models"].Actor(path, attn_implementation=args.ds.attn_implementation, param_dtype=args.ds.param_dtype,
                                     packing_samples=args.ds.packing_samples, temperature=args.rollout.temperature)
    actor.model.float()
    return actor


class _Rollout:
    """One rollout: vLLM's role (generation) and the experience maker's forwards, with OpenRLHF's functions."""

    def __init__(self, mods: dict[str, Any], args: Any, tokenizer: Any, actor: Any, ref: Any, task: Any,
                 rng: np.random.Generator) -> None:
        self.mods, self.args, self.tok, self.actor, self.ref, self.task, self.rng = mods, args, tokenizer, actor, ref, task, rng
        self.rows: list[dict[str, Any]] = []  # row -> prompt ids, generated ids, reward
        self.hidden: dict[str, dict[int, torch.Tensor]] = {"old": {}, "ref": {}}
        self.heads: dict[str, torch.Tensor] = {}

    def generate(self) -> list[Any]:
        args = self.args
        n = int(args.rollout.n_samples_per_prompt)
        gen = self.mods["trainer.ppo_utils.samples_generator"].SamplesGenerator
        maker = gen.__new__(gen)  # the method below reads only its arguments
        samples = []
        for digits in self.task.sample_prompts(int(args.rollout.batch_size), self.rng):
            prompt = self.task.prompt_text(digits)
            prompt_ids = self.tok(text=prompt, add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()
            with torch.no_grad():
                out = self.actor.model.generate(
                    input_ids=torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                    do_sample=True, temperature=float(args.rollout.temperature), top_p=float(args.rollout.top_p), top_k=0,
                    max_new_tokens=int(args.rollout.max_new_tokens), min_new_tokens=1, num_return_sequences=n,
                    pad_token_id=self.tok.pad_token_id, eos_token_id=self.tok.eos_token_id)
            for seq in out[:, len(prompt_ids):].tolist():
                ids = seq[:seq.index(self.tok.eos_token_id) + 1] if self.tok.eos_token_id in seq else seq
                row = len(self.rows)
                reward = float(self.task.score_tokens(digits, ids)[0])
                self.rows.append({"prompt_ids": prompt_ids, "ids": ids, "reward": reward})
                response = {"prompt": prompt, "label": str(row), "images": None, "mm_train_inputs": None,
                            "observation_tokens": prompt_ids + ids, "action_ranges": [(len(prompt_ids), len(prompt_ids) + len(ids))],
                            "rollout_log_probs": None, "reward": reward, "scores": reward,
                            "truncated": self.tok.eos_token_id not in ids, "extra_logs": {}}
                samples.append(maker._process_response_into_experience(response, max_len=int(args.data.max_len)))
        return samples

    def _forward(self, model: Any, role: str, exp: Any) -> torch.Tensor:
        """``PolicyModelActor.forward`` / ``ReferenceModelActor.forward``: eval mode, no grad; keeps the hidden states."""
        kept: list[torch.Tensor] = []
        hook = model.model.model.norm.register_forward_hook(lambda m, a, o: kept.append(o.detach().cpu()))
        model.eval()
        try:
            with torch.no_grad():
                logp = model(exp.sequences, exp.action_mask, exp.attention_mask, ring_attn_group=None)
        finally:
            hook.remove()
            model.train()
        lengths = exp.attention_mask.sum(-1).tolist()
        for i, row in enumerate(exp.labels):
            self.hidden[role][int(row)] = kept[0][i, :int(lengths[i])]
        self.heads[role] = model.model.get_output_embeddings().weight.detach().cpu().clone()
        return logp.to("cpu")

    def experiences(self, kl_ctl: Any) -> list[Any]:
        """``make_experience_batch`` (EM:80-96): split, the forwards, the KL fields, the advantages."""
        args, mu = self.args, self.mods["models.utils"]
        em = self.mods["trainer.ppo_utils.experience_maker"].RemoteExperienceMaker(
            None, None, None, None, kl_ctl, types.SimpleNamespace(args=args), self.tok)
        batches = em.split_rollout_samples(self.generate())
        for samples in batches:  # make_experience, EM:113-233, with the Ray dispatch replaced by direct calls
            old = self._forward(self.actor, "old", samples)
            base = self._forward(self.ref, "ref", samples) if self.ref is not None else None
            if base is not None and not args.algo.kl.use_loss:
                kl = mu.compute_approx_kl(old, base, kl_estimator=args.algo.kl.estimator)
                diff = old.float() - base.float()
            else:
                kl, diff = torch.zeros_like(old), torch.zeros_like(old)
            samples.action_log_probs = old
            samples.base_action_log_probs = base if args.algo.kl.use_loss else None
            samples.values = None
            samples.kl = kl
            samples.info["kl"] = mu.masked_mean(kl, samples.action_mask, dim=-1)
            samples.info["logprobs_diff"] = mu.masked_mean(diff, samples.action_mask, dim=-1)
        return em.compute_advantages_and_returns(batches)


# -- the capture ---------------------------------------------------------------------------------------------------

class _Capture:
    """The wrappers and hooks on one ActorPPOTrainer and the trace they write (module docstring)."""

    def __init__(self, mods: dict[str, Any], trainer: Any, strategy: CPUStrategy, rec: TraceRecorder, group_size: int,
                 eos: int) -> None:
        self.trainer, self.strategy, self.rec, self.G, self.eos = trainer, strategy, rec, group_size, eos
        self.loss_module, self.actor_module = mods["models.loss"], mods["trainer.ray.ppo_actor"]
        self.rollout: _Rollout | None = None
        self.current: dict[str, Any] | None = None
        self.in_step = False
        self.step = 0
        self.steps: list[int] = []
        self.step_extra: dict[str, list[Any]] = {}
        actor = trainer.actor
        self.weight = actor.model.get_output_embeddings().weight
        actor.register_forward_hook(self._on_actor_forward)
        actor.model.model.norm.register_forward_hook(self._on_norm)
        trainer.training_step = self._wrap(trainer.training_step, self._on_training_step)
        strategy.backward = self._wrap(strategy.backward, self._on_backward)
        strategy.optimizer_step = self._wrap(strategy.optimizer_step, self._on_optimizer_step)

    @staticmethod
    def _wrap(original: Callable[..., Any], handler: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return handler(original, *args, **kwargs)

        return wrapper

    def _on_training_step(self, original: Any, experience: Any, kl_ctl: float, step: int, loss_batch_info: Any = None) -> Any:
        if not self.in_step:
            self.rec.begin_step(self.step)
            self.in_step, self.step_extra = True, {}
        cur = self.current = {"exp": experience, "info": loss_batch_info, "kl_ctl": kl_ctl, "matrices": {}}

        def spy(role: str, real: Callable[..., Any]) -> Callable[..., Any]:
            def aggregate_loss(loss: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                cur["matrices"].setdefault(role, loss.detach().cpu())
                return real(loss, *args, **kwargs)

            return aggregate_loss

        # the per-token matrices OpenRLHF aggregates: PolicyLoss's (models/loss.py's global, L:249-256) and the
        # KL's (ppo_actor's own import, PA:331); each spy hands its arguments on unchanged
        with _patched(self.loss_module, "aggregate_loss", spy("policy", self.loss_module.aggregate_loss)), \
                _patched(self.actor_module, "aggregate_loss", spy("kl", self.actor_module.aggregate_loss)):
            try:
                return original(experience, kl_ctl, step, loss_batch_info)
            finally:
                self.current = None

    def _on_norm(self, module: Any, args: Any, output: torch.Tensor) -> None:
        if self.current is not None and torch.is_grad_enabled():
            self.current["hidden"] = output.detach().cpu()

    def _on_actor_forward(self, module: Any, args: Any, output: Any) -> None:
        cur = self.current
        if cur is None or not torch.is_grad_enabled():
            return
        logp = output[0] if isinstance(output, tuple) else output
        cur["logp"] = logp.detach().cpu()

        def keep(g: torch.Tensor) -> None:
            cur["grad_logp"] = g.detach().cpu() + cur.get("grad_logp", 0)

        logp.register_hook(keep)

    def _on_backward(self, original: Any, loss: torch.Tensor, model: Any, optimizer: Any, **kwargs: Any) -> Any:
        cur = self.current
        scale: list[torch.Tensor] = []
        loss.register_hook(lambda g: scale.append(g.detach().cpu()))
        result = original(loss, model, optimizer, **kwargs)
        self._record(cur, loss.detach().cpu() * scale[0], float(loss.detach()), float(scale[0]))
        return result

    def _record(self, cur: dict[str, Any], backward_scalar: torch.Tensor, loss: float, c: float) -> None:
        exp, ro = cur["exp"], self.rollout
        ids = exp.sequences.detach().cpu()
        b, T = ids.shape
        rows = torch.tensor([int(x) for x in exp.labels])
        prompt = torch.zeros(b, T, dtype=torch.bool)
        completion = torch.zeros(b, T, dtype=torch.bool)
        for i, r in enumerate(rows.tolist()):
            rec = ro.rows[r]
            P, C = len(rec["prompt_ids"]), len(rec["ids"])
            if ids[i, :P + C].tolist() != rec["prompt_ids"] + rec["ids"]:
                raise RuntimeError(f"row {r}: the micro-batch sequence is not the rollout's prompt and generated ids")
            prompt[i, :P] = True
            completion[i, P:P + C] = True
        token_loss = cur["matrices"]["policy"]
        if "kl" in cur["matrices"]:  # loss = actor_loss + kl_loss * kl_ctl, both over the same counts (PA:331-338)
            token_loss = token_loss + cur["matrices"]["kl"] * float(cur["kl_ctl"])
        old_h = _pad_rows([ro.hidden["old"][r] for r in rows.tolist()], T)
        ref_h = _pad_rows([ro.hidden["ref"][r] for r in rows.tolist()], T) if exp.base_action_log_probs is not None else None
        self.rec.micro_batch(
            input_ids=ids, attention_mask=exp.attention_mask.detach().cpu().bool(), prompt_mask=prompt,
            completion_mask=completion, loss_mask=_full(exp.action_mask.bool(), T, False),
            logp=_full(cur["logp"], T), grad_logp=_full(cur.get("grad_logp", torch.zeros_like(cur["logp"])), T),
            old_logp=_full(exp.action_log_probs, T), ref_logp=_full(exp.base_action_log_probs, T),
            advantages=_full(exp.advantages, T), rewards=torch.tensor([ro.rows[r]["reward"] for r in rows.tolist()]),
            group_ids=rows // self.G, row_ids=rows, hidden=cur["hidden"], old_hidden=old_h, ref_hidden=ref_h,
            token_loss=_full(token_loss, T), loss=backward_scalar,
        )
        info = cur["info"] or {}
        for key, value in (("training_step_loss", loss), ("strategy_backward_scale", c),
                           ("backward_scalar", float(backward_scalar)),
                           ("batch_num_tokens", float(info.get("batch_num_tokens", float("nan")))),
                           ("global_batch_size", float(info.get("global_batch_size", float("nan")))),
                           ("kl_ctl", float(cur["kl_ctl"])), ("experience_rewards", exp.rewards.tolist())):
            self.step_extra.setdefault(key, []).append(value)

    def _on_optimizer_step(self, original: Any, optimizer: Any, model: Any, scheduler: Any, **kwargs: Any) -> Any:
        if self.strategy.is_gradient_accumulation_boundary():
            self.rec.probe("lm_head.weight", self.weight.grad, lm_head_weight=self.weight)
            for role, weight in self.rollout.heads.items():
                if role == "old" or self.trainer.args.algo.kl.use_loss:
                    self.rec.lm_head(weight, role=role)
            self.rec.end_step(accumulated_gradient=self.strategy.accumulated_gradient, **self.step_extra)
            self.steps.append(self.step)
            self.step += 1
            self.in_step = False
        return original(optimizer, model, scheduler, **kwargs)


# -- one scenario --------------------------------------------------------------------------------------------------

def _save_model_dir(folder: str, seed: int) -> None:
    from refimpl.trainer.task import build_model, build_tokenizer

    build_model(seed=seed, **MODEL).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)


def record(out_dir: str | os.PathLike[str], scenario: str, steps: int = 2, seed: int = 0) -> Path:
    """Train OpenRLHF's actor ``steps`` optimizer steps (``steps`` / 2 rollouts of 2 epochs) under
    ``SCENARIOS[scenario]`` and write the trace to ``out_dir/scenario``; returns that folder."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: {scenario!r} not one of {', '.join(SCENARIOS)}")
    if steps < 2 or steps % 2:
        raise ValueError(f"steps: {steps}: each rollout trains --train.max_epochs 2 optimizer steps, so steps is even and >= 2")
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(k, "1")
    import transformers

    from refimpl.trainer.task import EOS_ID, DigitTask

    transformers.utils.logging.set_verbosity_error()
    mods, stubs, placeholders = import_openrlhf()
    import openrlhf

    trace_dir = Path(out_dir) / scenario
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    task = DigitTask(*TASK)
    with tempfile.TemporaryDirectory(prefix="rlspec-openrlhf-") as tmp:
        model_dir = os.path.join(tmp, "model")
        _save_model_dir(model_dir, seed)
        argv = ["--actor.model_name_or_path", model_dir, "--train.seed", str(seed), *COMMON, *SCENARIOS[scenario]]
        args = parse_args(mods, placeholders, argv)
        rows = int(args.rollout.batch_size) * int(args.rollout.n_samples_per_prompt)
        if rows != int(args.train.batch_size) or int(args.train.max_epochs) != 2:
            raise ValueError(f"{scenario}: a rollout ({rows} rows) must be one train batch ({args.train.batch_size}) "
                             f"trained 2 epochs (max_epochs {args.train.max_epochs})")
        pa = mods["trainer.ray.ppo_actor"]
        strategy = CPUStrategy(args)
        actor = load_actor(mods, args, model_dir)
        ref = load_actor(mods, args, model_dir) if args.algo.kl.init_coef > 0 else None  # cli/train_ppo_ray.py:93-103
        tokenizer = mods["utils.utils"].get_tokenizer(model_dir, actor.model, "left", strategy)
        adam = args.actor.adam
        optim = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=float(adam.lr),
                                  betas=tuple(adam.betas), eps=float(adam.eps), weight_decay=float(adam.weight_decay))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optim, lambda _: 1.0)
        with _patched(pa, "torch_dist_barrier_and_cuda_sync", lambda: None), _patched(torch.cuda, "current_device", lambda: 0):
            trainer = pa.ActorPPOTrainer(strategy, actor, ema_model=None, actor_optim=optim, actor_scheduler=scheduler,
                                         micro_train_batch_size=args.train.micro_batch_size, tokenizer=tokenizer,
                                         eps_clip=args.actor.eps_clip, ema_beta=args.train.ema_beta, vllm_engines=None,
                                         dataloader_pin_memory=False)
        kl_ctl = mods["trainer.ppo_utils.kl_controller"].FixedKLController(args.algo.kl.init_coef)
        config = claims(args, EOS_ID)
        rec = TraceRecorder(trace_dir, config=config, trainer={
            "name": "openrlhf", "version": openrlhf.__version__ if hasattr(openrlhf, "__version__") else _version(),
            "scenario": scenario, "seed": seed, "argv": ["<model folder>" if a == model_dir else a for a in argv],
            "trainer": "openrlhf.trainer.ray.ppo_actor.ActorPPOTrainer.ppo_train", "stubs": stubs,
            "stand_ins": ["CPUStrategy for DeepspeedStrategy (loss / gas, step at the boundary)",
                          "transformers.generate for vLLM", "float32 model (Actor loads bf16)"],
            "model": f"random LlamaForCausalLM (refimpl.trainer.task.build_model {MODEL}, vocab 14, untied head)"})
        capture = _Capture(mods, trainer, strategy, rec, int(args.rollout.n_samples_per_prompt), EOS_ID)
        for _ in range(steps // 2):
            rollout = _Rollout(mods, args, tokenizer, actor, ref, task, rng)
            capture.rollout = rollout
            for exp in rollout.experiences(kl_ctl):
                trainer.replay_buffer.append(exp)
            with _patched(torch.cuda, "current_device", lambda: "cpu"), contextlib.redirect_stderr(io.StringIO()):
                actor.train()
                trainer.ppo_train(kl_ctl.value)  # PolicyModelActor.fit (PA:598-606) with ppo_trainer.py:293's kl_ctl.value
            trainer.replay_buffer.clear()
    if capture.steps != list(range(steps)):
        raise RuntimeError(f"{scenario}: recorded steps {capture.steps}, expected 0..{steps - 1}")
    return trace_dir


def _version() -> str:
    from importlib.metadata import version

    return version("openrlhf")


def main(argv: list[str] | None = None) -> int:
    return recorder_main(argv, description=__doc__.splitlines()[0], scenarios=SCENARIOS, record=record,
                         default_steps=2, steps_help="optimizer steps (even: one rollout trains 2)", before=lambda: torch.set_num_threads(1))


if __name__ == "__main__":
    sys.exit(main())
