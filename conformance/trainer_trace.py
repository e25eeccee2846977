"""``rlspec train --trace DIR``: the refimpl trainer's recorder. Every optimizer update becomes one trace step
(``rlspec.trace``, format ``conformance/spec/v1/trace.md``), written by every rank for its own rows, for
``rlspec replay DIR``.

:class:`TraceHook` is the trainer's ``on_step`` hook (``refimpl.trainer.StepRecord``, after the update's
backward passes): each micro-batch's ids and masks, the loss forward's log-probs and entropies with
d loss/d logp (``retain_grad``), old, reference and (asynchronous mode) behaviour log-probs, rewards,
row and group ids, advantages, the critic's values, targets and d loss/d values (PPO), per-token rewards,
the final hidden states and the micro-batch loss; per update the LM-head weight and its gradient after
accumulation and the DDP all-reduce, before clipping. The manifest's ``config`` is the trainer's resolved
``TrainConfig`` in trace keys. With ``cp_size`` > 1 every rank records its token columns of each per-token
tensor (``cp_columns``; the hidden states too: the trainer runs the whole rows), as part ``dp<d>-cp<c>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from refimpl.trainer.config import TrainConfig
from refimpl.trainer.loop import RolloutRecord, StepRecord
from refimpl.trainer.rollout import UNTRUNCATED
from rlspec.trace import TraceRecorder


def trace_config(cfg: TrainConfig, eos_id: int) -> dict[str, Any]:
    """What the trainer computes, in the manifest's ``config`` keys (rlspec.trace.CONFIG_KEYS)."""
    rows = cfg.prompts_per_step * cfg.group_size
    out: dict[str, Any] = {
        "algorithm": "gae" if cfg.algo == "ppo" else cfg.algo, "loss": cfg.loss, "agg": cfg.agg, "agg_scope": "step",
        "norm_length": cfg.norm_length, "eps_low": cfg.eps_low, "eps_high": cfg.eps_high, "dual_clip": cfg.dual_clip,
        "kl_coef": cfg.kl_coef, "kl_estimator": cfg.kl_estimator, "entropy_coef": cfg.entropy_coef,
        "temperature": cfg.temperature, "group_size": cfg.group_size, "grpo_scale": cfg.grpo_scale,
        "grpo_std_ddof": cfg.grpo_std_ddof, "grpo_eps": cfg.grpo_eps, "reinforce_baseline": cfg.reinforce_baseline,
        "grad_reduce": "mean", "eos_token_id": eos_id, "correction": cfg.correction,
        "loss_mask_subset": cfg.correction != "none", "rollout_rows": rows,
        "sampling": {"temperature": cfg.temperature, **UNTRUNCATED, "top_k": cfg.top_k, "top_p": cfg.top_p},
    }
    if cfg.algo == "ppo":
        out.update(gamma=cfg.gamma, lam=cfg.lam, whiten_advantages=cfg.whiten_advantages, kl_reward_coef=cfg.kl_reward_coef,
                   kl_reward_estimator=cfg.kl_reward_estimator, vf_coef=cfg.vf_coef, value_clip=cfg.value_clip,
                   value_agg=cfg.value_agg)
    return out


class TraceHook:
    """``on_step`` hook writing every update of the run to a trace folder (all ranks; rank 0 the manifests)."""

    wants_hidden = True  # the trainer hands over final hidden states, the LM-head weight and its gradient

    def __init__(self, directory: str | Path, *, then: Any = None) -> None:
        self.directory = Path(directory)
        self.then = then  # another hook (``--verify``) called after the trace is written
        self.recorder: TraceRecorder | None = None
        self._rollout: RolloutRecord | None = None

    def __call__(self, rec: StepRecord) -> None:
        if self.recorder is None:
            self.recorder = TraceRecorder(
                self.directory, config=trace_config(rec.config, rec.eos_id),
                trainer={"name": "refimpl", "version": f"rlspec trainer, torch {torch.__version__}",
                         "world_size": rec.world_size},
                dp_rank=rec.rank // rec.config.cp_size, dp_size=rec.world_size // rec.config.cp_size,
                cp_rank=rec.rank % rec.config.cp_size, cp_size=rec.config.cp_size)
        if rec.rollout is not None:
            self._rollout = rec.rollout
        ro = self._rollout
        r = self.recorder
        r.begin_step(rec.update)
        cfg = rec.config
        for m in rec.micro:
            a, b = m.rows
            # prompt and completion from the token layout alone (left-padded prompt in the first prompt_width
            # columns, the attended completion after it); the loss mask is the one the loss used
            cols = torch.arange(m.input_ids.shape[1]).unsqueeze(0)
            attended = m.attention_mask.bool()
            rows = torch.arange(a, b) + ro.rank_offset
            loss_mask = m.mask if m.keep is None else m.mask & m.keep
            loss = m.policy_loss + (cfg.vf_coef * m.value_loss if m.value_loss is not None else 0.0)
            # old, reference and behaviour log-probs as the rollout scored them (not as the loss received them)
            rollout_logp = ro.behav_logp[a:b] if ro.behav_logp is not None else None
            tensors: dict[str, Any] = dict(
                input_ids=m.input_ids, attention_mask=attended, prompt_mask=(cols < rec.prompt_width) & attended,
                completion_mask=(cols >= rec.prompt_width) & attended, loss_mask=loss_mask, logp=m.logp,
                grad_logp=m.grad_logp, entropy=m.entropy, old_logp=ro.old_logp[a:b], ref_logp=ro.ref_logp[a:b],
                rollout_logp=rollout_logp, advantages=m.advantages, rewards=ro.rewards_global[rows],
                row_ids=rows, group_ids=rows // cfg.group_size, hidden=m.hidden, loss=torch.tensor(loss, dtype=torch.float64),
                old_hidden=ro.old_hidden[a:b] if ro.old_hidden is not None else None,
                ref_hidden=ro.ref_hidden[a:b] if ro.ref_hidden is not None else None,
                is_weights=m.is_weights,
            )
            if m.values is not None:
                tensors.update(values=m.values, grad_values=m.grad_values, old_values=m.old_values, returns=m.returns,
                               token_rewards=ro.token_rewards[a:b] if ro.token_rewards is not None else None)
            if m.cp_columns is not None:  # context parallelism: this rank's token columns of every per-token tensor
                width = m.input_ids.shape[1]
                tensors = {k: (v.index_select(1, m.cp_columns) if isinstance(v, torch.Tensor) and v.dim() >= 2
                               and v.shape[1] == width else v) for k, v in tensors.items()}
                tensors["cp_columns"] = m.cp_columns
            r.micro_batch(**{k: v for k, v in tensors.items() if v is not None})
        if rec.head_grad is not None:
            r.probe("lm.lm_head.weight", rec.head_grad, lm_head_weight=rec.weight)
        for role, weight in (("old", ro.old_weight), ("ref", ro.ref_weight)):
            if weight is not None:
                r.lm_head(weight, role=role)
        r.end_step(step=rec.step, epoch=rec.epoch, minibatch=rec.minibatch)
        if self.then is not None:
            self.then(rec)
