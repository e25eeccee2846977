"""Record a trainer's optimizer steps as an rlspec trace (format ``rlspec-trace`` version 1), for
``rlspec replay``. The format is specified in ``conformance/spec/v1/trace.md``.

This module imports only torch, safetensors and the standard library, so a trainer can use it in its own
environment (put the rlspec checkout on ``PYTHONPATH``, or ``pip install rlspec``). One recorder per
process; under ``torch.distributed`` every rank writes its own part of each step and global rank 0 writes
the step's manifest, without any collective call.

    rec = TraceRecorder("trace/", config={"algorithm": "grpo", "loss": "ppo", "agg": "token_mean"},
                        dp_rank=dp_rank, dp_size=dp_size)
    rec.begin_step(step)
    for mb in micro_batches:
        logp = policy_logprobs(mb)            # [b, T], token-aligned, 0 at positions the loss ignores
        rec.watch("logp", logp)               # d loss / d logp is recorded when backward runs
        loss = my_loss(logp, mb)
        rec.micro_batch(input_ids=mb.ids, loss_mask=mb.mask, logp=logp, old_logp=mb.old,
                        advantages=mb.adv, loss=loss)
        loss.backward()
    rec.probe("lm_head.weight", model.lm_head.weight.grad)  # after accumulation and all-reduce, before clipping
    rec.end_step()
    optimizer.step()

Tensors are copied (detached, to CPU) when they are handed over; nothing is written before
:meth:`TraceRecorder.end_step`, so gradients captured by :meth:`TraceRecorder.watch` during the backward
passes are in the files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

TRACE_FORMAT = "rlspec-trace"
TRACE_VERSION = 1

# Per-micro-batch tensors, spec conventions: rows are sequences, columns are token positions of the full
# sequence (prompt and completion), token-aligned (column t of a per-token quantity belongs to token x_t:
# log pi(x_t | x_<t), the entropy of the distribution that predicted x_t, the value of the state before x_t).
# Packed micro-batches hold one row [1, total] and ``cu_seqlens``; context-parallel ranks hold a shard of the
# columns and ``cp_columns``. Every name is optional except ``input_ids`` and ``loss_mask``.
MICRO_TENSORS: dict[str, str] = {
    "input_ids": "[b, T] int: token ids of the whole sequence (prompt then completion, padding anywhere)",
    "loss_mask": "[b, T] bool: the tokens the policy loss counts (numerators and denominators)",
    "attention_mask": "[b, T] bool: the tokens the model attends to (not padding)",
    "prompt_mask": "[b, T] bool: prompt tokens",
    "completion_mask": "[b, T] bool: tokens the policy generated (through the first EOS, nothing after it)",
    "logp": "[b, T] log-probs of the loss forward (temperature applied), the tensor the loss differentiates",
    "grad_logp": "[b, T] d(micro-batch loss)/d logp, as the backward saw it (TraceRecorder.watch)",
    "entropy": "[b, T] entropy of the predicting distribution, from the loss forward",
    "grad_entropy": "[b, T] d(micro-batch loss)/d entropy",
    "old_logp": "[b, T] log-probs of the policy that sampled the batch, as the trainer recomputed them (PPO's pi_old)",
    "ref_logp": "[b, T] log-probs of the reference policy (the KL anchor)",
    "rollout_logp": "[b, T] log-probs the inference engine reported at sampling time",
    "rewards": "[b] sequence scores (the reward function's outputs)",
    "token_rewards": "[b, T] per-token rewards (PPO: the score on the last valid token, minus the KL reward)",
    "group_ids": "[b] int: the prompt group of each row (rows of one prompt share the id)",
    "row_ids": "[b] int: each row's index in the step's global batch (how the step's rows are ordered)",
    "advantages": "[b] or [b, T] advantages as the loss used them",
    "values": "[b, T] value predictions of the loss forward (critic)",
    "grad_values": "[b, T] d(micro-batch loss)/d values",
    "old_values": "[b, T] value predictions at rollout time (the value clip's anchor)",
    "returns": "[b, T] value targets",
    "is_weights": "[b, T] rollout-correction importance weights the loss applied",
    "token_loss": "[b, T] the per-token loss before aggregation, where the trainer exposes it",
    "hidden": "[b, T, D] final hidden states, the LM head's input (column t predicts x_{t+1})",
    "old_hidden": "[b, T, D] final hidden states of the forward that produced old_logp (with old_lm_head_weight)",
    "ref_hidden": "[b, T, D] final hidden states of the forward that produced ref_logp (with ref_lm_head_weight)",
    "cu_seqlens": "[n + 1] int: packed micro-batch, the sequence boundaries along the packed row",
    "cp_columns": "[T_local] int: context parallelism, the global column of each local column",
    "loss": "[] the micro-batch loss the backward was called on (after any scaling the trainer applies)",
}

# Per-step tensors (``step.safetensors``, written by global rank 0).
STEP_TENSORS: dict[str, str] = {
    "probe_grad": "the probe parameter's gradient after accumulation and the data-parallel all-reduce, before clipping",
    "lm_head_weight": "[V, D] the LM-head weight of the loss forward (with ``hidden``, the log-prob link)",
    "old_lm_head_weight": "[V, D] the LM-head weight of the forward that produced old_logp (with ``old_hidden``)",
    "ref_lm_head_weight": "[V, D] the LM-head weight of the reference forward that produced ref_logp (with ``ref_hidden``)",
}
HEAD_ROLES = {"policy": "lm_head_weight", "old": "old_lm_head_weight", "ref": "ref_lm_head_weight"}

# Manifest ``config`` keys rlspec replay reads (any other key is kept and shown).
CONFIG_KEYS: dict[str, str] = {
    "algorithm": "advantage estimator: grpo, rloo, reinforce, gae (PPO with a critic)",
    "loss": "policy loss: ppo, gspo, cispo, sapo, vespo, pg",
    "loss_kwargs": "sapo / vespo: the keywords of oracle.sapo_token_loss (tau_pos, tau_neg) / vespo_token_loss (k_pos, ...)",
    "agg": "aggregation mode: token_mean, seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm, sum",
    "agg_scope": "step (the step's global counts, the spec; default) or micro_batch (counts of each micro-batch, a documented convention)",
    "norm_length": "seq_mean_token_sum_norm's constant L",
    "eps_low": "lower clip epsilon", "eps_high": "upper clip epsilon", "dual_clip": "dual-clip constant c (or null)",
    "cispo_bound": "CISPO's bounds: relative (the weight capped at 1 + eps_high, default) or absolute (at eps_high)",
    "kl_coef": "coefficient of the KL term in the loss (0: none)", "kl_estimator": "k1, k2, k3, low_var_kl, ...",
    "kl_gradient": "the KL term's form (kl.loss): estimator (default), straight_through, unbiased, bias_corrected (K x ratio)",
    "kl_log_ratio_clamp": "the KL term's log-ratio clipped to +-c before the estimator (or null)",
    "kl_clamp": "the KL term's value clipped to +-c after the estimator (or null; gradient 0 where it binds)",
    "entropy_coef": "coefficient of the entropy bonus in the loss (0: none)",
    "temperature": "the temperature of the log-probs", "group_size": "completions per prompt",
    "grpo_scale": "GRPO's scale: group, batch, none", "grpo_std_ddof": "GRPO std's ddof", "grpo_eps": "GRPO std's epsilon",
    "reinforce_baseline": "REINFORCE's baseline", "gamma": "GAE gamma", "lam": "GAE lambda",
    "whiten_advantages": "GAE advantages whitened over the step", "kl_reward_coef": "PPO's KL-in-reward coefficient",
    "kl_reward_estimator": "PPO's KL-in-reward estimator", "vf_coef": "value-loss coefficient",
    "value_clip": "value clip range (or null)", "value_agg": "the value loss's aggregation mode",
    "correction": "the learner's off-policy correction (none; any other: the loss links are not replayed)",
    "rollout_rows": "rows one advantage computation spans, when a rollout feeds several optimizer steps",
    "loss_mask_subset": "true when the trainer drops completion tokens from the loss by design (a rejection)",
    "grad_reduce": "mean (default: the data-parallel all-reduce averages) or sum",
    "eos_token_id": "the EOS token id (the mask link checks the completion ends at the first EOS)",
    "sampling": "the sampler's settings: {temperature, top_k, top_p, min_p, repetition_penalty} (the sampling link)",
}


def _dist_ranks() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _copy(name: str, value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True).contiguous()
    if isinstance(value, (int, float, bool)):
        return torch.tensor(value)
    raise TypeError(f"TraceRecorder.micro_batch: {name}: expected a torch.Tensor or a Python number, got {type(value).__name__}")


class TraceRecorder:
    """Writes a trace folder: ``trace.json``, then ``step-NNNNNN/`` per optimizer step.

    ``directory``: the trace folder (created). ``config``: what the trainer claims it computes
    (``CONFIG_KEYS``; JSON-serialisable values). ``trainer``: free-form identification (name, version).
    ``dp_rank``/``dp_size``/``cp_rank``/``cp_size``: this process's place in the layout (default: the
    ``torch.distributed`` rank and world size as data-parallel ranks, one context-parallel rank).
    """

    def __init__(self, directory: str | os.PathLike[str], *, config: Mapping[str, Any] | None = None,
                 trainer: Mapping[str, Any] | None = None, dp_rank: int | None = None, dp_size: int | None = None,
                 cp_rank: int = 0, cp_size: int = 1) -> None:
        rank, world = _dist_ranks()
        self.dir = Path(directory)
        self.config = dict(config or {})
        self.trainer = dict(trainer or {})
        self.dp_size = world // cp_size if dp_size is None else int(dp_size)
        self.dp_rank = rank // cp_size if dp_rank is None else int(dp_rank)
        self.cp_size, self.cp_rank = int(cp_size), int(cp_rank)
        if not 0 <= self.dp_rank < self.dp_size:
            raise ValueError(f"TraceRecorder: dp_rank: {self.dp_rank} not in [0, dp_size={self.dp_size})")
        if not 0 <= self.cp_rank < self.cp_size:
            raise ValueError(f"TraceRecorder: cp_rank: {self.cp_rank} not in [0, cp_size={self.cp_size})")
        try:
            json.dumps(self.config)
        except TypeError as exc:
            raise TypeError(f"TraceRecorder: config: not JSON-serialisable ({exc})") from None
        self.main = self.dp_rank == 0 and self.cp_rank == 0
        self._step: int | None = None
        self._micro: list[dict[str, torch.Tensor]] = []
        self._step_tensors: dict[str, torch.Tensor] = {}
        self._probe_name: str | None = None
        self.steps_written: list[int] = []
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.main:
            self._write_json(self.dir / "trace.json", {"format": TRACE_FORMAT, "version": TRACE_VERSION,
                                                        "trainer": self.trainer})

    # -- one step --------------------------------------------------------------------------------

    def begin_step(self, step: int) -> None:
        """Start recording optimizer step ``step`` (an int >= 0)."""
        if self._step is not None:
            raise RuntimeError(f"TraceRecorder.begin_step: step {self._step} was begun and not ended (call end_step)")
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"TraceRecorder.begin_step: step: expected an int >= 0, got {step!r}")
        self._step = step
        self._micro, self._step_tensors, self._probe_name = [], {}, None

    def micro_batch(self, **tensors: Any) -> int:
        """Record one micro-batch (names: ``MICRO_TENSORS``); returns its index on this rank. Call it once per
        micro-batch, in the order the backward passes run."""
        self._require_step("micro_batch")
        unknown = sorted(set(tensors) - set(MICRO_TENSORS))
        if unknown:
            raise ValueError(f"TraceRecorder.micro_batch: {unknown[0]}: not a trace tensor name "
                             f"(known: {', '.join(MICRO_TENSORS)})")
        for required in ("input_ids", "loss_mask"):
            if required not in tensors:
                raise ValueError(f"TraceRecorder.micro_batch: {required}: required")
        self._micro.append({k: _copy(k, v) for k, v in tensors.items() if v is not None})
        return len(self._micro) - 1

    def watch(self, name: str, tensor: torch.Tensor, *, mb: int | None = None) -> torch.Tensor:
        """Record ``d loss / d tensor`` as ``grad_<name>`` of micro-batch ``mb`` (default: the one
        :meth:`micro_batch` records next), captured by a tensor hook when backward runs; gradients of
        several backward passes through the tensor add up. ``name``: logp, entropy or values. Returns the
        tensor."""
        self._require_step("watch")
        key = f"grad_{name}"
        if key not in MICRO_TENSORS:
            raise ValueError(f"TraceRecorder.watch: name: {name!r} has no gradient tensor (logp, entropy, values)")
        if not isinstance(tensor, torch.Tensor) or not tensor.requires_grad:
            raise ValueError(f"TraceRecorder.watch: tensor: {name} does not require grad (watch the loss forward's tensor)")
        slot = len(self._micro) if mb is None else int(mb)

        def hook(grad: torch.Tensor, slot: int = slot) -> None:
            g = grad.detach().to("cpu", copy=True)
            target = self._micro[slot] if slot < len(self._micro) else None
            if target is None:
                raise RuntimeError(f"TraceRecorder.watch: {name}: backward ran before micro_batch() recorded its micro-batch")
            target[key] = target[key] + g if key in target else g

        tensor.register_hook(hook)
        return tensor

    def probe(self, name: str, grad: torch.Tensor | None, *, lm_head_weight: torch.Tensor | None = None) -> None:
        """Record the probe parameter ``name``'s gradient after accumulation and all-reduce, before clipping
        (and, optionally, the LM-head weight the forward used). Written by global rank 0 only."""
        self._require_step("probe")
        if grad is None:
            raise ValueError(f"TraceRecorder.probe: grad: {name} has no gradient (call probe after the backward passes)")
        self._probe_name = str(name)
        self._step_tensors["probe_grad"] = _copy("probe_grad", grad)
        if lm_head_weight is not None:
            self._step_tensors["lm_head_weight"] = _copy("lm_head_weight", lm_head_weight)

    def lm_head(self, weight: torch.Tensor, *, role: str = "policy") -> None:
        """Record the LM-head weight of one forward: ``policy`` (the loss forward, ``lm_head_weight``), ``old``
        (the forward that produced ``old_logp``) or ``ref`` (the reference forward of ``ref_logp``). With the
        matching hidden states (``hidden``, ``old_hidden``, ``ref_hidden``) replay recomputes that role's
        log-probs from first principles. Written by global rank 0 only."""
        self._require_step("lm_head")
        if role not in HEAD_ROLES:
            raise ValueError(f"TraceRecorder.lm_head: role: {role!r} not one of {', '.join(HEAD_ROLES)}")
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise ValueError(f"TraceRecorder.lm_head: weight: expected a [V, D] tensor, got "
                             f"{tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__}")
        self._step_tensors[HEAD_ROLES[role]] = _copy(HEAD_ROLES[role], weight)

    def end_step(self, **extra: Any) -> Path:
        """Write the step's files; ``extra``: JSON values added to this rank's part (e.g. the trainer's own
        logged metrics). Returns the step folder."""
        step = self._require_step("end_step")
        if not self._micro:
            raise RuntimeError(f"TraceRecorder.end_step: step {step}: no micro_batch() recorded")
        from safetensors.torch import save_file

        folder = self.dir / f"step-{step:06d}"
        folder.mkdir(parents=True, exist_ok=True)
        entries = []
        for j, rec in enumerate(self._micro):
            fname = f"dp{self.dp_rank}-cp{self.cp_rank}-mb{j}.safetensors"
            save_file({k: v for k, v in rec.items()}, str(folder / fname))
            entries.append({"mb": j, "file": fname, "tensors": sorted(rec)})
        part = {"dp_rank": self.dp_rank, "cp_rank": self.cp_rank, "micro_batches": entries}
        if extra:
            part["extra"] = extra
        self._write_json(folder / f"part-dp{self.dp_rank}-cp{self.cp_rank}.json", part)
        if self.main:
            manifest = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "step": step,
                        "layout": {"dp": self.dp_size, "cp": self.cp_size, "micro_batches": len(self._micro)},
                        "config": self.config}
            if self._step_tensors:
                save_file(self._step_tensors, str(folder / "step.safetensors"))
                manifest["probe"] = self._probe_name
            self._write_json(folder / "manifest.json", manifest)
        self.steps_written.append(step)
        self._step = None
        self._micro, self._step_tensors = [], {}
        return folder

    # -- helpers ---------------------------------------------------------------------------------

    def _require_step(self, what: str) -> int:
        if self._step is None:
            raise RuntimeError(f"TraceRecorder.{what}: no step begun (call begin_step first)")
        return self._step

    @staticmethod
    def _write_json(path: Path, data: Mapping[str, Any]) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


__all__ = ["TraceRecorder", "TRACE_FORMAT", "TRACE_VERSION", "MICRO_TENSORS", "STEP_TENSORS", "CONFIG_KEYS"]
