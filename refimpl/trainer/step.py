"""One optimizer update's math, built from the refimpl functions: the policy forward through the fused
log-prob path, the advantages of every algorithm, and the micro-batch loss with distributed-exact
aggregation.

The forward never materialises the ``[B, T, V]`` logits: the backbone's final hidden states and the
LM-head weight go to :func:`refimpl.token_logprobs_and_entropy_from_hidden` (a model whose head is not
a plain bias-free linear map, or that rescales its logits, takes the logits path instead).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import refimpl
from refimpl.trainer import _dist
from refimpl.trainer.config import TrainConfig


def position_ids_from(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over attended tokens (left padding skipped), as ``generate`` assigns them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _plain_head(lm: nn.Module) -> bool:
    head = lm.get_output_embeddings()
    cfg = getattr(lm, "config", None)
    rescaled = any(getattr(cfg, k, None) not in (None, 1.0) for k in ("final_logit_softcapping", "logit_scale", "logits_scaling"))
    return isinstance(head, nn.Linear) and head.bias is None and not rescaled


@dataclass
class PolicyOutput:
    logp: torch.Tensor  # [B, T] log pi(x_t | x_<t) at valid t (temperature applied), 0 elsewhere
    entropy: torch.Tensor  # [B, T] entropy of the distribution that predicted x_t
    values: torch.Tensor | None  # [B, T] V(state before x_t) at valid t, 0 elsewhere (value head only)
    hidden: torch.Tensor  # [B, T, D] the backbone's final hidden states (the LM head's input)


class PolicyModel(nn.Module):
    """A Hugging Face causal LM, optionally with a scalar value head on its final hidden states.

    ``forward`` returns token-aligned log-probs, entropies and values (spec conventions) and is the
    module that DDP wraps, so every parameter's gradient flows through one ``forward`` call."""

    def __init__(self, lm: nn.Module, *, value_head: bool = False) -> None:
        super().__init__()
        self.lm = lm
        self.fused = _plain_head(lm)
        self.value_head = None
        if value_head:
            d = lm.get_output_embeddings().weight.shape[1]
            self.value_head = nn.Linear(d, 1)
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                mask: torch.Tensor, temperature: float, support: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """(logp, entropy, values or an empty tensor, hidden): a tuple, so DDP sees plain tensors;
        :func:`run_policy` wraps it in a :class:`PolicyOutput`. With ``support`` ([B, T, V] bool, the sets the
        tokens were sampled from: the keep sampling mask) the log-probs are renormalised over it
        (``support_logprobs``, through materialised logits); the entropy stays the full-support one."""
        base = self.lm.base_model
        hidden = base(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      use_cache=False).last_hidden_state
        head = self.lm.get_output_embeddings()
        if self.fused:
            logp, entropy = refimpl.token_logprobs_and_entropy_from_hidden(
                hidden, head.weight, input_ids, mask, temperature=temperature
            )
        else:  # a head with a bias or rescaled logits: materialise them
            logits = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=False).logits
            logp = refimpl.token_logprobs(logits, input_ids, mask, temperature=temperature)
            entropy = refimpl.token_entropy(logits, mask, temperature=temperature)
        if support is not None:
            logits = head(hidden) if self.fused else logits
            logp = refimpl.support_logprobs(logits, input_ids, mask, support, temperature=temperature)
        values = None
        if self.value_head is not None:
            v = self.value_head(hidden).squeeze(-1).float()  # v[:, s]: value of the state after token s
            values = torch.zeros_like(v)
            values[:, 1:] = v[:, :-1]  # token-aligned: position t holds the value of the state before x_t
            values = torch.where(mask, values, torch.zeros_like(values))
        else:
            values = hidden.new_zeros(0)
        return logp, entropy, values, hidden


def run_policy(module: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
               mask: torch.Tensor, temperature: float, support: torch.Tensor | None = None) -> PolicyOutput:
    """Call a :class:`PolicyModel` (or its DDP wrapper) and name its outputs."""
    logp, entropy, values, hidden = module(input_ids, attention_mask, position_ids, mask, temperature, support)
    return PolicyOutput(logp, entropy, values if values.numel() else None, hidden)


# ------------------------------------------------------------------------------------------------
# Advantages
# ------------------------------------------------------------------------------------------------


@torch.no_grad()
def sequence_advantages(cfg: TrainConfig, rewards_global: torch.Tensor) -> torch.Tensor:
    """[B_global] advantages of grpo / rloo / reinforce, from every rank's rewards (groups contiguous)."""
    r = rewards_global
    if cfg.algo == "grpo":
        return refimpl.grpo_advantages(r, cfg.group_size, scale=cfg.grpo_scale, std_ddof=cfg.grpo_std_ddof, eps=cfg.grpo_eps)
    if cfg.algo == "rloo":
        return refimpl.rloo_advantages(r, cfg.group_size)
    if cfg.algo == "reinforce":
        return refimpl.reinforce_advantages(r, baseline=cfg.reinforce_baseline)
    raise ValueError(f"sequence_advantages: algo: {cfg.algo!r} has per-token advantages")


