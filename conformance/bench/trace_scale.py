"""A synthetic training step at scale for ``rlspec replay``'s benchmark: B sequences x T tokens in ``micro``
micro-batches, PPO loss with a k3 KL term and a token-mean over the step's global counts, every per-token
tensor recorded. With ``hidden=(D, V)`` the log-probs come from random final hidden states [B, T, D] through a
random LM head [V, D] (both recorded, with the head's gradient as the probe): the log-prob and entropy links run
on a seeded sample of rows, the probe on every row; without, those links are "not recorded". The gradients are
refimpl's, by autograd, so the trace is what a correct trainer records."""

from __future__ import annotations

from pathlib import Path

import torch

import refimpl
from rlspec.trace import TraceRecorder

CONFIG = {"algorithm": "grpo", "loss": "ppo", "agg": "token_mean", "eps_low": 0.2, "eps_high": 0.28, "kl_coef": 0.05,
          "kl_estimator": "k3", "group_size": 8, "grpo_scale": "group", "grpo_eps": 1e-6, "grpo_std_ddof": 1}


def write_step(root: str | Path, *, B: int = 256, T: int = 4096, micro: int = 8, prompt: int = 512, seed: int = 0,
               hidden: tuple[int, int] | None = None) -> Path:
    """Write the one-step trace to ``root`` and return it."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 8, T - prompt + 1, (B,), generator=g)
    cols = torch.arange(T)
    comp = (cols >= prompt) & (cols < prompt + lengths[:, None])
    prompt_mask = (cols < prompt).expand(B, T)
    rewards = torch.randint(0, 2, (B,), generator=g).float()
    A = refimpl.grpo_advantages(rewards, CONFIG["group_size"], eps=CONFIG["grpo_eps"])
    ids = torch.randint(0, hidden[1] if hidden else 1000, (B, T), generator=g)
    W = None
    if hidden:
        D, V = hidden
        W = (torch.randn(V, D, generator=g) / D ** 0.5).requires_grad_(True)
        h = torch.randn(B, T, D, generator=g)
        with torch.no_grad():
            cur = refimpl.token_logprobs_from_hidden(h, W, ids, comp)
    else:
        cur = torch.where(comp, -torch.rand(B, T, generator=g) * 3, 0.0)
    old = torch.where(comp, cur + 0.1 * torch.randn(B, T, generator=g), 0.0)
    ref = torch.where(comp, old + 0.05 * torch.randn(B, T, generator=g), 0.0)
    N, S = float(comp.sum()), float(B)
    counts = refimpl.distributed.StepCounts(N, S)
    rec = TraceRecorder(root, config=CONFIG, trainer={"name": "synthetic", "version": f"{B}x{T}"})
    rec.begin_step(0)
    rows = B // micro
    for j in range(micro):
        sl = slice(j * rows, (j + 1) * rows)
        m = comp[sl]
        if W is not None:
            logp = refimpl.token_logprobs_from_hidden(h[sl], W, ids[sl], m)
        else:
            logp = cur[sl].clone().requires_grad_(True)
        ell = refimpl.ppo_token_loss(logp, old[sl], A[sl], m, eps_low=0.2, eps_high=0.28)
        ell = ell + CONFIG["kl_coef"] * refimpl.kl_penalty(logp, ref[sl], m, estimator="k3")
        loss = refimpl.distributed.micro_batch_loss(ell, m, counts, mode="token_mean", dp_world_size=1)
        rec.watch("logp", logp)
        extra = {"hidden": h[sl]} if W is not None else {}
        rec.micro_batch(**extra, input_ids=ids[sl], loss_mask=m, attention_mask=m | prompt_mask[sl],
                        prompt_mask=prompt_mask[sl], completion_mask=m, logp=logp, old_logp=old[sl], ref_logp=ref[sl],
                        advantages=A[sl], rewards=rewards[sl], group_ids=torch.arange(j * rows, (j + 1) * rows) // 8, loss=loss)
        loss.backward()
    if W is not None:
        rec.probe("lm_head.weight", W.grad, lm_head_weight=W.detach())
    rec.end_step()
    return Path(root)
