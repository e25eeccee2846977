"""Every knob of the refimpl trainer, with its default and what it does.

The defaults train the tiny random-weight Llama of :mod:`refimpl.trainer.task` on the digit-reversal
task to a clearly learned level on a 2-core CPU in a few minutes (README, "End-to-end II").
A *step* is one rollout batch: sample ``group_size`` completions for each of ``prompts_per_step``
prompts, score them, compute advantages, then ``epochs`` passes over the batch, each pass split into
``num_minibatches`` optimizer updates, each update accumulated over ``grad_accum`` micro-batches.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refimpl.offpolicy import REJECTION_LEVELS
from refimpl.trainer.prompt_file import resolve_reward_spec

ALGOS = ("grpo", "rloo", "reinforce", "ppo")
LOSSES = ("ppo", "gspo", "cispo")
AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")
GRPO_SCALES = ("group", "batch", "none")
KL_ESTIMATORS = ("k1", "k2", "k3")
TASKS = ("reverse", "sort", "copy")
# Asynchronous mode: the learner's correction of the actors' (stale, other-precision) samples.
CORRECTIONS = ("none", "tis_token", "tis_sequence", "mis_token", "rejection", "decoupled")
ACTOR_DTYPES = ("float32", "bfloat16")
ENGINES = ("hf", "vllm")
ENGINE_LOGPROBS = ("processed_logprobs", "raw_logprobs")
BEHAV_FORMS = ("sampling", "full")  # the form of the behaviour log-probs the rollout actors record
# vLLM 0.32.0 CPU attention (v1/attention/backends/cpu_attn.py:69-70 get_supported_head_sizes)
VLLM_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
OWN_MAX_NEW_TOKENS = 64  # the completion budget of a local model's run when max_new_tokens is None

# Per-loss clip defaults when eps_low / eps_high are None (the spec's canonical defaults).
LOSS_CLIP_DEFAULTS: dict[str, tuple[float | None, float]] = {
    "ppo": (0.2, 0.2),
    "gspo": (3e-4, 4e-4),
    "cispo": (None, 0.28),
}


@dataclass
class TrainConfig:
    """The trainer's configuration (``rlspec train --help`` shows the same knobs as flags)."""

    # --- run ------------------------------------------------------------------------------------
    seed: int = 0
    """Seeds the model initialisation, the prompts of every step and the sampling of every step
    (each step's randomness is derived from (seed, step, rank), so a resumed run replays exactly)."""
    steps: int = 400
    """Rollout batches (outer steps) to train for."""
    out_dir: str | None = None
    """Where metrics.jsonl, summary.json, curves.png and checkpoints go (None: nothing written)."""
    device: str = "auto"
    """"auto" (CUDA when available, else CPU), "cpu" or "cuda"/"cuda:N"."""
    cp_size: int = 1
    """Context parallelism: the loss columns of every sequence split over cp_size ranks (refimpl.context_parallel;
    the model runs whole on each rank), so world size = data-parallel size x cp_size. Token-level losses (not
    gspo), synchronous, no critic."""
    checkpoint_every: int = 50
    """Write a checkpoint every N steps (and at the end); 0 disables periodic checkpoints."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep."""
    target_reward: float = 0.9
    """The "learned" threshold: the first step where the 10-step moving average of the mean reward
    reaches it is reported (steps and wall seconds) in summary.json."""

    # --- task and model -------------------------------------------------------------------------
    task: str = "reverse"
    """"reverse" (write the digits backwards), "sort" (ascending) or "copy"."""
    min_digits: int = 3
    """Shortest digit string of a prompt."""
    max_digits: int = 3
    """Longest digit string of a prompt (prompts are left-padded to max_digits + 1 tokens)."""
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    init_std: float = 0.02
    """``initializer_range`` of the random-weight Llama."""
    model: str | None = None
    """A local transformers causal-LM folder (weights and tokenizer) to train instead of the random-weight Llama
    (with ``prompts`` and ``reward``; the digit-task and model-shape knobs above then do not apply). See
    docs/end-to-end.md, "Your own model"."""
    prompts: str | None = None
    """With ``model``: a JSON-lines file of prompts ({"prompt": text} or {"messages": chat}, other keys are
    columns for the reward), taken in shuffled passes."""
    reward: str | None = None
    """With ``model``: the reward function, 'module:function' or 'path/to/file.py:function', called as TRL's
    reward functions are: reward(prompts, completions, completion_ids, **columns) -> list[float]."""

    # --- rollout --------------------------------------------------------------------------------
    prompts_per_step: int = 32
    """Prompts per step over all ranks (must divide by the world size)."""
    group_size: int = 8
    """Completions sampled per prompt (a GRPO/RLOO group: contiguous rows)."""
    temperature: float = 1.0
    """Sampling temperature; log-probs are computed at the same temperature (no top-k/top-p)."""
    max_new_tokens: int | None = None
    """Completion budget (None: max_digits + 2; 64 with ``model``). Completions end at the first EOS, which is trained."""

    # --- advantages -----------------------------------------------------------------------------
    algo: str = "grpo"
    """"grpo" (group-normalised), "rloo" (leave-one-out), "reinforce" (with reinforce_baseline) or
    "ppo" (value head, GAE on per-token KL-shaped rewards with the score on the last valid token)."""
    grpo_scale: str = "group"
    """grpo_advantages(scale=): "group" std, "batch" std or "none" (Dr. GRPO)."""
    grpo_std_ddof: int = 1
    grpo_eps: float = 1e-6
    reinforce_baseline: str = "batch_mean"
    """reinforce_advantages(baseline=): "batch_mean" or "none"."""
    gamma: float = 1.0
    """GAE discount (algo "ppo")."""
    lam: float = 0.95
    """GAE lambda (algo "ppo")."""
    whiten_advantages: bool = True
    """Whiten GAE advantages over the valid tokens of the whole (all-rank) batch (algo "ppo")."""
    kl_reward_coef: float = 0.02
    """beta of the per-token reward -beta*KL(old || ref) (rlhf_token_rewards; algo "ppo" only)."""
    kl_reward_estimator: str = "k1"

    # --- loss -----------------------------------------------------------------------------------
    loss: str = "ppo"
    """Policy token loss: "ppo" (clipped ratio), "gspo" (sequence ratio) or "cispo" (clipped IS weight)."""
    eps_low: float | None = None
    """Lower clip (None: the loss's spec default: ppo 0.2, gspo 3e-4, cispo no lower bound)."""
    eps_high: float | None = None
    """Upper clip (None: ppo 0.2, gspo 4e-4, cispo 0.28); asymmetric clipping = eps_high != eps_low."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 for A < 0 (loss "ppo" only)."""
    kl_coef: float | None = None
    """beta of the KL-to-reference penalty added to the token loss (kl_penalty, kl_estimator). None:
    0.05 for grpo, whose advantages are normalised to unit scale; 0.01 for rloo and reinforce, whose
    advantages are raw reward differences (about 5x smaller here, so the same beta would weigh 5x more);
    0 for ppo, whose KL is in the per-token reward (kl_reward_coef). Without it the stop token dies
    out before the digits are learned and the policy collapses onto never stopping."""
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    """Entropy bonus: the token loss gets -entropy_coef * H_t (aggregated like the rest)."""
    agg: str = "token_mean"
    """Aggregation mode of the token loss (aggregate(mode=)); global counts over micro-batches and ranks."""
    norm_length: float | None = None
    """Dr. GRPO constant for agg "seq_mean_token_sum_norm" (None: max_new_tokens)."""
    vf_coef: float = 0.5
    """Weight of the value loss (algo "ppo")."""
    value_clip: float | None = 0.2
    """value_token_loss(clip=) (algo "ppo"); None: unclipped."""
    value_agg: str = "token_mean"
    """Aggregation mode of the value loss."""

    # --- optimisation ---------------------------------------------------------------------------
    epochs: int = 1
    """Passes over each rollout batch."""
    num_minibatches: int = 2
    """Optimizer updates per pass (contiguous slices of whole rows; the first one of the first pass
    is exactly on-policy: ratio 1)."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer update."""
    lr: float = 1e-3
    """AdamW learning rate (constant)."""
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm to this (None: no clipping; the norm is logged either way)."""

    # --- asynchronous actor-learner training (docs/async.md) ----------------------------------
    asynchronous: bool = False
    """Ray rollout actors generate while the learner trains (``rlspec train --async``): the batch of
    step k is sampled with the newest weights an actor has, at most max_staleness versions behind
    (version v = the weights after v steps); the learner recomputes the old (proximal) log-probs and
    applies ``correction`` against the behaviour log-probs the actor recorded at sampling time."""
    max_staleness: int = 1
    """Bound on k - v for the batch of step k (an actor that would run further ahead waits).
    0: every batch is sampled with the learner's current weights (the synchronous schedule)."""
    num_actors: int = 1
    """Ray rollout actors (each holds a copy of the policy in actor_dtype and samples whole batches)."""
    actor_dtype: str = "float32"
    """Precision of the actors' model: "bfloat16" makes the engine differ from the float32 learner
    (rho = pi_old / pi_behav != 1 even at staleness 0), as a vLLM/trainer pair does."""
    actor_threads: int = 1
    """torch threads of each actor process."""
    engine: str = "hf"
    """What the rollout actors sample with: "hf" (a transformers copy of the policy, ``model.generate``) or
    "vllm" (a vLLM engine per actor, from ``rlspec frameworks install vllm``; weights synced into the running
    engine after every update, behaviour log-probs from vLLM's processed_logprobs). vLLM needs a head size
    hidden_size / num_heads of 32, 64, 80, ... (e.g. --num-heads 2)."""
    engine_logprobs: str = "processed_logprobs"
    """Which log-probs the vLLM engine reports as behaviour log-probs: "processed_logprobs" (under the tempered
    distribution each token was drawn from: logprob.sampling) or "raw_logprobs" (vLLM's default: the untempered
    log-softmax, the wrong behaviour log-probs at temperature != 1; --verify's engine_logp check fails on them)."""
    top_k: int = 0
    """Truncation of the rollout actors' sampler (asynchronous mode): keep the top_k most probable tokens (ties
    kept; 0: no top-k). The actors then sample from the tempered, truncated distribution of logprob.sampling."""
    top_p: float = 1.0
    """... and the smallest nucleus of mass top_p, after top-k (1: no top-p)."""
    behav_logprobs: str = "sampling"
    """The form of the behaviour log-probs the actors record: "sampling" (under the truncated distribution each
    token was drawn from: logprob.sampling, vLLM's processed_logprobs) or "full" (the full-support tempered
    log-softmax: logprob.token; transformers actors, or vLLM without truncation). Under truncation, "sampling"
    against the learner's full-support log-probs puts the kept mass S into rho = pi_old / pi_behav (rho = S < 1
    on-policy: TRL #6789, vLLM #42259); keep_sampling_mask or "full" removes it. The run logs which."""
    keep_sampling_mask: bool = False
    """DeepSeek-V3.2's keep sampling mask: the actors record the support each token was drawn from ([B, T, V]
    bool) and the learner renormalises its current, old and reference log-probs over it (support_logprobs), so
    that rho compares two distributions over the same tokens. Needs behav_logprobs "sampling"; the entropy stays
    the full-support one."""
    engine_check: bool = False
    """The actors also return their own transformers forward of each batch (float32 and bfloat16 logits), so
    that ``--verify`` checks the engine's behaviour log-probs against logprob.sampling of the actor's weights
    (``rlspec train --verify`` sets it with engine "vllm")."""
    correction: str = "none"
    """The learner's off-policy correction (spec v1.1): "none" (PPO against the recomputed old
    log-probs, behaviour log-probs ignored), "tis_token" / "tis_sequence" (truncated importance
    weights min(rho, correction_high), per token / per sequence product: rollout_is_weights),
    "mis_token" (masked IS: rho kept inside [correction_low, correction_high], 0 outside),
    "rejection" (tokens or rows with rho outside the bounds leave the loss and its denominator:
    rollout_rejection_mask, level rejection_level) or "decoupled" (AReaL's decoupled PPO: ratio
    against the recomputed proximal policy, weight pi_prox / pi_behav capped at behav_cap).
    Every correction but "none" needs loss "ppo"."""
    correction_low: float | None = None
    """Lower bound of the IS weight / kept ratio (None: none for TIS, 0.5 for mis_token and rejection)."""
    correction_high: float = 2.0
    """Upper bound: the TIS cap, the masked-IS and rejection upper bound."""
    rejection_level: str = "token"
    """rollout_rejection_mask(level=) of correction "rejection": per token, or whole rows by the sum /
    mean / max of their log-ratios or all of their tokens."""
    behav_cap: float | None = None
    """Decoupled PPO: cap on the behaviour weight pi_prox / pi_behav (None: uncapped)."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes stored with the run (not used by the trainer)."""

    # -------------------------------------------------------------------------------------------
    def resolved(self) -> "TrainConfig":
        """A copy with the None defaults filled in and every value checked (raises ValueError)."""
        c = dataclasses.replace(self, extra=dict(self.extra))
        _choice("algo", c.algo, ALGOS)
        _choice("loss", c.loss, LOSSES)
        _choice("agg", c.agg, AGG_MODES)
        _choice("value_agg", c.value_agg, AGG_MODES)
        _choice("grpo_scale", c.grpo_scale, GRPO_SCALES)
        _choice("kl_estimator", c.kl_estimator, KL_ESTIMATORS)
        _choice("kl_reward_estimator", c.kl_reward_estimator, KL_ESTIMATORS)
        _choice("reinforce_baseline", c.reinforce_baseline, ("none", "batch_mean"))
        _choice("task", c.task, TASKS)
        _choice("correction", c.correction, CORRECTIONS)
        _choice("actor_dtype", c.actor_dtype, ACTOR_DTYPES)
        _choice("engine", c.engine, ENGINES)
        _choice("engine_logprobs", c.engine_logprobs, ENGINE_LOGPROBS)
        _choice("behav_logprobs", c.behav_logprobs, BEHAV_FORMS)
        _choice("rejection_level", c.rejection_level, REJECTION_LEVELS)
        low, high = LOSS_CLIP_DEFAULTS[c.loss]
        if c.eps_low is None:
            c.eps_low = low
        if c.eps_high is None:
            c.eps_high = high
        own = [name for name in ("model", "prompts", "reward") if getattr(c, name) is not None]
        if own and len(own) < 3:
            missing = [name for name in ("model", "prompts", "reward") if name not in own]
            raise ValueError(f"TrainConfig: {', '.join(missing)}: needed with {', '.join(own)} (a local model is "
                             "trained on a prompts file with a reward function: model, prompts and reward together)")
        if own:
            for name in ("model", "prompts"):
                path = Path(getattr(c, name)).expanduser().resolve()
                if not (path.is_dir() if name == "model" else path.is_file()):
                    raise ValueError(f"TrainConfig: {name}: no {'folder' if name == 'model' else 'file'} {getattr(c, name)}")
                setattr(c, name, str(path))
            c.reward = resolve_reward_spec(c.reward)
        if c.max_new_tokens is None:
            c.max_new_tokens = c.max_digits + 2 if not own else OWN_MAX_NEW_TOKENS
        if c.kl_coef is None:
            c.kl_coef = {"grpo": 0.05, "rloo": 0.01, "reinforce": 0.01, "ppo": 0.0}[c.algo]
        if c.norm_length is None:
            c.norm_length = float(c.max_new_tokens)
        if c.dual_clip is not None and c.loss != "ppo":
            raise ValueError(f"TrainConfig: dual_clip: only for loss 'ppo', got loss {c.loss!r}")
        for name in ("steps", "prompts_per_step", "group_size", "epochs", "num_minibatches", "grad_accum",
                     "max_new_tokens", "min_digits", "max_digits", "hidden_size", "num_layers", "num_heads"):
            if int(getattr(c, name)) < 1:
                raise ValueError(f"TrainConfig: {name}: expected >= 1, got {getattr(c, name)!r}")
        if c.min_digits > c.max_digits:
            raise ValueError(f"TrainConfig: min_digits: expected <= max_digits = {c.max_digits}, got {c.min_digits}")
        if c.correction_low is None and c.correction in ("mis_token", "rejection"):
            c.correction_low = 0.5
        if int(c.max_staleness) < 0:
            raise ValueError(f"TrainConfig: max_staleness: expected >= 0, got {c.max_staleness!r}")
        for name in ("num_actors", "actor_threads"):
            if int(getattr(c, name)) < 1:
                raise ValueError(f"TrainConfig: {name}: expected >= 1, got {getattr(c, name)!r}")
        if not c.asynchronous and (c.correction != "none" or c.actor_dtype != "float32"):
            raise ValueError(f"TrainConfig: correction={c.correction!r}, actor_dtype={c.actor_dtype!r}: only for the "
                             "asynchronous mode (asynchronous=True, rlspec train --async); the synchronous trainer "
                             "samples with the learner's own weights")
        if int(c.top_k) < 0 or not 0.0 < float(c.top_p) <= 1.0:
            raise ValueError(f"TrainConfig: top_k, top_p: expected top_k >= 0 and 0 < top_p <= 1, got {c.top_k!r}, {c.top_p!r}")
        truncated = c.top_k > 0 or c.top_p < 1.0
        if (truncated or c.keep_sampling_mask) and not c.asynchronous:
            raise ValueError(f"TrainConfig: top_k={c.top_k!r}, top_p={c.top_p!r}, keep_sampling_mask={c.keep_sampling_mask!r}: "
                             "truncated sampling is for the asynchronous mode's rollout actors (asynchronous=True, "
                             "rlspec train --async); the synchronous trainer samples from the full tempered distribution "
                             "its log-probs describe")
        if c.keep_sampling_mask and c.behav_logprobs != "sampling":
            raise ValueError("TrainConfig: keep_sampling_mask: renormalises the learner's log-probs over the sampled "
                             "support, so the behaviour log-probs must be the sampling ones (behav_logprobs 'sampling'), "
                             f"got behav_logprobs {c.behav_logprobs!r}")
        if c.engine == "vllm" and truncated and (c.behav_logprobs == "full" or c.engine_logprobs != "processed_logprobs"):
            raise ValueError(f"TrainConfig: behav_logprobs, engine_logprobs: vLLM reports no full-support tempered "
                             f"log-probs of a truncated sampler (top_k={c.top_k}, top_p={c.top_p}): use behav_logprobs "
                             f"'sampling' with engine_logprobs 'processed_logprobs', got {c.behav_logprobs!r}, "
                             f"{c.engine_logprobs!r}")
        if c.engine != "hf" and not c.asynchronous:
            raise ValueError(f"TrainConfig: engine: {c.engine!r} samples in the asynchronous mode's rollout actors "
                             "(asynchronous=True, rlspec train --async); the synchronous trainer samples with its own weights")
        if c.engine == "vllm" and c.model is not None:
            head = _head_size(c.model)
            if head is not None and head not in VLLM_HEAD_SIZES:
                raise ValueError(f"TrainConfig: model: engine 'vllm' needs a head size in {VLLM_HEAD_SIZES} (vLLM's CPU "
                                 f"attention), {c.model} has {head}")
        if c.engine == "vllm" and c.model is None and (c.hidden_size % c.num_heads or c.hidden_size // c.num_heads not in VLLM_HEAD_SIZES):
            raise ValueError(f"TrainConfig: num_heads: engine 'vllm' needs a head size hidden_size / num_heads in "
                             f"{VLLM_HEAD_SIZES} (vLLM's CPU attention), got {c.hidden_size} / {c.num_heads}; "
                             f"e.g. num_heads {max(1, c.hidden_size // 32)}")
        if c.correction != "none" and c.loss != "ppo":
            raise ValueError(f"TrainConfig: correction: {c.correction!r} corrects the clipped PPO term "
                             f"(corrected_policy_loss, decoupled_ppo_token_loss); needs loss 'ppo', got {c.loss!r}")
        if not c.correction_high > 0 or (c.correction_low is not None and not 0 <= c.correction_low <= c.correction_high):
            raise ValueError(f"TrainConfig: correction_low, correction_high: expected 0 <= low <= high, high > 0, "
                             f"got {c.correction_low!r}, {c.correction_high!r}")
        if c.behav_cap is not None and not c.behav_cap > 0:
            raise ValueError(f"TrainConfig: behav_cap: expected > 0 or None, got {c.behav_cap!r}")
        if not c.temperature > 0:
            raise ValueError(f"TrainConfig: temperature: expected > 0, got {c.temperature!r}")
        if int(c.cp_size) < 1:
            raise ValueError(f"TrainConfig: cp_size: expected >= 1, got {c.cp_size!r}")
        if c.cp_size > 1 and (c.loss == "gspo" or c.algo == "ppo" or c.asynchronous):
            raise ValueError(f"TrainConfig: cp_size: {c.cp_size} needs a token-level loss without a critic in the "
                             f"synchronous trainer (not loss 'gspo', algo 'ppo' or asynchronous), got loss {c.loss!r}, "
                             f"algo {c.algo!r}, asynchronous {c.asynchronous}")
        if c.algo in ("grpo", "rloo") and c.group_size < 2:
            raise ValueError(f"TrainConfig: group_size: {c.algo} needs groups of >= 2, got {c.group_size}")
        return c

    def rows_per_micro_batch(self, world_size: int) -> int:
        """Rows of one micro-batch on one rank (raises when the batch does not split evenly)."""
        if self.prompts_per_step % world_size:
            raise ValueError(f"TrainConfig: prompts_per_step: {self.prompts_per_step} does not divide by the world size {world_size}")
        local = self.prompts_per_step // world_size * self.group_size
        parts = self.num_minibatches * self.grad_accum
        if local % parts:
            raise ValueError(
                f"TrainConfig: num_minibatches * grad_accum = {parts} does not divide the {local} rows per rank "
                f"(prompts_per_step / world_size * group_size)"
            )
        return local // parts

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"TrainConfig: unknown keys {unknown}")
        return cls(**d)


def _head_size(model_dir: str) -> int | None:
    """The attention head size in a model folder's config.json (None when it does not say)."""
    path = Path(model_dir) / "config.json"
    cfg = json.loads(path.read_text()) if path.is_file() else {}
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        return int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    return None


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"TrainConfig: {name}: expected one of {list(choices)}, got {value!r}")


def field_help() -> dict[str, str]:
    """{field name: its documentation} from the attribute docstrings above (for the CLI help)."""
    import ast
    import inspect
    import textwrap

    src = textwrap.dedent(inspect.getsource(TrainConfig))
    body = ast.parse(src).body[0].body
    out: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant) and isinstance(nxt.value.value, str):
                out[node.target.id] = " ".join(nxt.value.value.split())
    return out


__all__ = ["TrainConfig", "CORRECTIONS", "ACTOR_DTYPES", "REJECTION_LEVELS", "ALGOS", "LOSSES", "AGG_MODES", "GRPO_SCALES", "KL_ESTIMATORS", "TASKS", "field_help"]
