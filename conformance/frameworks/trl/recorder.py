"""An rlspec trace of TRL 1.16.0's real GRPO and RLOO training steps (``rlspec replay DIR/<scenario>``).

TRL lives in rlspec's main environment::

    PYTHONPATH=/work/main python conformance/frameworks/trl/recorder.py --out DIR [--scenario NAME ...] \\
        [--steps N] [--seed S]

What runs (CPU, offline). ``trl.GRPOTrainer`` (or ``trl.RLOOTrainer``) built by path on the random-weight
``LlamaForCausalLM`` of ``refimpl.trainer.task.build_model`` (2 layers, hidden 64, vocabulary 14, untied head)
and its locally built WordLevel tokenizer (``build_tokenizer``), saved to a temporary folder. The prompts are the
digit task's (``refimpl.trainer.task.DigitTask``, reverse 3 digits); the reward function scores the completion
token ids TRL passes it (``completion_ids``): the task's partial-credit reward plus the share of digit tokens
(``DigitReward``). ``trainer.train()`` runs unchanged, generation included (transformers ``generate``, no vLLM).
``rlspec e2e --trainer trl`` records one trace with this module and replays it.

Where the trace is taken. Every probe is an instance-level wrapper on the trainer that calls the original and
changes no value. Paths are in ``trl/trainer/`` (1.16.0), ``G`` = ``grpo_trainer.py``, ``R`` =
``rloo_trainer.py``; HF = transformers 5.24.0 ``trainer.py``; A = accelerate 1.16.0 ``accelerator.py``.

- ``_generate_and_score_completions`` (G:2324, R:1458): its output, the generation batch in the order the reward
  function saw it (prompt ``i // num_generations`` of the batch: ``RepeatSampler``, G:1280-1316). The rows'
  rewards are what the reward function returned for them (one function, weight 1: G:1579-1640). ``_prepare_inputs``
  (G:1522-1551) shuffles the batch (``shuffle_sequence_dict``) and splits it into ``steps_per_generation``
  micro-batches; each micro-batch row is matched back to its generation row by its prompt ids, completion ids and
  advantage (identical rows are interchangeable for every link), which gives ``row_ids`` and ``group_ids``.
- ``compute_loss`` (G:2939-2943, R:1789): one call per micro-batch from HF ``training_step`` (HF:2090). During it a
  forward hook on the final norm ``model.model.norm`` keeps ``hidden`` [b, T, D]: the fused head reads
  ``last_hidden_state`` (trl/trainer/utils.py:1616-1618, ``add_fused_lm_head``, installed at G:1066-1078) and never
  materialises logits. ``_get_per_token_logps_and_entropies`` (G:1419-1508, R:988-1078) is wrapped so that the
  log-probs of the loss forward (the only call inside ``_compute_loss`` that requires grad, G:3030) get a tensor
  hook, which catches d(backward scalar)/d logp, and its entropies are kept.
- ``accelerator.backward`` (A:2735-2766, called at HF:2126): it receives the loss after HF's optional division by
  ``current_gradient_accumulation_steps`` (HF:2110-2119: GRPOTrainer sets ``loss_is_scaled_for_ga = True``,
  G:285, and divides by itself where its loss type needs it; RLOOTrainer sets ``False``, R:219, so HF divides).
  A tensor hook on it catches c = d(scalar ``.backward()`` ran on)/d(that loss) (accelerate's own division by its
  ``gradient_accumulation_steps``, A:2755-2757); the trace's ``loss`` is c x that loss.
- ``_clip_grad_norm`` (HF:2781, called at HF:1938-1939 after the step's last backward, before
  ``optimizer.step()``): the probe, ``lm_head.weight.grad`` (accumulated, before clipping; one process, nothing to
  all-reduce) with ``lm_head.weight``; the step ends there. ``max_grad_norm`` must be > 0 (1.0 here).

How TRL's tensors map to the trace. TRL keeps [b, C] completion tensors (the last ``C = completion_ids.size(1)``
columns of ``cat(prompt_ids, completion_ids)``, prompts left-padded, completions right-padded, G:3022-3026); they go
to columns T - C .. T - 1, 0 / False elsewhere: ``logp``, ``grad_logp``, ``entropy``, ``old_logp``
(``old_per_token_logps``, or, when TRL skips it, ``per_token_logps.detach()``, which the loss then uses, G:3060-3065),
``ref_logp`` and ``loss_mask`` (``completion_mask``: no tool mask, entropy mask or off-policy mask in these
scenarios). ``attention_mask`` = ``cat(prompt_mask, completion_mask)`` (what the forward attended to),
``prompt_mask`` = TRL's, and ``completion_mask`` is derived here from the ids: the completion columns through the
first EOS (all of them when none), what the policy generated.

Manifest ``config``: TRL's claims for each ``loss_type`` (grpo_config.py:237-277, G:3153-3184):

- ``grpo`` / ``sapo``: each sequence's token mean, averaged over the micro-batch, divided by the accumulation
  steps: agg ``seq_mean_token_mean``, agg_scope ``micro_batch``.
- ``bnpo``: "normalizing with the number of active token in the local batch", divided by the accumulation steps:
  ``token_mean`` per ``micro_batch`` (the convention TRL #3021 was about).
- ``dr_grpo``: sum over the micro-batch / (rows x ``max_completion_length``), divided by the accumulation steps:
  ``seq_mean_token_sum_norm`` (``norm_length`` = max_completion_length), ``micro_batch``.
- ``dapo`` / ``cispo`` / ``vespo``: "normalizing with the number of active token in the global accumulated
  batch": ``num_items_in_batch`` (the generation batch's loss tokens, G:2498) x accumulation steps /
  ``steps_per_generation`` (G:3168-3172): ``token_mean``, agg_scope ``step``.
- ``luspo`` (requires ``importance_sampling_level="sequence"``): the GSPO sequence ratio (mean token log-ratio,
  G:3084-3088) clipped at epsilon, each row's token sum averaged over the micro-batch and divided by the
  accumulation steps: loss ``gspo``, ``seq_mean_token_sum``, ``micro_batch``.

PPO clip ``eps_low`` = ``epsilon``, ``eps_high`` = ``epsilon_high`` (``epsilon`` when unset, G:945-946). CISPO's
weight is ``clamp(r, max=epsilon_high).detach()`` (G:3109-3111): ``cispo_bound`` absolute, no lower bound. The KL
term is ``beta`` x k3 per token (G:3098-3101), multiplied by the ratio when ``use_bias_correction_kl`` (default True,
grpo_config.py:972): ``kl_gradient`` ``bias_corrected``, the ``kl.loss`` form K3 x r (scenario ``dapo_kl_ratio``);
``dapo_kl`` turns it off (``kl_estimator`` k3 alone). Advantages: ``(r - mean_g) / (std_g + 1e-4)`` with the unbiased std (G:2761-2810): ``grpo_eps`` 1e-4,
``grpo_std_ddof`` 1. RLOOTrainer (R:1655-1705): leave-one-out baseline, no normalisation
(``normalize_advantages`` False), the loss ``-min(r A, clip(r) A)`` per *sequence* with r = exp(Σ_t (logp - old)),
averaged over the micro-batch (R:1823-1831), HF dividing by the accumulation steps. At r = 1 (``num_iterations`` 1,
old = logp) its d/d logp_t is -A / (b x M), the token PPO of ``seq_mean_token_sum`` per micro-batch, which is what
the config claims. That token form's loss value counts -A once per token where RLOO counts it once per sequence,
so no trace ``loss`` is recorded for RLOO (its backward scalars are kept in the step's ``extra``).
TRL's own settings are kept under ``config["trl"]``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conformance.records.presets import preset_kwargs
from refimpl.trainer.task import DIGIT0_ID
from conformance.frameworks.recorder_cli import recorder_main
from rlspec.trace import TraceRecorder

COMMON: dict[str, Any] = dict(
    num_generations=4,
    per_device_train_batch_size=2,  # 2 rows per micro-batch: each group of 4 spans two micro-batches
    gradient_accumulation_steps=4,  # 4 micro-batches per optimizer step (steps_per_generation defaults to it)
    num_iterations=2,  # every generation batch trains two steps: the second step's ratios move off 1
    max_completion_length=5,
    temperature=0.7,
    learning_rate=1e-3,
    max_grad_norm=1.0,
    epsilon=0.2,
    scale_rewards="group",
    beta=0.0,
)
ONE_MICRO_BATCH: dict[str, Any] = dict(per_device_train_batch_size=8, gradient_accumulation_steps=1)

SCENARIOS: dict[str, dict[str, Any]] = {
    "dapo": dict(loss_type="dapo", epsilon_high=0.28),
    "dapo_ga1": dict(loss_type="dapo", epsilon_high=0.28, **ONE_MICRO_BATCH),
    "bnpo": dict(loss_type="bnpo"),
    "bnpo_ga1": dict(loss_type="bnpo", **ONE_MICRO_BATCH),
    "grpo": dict(loss_type="grpo"),
    "dr_grpo": dict(loss_type="dr_grpo"),
    "cispo": dict(loss_type="cispo", epsilon_high=5.0),  # the value grpo_config.py:187 recommends for cispo
    "luspo": dict(loss_type="luspo", importance_sampling_level="sequence"),
    "sapo": dict(loss_type="sapo"),
    "vespo": dict(loss_type="vespo"),
    "dapo_kl": dict(loss_type="dapo", epsilon_high=0.28, beta=0.04, use_bias_correction_kl=False),
    # TRL's default KL form; the larger step moves step 1 far enough from the reference and pi_old to tell K x r from K
    "dapo_kl_ratio": dict(loss_type="dapo", epsilon_high=0.28, beta=0.04, use_bias_correction_kl=True, learning_rate=0.03),
    "rloo": dict(trainer="rloo", num_iterations=1, normalize_advantages=False),
}
NOT_RLOO = ("scale_rewards",)  # GRPOConfig fields RLOOConfig does not have

TASK = ("reverse", 3)
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")  # of generation_kwargs (G:1155-1167)

AGG = {"grpo": ("seq_mean_token_mean", "micro_batch"), "sapo": ("seq_mean_token_mean", "micro_batch"),
       "bnpo": ("token_mean", "micro_batch"), "dr_grpo": ("seq_mean_token_sum_norm", "micro_batch"),
       "dapo": ("token_mean", "step"), "cispo": ("token_mean", "step"), "vespo": ("token_mean", "step"),
       "luspo": ("seq_mean_token_sum", "micro_batch")}
LOSS = {"cispo": "cispo", "luspo": "gspo", "sapo": "sapo", "vespo": "vespo"}
TRL_KEYS = ("loss_type", "epsilon", "epsilon_high", "beta", "use_bias_correction_kl", "temperature", "num_generations",
            "scale_rewards", "gradient_accumulation_steps", "per_device_train_batch_size", "num_iterations",
            "max_completion_length", "importance_sampling_level", "normalize_advantages", "sapo_temperature_pos",
            "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")


# ``rlspec e2e --trainer trl``: its GRPOConfig knobs and their defaults (beta > 0: the reference model and the KL
# term; num_iterations 2: TRL recomputes pi_old and the second step's ratios move off 1; temperature != 1)
E2E_DEFAULTS: dict[str, Any] = dict(loss_type="dapo", beta=0.04, num_iterations=2, temperature=0.7,
                                    scale_rewards="group", importance_sampling_level="token")


def grpo_settings(**overrides: Any) -> dict[str, Any]:
    """GRPOTrainer settings: the recorder's common ones (``COMMON``) with ``overrides`` (GRPOConfig fields)."""
    return {"trainer": "grpo", **COMMON, **overrides}


