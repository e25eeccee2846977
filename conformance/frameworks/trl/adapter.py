"""The TRL adapter: Hugging Face TRL's RL math, called through TRL itself, in spec v1 conventions.

What is called (trl 1.16.0 wheel; paths relative to the package root ``trl/``):

| spec function | TRL code path |
|---|---|
| ``token_logprobs`` | ``trainer/utils.py::selective_log_softmax`` (:538) |
| ``token_entropy`` | ``trainer/utils.py::entropy_from_logits`` (:604) on ``logits / temperature`` (the division TRL's own ``selective_log_softmax_and_entropy``, :672, does first) |
| ``token_logprobs_from_hidden`` / ``token_entropy_from_hidden`` | ``trainer/utils.py::add_fused_lm_head`` (:1548), i.e. ``kernels/chunked_logprob.py::ChunkedLogProbFunction``, the fused LM head the GRPO/RLOO trainers score tokens with |
| ``grpo_advantages`` | ``GRPOTrainer._generate_and_score_completions`` (``trainer/grpo_trainer.py:2324``; advantages at :2761-2810) |
| ``rloo_advantages`` | ``RLOOTrainer._generate_and_score_completions`` (``trainer/rloo_trainer.py``; advantages at :1664-1699) |
| ``gdpo_advantages`` | ``GRPOTrainer._generate_and_score_completions`` with ``multi_objective_aggregation="normalize_then_sum"`` and one reward function per column of the [B, K] rewards, ``reward_weights`` as ``GRPOConfig.reward_weights`` (advantages at :2790-2800; spec v1.1 adv.gdpo) |
| ``off_policy_sequence_mask`` | ``GRPOTrainer.get_off_policy_mask`` (``trainer/grpo_trainer.py:2944-2968``), a static method, on the completion columns |
| ``rollout_is_weights`` | ``GRPOTrainer._generate_and_score_completions`` with ``use_vllm=True`` (the ratio at ``grpo_trainer.py:2659-2707``), through a stubbed vLLM backend (below) |
| ``overlong_penalty`` | ``rewards/other_rewards.py::get_soft_overlong_punishment`` (:83-138), the reward function, on completions of the given lengths; ``factor`` is fixed at 1 (other values: not implemented) |
| ``entropy_top_mask`` | ``GRPOTrainer.get_high_entropy_mask`` (``trainer/grpo_trainer.py:1380-1416``) with threshold ``1 - rho``, as ``_compute_loss`` calls it (:3049-3052), on a stand-in trainer whose accelerator simulates the data-parallel ranks (``SimulatedRanks``, below) |

Extras that are not core-API functions (checked by ``conformance/frameworks/trl/checks.py``):
``grpo_loss`` (``GRPOTrainer._compute_loss``, ``grpo_trainer.py:3020-3292``) and ``rloo_loss``
(``RLOOTrainer._compute_loss``, ``rloo_trainer.py:1794-1863``), driven on a tiny random-weight Llama with
the gradient captured at the per-token log-probs, the final hidden states and the LM-head weight;
``grpo_current_logps`` / ``rloo_current_logps``, ``grpo_loss_types`` (read from the installed
``GRPOConfig``'s help and the branches of ``GRPOTrainer._compute_loss``), ``selective_log_softmax_and_entropy``
and ``nanstd``.

What loads TRL's rollout importance-sampling correction without vLLM (``rollout_is_weights``):
TRL computes the ratio inline in ``_generate_and_score_completions`` (``grpo_trainer.py:2659-2707``: δ =
(old − sampling)·mask, NaN → 0, summed per row for ``sequence_*``, ``exp``, then ``torch.clamp`` for
``*_truncate`` or ``masked_fill(ρ < clip_min | ρ > clip_max, 0)`` for ``*_mask``), only when
``self.use_vllm and self.vllm_importance_sampling_correction`` (:2660); nothing else in the package
computes it (only ``grpo_trainer.py`` and ``grpo_config.py`` name it; ``_compute_loss`` multiplies by the
precomputed ``inputs["importance_sampling_ratio"]``, :3146-3147, and VESPO reads it, :3125-3137).
The ratio itself is plain torch; what needs vLLM is construction: ``GRPOConfig(use_vllm=True)`` makes
``GRPOTrainer.__init__`` build ``VLLMGeneration`` (``grpo_trainer.py:1105-1138``, imported at :71), whose
``_init_vllm`` raises ``ImportError("vLLM is not available ...")`` when ``vllm`` cannot be imported
(``generation/vllm_generation.py:294-298``; the ``from vllm import LLM, RequestOutput, SamplingParams`` at :42-44 is
guarded by ``is_vllm_available``) and otherwise opens a server connection or an in-process engine
(:300-366). The adapter therefore builds the trainer from ``GRPOConfig(use_vllm=True,
vllm_importance_sampling_mode=..., vllm_importance_sampling_clip_min/max=...)`` with that one name,
``trl.trainer.grpo_trainer.VLLMGeneration``, replaced during construction by a stub that generates
nothing (``_NoVLLM``), and generates through TRL's public ``rollout_func`` (``grpo_trainer.py:2200-2218``):
it returns the completion ids, the rollout engine's log-probs (TRL's ``sampling_per_token_logps``,
:2463-2476) and ``env_mask`` (TRL's ``tool_mask``, :2270-2272). Everything from the config to the ratio
is TRL's own code. TRL recomputes ``old_per_token_logps`` itself (:2643-2657), so the adapter hands it
``rollout = old_TRL − (old_logp − rollout_logp)``: TRL's ratio depends on the log-probs only through
that difference, which is then the spec's δ up to float32 rounding (TRL's dtype). Mapping: ``level``
token/sequence × ``mode`` truncate/mask → ``vllm_importance_sampling_mode`` ``token_truncate`` /
``token_mask`` / ``sequence_truncate`` / ``sequence_mask``, ``lo``/``hi`` → ``clip_min``/``clip_max``.
Not expressible in TRL (``NotImplementedError``): ``mode="none"`` (every TRL mode bounds),
``seq_stat="geometric"`` (TRL's sequence ratio is the product), ``log_ratio_clamp``,
``batch_normalize=True``, ``*_truncate`` with neither bound (``grpo_config.py:1162-1171`` rejects it) and
``lo == hi`` (``clip_min < clip_max`` required, :1152-1160).

What gathers the high-entropy mask's pool across ranks (``entropy_top_mask``): ``get_high_entropy_mask``
reads only ``self.accelerator`` (``pad_across_processes`` with the sentinel −1e9, then ``gather``), so it
is called unbound on a ``types.SimpleNamespace(accelerator=SimulatedRanks(...))``, as TRL's own tests
call it. ``SimulatedRanks`` is accelerate's two collectives over ranks simulated in one process: it pads
this rank's tensor (the one TRL passes) and the other ranks' tensors to the longest, with TRL's pad
value, and ``gather`` concatenates them in rank order. With ``pooled_entropy`` (the batch's valid
entropies, this call's own included), the other ranks hold the pool minus this call's valid entropies
(as their own ``entropies[mask].float()``); a pool that does not contain them is not expressible
(``NotImplementedError``: an all-gather always includes the caller's own).

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

import contextlib
import logging
import math
import os
import re
import tempfile
import threading
import types
import warnings
from typing import Any
from unittest import mock

import torch

from conformance.frameworks.trl.modes import IS_MODES
from conformance.runner.loading import AdapterLoadError

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


def _check_finite_at(fn: str, name: str, x: torch.Tensor, valid: torch.Tensor) -> None:
    if not bool(torch.isfinite(x[valid]).all()):
        raise _fail(fn, name, "non-finite value at a valid position")


def _check_bound(fn: str, name: str, x: Any) -> float | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _fail(fn, name, f"expected None or a float > 0, got {type(x).__name__}", TypeError)
    if not (math.isfinite(x) and x > 0):
        raise _fail(fn, name, f"expected None or a finite float > 0, got {x!r}")
    return float(x)


class SimulatedRanks:
    """accelerate's ``pad_across_processes`` and ``gather`` for one rank of ``len(others) + 1`` data-parallel
    ranks simulated in one process: ``others`` are the tensors the other ranks pass, in rank order around
    this rank (``rank``). Each call pads to the longest tensor along dim 0 with the caller's pad value and
    gathers by concatenation in rank order, as the real collectives do."""

    def __init__(self, others: list[torch.Tensor], rank: int = 0) -> None:
        self.others = list(others)
        self.rank = rank
        self.num_processes = len(self.others) + 1
        self._pad_index: float = 0.0
        self._length = 0

    @staticmethod
    def _padded(x: torch.Tensor, length: int, value: float) -> torch.Tensor:
        return torch.cat([x, x.new_full((length - x.shape[0],) + tuple(x.shape[1:]), value)], dim=0)

    def pad_across_processes(self, tensor: torch.Tensor, dim: int = 0, pad_index: float = 0, pad_first: bool = False) -> torch.Tensor:
        if dim != 0 or pad_first:
            raise NotImplementedError("SimulatedRanks pads along dim 0 at the end only (what get_high_entropy_mask asks)")
        self._length = max([tensor.shape[0]] + [o.shape[0] for o in self.others])
        self._pad_index = pad_index
        return self._padded(tensor, self._length, pad_index)

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        parts = [self._padded(o.to(tensor.dtype), self._length, self._pad_index) for o in self.others]
        parts.insert(self.rank, tensor)
        return torch.cat(parts, dim=0)


def _pool_without(fn: str, pooled: Any, local: torch.Tensor) -> torch.Tensor:
    """The multiset ``pooled`` minus the values of ``local`` (exact float64 comparison): the entropies the
    other ranks hold."""
    from collections import Counter

    if isinstance(pooled, torch.Tensor):
        values = pooled.detach().to(torch.float64).flatten().tolist()
    elif isinstance(pooled, (list, tuple)):
        values = [float(v) for v in pooled]
    else:
        raise _fail(fn, "pooled_entropy", f"expected a 1-D tensor or a list of floats, got {type(pooled).__name__}", TypeError)
    remaining = Counter(values)
    for v in local.detach().to(torch.float64).tolist():
        if remaining[v] == 0:
            raise NotImplementedError("pooled_entropy does not contain this call's valid entropy "
                                      f"{v!r}: TRL's all-gather always includes the caller's own")
        remaining[v] -= 1
    return torch.tensor(sorted(remaining.elements()), dtype=torch.float64)


class _NoVLLM:
    """Stands in for ``trl.generation.vllm_generation.VLLMGeneration`` while a ``use_vllm=True`` trainer is
    built (``grpo_trainer.py:1105-1138``): no engine, no server. Generation goes through ``rollout_func``;
    ``_generate`` still calls ``sync_weights`` once per step (``grpo_trainer.py:2202-2205``)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def sync_weights(self) -> None:
        pass

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("rlspec's TRL adapter generates through rollout_func, not vLLM")


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
        "token_logprobs": "on the CPU path selective_log_softmax runs PyTorch's bfloat16 log_softmax (utils.py:582-595), "
        "which rounds the log-normaliser at the largest logit's scale: a confident token's log-prob comes out 0 "
        "(finding bf16-log-softmax-precision); logits / temperature is also computed in bfloat16 (:577)",
        "token_entropy": "on the CPU path entropy_from_logits runs PyTorch's bfloat16 log_softmax (utils.py:637-639): a "
        "confident row loses its top token's term (finding bf16-log-softmax-precision)",
        "rollout_is_weights": "TRL's log-probs and ratio are float32: the trainer's old_per_token_logps and the "
        "vLLM log-probs built by torch.tensor (grpo_trainer.py:2464-2470)",
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
            raise AdapterLoadError(f"adapter 'trl': cannot import 'trl' ({exc}): pip install 'rlspec[trl]'") from exc
        self._trl = trl
        self._utils = trl_utils
        self.version = trl.__version__
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
        """TRL-specific rows for `rlspec check`: every GRPO loss_type, the rollout corrections (IS ratio,
        OPSM) inside the GRPO loss, RLOO's loss, TRL's free helpers."""
        from conformance.frameworks.trl.checks import extra_rows

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

    def gdpo_advantages(self, rewards: torch.Tensor, group_size: int, *, reward_weights: list[float] | None = None) -> torch.Tensor:
        """Spec v1.1 adv.gdpo: GRPOTrainer with ``multi_objective_aggregation="normalize_then_sum"`` and one reward
        function per column of ``rewards`` [B, K] (grpo_trainer.py:2790-2800), ``reward_weights`` as
        ``GRPOConfig.reward_weights``."""
        fn = "gdpo_advantages"
        r = _check_float(fn, "rewards", rewards, 2)
        if r.shape[1] < 1 or not bool(torch.isfinite(r).all()):
            raise _fail(fn, "rewards", f"expected finite [B, K >= 1], got shape {tuple(r.shape)}")
        _, G = _check_groups(fn, r[:, 0], group_size)
        config: dict[str, Any] = {"multi_objective_aggregation": "normalize_then_sum"}
        if reward_weights is not None:
            if not isinstance(reward_weights, (list, tuple)) or len(reward_weights) != r.shape[1]:
                raise _fail(fn, "reward_weights", f"expected {r.shape[1]} numbers, got {reward_weights!r}")
            config["reward_weights"] = tuple(float(w) for w in reward_weights)
        with self._lock:
            return self._world_().advantages("grpo", r, G, **config)

    # ------------------------------------------------------------------------------------------
    # offpolicy.opsm: GRPOTrainer.get_off_policy_mask (static)
    # offpolicy.is_weights: the vLLM importance-sampling correction of _generate_and_score_completions
    # ------------------------------------------------------------------------------------------

    def off_policy_sequence_mask(self, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: Any, *, threshold: float) -> torch.Tensor:
        """``GRPOTrainer.get_off_policy_mask`` (``grpo_trainer.py:2944-2968``) on the completion columns
        ``[:, 1:]`` (column j of TRL's tensors is spec position j + 1), with ``old_logp`` as TRL's
        ``sampling_per_token_logps`` (what ``_compute_loss`` passes, :3068-3081) and the mask as TRL's
        integer loss mask. Advantages: ``[B]`` becomes TRL's ``(B, 1)`` (``_compute_loss`` unsqueezes a
        1-D tensor, :3058-3059); ``[B, T]`` is passed as ``(B, T - 1)``, the per-token advantages
        ``_compute_loss`` accepts from subclasses (:3056-3059), which ``advantages >= 0`` broadcasts
        against the row's ``(B, 1)`` mean (:2966-2968): the spec's per-token test, so every spec input is
        expressible. TRL's keep is ``(B, 1)`` (or ``(B, T - 1)``); it is put back at the valid tokens."""
        fn = "off_policy_sequence_mask"
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise _fail(fn, "threshold", f"expected a real number, got {type(threshold).__name__}", TypeError)
        if not math.isfinite(threshold):
            raise _fail(fn, "threshold", f"expected a finite float, got {threshold!r}")
        logp = _check_float(fn, "logp", logp, 2)
        old_logp = _check_float(fn, "old_logp", old_logp, 2)
        if old_logp.shape != logp.shape:
            raise _fail(fn, "old_logp", f"expected shape {tuple(logp.shape)}, got {tuple(old_logp.shape)}")
        mask = _check_mask(fn, mask, tuple(logp.shape))
        B, T = mask.shape
        if not isinstance(advantages, torch.Tensor) or not advantages.is_floating_point():
            raise _fail(fn, "advantages", "expected a floating tensor", TypeError)
        if tuple(advantages.shape) not in ((B,), (B, T)):
            raise _fail(fn, "advantages", f"expected [B] = [{B}] or [B, T] = [{B}, {T}], got {tuple(advantages.shape)}")
        _check_finite_at(fn, "logp", logp, mask)
        _check_finite_at(fn, "old_logp", old_logp, mask)
        if advantages.ndim == 1:
            _check_finite_at(fn, "advantages", advantages, torch.ones(B, dtype=torch.bool))
        else:
            _check_finite_at(fn, "advantages", advantages, mask)
        if B == 0 or T < 2:
            return torch.zeros(B, T, dtype=torch.bool)
        from trl import GRPOTrainer

        valid = mask[:, 1:]
        adv = advantages.unsqueeze(1) if advantages.ndim == 1 else advantages[:, 1:]
        keep = GRPOTrainer.get_off_policy_mask(
            advantages=adv,
            per_token_logps=logp[:, 1:],
            sampling_per_token_logps=old_logp[:, 1:],
            mask=valid.long(),  # TRL's loss mask is completion_mask * tool_mask, integer (:3027)
            off_policy_threshold=float(threshold),
        )
        kept = keep.bool().expand(B, T - 1) & valid
        return torch.cat([torch.zeros(B, 1, dtype=torch.bool), kept], dim=1)

    def rollout_is_weights(
        self,
        old_logp: torch.Tensor,
        rollout_logp: torch.Tensor,
        mask: Any,
        *,
        level: str = "token",
        seq_stat: str = "product",
        mode: str = "truncate",
        lo: float | None = None,
        hi: float | None = 2.0,
        log_ratio_clamp: float | None = None,
        batch_normalize: bool = False,
    ) -> torch.Tensor:
        """TRL's vLLM importance-sampling ratio (``grpo_trainer.py:2659-2707``), computed by
        ``_generate_and_score_completions`` of a ``use_vllm=True`` trainer built around a stubbed vLLM
        backend (module docstring). The output is TRL's ``importance_sampling_ratio`` (``(B, T - 1)`` or
        ``(B, 1)``) at the valid tokens, 0 elsewhere, in ``old_logp``'s dtype."""
        fn = "rollout_is_weights"
        for name, value, allowed in (("level", level, ("token", "sequence")), ("seq_stat", seq_stat, ("product", "geometric")),
                                     ("mode", mode, ("none", "truncate", "mask"))):
            if not isinstance(value, str):
                raise _fail(fn, name, f"expected a string, got {type(value).__name__}", TypeError)
            if value not in allowed:
                raise _fail(fn, name, f"expected one of {allowed}, got {value!r}")
        lo, hi = _check_bound(fn, "lo", lo), _check_bound(fn, "hi", hi)
        if lo is not None and hi is not None and lo > hi:
            raise _fail(fn, "lo", f"expected lo <= hi, got lo={lo!r} > hi={hi!r}")
        if log_ratio_clamp is not None and not (isinstance(log_ratio_clamp, (int, float)) and log_ratio_clamp > 0):
            raise _fail(fn, "log_ratio_clamp", f"expected None or a float > 0, got {log_ratio_clamp!r}")
        if not isinstance(batch_normalize, bool):
            raise _fail(fn, "batch_normalize", f"expected a bool, got {type(batch_normalize).__name__}", TypeError)
        old_logp = _check_float(fn, "old_logp", old_logp, 2)
        rollout_logp = _check_float(fn, "rollout_logp", rollout_logp, 2)
        if rollout_logp.shape != old_logp.shape:
            raise _fail(fn, "rollout_logp", f"expected shape {tuple(old_logp.shape)}, got {tuple(rollout_logp.shape)}")
        mask = _check_mask(fn, mask, tuple(old_logp.shape))
        _check_finite_at(fn, "old_logp", old_logp, mask)
        _check_finite_at(fn, "rollout_logp", rollout_logp, mask)
        # What GRPOConfig cannot express (module docstring)
        if mode == "none":
            raise NotImplementedError("mode='none': every TRL vllm_importance_sampling_mode bounds the ratio")
        if level == "sequence" and seq_stat == "geometric":
            raise NotImplementedError("seq_stat='geometric': TRL's sequence ratio is the product, grpo_trainer.py:2667-2672")
        if log_ratio_clamp is not None:
            raise NotImplementedError("log_ratio_clamp: TRL does not clamp the log-ratio")
        if batch_normalize:
            raise NotImplementedError("batch_normalize=True: TRL does not normalise the ratio")
        if mode == "truncate" and lo is None and hi is None:
            raise NotImplementedError("truncate without bounds: GRPOConfig requires clip_min or clip_max, grpo_config.py:1162-1171")
        if lo is not None and lo == hi:
            raise NotImplementedError("lo == hi: GRPOConfig requires clip_min < clip_max, grpo_config.py:1152-1160")
        B, T = mask.shape
        valid = mask[:, 1:]
        if B == 0 or not bool(valid.any()):
            return torch.zeros(B, T, dtype=old_logp.dtype)
        delta = torch.where(valid, old_logp[:, 1:].detach().double() - rollout_logp[:, 1:].detach().double(), 0.0)
        config = {
            "vllm_importance_sampling_mode": IS_MODES[(level, mode)],
            "vllm_importance_sampling_clip_min": lo,
            "vllm_importance_sampling_clip_max": hi,
        }
        with self._lock:
            ratio = self._world_().is_ratio(delta, valid, config)["importance_sampling_ratio"]
        w = torch.where(valid, ratio.to(torch.float64).expand(B, T - 1), 0.0)
        return torch.cat([torch.zeros(B, 1, dtype=torch.float64), w], dim=1).to(old_logp.dtype)

    # ------------------------------------------------------------------------------------------
    # reward.overlong: trl.rewards.get_soft_overlong_punishment, a reward function
    # ------------------------------------------------------------------------------------------

    def soft_overlong_punishment(self, completion_ids: list[list[int]], max_completion_len: int,
                                 soft_punish_cache: int) -> list[float]:
        """TRL's reward function itself: ``get_soft_overlong_punishment(max_completion_len, soft_punish_cache)``
        (``trl/rewards/other_rewards.py:83-138``) called on ``completion_ids`` as ``GRPOTrainer`` calls a
        reward function (``grpo_trainer.py:1627``, ``completion_ids=completion_ids_list``)."""
        from trl.rewards import get_soft_overlong_punishment

        return get_soft_overlong_punishment(max_completion_len, soft_punish_cache)(completion_ids)

    def overlong_penalty(self, lengths: torch.Tensor, *, max_length: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
        """``soft_overlong_punishment`` on completions of ``lengths[b]`` tokens (TRL reads ``len(ids)`` only,
        EOS included), as float64 (TRL returns Python floats). TRL has no factor: ``factor != 1`` is not
        offered (weight the reward function with ``GRPOConfig.reward_weights`` instead)."""
        fn = "overlong_penalty"
        if not isinstance(lengths, torch.Tensor) or lengths.is_floating_point() or lengths.dtype == torch.bool:
            raise _fail(fn, "lengths", f"expected an integer tensor [B], got {getattr(lengths, 'dtype', type(lengths).__name__)}", TypeError)
        if lengths.ndim != 1 or bool((lengths < 0).any()):
            raise _fail(fn, "lengths", f"expected 1-D [B] lengths >= 0, got shape {tuple(lengths.shape)}")
        for name, value in (("max_length", max_length), ("buffer", buffer)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise _fail(fn, name, f"expected an int, got {type(value).__name__}", TypeError)
        if max_length < 1 or not 0 <= buffer <= max_length:
            raise _fail(fn, "buffer", f"expected 0 <= buffer <= max_length >= 1, got {buffer!r}, {max_length!r}")
        if factor != 1.0:
            raise NotImplementedError("get_soft_overlong_punishment has no factor (eq. 13's 1, other_rewards.py:130-137); "
                                      "GRPOConfig.reward_weights scales a reward function instead")
        ids = [[UNK_ID] * int(n) for n in lengths.tolist()]
        return torch.tensor(self.soft_overlong_punishment(ids, max_length, buffer), dtype=torch.float64)

    # ------------------------------------------------------------------------------------------
    # entropy.top_mask: GRPOTrainer.get_high_entropy_mask over simulated data-parallel ranks
    # ------------------------------------------------------------------------------------------

    def high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float,
                          others: list[torch.Tensor] = (), rank: int = 0) -> torch.Tensor:
        """``GRPOTrainer.get_high_entropy_mask(entropies, mask, threshold)`` (``grpo_trainer.py:1380-1416``)
        as rank ``rank`` of a data-parallel group whose other ranks pass ``others`` (in rank order) to the
        all-gather (their ``entropies[mask].float()``), in TRL's own conventions and dtypes."""
        from trl import GRPOTrainer

        stand_in = types.SimpleNamespace(accelerator=SimulatedRanks(list(others), rank))
        return GRPOTrainer.get_high_entropy_mask(stand_in, entropies, mask, threshold)

    def entropy_top_mask(self, entropy: torch.Tensor, mask: Any, *, rho: float = 1.0,
                         pooled_entropy: Any = None) -> torch.Tensor:
        """``get_high_entropy_mask`` with threshold ``1 - rho`` (``_compute_loss``, :3049-3052) and TRL's integer
        loss mask; the other ranks hold ``pooled_entropy`` minus this call's valid entropies (module docstring).
        ``_compute_loss`` skips the call at ``rho = 1`` (every token kept: the quantile 0 is the minimum, the
        same mask)."""
        fn = "entropy_top_mask"
        entropy = _check_float(fn, "entropy", entropy, 2)
        mask = _check_mask(fn, mask, tuple(entropy.shape))
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= float(rho) <= 1.0:
            raise _fail(fn, "rho", f"expected a number in [0, 1], got {rho!r}")
        _check_finite_at(fn, "entropy", entropy, mask)
        others = [] if pooled_entropy is None else [_pool_without(fn, pooled_entropy, entropy[mask]).float()]
        keep = self.high_entropy_mask(entropy, mask.long(), 1.0 - float(rho), others)
        return keep.bool() & mask

    # ------------------------------------------------------------------------------------------
    # GRPOTrainer._compute_loss (extra, not a core-API function)
    # ------------------------------------------------------------------------------------------

    def grpo_loss_types(self) -> tuple[str, ...]:
        """The ``loss_type`` values the installed TRL offers: those ``GRPOConfig`` documents (its field
        help), then any other that ``GRPOTrainer._compute_loss`` dispatches on. ``GRPOConfig`` does not
        validate ``loss_type``; ``_compute_loss`` does, with an ``if``/``elif`` chain on
        ``self.loss_type`` that ends in ``ValueError("Unknown loss type")`` (trl 1.16.0
        ``grpo_trainer.py:3109-3138`` for the per-token loss, ``:3153-3184`` for the reduction)."""
        return tuple(dict.fromkeys(self.grpo_documented_loss_types() + self.grpo_dispatched_loss_types()))

    def grpo_documented_loss_types(self) -> tuple[str, ...]:
        """The ``loss_type`` values of the ``GRPOConfig.loss_type`` help ("Supported values are ...")."""
        import dataclasses

        from trl import GRPOConfig

        field = next(f for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type")
        sentence = re.search(r"Supported values are (.*?)\.", field.metadata["help"], re.S)
        return tuple(re.findall(r"'([a-z_]+)'", sentence.group(1))) if sentence else (field.default,)

    def grpo_dispatched_loss_types(self) -> tuple[str, ...]:
        """The ``loss_type`` values ``GRPOTrainer._compute_loss`` has a branch for, read from its source:
        the literals of ``self.loss_type == "x"`` and ``self.loss_type in ["x", ...]``."""
        import inspect

        from trl import GRPOTrainer

        src = inspect.getsource(GRPOTrainer._compute_loss)
        found: list[str] = []
        for single, group in re.findall(r"self\.loss_type\s*(?:==\s*[\"']([a-z_]+)[\"']|in\s*[\[(]([^\])]*)[\])])", src):
            found += [single] if single else re.findall(r"[\"']([a-z_]+)[\"']", group)
        return tuple(dict.fromkeys(found))

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
        optional ``tool_mask``, ``old_per_token_logps``, ``ref_per_token_logps``,
        ``sampling_per_token_logps`` ([B, C]), ``importance_sampling_ratio`` ([B, C] or [B, 1]; TRL reads it
        only with ``use_vllm=True``, :3146, so such a config builds the trainer around the stubbed vLLM
        backend of the module docstring) and ``num_items_in_batch`` (default: the number of loss tokens).
        Returned (torch, detached): ``loss``; ``input_ids``, ``mask`` (spec [B, T] with T = P + C);
        ``hidden`` [B, T, D] (final norm output), ``weight`` [V, D] (LM head); ``logp`` [B, T] (TRL's
        log-probs, token-aligned); ``old_logp``, ``ref_logp``, ``sampling_logp``, ``is_ratio`` (broadcast
        over the completion), ``advantages`` in spec layout; ``grad_logp`` [B, T], ``grad_entropy`` [B, T]
        (dL/d of the per-token outputs of the fused head), ``grad_hidden``, ``grad_weight``; and the
        effective trainer settings (``temperature``, ``epsilon_low``, ..., ``is_correction``: whether
        ``_compute_loss`` multiplies by the ratio, ``is_mode`` / ``is_clip_min`` / ``is_clip_max``,
        ``off_policy_mask_threshold``).
        """
        with self._lock:
            return self._world_().loss(batch, config)

    def grpo_adaptive_entropy_step(self, batch: dict[str, torch.Tensor], *, coef: float, last_entropy: float,
                                   **config: Any) -> dict[str, Any]:
        """One :meth:`grpo_loss` (train mode, one micro-batch = one optimizer step) with adaptive entropy
        control (``use_adaptive_entropy=True`` in ``config``) from the controller state ``coef``
        (``entropy_coef``) and ``last_entropy`` (``_last_world_entropy``, the previous step's measurement),
        plus the state ``_compute_loss`` leaves: ``entropy_coef_after`` and ``world_entropy`` (the
        ``_last_world_entropy`` it measured, :3229-3239)."""
        with self._lock:
            return self._world_().adaptive_entropy_step(batch, config, coef, last_entropy)


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
        self._rollout_next: dict[str, Any] | None = None  # what rollout_func returns next
        self._advantages: dict[tuple, torch.Tensor] = {}  # the suite re-asks the same case while fingerprinting

    # reward function: the requested reward of each row, found by the row index column
    def _reward(self, prompts: list, completions: list, rlspec_index: list[int], **_: Any) -> list[float]:
        return [self._reward_table[i] for i in rlspec_index]

    def _column_reward(self, k: int) -> Any:
        """Reward function k of a multi-reward trainer (GDPO): column k of the requested [B, K] rewards."""
        def reward(prompts: list, completions: list, rlspec_index: list[int], **_: Any) -> list[float]:
            return [self._reward_table[i][k] for i in rlspec_index]

        reward.__name__ = f"rlspec_reward_{k}"
        return reward

    def _rollout(self, prompts: list, trainer: Any) -> dict[str, Any]:
        """``rollout_func`` (``grpo_trainer.py:2200-2218``): the completions and rollout log-probs set by
        :meth:`is_ratio`."""
        out, self._rollout_next = self._rollout_next, None
        if out is None:
            raise RuntimeError("rlspec: no rollout prepared")
        return out

    def _trainer(self, kind: str, config: dict[str, Any]) -> Any:
        key = (kind, tuple(sorted(config.items())))
        if key in self._trainers:
            return self._trainers[key]
        import trl.trainer.grpo_trainer as grpo_module
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
        columns = base.pop("rlspec_reward_columns", 0)  # K reward functions (GDPO), else the single one
        extra: dict[str, Any] = {}
        # use_vllm=True: GRPOTrainer.__init__ would build VLLMGeneration, which needs vllm installed and an
        # engine or server (module docstring); the stub stands in for it during construction only, and
        # rollout_func generates.
        no_vllm = mock.patch.object(grpo_module, "VLLMGeneration", _NoVLLM) if base.get("use_vllm") else contextlib.nullcontext()
        if base.get("use_vllm"):
            extra["rollout_func"] = self._rollout
        trl_logger = logging.getLogger("trl")
        level = trl_logger.level
        trl_logger.setLevel(logging.ERROR)  # the advice TRL logs for deliberately unusual configurations
        try:
            with warnings.catch_warnings(), no_vllm:
                warnings.simplefilter("ignore")
                args = Config(**base)
                trainer = Trainer(
                    model=self.model_dir,
                    reward_funcs=[self._column_reward(k) for k in range(columns)] if columns else self._reward,
                    args=args,
                    train_dataset=Dataset.from_dict({"prompt": [_PROMPT] * 2, "rlspec_index": [0, 1]}),
                    processing_class=self.tokenizer,
                    **extra,
                )
        finally:
            trl_logger.setLevel(level)
        trainer.current_gradient_accumulation_steps = 1  # set by train() otherwise (§11 item 5)
        self._trainers[key] = trainer
        return trainer

    def advantages(self, kind: str, rewards: torch.Tensor, G: int, **config: Any) -> torch.Tensor:
        """The trainer's advantages for ``rewards`` ([B], or [B, K]: one reward function per column)."""
        B = rewards.shape[0]
        table = [tuple(v) if isinstance(v, list) else float(v) for v in rewards.detach().to(torch.float64).tolist()]
        if rewards.dim() == 2:
            config["rlspec_reward_columns"] = rewards.shape[1]
        key = (kind, tuple(table), G, tuple(sorted(config.items())))
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
        self._reward_table = table
        inputs = [{"prompt": _PROMPT, "rlspec_index": i} for i in range(B)]
        trainer.model.train(train)
        with torch.random.fork_rng(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            out = trainer._generate_and_score_completions(inputs)
        trainer.model.train(True)
        self._advantages[key] = out["advantages"].detach().clone()
        return self._advantages[key].clone()

    def is_ratio(self, delta: torch.Tensor, valid: torch.Tensor, config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Run ``GRPOTrainer._generate_and_score_completions`` of a ``use_vllm=True`` trainer (eval mode, one
        generation per prompt, so any B) on B completions of width C = ``valid.shape[1]`` whose rollout
        log-probs are TRL's own recomputed ``old_per_token_logps`` minus ``delta`` ([B, C] float64, 0 where
        ``valid`` is False), with ``env_mask = valid``; return TRL's output (``importance_sampling_ratio``,
        ``old_per_token_logps``, ``sampling_per_token_logps``, ...)."""
        cfg = dict(config, use_vllm=True, vllm_importance_sampling_correction=True,
                   num_generations_eval=1, per_device_eval_batch_size=1)
        trainer = self._trainer("grpo", cfg)
        B, C = valid.shape
        prompt_ids = [[3]] * B  # "w0"
        completion_ids = [[3 + (b + t) % (TINY_LLAMA["vocab_size"] - 3) for t in range(C)] for b in range(B)]
        ids = torch.tensor([p + c for p, c in zip(prompt_ids, completion_ids)])
        trainer.model.eval()
        try:
            with torch.no_grad():
                # the same call, chunking (per_device_eval_batch_size) and inputs as TRL's (grpo_trainer.py:2643-2657)
                old, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, torch.ones_like(ids), C, batch_size=1)
            self._rollout_next = {
                "prompt_ids": prompt_ids,
                "completion_ids": completion_ids,
                "logprobs": (old.double() - delta).tolist(),
                "env_mask": valid.int().tolist(),
            }
            self._reward_table = [0.0] * B
            with torch.random.fork_rng(), torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = trainer._generate_and_score_completions([{"prompt": _PROMPT, "rlspec_index": i} for i in range(B)])
        finally:
            self._rollout_next = None
            trainer.model.train(True)
        return out

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

    def adaptive_entropy_step(self, batch: dict[str, torch.Tensor], config: dict[str, Any], coef: float,
                              last_entropy: float) -> dict[str, Any]:
        """The controller state set on the (cached) trainer, one ``_compute_loss``, the state read back."""
        trainer = self._trainer("grpo", dict(config))
        trainer.entropy_coef = float(coef)
        trainer._last_world_entropy = float(last_entropy)
        trainer._entropy_window_stats = None
        out = self.loss(batch, config)
        out["entropy_coef_after"] = float(trainer.entropy_coef)
        out["world_entropy"] = float(trainer._last_world_entropy)
        out["entropy_control"] = {"target": float(trainer.args.entropy_target), "delta": float(trainer.args.entropy_coef_delta),
                                  "coef_min": float(trainer.args.entropy_coef_min),
                                  "coef_max": float(trainer.args.entropy_coef_max)}
        return out

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

        is_ratio = batch.get("importance_sampling_ratio")
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
        if kind == "grpo":  # grpo_config.py:714-757: read only by loss_type "sapo" (:3121-3124) and "vespo" (:3125-3137)
            settings.update({name: float(getattr(trainer.args, name)) for name in (
                "sapo_temperature_pos", "sapo_temperature_neg",
                "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")})
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
            "top_entropy_quantile": float(trainer.top_entropy_quantile),
            "max_completion_length": int(trainer.max_completion_length),
            # the rollout corrections (grpo_trainer.py:3068-3081, :3140-3147)
            "sampling_logp": spec_completion(batch.get("sampling_per_token_logps")),
            "is_ratio": None if is_ratio is None else spec_completion(is_ratio.expand(B, C)),
            "is_correction": bool(trainer.use_vllm and trainer.vllm_importance_sampling_correction and trainer.loss_type != "vespo"),
            "is_mode": trainer.vllm_importance_sampling_mode,
            "is_clip_min": trainer.vllm_importance_sampling_clip_min,
            "is_clip_max": trainer.vllm_importance_sampling_clip_max,
            "off_policy_mask_threshold": trainer.off_policy_mask_threshold,
        }


__all__ = ["TRLAdapter", "SimulatedRanks"]