@dataclass
class GaeResult:
    token_rewards: torch.Tensor  # [B, T]
    advantages_raw: torch.Tensor  # [B, T] GAE before whitening
    advantages: torch.Tensor  # [B, T] (whitened over the whole all-rank batch when configured)
    returns: torch.Tensor  # [B, T] = raw advantages + values


@torch.no_grad()
def gae_advantages(cfg: TrainConfig, scores: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor,
                   values: torch.Tensor, mask: torch.Tensor) -> GaeResult:
    """PPO's advantages: per-token rewards -beta*KL(old || ref) with the score on each row's last valid
    token, GAE against the value head's values; whitened over every rank's valid tokens."""
    R = refimpl.rlhf_token_rewards(scores, old_logp, ref_logp, mask, kl_coef=cfg.kl_reward_coef,
                                   estimator=cfg.kl_reward_estimator)
    A, returns = refimpl.gae(R, values, mask, gamma=cfg.gamma, lam=cfg.lam)
    adv = A
    if cfg.whiten_advantages:
        A_all, m_all = _dist.all_gather_rows(A), _dist.all_gather_rows(mask)
        lo = _dist.rank() * A.shape[0]
        adv = refimpl.whiten(A_all, m_all)[lo:lo + A.shape[0]]
    return GaeResult(R, A, adv, returns)


# ------------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------------


def policy_token_loss(cfg: TrainConfig, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                      mask: torch.Tensor) -> torch.Tensor:
    if cfg.loss == "ppo":
        return refimpl.ppo_token_loss(logp, old_logp, advantages, mask, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                      dual_clip=cfg.dual_clip)
    if cfg.loss == "gspo":
        return refimpl.gspo_token_loss(logp, old_logp, advantages, mask, eps_low=cfg.eps_low, eps_high=cfg.eps_high)
    return refimpl.cispo_token_loss(logp, old_logp, advantages, mask, eps_low=cfg.eps_low, eps_high=cfg.eps_high)


def objective_token_loss(cfg: TrainConfig, out: PolicyOutput, old_logp: torch.Tensor, ref_logp: torch.Tensor,
                         advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """l_t = policy_t + kl_coef * KL_t(logp || ref) - entropy_coef * H_t (valid t; 0 elsewhere)."""
    ell = policy_token_loss(cfg, out.logp, old_logp, advantages, mask)
    if cfg.kl_coef != 0.0:
        ell = ell + cfg.kl_coef * refimpl.kl_penalty(out.logp, ref_logp, mask, estimator=cfg.kl_estimator)
    if cfg.entropy_coef != 0.0:
        ell = ell - cfg.entropy_coef * out.entropy
    return ell


@torch.no_grad()
def clip_masks(cfg: TrainConfig, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
               mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Float [B, T] masks of the tokens on a clipped branch: ``high`` (ratio above 1+eps_high where that
    clips), ``low`` (below 1-eps_low), ``dual`` (ratio above dual_clip, A < 0), and the token ``ratio``."""
    m = mask.bool()
    d = torch.where(m, logp.float() - old_logp.float(), torch.zeros_like(logp, dtype=torch.float32))
    A = advantages.float()
    A = A.unsqueeze(1).expand(m.shape) if A.dim() == 1 else A
    ratio = torch.exp(d)
    if cfg.loss == "gspo":
        n = m.sum(1, keepdim=True).clamp(min=1)
        r = torch.exp(d.sum(1, keepdim=True) / n).expand(m.shape)
    else:
        r = ratio
    hi = 1.0 + cfg.eps_high
    lo = None if cfg.eps_low is None else 1.0 - cfg.eps_low
    zero = torch.zeros_like(r, dtype=torch.bool)
    if cfg.loss == "cispo":  # the IS weight is clipped whatever the sign of A
        high = r > hi
        low = r < lo if lo is not None else zero
    else:
        high = (A > 0) & (r > hi)
        low = (A < 0) & (r < lo)
    dual = (A < 0) & (r > cfg.dual_clip) if cfg.dual_clip is not None else zero
    f = lambda x: (x & m).float()  # noqa: E731
    return {"high": f(high), "low": f(low), "dual": f(dual), "ratio": torch.where(m, ratio, torch.zeros_like(ratio))}


__all__ = [
    "PolicyModel",
    "PolicyOutput",
    "run_policy",
    "position_ids_from",
    "sequence_advantages",
    "gae_advantages",
    "GaeResult",
    "policy_token_loss",
    "objective_token_loss",
    "clip_masks",
]