def settings_of(scenario: str) -> dict[str, Any]:
    """The trainer's keyword settings of ``scenario`` (``trainer`` names which: grpo or rloo)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: {scenario!r} not one of {', '.join(SCENARIOS)}")
    out = {"trainer": "grpo", **COMMON, **SCENARIOS[scenario]}
    if out["trainer"] == "rloo":
        for key in NOT_RLOO:
            out.pop(key)
    return out


def claims(settings: dict[str, Any], eos_token_id: int) -> dict[str, Any]:
    """The manifest ``config``: what TRL's code and docs say its step computes under ``settings``."""
    eps = float(settings["epsilon"])
    high = settings.get("epsilon_high")
    high = eps if high is None else float(high)
    common = {"kl_estimator": "k3", "entropy_coef": 0.0, "temperature": float(settings["temperature"]),
              "group_size": int(settings["num_generations"]), "grad_reduce": "mean", "eos_token_id": eos_token_id,
              "trl": {k: settings.get(k) for k in TRL_KEYS}}
    if settings["trainer"] == "rloo":
        return {"algorithm": "rloo", "loss": "ppo", "agg": "seq_mean_token_sum", "agg_scope": "micro_batch",
                "eps_low": eps, "eps_high": high, "kl_coef": 0.0, **common}
    lt = settings["loss_type"]
    if settings["beta"] and settings.get("use_bias_correction_kl"):
        if settings.get("importance_sampling_level", "token") != "token":
            raise ValueError("use_bias_correction_kl: with importance_sampling_level='sequence' the KL term times the "
                             "sequence-level ratio has no kl.loss form a trace config can state")
        common["kl_gradient"] = "bias_corrected"  # K3 x exp(logp - old), differentiated through both (G:3103-3104)
    agg, scope = AGG[lt]
    loss = LOSS.get(lt, "ppo")
    clip = ({"eps_low": None, "eps_high": high, "cispo_bound": "absolute"} if loss == "cispo"
            else {"eps_low": eps, "eps_high": high})
    out = {"algorithm": "grpo", "loss": loss, "agg": agg, "agg_scope": scope, **clip,
           "kl_coef": float(settings["beta"]), **common,
           "grpo_scale": {True: "group", False: "none"}.get(settings["scale_rewards"], settings["scale_rewards"]),
           "grpo_std_ddof": 1, "grpo_eps": 1e-4}
    if agg == "seq_mean_token_sum_norm":
        out["norm_length"] = int(settings["max_completion_length"])
    if loss == "sapo":  # tau = sapo_temperature_pos where A > 0, else _neg (G:3121-3124)
        out["loss_kwargs"] = {"tau_pos": float(settings["sapo_temperature_pos"]),
                              "tau_neg": float(settings["sapo_temperature_neg"])}
    if loss == "vespo":  # get_gamma_weights (G:2972-3018) with GRPOConfig's vespo_* and TRL's log-ratio clamps
        out["loss_kwargs"] = {**{k: float(settings[f"vespo_{k}"]) for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")},
                              **preset_kwargs("trl", "vespo_token_loss")}
    return out


def offline() -> None:
    """No network: the model and tokenizer are built here."""
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(k, "1")


def quiet() -> None:
    """transformers', datasets' and TRL's logs and progress bars off."""
    import datasets
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)


