"""The TRL adapter: Hugging Face TRL's RL math, called through TRL itself, in spec v1 conventions.

What is called (trl 1.16.0 wheel; paths relative to the package root ``trl/``):

| spec function | TRL code path |
|---|---|
| ``token_logprobs`` | ``trainer/utils.py::selective_log_softmax`` (:538) |
| ``token_entropy`` | ``trainer/utils.py::entropy_from_logits`` (:604) on ``logits / temperature`` (the division TRL's own ``selective_log_softmax_and_entropy``, :672, does first) |
| ``token_logprobs_from_hidden`` / ``token_entropy_from_hidden`` | ``trainer/utils.py::add_fused_lm_head`` (:1548), i.e. ``kernels/chunked_logprob.py::ChunkedLogProbFunction``, the fused LM head the GRPO/RLOO trainers score tokens with |
| ``grpo_advantages`` | ``GRPOTrainer._generate_and_score_completions`` (``trainer/grpo_trainer.py:2324``; advantages at :2761-2810) |
| ``rloo_advantages`` | ``RLOOTrainer._generate_and_score_completions`` (``trainer/rloo_trainer.py``; advantages at :1664-1699) |

Extras that are not core-API functions (checked by ``conformance/trl_checks.py``):
``grpo_loss`` (``GRPOTrainer._compute_loss``, ``grpo_trainer.py:3020-3292``) and ``rloo_loss``
(``RLOOTrainer._compute_loss``, ``rloo_trainer.py:1794-1863``), driven on a tiny random-weight Llama with
the gradient captured at the per-token log-probs, the final hidden states and the LM-head weight;
``grpo_current_logps`` / ``rloo_current_logps``, ``grpo_loss_types`` (read from the installed
``GRPOConfig``), ``selective_log_softmax_and_entropy`` and ``nanstd``.

Conventions this adapter converts (the checks never do):
- TRL scores ``logits[:, :-1]`` against ``input_ids[:, 1:]``; the spec is token-aligned (position t is
  about ``input_ids[:, t]``). Outputs are put back at ``t`` with exact zeros where ``mask`` is False.
- Only the positions that predict a valid token are handed to TRL (``logits[:, :-1][mask[:, 1:]]``),
  as TRL's own fused head does on Triton devices (``utils.py:1642-1658``, ``compact``). Masked
  positions therefore never reach TRL, whatever they hold.
- The trainers take rewards from reward functions, not tensors: the adapter registers one reward
  function that looks the requested reward up by the row index carried in the dataset column
  ``rlspec_index``, so TRL's rewards equal the requested ones exactly (float32, TRL's reward dtype).
- TRL rejects ``num_generations < 2`` in training (``grpo_config.py:1137``). A group size of 1 is run in
  eval mode with ``num_generations_eval=1``, the one place TRL computes size-1 groups.

Everything runs on CPU and offline: the model is a ``LlamaForCausalLM`` built from a config with random
weights (peer-conventions §11), saved to a temporary folder so the trainers can load it (and the
reference model) by path; the tokenizer is a word-level ``tokenizers`` tokenizer built in memory.
Importing this module never imports TRL; constructing the adapter does, and a missing TRL raises
``AdapterLoadError("... cannot import ...")`` so ``rlspec check`` shows a clean "not installed" row.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
import types
import warnings
from typing import Any

import torch

from conformance.adapters.loading import AdapterLoadError

# The tiny policy (peer-conventions §11 item 2). `initializer_range` is raised from 0.02 so that the
# random LM head gives logits of order 1 (a non-uniform softmax) instead of near-uniform ones.
TINY_LLAMA = dict(
    vocab_size=32,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=None,
    initializer_range=0.5,
    tie_word_embeddings=False,
)
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
MODEL_SEED = 1234
_PROMPT = "w0 w1 w2"


def _fail(fn: str, arg: str, message: str, exc: type[Exception] = ValueError) -> Exception:
    return exc(f"{fn}: {arg}: {message}")


def _check_mask(fn: str, mask: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or mask.ndim != 2 or tuple(mask.shape) != shape:
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise _fail(fn, "mask", f"expected [B, T] = {list(shape)}, got {got}")
    if mask.dtype != torch.bool:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise _fail(fn, "mask", "non-binary values (expected bool or exactly 0/1)")
        mask = mask != 0
    if mask.shape[1] and bool(mask[:, 0].any()):
        raise _fail(fn, "mask", "mask[:, 0] must be False (the first token has no prediction)")
    return mask


def _check_float(fn: str, name: str, x: Any, ndim: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise _fail(fn, name, f"expected a torch.Tensor, got {type(x).__name__}", TypeError)
    if not x.is_floating_point():
        raise _fail(fn, name, f"expected a floating dtype, got {x.dtype}", TypeError)
    if x.ndim != ndim:
        raise _fail(fn, name, f"expected {ndim}-D, got shape {tuple(x.shape)}")
    return x


def _check_temperature(fn: str, temperature: float) -> float:
    if not temperature > 0:
        raise _fail(fn, "temperature", f"expected > 0, got {temperature!r}")
    return float(temperature)


def _check_groups(fn: str, rewards: Any, group_size: Any) -> tuple[torch.Tensor, int]:
    rewards = _check_float(fn, "rewards", rewards, 1)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise _fail(fn, "group_size", f"expected an integer >= 1, got {group_size!r}")
    if rewards.shape[0] % group_size:
        raise _fail(fn, "group_size", f"{group_size} does not divide B = {rewards.shape[0]}")
    if not bool(torch.isfinite(rewards).all()):
        raise _fail(fn, "rewards", "non-finite value")
    return rewards, group_size


def _scatter_tokens(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[N] values at the valid positions of `valid` [B, T-1] -> token-aligned [B, T] (column 0 and
    invalid positions exactly 0; differentiable)."""
    B = valid.shape[0]
    tail = values.new_zeros(valid.shape).masked_scatter(valid, values)
    return torch.cat([values.new_zeros(B, 1), tail], dim=1)