def save_model_dir(folder: str | os.PathLike[str], seed: int) -> Any:
    """The task's random-weight Llama and tokenizer saved to ``folder``; returns the tokenizer."""
    from refimpl.trainer.task import build_model, build_tokenizer

    model = build_model(seed=seed, max_positions=64)
    tokenizer = build_tokenizer()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer


def prompts(task: Any, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [task.prompt_text(d) for d in task.sample_prompts(n, rng)]


class DigitReward:
    """The task's partial-credit reward of the completion ids TRL passes plus the share of them that are digit
    tokens (a dense term: a random-weight model rarely earns task credit, and groups of equal rewards have zero
    advantages, which would leave the gradient links nothing to compare); keeps every call's rewards
    (generation order)."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.calls: list[list[float]] = []
        self.__name__ = "digit_reward"

    def __call__(self, prompts: list[str], completions: list[Any], completion_ids: list[list[int]], **_: Any) -> list[float]:
        out = []
        for p, ids in zip(prompts, completion_ids):
            digits = [int(x) for x in p.split() if x.isdigit()]
            share = sum(1 for t in ids if DIGIT0_ID <= t < DIGIT0_ID + 10) / max(len(ids), 1)
            out.append(float(self.task.score_tokens(digits, ids)[0]) + share)
        self.calls.append(out)
        return out


def _full(x: torch.Tensor | None, T: int, fill: Any = 0) -> torch.Tensor | None:
    """[b, C] (the last C columns) -> [b, T], ``fill`` in the other columns."""
    if x is None:
        return None
    x = x.detach().cpu()
    out = torch.full((x.shape[0], T), fill, dtype=x.dtype)
    out[:, T - x.shape[1]:] = x
    return out


def _through_eos(completion_ids: torch.Tensor, eos: int) -> torch.Tensor:
    """[b, C] bool: each row's completion columns through its first EOS (all of them when it has none)."""
    is_eos = completion_ids == eos
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), completion_ids.shape[1] - 1)
    return torch.arange(completion_ids.shape[1])[None, :] <= first[:, None]


class _Capture:
    """The wrappers on one trainer and the trace they write (see the module docstring)."""

    def __init__(self, trainer: Any, rec: TraceRecorder, reward: DigitReward, *, group_size: int, eos: int,
                 record_loss: bool) -> None:
        self.trainer, self.rec, self.reward = trainer, rec, reward
        self.G, self.eos, self.record_loss = group_size, eos, record_loss
        self.generation: dict[str, torch.Tensor] | None = None  # the current generation batch (generation order)
        self.used: set[int] = set()
        self.current: dict[str, Any] | None = None
        self.in_generation = False
        self.gen_old: torch.Tensor | None = None
        self.gen_hidden: dict[str, torch.Tensor] = {}  # role (old, ref) -> [B_gen, T, D] of that role's forward
        self.gen_weight: dict[str, torch.Tensor] = {}  # role -> the LM-head weight of that forward
        self.step_extra: dict[str, list[Any]] = {}
        self.in_step = False
        self.steps: list[int] = []
        self.step_heads: dict[str, torch.Tensor] = {}
        model = trainer.model
        self.norm = model.model.norm
        self.weight = model.get_output_embeddings().weight
        for name in ("_generate_and_score_completions", "compute_loss", "_get_per_token_logps_and_entropies",
                     "_clip_grad_norm"):
            setattr(trainer, name, self._wrap(name, getattr(trainer, name)))
        trainer.accelerator.backward = self._wrap("backward", trainer.accelerator.backward)

    def _wrap(self, name: str, original: Any) -> Any:
        handler = getattr(self, f"_on_{name.lstrip('_')}")

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return handler(original, *args, **kwargs)

        return wrapper

    # -- rollout -------------------------------------------------------------------------------------
    def _on_generate_and_score_completions(self, original: Any, inputs: Any) -> Any:
        n_calls = len(self.reward.calls)
        self.gen_old, self.gen_hidden, self.gen_weight = None, {}, {}
        self.in_generation = True
        try:
            out = original(inputs)
        finally:
            self.in_generation = False
        if len(self.reward.calls) != n_calls + 1:
            raise RuntimeError(f"the reward function ran {len(self.reward.calls) - n_calls} times for one generation batch")
        rewards = torch.tensor(self.reward.calls[-1], dtype=torch.float32)
        if rewards.shape[0] != out["prompt_ids"].shape[0]:
            raise RuntimeError(f"{rewards.shape[0]} rewards for {out['prompt_ids'].shape[0]} rows")
        self.generation = {"prompt_ids": out["prompt_ids"].detach().cpu(), "completion_ids": out["completion_ids"].detach().cpu(),
                           "advantages": out["advantages"].detach().cpu(), "rewards": rewards,
                           "old_per_token_logps": self.gen_old}
        return out

    def _rows_of(self, inputs: dict[str, Any]) -> torch.Tensor:
        """Each micro-batch row's index in the generation batch (see the module docstring)."""
        gen = self.generation
        assert gen is not None, "a micro-batch before any generation batch"
        rows = []
        for i in range(inputs["prompt_ids"].shape[0]):
            p, c, a = (inputs[k][i].detach().cpu() for k in ("prompt_ids", "completion_ids", "advantages"))
            match = next((j for j in range(gen["prompt_ids"].shape[0]) if j not in self.used
                          and torch.equal(gen["prompt_ids"][j], p) and torch.equal(gen["completion_ids"][j], c)
                          and torch.equal(gen["advantages"][j], a)), None)
            if match is None:
                raise RuntimeError(f"micro-batch row {i} matches no unused row of the generation batch")
            self.used.add(match)
            rows.append(match)
        return torch.tensor(rows)

    # -- one micro-batch -----------------------------------------------------------------------------
    def _on_compute_loss(self, original: Any, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.in_step:
            self.rec.begin_step(int(self.trainer.state.global_step))
            self.in_step, self.step_extra, self.used, self.step_heads = True, {}, set(), {}
        self.current = {"inputs": inputs, "rows": self._rows_of(inputs)}

        def keep_hidden(module: Any, args_: Any, output: torch.Tensor) -> None:
            self.current["hidden"] = output.detach().cpu()

        hook = self.norm.register_forward_hook(keep_hidden)
        try:
            loss = original(model, inputs, *args, **kwargs)
        finally:
            hook.remove()
        self.current["compute_loss"] = float(loss.detach())
        return loss

    def _role_of(self, model: Any) -> str | None:
        """Which log-probs a forward during generation computes: ``old`` (the policy, G:2646-2655, R:1600-1610)
        or ``ref`` (the reference model, G:2710-2720)."""
        if model is self.trainer.model:
            return "old"
        if model is not None and model is getattr(self.trainer, "ref_model", None):
            return "ref"
        return None

    def _on_get_per_token_logps_and_entropies(self, original: Any, *args: Any, **kwargs: Any) -> Any:
        role = self._role_of(args[0] if args else kwargs.get("model")) if self.in_generation else None
        chunks: list[torch.Tensor] = []
        hook = None
        if role is not None and role not in self.gen_hidden:  # the role's forward: keep its final hidden states
            model = args[0] if args else kwargs["model"]
            hook = model.model.norm.register_forward_hook(lambda m, a, o: chunks.append(o.detach().cpu()))
        try:
            out = original(*args, **kwargs)
        finally:
            if hook is not None:
                hook.remove()
        if hook is not None:
            self.gen_hidden[role] = torch.cat(chunks, dim=0)  # TRL runs the forward in chunks of batch_size rows
            self.gen_weight[role] = model.get_output_embeddings().weight.detach().cpu().clone()
        logps, entropies = out[0], out[1]
        if role == "old" and self.gen_old is None:
            self.gen_old = logps.detach().cpu()  # the policy's log-probs at generation (RLOO: R:1600-1610)
        cur = self.current
        if cur is not None and logps.requires_grad and "logp" not in cur:
            cur["logp"] = logps.detach().cpu()
            cur["entropy"] = None if entropies is None else entropies.detach().cpu()

            def keep_grad(g: torch.Tensor) -> None:
                cur["grad_logp"] = g.detach().cpu() + cur.get("grad_logp", 0)

            logps.register_hook(keep_grad)
        return out

    def _on_backward(self, original: Any, loss: torch.Tensor, **kwargs: Any) -> Any:
        cur = self.current
        if cur is None:  # not a policy micro-batch (no other backward runs in these scenarios)
            return original(loss, **kwargs)
        scale: list[torch.Tensor] = []
        loss.register_hook(lambda g: scale.append(g.detach().cpu()))
        result = original(loss, **kwargs)
        inp, rows = cur["inputs"], cur["rows"]
        gen = self.generation
        P, C = inp["prompt_ids"].shape[1], inp["completion_ids"].shape[1]
        T = P + C
        ids = torch.cat([inp["prompt_ids"], inp["completion_ids"]], dim=1).detach().cpu()
        cmask = inp["completion_mask"].detach().cpu().bool()
        pmask = inp["prompt_mask"].detach().cpu().bool()
        old = inp.get("old_per_token_logps")
        if "old_logps" in inp:  # RLOO: the per-token log-probs whose row sums are old_logps (R:1600-1610)
            old = gen["old_per_token_logps"][rows]
            if not torch.allclose((old * cmask).sum(1), inp["old_logps"].detach().cpu(), atol=1e-5):
                raise RuntimeError("RLOO: the generation-time per-token log-probs do not sum to old_logps")
        recomputed = old is not None  # TRL ran a forward for pi_old (its hidden states are kept: old_hidden)
        old = cur["logp"] if old is None else old  # GRPO's loss then uses per_token_logps.detach() (G:3060-3065)
        old_hidden = self.gen_hidden["old"][rows] if recomputed and "old" in self.gen_hidden else None
        ref_hidden = self.gen_hidden["ref"][rows] if inp.get("ref_per_token_logps") is not None and "ref" in self.gen_hidden else None
        for role, h in (("old", old_hidden), ("ref", ref_hidden)):
            if h is not None:
                self.step_heads[role] = self.gen_weight[role]
        grad = cur.get("grad_logp")
        c = float(scale[0])
        rec_loss = loss.detach().cpu() * c
        self.rec.micro_batch(
            input_ids=ids, attention_mask=torch.cat([pmask, cmask], dim=1), prompt_mask=torch.cat([pmask, torch.zeros_like(cmask)], dim=1),
            completion_mask=_full(_through_eos(inp["completion_ids"].detach().cpu(), self.eos), T, False),
            loss_mask=_full(cmask, T, False), logp=_full(cur["logp"], T),
            grad_logp=_full(grad if grad is not None else torch.zeros_like(cur["logp"]), T),
            entropy=_full(cur.get("entropy"), T), old_logp=_full(old, T), ref_logp=_full(inp.get("ref_per_token_logps"), T),
            advantages=inp["advantages"].detach().cpu(), rewards=gen["rewards"][rows], row_ids=rows,
            group_ids=rows // self.G, hidden=cur["hidden"], old_hidden=old_hidden, ref_hidden=ref_hidden,
            loss=rec_loss if self.record_loss else None,
        )
        for key, value in (("compute_loss", cur["compute_loss"]), ("training_step_loss", float(loss.detach())),
                           ("accelerate_backward_scale", c), ("backward_scalar", float(rec_loss)),
                           ("num_items_in_batch", float(inp["num_items_in_batch"]) if "num_items_in_batch" in inp else None)):
            self.step_extra.setdefault(key, []).append(value)
        self.current = None
        return result

    # -- the step's end ------------------------------------------------------------------------------
    def _on_clip_grad_norm(self, original: Any, model: Any) -> Any:
        t = self.trainer
        self.rec.probe("lm_head.weight", self.weight.grad, lm_head_weight=self.weight)
        for role, weight in self.step_heads.items():
            self.rec.lm_head(weight, role=role)
        self.rec.end_step(current_gradient_accumulation_steps=int(t.current_gradient_accumulation_steps),
                          args_gradient_accumulation_steps=int(t.args.gradient_accumulation_steps),
                          steps_per_generation=int(t.args.steps_per_generation),
                          accelerator_gradient_accumulation_steps=int(t.accelerator.gradient_accumulation_steps),
                          num_processes=int(t.accelerator.num_processes), **self.step_extra)
        self.steps.append(int(t.state.global_step))
        self.in_step = False
        return original(model)


def record(out_dir: str | os.PathLike[str], scenario: str, steps: int = 4, seed: int = 0,
           settings: dict[str, Any] | None = None) -> Path:
    """Train TRL's trainer ``steps`` optimizer steps under ``SCENARIOS[scenario]`` (or, when given, the full
    keyword ``settings`` of :func:`settings_of`'s form, ``scenario`` then only names the folder) and write the
    trace to ``out_dir/scenario``; returns that folder."""
    settings = dict(settings_of(scenario) if settings is None else settings)
    offline()
    import trl
    from datasets import Dataset

    from refimpl.trainer.task import EOS_ID, DigitTask

    quiet()
    kind = settings.pop("trainer")
    if kind == "rloo":
        from trl import RLOOConfig as Config
        from trl import RLOOTrainer as Trainer
    else:
        from trl import GRPOConfig as Config
        from trl import GRPOTrainer as Trainer
    task = DigitTask(TASK[0], TASK[1], TASK[1])
    trace_dir = Path(out_dir) / scenario
    reward = DigitReward(task)
    with tempfile.TemporaryDirectory(prefix="rlspec-trl-") as tmp:
        model_dir = os.path.join(tmp, "model")
        tokenizer = save_model_dir(model_dir, seed)
        args = Config(output_dir=os.path.join(tmp, "run"), max_steps=steps, report_to=[], use_cpu=True, bf16=False,
                      save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=seed, **settings)
        per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps // args.num_generations
        texts = prompts(task, max(per_step * steps, per_step), seed)
        resolved = {"trainer": kind, **{k: getattr(args, k, None) for k in TRL_KEYS}}  # TRL's defaults filled in
        rec = TraceRecorder(trace_dir, config=claims(resolved, EOS_ID),
                            trainer={"name": "trl", "version": trl.__version__, "scenario": scenario,
                                     "trainer": f"trl.{Trainer.__name__}", "seed": seed,
                                     "model": "random LlamaForCausalLM (refimpl.trainer.task.build_model: 2 layers, "
                                              "hidden 64, vocab 14, untied head)"})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = Trainer(model=model_dir, reward_funcs=reward, args=args,
                              train_dataset=Dataset.from_dict({"prompt": texts}), processing_class=tokenizer)
            rec.config["sampling"] = {k: trainer.generation_kwargs.get(k) for k in SAMPLING_KEYS}
            capture = _Capture(trainer, rec, reward, group_size=int(args.num_generations), eos=EOS_ID,
                               record_loss=kind != "rloo")
            with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its log dicts
                trainer.train()
    if capture.steps != list(range(steps)):
        raise RuntimeError(f"{scenario}: recorded steps {capture.steps}, expected 0..{steps - 1}")
    return trace_dir


def main(argv: list[str] | None = None) -> int:
    return recorder_main(argv, description=__doc__.splitlines()[0], scenarios=SCENARIOS, record=record,
                         default_steps=4)


if __name__ == "__main__":
    sys.exit(main())