class _HeadOnlyBackbone(torch.nn.Module):
    """A backbone that returns the hidden states it was given (set just before each call)."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden: torch.Tensor | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return types.SimpleNamespace(last_hidden_state=self.hidden)


class TRLAdapter:
    """Spec v1 adapter for TRL (see the module docstring for what each function calls)."""

    name = "trl"
    spec_version = "v1"
    array_api = "torch"
    # Every dtype: TRL's trainers hold rewards in float32 and its fused head accumulates in float32
    # whatever the input dtype, and its softmax runs in the logits' dtype; the runner reports those
    # as precision findings beside the semantic verdict (api.md, "Precision").
    dtypes = ("float64", "float32", "bfloat16")
    precision_notes = {
        "token_logprobs": "selective_log_softmax computes the softmax in the logits' dtype (bfloat16)",
        "token_entropy": "entropy_from_logits computes the softmax in the logits' dtype (bfloat16)",
    }
    supports_grad = True
    accepts_variants = False

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        try:
            import trl
            from trl.trainer import utils as trl_utils
        except ImportError as exc:  # the "not installed" row of `rlspec check`
            raise AdapterLoadError(f"adapter 'trl': cannot import 'trl': {exc}") from exc
        self._trl = trl
        self._utils = trl_utils
        self.version = trl.__version__
        self.framework_available = True
        self._world: _TinyWorld | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------------------------------
    # logprob.token / logprob.entropy: trl/trainer/utils.py selective_log_softmax, entropy_from_logits
    # ------------------------------------------------------------------------------------------

    def _shifted(self, fn: str, logits: torch.Tensor, mask: Any) -> tuple[torch.Tensor, torch.Tensor]:
        logits = _check_float(fn, "logits", logits, 3)
        mask = _check_mask(fn, mask, tuple(logits.shape[:2]))
        valid = mask[:, 1:]
        return logits[:, :-1][valid], valid

    def token_logprobs(self, logits: torch.Tensor, input_ids: torch.Tensor, mask: Any, *, temperature: float = 1.0) -> torch.Tensor:
        fn = "token_logprobs"
        temperature = _check_temperature(fn, temperature)
        if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point():
            raise _fail(fn, "input_ids", "expected an integer tensor", TypeError)
        rows, valid = self._shifted(fn, logits, mask)
        B, T = valid.shape[0], valid.shape[1] + 1
        if rows.shape[0] == 0:
            return torch.zeros(B, T, dtype=logits.dtype)
        targets = input_ids[:, 1:][valid].long()
        lp = self._utils.selective_log_softmax(rows, targets, temperature=temperature)
        return _scatter_tokens(lp, valid)

    def token_entropy(self, logits: torch.Tensor, mask: Any, *, temperature: float = 1.0) -> torch.Tensor:
        fn = "token_entropy"
        temperature = _check_temperature(fn, temperature)
        rows, valid = self._shifted(fn, logits, mask)
        B, T = valid.shape[0], valid.shape[1] + 1
        if rows.shape[0] == 0:
            return torch.zeros(B, T, dtype=logits.dtype)
        if temperature != 1.0:  # as selective_log_softmax_and_entropy does before entropy_from_logits
            rows = rows / temperature
        return _scatter_tokens(self._utils.entropy_from_logits(rows), valid)

    def selective_log_softmax_and_entropy(self, logits: torch.Tensor, input_ids: torch.Tensor, mask: Any, *, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """``trl.trainer.utils.selective_log_softmax_and_entropy`` in spec conventions:
        ``(token_logprobs, token_entropy)``."""
        fn = "selective_log_softmax_and_entropy"
        temperature = _check_temperature(fn, temperature)
        rows, valid = self._shifted(fn, logits, mask)
        B, T = valid.shape[0], valid.shape[1] + 1
        if rows.shape[0] == 0:
            z = torch.zeros(B, T, dtype=logits.dtype)
            return z, z.clone()
        targets = input_ids[:, 1:][valid].long()
        lp, ent = self._utils.selective_log_softmax_and_entropy(rows, targets, temperature=temperature)
        return _scatter_tokens(lp, valid), _scatter_tokens(ent, valid)

    def nanstd(self, x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
        """``trl.trainer.utils.nanstd`` (utils.py:1021): the std of GRPO's advantages (Bessel, NaN-aware)."""
        return self._utils.nanstd(x) if dim is None else self._utils.nanstd(x, dim=dim)

    # ------------------------------------------------------------------------------------------
    # logprob.fused: trl/trainer/utils.py add_fused_lm_head (-> kernels/chunked_logprob.py)
    # ------------------------------------------------------------------------------------------

    def _fused(self, fn: str, hidden: torch.Tensor, weight: torch.Tensor, input_ids: torch.Tensor | None, mask: Any, temperature: float, output: str) -> torch.Tensor:
        from transformers import PretrainedConfig

        temperature = _check_temperature(fn, temperature)
        hidden = _check_float(fn, "hidden", hidden, 3)
        weight = _check_float(fn, "weight", weight, 2)
        if weight.shape[1] != hidden.shape[2]:
            raise _fail(fn, "weight", f"expected [V, D] with D = {hidden.shape[2]}, got {tuple(weight.shape)}")
        mask = _check_mask(fn, mask, tuple(hidden.shape[:2]))
        valid = mask[:, 1:]
        B, T = mask.shape
        n = int(valid.sum())
        if n == 0:
            return torch.zeros(B, T, dtype=torch.float32)
        targets = input_ids[:, 1:][valid].long() if input_ids is not None else torch.zeros(n, dtype=torch.long)
        # A model whose backbone returns `hidden` and whose output embedding is `weight`; TRL patches
        # its forward exactly as it patches the policy in GRPOTrainer.__init__ (grpo_trainer.py:1068).
        shim = torch.nn.Module()
        shim.config = PretrainedConfig()
        shim.base_model = _HeadOnlyBackbone()
        shim.forward = lambda *a, **k: None  # replaced by add_fused_lm_head
        head = types.SimpleNamespace(weight=weight, bias=None)
        shim.get_output_embeddings = lambda: head
        outputs = ("log_probs",) if output == "log_probs" else ("log_probs", "entropy")
        self._utils.add_fused_lm_head(shim, temperature=temperature, outputs=outputs)
        # Pre-shifted labels (`shift_labels`, utils.py:1617-1622) on the compacted valid positions.
        shim.base_model.hidden = hidden[:, :-1][valid].unsqueeze(0)
        out = shim(input_ids=targets.unsqueeze(0), shift_labels=targets.unsqueeze(0), fused_lm_head=True)
        per_token = getattr(out, output)[0]
        return _scatter_tokens(per_token, valid)

    def token_logprobs_from_hidden(self, hidden: torch.Tensor, weight: torch.Tensor, input_ids: torch.Tensor, mask: Any, *, temperature: float = 1.0) -> torch.Tensor:
        return self._fused("token_logprobs_from_hidden", hidden, weight, input_ids, mask, temperature, "log_probs")

    def token_entropy_from_hidden(self, hidden: torch.Tensor, weight: torch.Tensor, mask: Any, *, temperature: float = 1.0) -> torch.Tensor:
        return self._fused("token_entropy_from_hidden", hidden, weight, None, mask, temperature, "entropy")

    # ------------------------------------------------------------------------------------------
    # adv.grpo / adv.rloo: the trainers' _generate_and_score_completions on a tiny model
    # ------------------------------------------------------------------------------------------

    def _world_(self) -> _TinyWorld:
        with self._lock:
            if self._world is None:
                self._world = _TinyWorld()
            return self._world

    def extra_rows(self, seed: int) -> list[Any]:
        """TRL-specific rows for `rlspec check`: every GRPO loss_type, RLOO's loss, bf16 paths."""
        from conformance.trl_checks import extra_rows

        return extra_rows(self, seed)

    def grpo_advantages(self, rewards: torch.Tensor, group_size: int, *, scale: str = "group") -> torch.Tensor:
        rewards, G = _check_groups("grpo_advantages", rewards, group_size)
        if scale not in ("group", "batch", "none"):
            raise _fail("grpo_advantages", "scale", f"expected 'group', 'batch' or 'none', got {scale!r}")
        with self._lock:
            return self._world_().advantages("grpo", rewards, G, scale_rewards=scale)

    def rloo_advantages(self, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        rewards, G = _check_groups("rloo_advantages", rewards, group_size)
        with self._lock:
            return self._world_().advantages("rloo", rewards, G)

    # ------------------------------------------------------------------------------------------
    # GRPOTrainer._compute_loss (extra, not a core-API function)
    # ------------------------------------------------------------------------------------------

    def grpo_loss_types(self) -> tuple[str, ...]:
        """The ``loss_type`` values the installed ``GRPOConfig`` documents (read from its field help)."""
        import dataclasses

        from trl import GRPOConfig

        field = next(f for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type")
        sentence = re.search(r"Supported values are (.*?)\.", field.metadata["help"], re.S)
        return tuple(re.findall(r"'([a-z_]+)'", sentence.group(1))) if sentence else (field.default,)

    def grpo_current_logps(self, batch: dict[str, torch.Tensor], **config: Any) -> torch.Tensor:
        """TRL's per-token log-probs of the completion, ``[B, C]`` (TRL's layout), without gradient."""
        with self._lock:
            return self._world_().current_logps(batch, config)

    def rloo_current_logps(self, batch: dict[str, torch.Tensor], **config: Any) -> torch.Tensor:
        """TRL's per-token log-probs under ``RLOOTrainer`` (``[B, C]``, no gradient)."""
        with self._lock:
            return self._world_().current_logps(batch, config, kind="rloo")

    def rloo_loss(self, batch: dict[str, torch.Tensor], **config: Any) -> dict[str, Any]:
        """``RLOOTrainer._compute_loss`` (``trainer/rloo_trainer.py:1794-1863``): as :meth:`grpo_loss`, with
        ``batch["old_logps"]`` the per-sequence sums ``[B]`` instead of per-token old log-probs."""
        with self._lock:
            return self._world_().loss(batch, config, kind="rloo")

    def grpo_loss(self, batch: dict[str, torch.Tensor], **config: Any) -> dict[str, Any]:
        """Run ``GRPOTrainer._compute_loss`` once with ``GRPOConfig(**config)`` on ``batch`` and return the
        loss, the inputs of the LM head and the gradients, all in spec conventions.

        ``batch`` holds TRL's keys: ``prompt_ids`` / ``prompt_mask`` ([B, P], left-padded),
        ``completion_ids`` / ``completion_mask`` ([B, C], right-padded), ``advantages`` ([B] or [B, C]),
        optional ``tool_mask``, ``old_per_token_logps``, ``ref_per_token_logps`` ([B, C]) and
        ``num_items_in_batch`` (default: the number of loss tokens). Returned (torch, detached):
        ``loss``; ``input_ids``, ``mask`` (spec [B, T] with T = P + C); ``hidden`` [B, T, D] (final norm
        output), ``weight`` [V, D] (LM head); ``logp`` [B, T] (TRL's log-probs, token-aligned);
        ``old_logp``, ``ref_logp``, ``advantages`` in spec layout; ``grad_logp`` [B, T],
        ``grad_entropy`` [B, T] (dL/d of the per-token outputs of the fused head), ``grad_hidden``,
        ``grad_weight``; and the effective trainer settings (``temperature``, ``epsilon_low``, ...).
        """
        with self._lock:
            return self._world_().loss(batch, config)


class _TinyWorld:
    """The tokenizer, the saved tiny model and a cache of trainers, one per configuration."""

    def __init__(self) -> None:
        import datasets
        import transformers
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        datasets.disable_progress_bars()
        datasets.utils.logging.set_verbosity_error()

        vocab = {"<pad>": PAD_ID, "<eos>": EOS_ID, "<unk>": UNK_ID}
        vocab.update({f"w{i}": 3 + i for i in range(TINY_LLAMA["vocab_size"] - 3)})
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        self.tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="rlspec-trl-")
        self.model_dir = os.path.join(self._tmp.name, "tiny-llama")
        with torch.random.fork_rng():
            torch.manual_seed(MODEL_SEED)
            model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA))
        model.save_pretrained(self.model_dir)
        self.tokenizer.save_pretrained(self.model_dir)
        self._trainers: dict[tuple, Any] = {}
        self._reward_table: list[float] = []
        self._advantages: dict[tuple, torch.Tensor] = {}  # the suite re-asks the same case while fingerprinting

    # reward function: the requested reward of each row, found by the row index column
    def _reward(self, prompts: list, completions: list, rlspec_index: list[int], **_: Any) -> list[float]:
        return [self._reward_table[i] for i in rlspec_index]

    def _trainer(self, kind: str, config: dict[str, Any]) -> Any:
        key = (kind, tuple(sorted(config.items())))
        if key in self._trainers:
            return self._trainers[key]
        from datasets import Dataset

        if kind == "grpo":
            from trl import GRPOConfig as Config
            from trl import GRPOTrainer as Trainer
        else:
            from trl import RLOOConfig as Config
            from trl import RLOOTrainer as Trainer
        base = dict(
            output_dir=os.path.join(self._tmp.name, f"run-{len(self._trainers)}"),
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=2,
            report_to=[],
            use_cpu=True,
            bf16=False,  # TRL configs default to bf16=True (peer-conventions §11 item 3)
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        base.update(config)
        trl_logger = logging.getLogger("trl")
        level = trl_logger.level
        trl_logger.setLevel(logging.ERROR)  # the advice TRL logs for deliberately unusual configurations
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = Config(**base)
                trainer = Trainer(
                    model=self.model_dir,
                    reward_funcs=self._reward,
                    args=args,
                    train_dataset=Dataset.from_dict({"prompt": [_PROMPT] * 2, "rlspec_index": [0, 1]}),
                    processing_class=self.tokenizer,
                )
        finally:
            trl_logger.setLevel(level)
        trainer.current_gradient_accumulation_steps = 1  # set by train() otherwise (§11 item 5)
        self._trainers[key] = trainer
        return trainer

    def advantages(self, kind: str, rewards: torch.Tensor, G: int, **config: Any) -> torch.Tensor:
        B = rewards.shape[0]
        key = (kind, tuple(rewards.detach().to(torch.float64).tolist()), G, tuple(sorted(config.items())))
        if key in self._advantages:
            return self._advantages[key].clone()
        if kind == "rloo":
            config["beta"] = 0.0  # RLOO's default beta 0.05 subtracts a KL from the reward first
        if G >= 2:
            trainer = self._trainer(kind, dict(config, num_generations=G, per_device_train_batch_size=G))
            train = True
        else:  # size-1 groups: eval mode with num_generations_eval = 1 (grpo_trainer.py:2772-2773, rloo_trainer.py:1679-1680)
            trainer = self._trainer(kind, dict(config, num_generations_eval=1, per_device_eval_batch_size=1))
            train = False
        self._reward_table = [float(r) for r in rewards.detach().to(torch.float64).tolist()]
        inputs = [{"prompt": _PROMPT, "rlspec_index": i} for i in range(B)]
        trainer.model.train(train)
        with torch.random.fork_rng(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            out = trainer._generate_and_score_completions(inputs)
        trainer.model.train(True)
        self._advantages[key] = out["advantages"].detach().clone()
        return self._advantages[key].clone()

    # -------------------------------------------------------------------------------------------
    # GRPO loss
    # -------------------------------------------------------------------------------------------

    @staticmethod
    def _loss_mask(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        m = batch["completion_mask"]
        return m if batch.get("tool_mask") is None else m * batch["tool_mask"]

    def current_logps(self, batch: dict[str, torch.Tensor], config: dict[str, Any], kind: str = "grpo") -> torch.Tensor:
        trainer = self._trainer(kind, dict(config))
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            lp, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, att, batch["completion_ids"].shape[1]
            )
        return lp

    def loss(self, batch: dict[str, torch.Tensor], config: dict[str, Any], kind: str = "grpo") -> dict[str, Any]:
        trainer = self._trainer(kind, dict(config))
        model = trainer.model
        model.train()
        P, C = batch["prompt_ids"].shape[1], batch["completion_ids"].shape[1]
        loss_mask = self._loss_mask(batch)
        inputs = {k: v for k, v in batch.items() if v is not None}
        if kind == "grpo":
            inputs.setdefault("num_items_in_batch", loss_mask.sum())

        captured: dict[str, torch.Tensor] = {}

        def keep_hidden(module: Any, args: Any, output: torch.Tensor) -> None:
            captured["hidden"] = output

        def keep_per_token(module: Any, args: Any, output: Any) -> None:
            if getattr(output, "log_probs", None) is not None:  # the fused_lm_head=True call
                captured["log_probs"] = output.log_probs
                captured["entropy"] = output.entropy

        hooks = [
            model.model.norm.register_forward_hook(keep_hidden),  # = backbone last_hidden_state
            model.register_forward_hook(keep_per_token),
        ]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loss = trainer._compute_loss(model, inputs)
        finally:
            for h in hooks:
                h.remove()
        weight = model.get_output_embeddings().weight
        wrt = [captured["log_probs"], captured["hidden"], weight]
        if captured.get("entropy") is not None:
            wrt.append(captured["entropy"])
        grads = torch.autograd.grad(loss, wrt, allow_unused=True)
        grads = [torch.zeros_like(w) if g is None else g for w, g in zip(wrt, grads)]
        g_logp, g_hidden, g_weight = grads[:3]
        g_entropy = grads[3] if len(grads) > 3 else torch.zeros_like(captured["log_probs"])
        model.zero_grad(set_to_none=True)

        B, T = batch["prompt_ids"].shape[0], P + C

        def spec_completion(x: torch.Tensor | None) -> torch.Tensor | None:
            """[B, C] completion array -> token-aligned [B, T] (prompt columns 0)."""
            if x is None:
                return None
            out = torch.zeros(B, T, dtype=torch.float64)
            out[:, P:] = x.detach().to(torch.float64)
            return out

        def spec_shifted(x: torch.Tensor) -> torch.Tensor:
            """[B, T-1] fused-head array (column j scores token j+1) -> token-aligned [B, T]."""
            out = torch.zeros(B, T, dtype=torch.float64)
            out[:, 1:] = x.detach().to(torch.float64)
            return out

        adv = batch["advantages"].detach().to(torch.float64)
        if adv.ndim == 2:
            adv = spec_completion(adv)
        mask = torch.zeros(B, T, dtype=torch.bool)
        mask[:, P:] = loss_mask.bool()
        settings = {
            "temperature": float(trainer.temperature),
            "epsilon_low": float(trainer.epsilon_low),
            "epsilon_high": float(trainer.epsilon_high),
            "beta": float(trainer.beta),
        }
        if kind == "rloo":
            return {
                "loss": float(loss.detach()),
                "input_ids": torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
                "mask": mask,
                "hidden": captured["hidden"].detach().to(torch.float64),
                "weight": weight.detach().to(torch.float64),
                "logp": spec_shifted(captured["log_probs"]) * mask,
                "old_logps": batch["old_logps"].detach().to(torch.float64),
                "advantages": adv,
                "grad_logp": spec_shifted(g_logp),
                "grad_hidden": g_hidden.detach().to(torch.float64),
                "grad_weight": g_weight.detach().to(torch.float64),
                **settings,
            }
        return {
            "loss": float(loss.detach()),
            "input_ids": torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
            "mask": mask,
            "hidden": captured["hidden"].detach().to(torch.float64),
            "weight": weight.detach().to(torch.float64),
            "logp": spec_shifted(captured["log_probs"]) * mask,
            "old_logp": spec_completion(batch.get("old_per_token_logps")),
            "ref_logp": spec_completion(batch.get("ref_per_token_logps")),
            "advantages": adv,
            "num_items_in_batch": float(inputs["num_items_in_batch"]),
            "grad_logp": spec_shifted(g_logp),
            "grad_entropy": spec_shifted(g_entropy),
            "grad_hidden": g_hidden.detach().to(torch.float64),
            "grad_weight": g_weight.detach().to(torch.float64),
            **settings,
            "loss_type": trainer.loss_type,
            "importance_sampling_level": trainer.importance_sampling_level,
            "delta": trainer.args.delta,
            "use_bias_correction_kl": bool(trainer.args.use_bias_correction_kl),
            "entropy_coef": float(getattr(trainer, "entropy_coef", 0.0) or 0.0),
            "max_completion_length": int(trainer.max_completion_length),
        }


__all__ = ["TRLAdapter"]
