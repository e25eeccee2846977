"""Traces written by hand with rlspec.trace.TraceRecorder, their gradients derived by hand: the policy
gradient loss l_t = -A_b * logp_t has d l_t / d logp_t = -A_b, so a token's recorded gradient is -A_b times
the weight its normalisation gives it (1/N for the step's token mean over N tokens, 1/(n_i * M) for micro-batch
i's own mean over its n_i tokens averaged over M accumulation steps)."""

from __future__ import annotations

from pathlib import Path

import torch

from rlspec.trace import TraceRecorder

T = 6
# two micro-batches of two rows; prompt in columns 0-1, completions of 4, 1, 2 and 1 tokens (micro-batches of 5 and 3)
LENGTHS = ((4, 1), (2, 1))
ADV = ((1.0, -2.0), (0.5, 3.0))


def masks(lengths: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    prompt = torch.zeros(len(lengths), T, dtype=torch.bool)
    prompt[:, :2] = True
    comp = torch.zeros_like(prompt)
    for i, n in enumerate(lengths):
        comp[i, 2:2 + n] = True
    return prompt, comp


def write(root: Path, *, weight: str = "step", dp: int = 1, config: dict | None = None, edit=None) -> Path:
    """A one-step trace of ``dp`` ranks, each with the two micro-batches above. ``weight``: step (1/N), micro_mean
    (1/(n_i M)), twice (1/(N M)). ``edit(name, tensors)`` changes a micro-batch's tensors before recording."""
    N = sum(sum(ls) for ls in LENGTHS) * dp
    M = len(LENGTHS)
    cfg = {"algorithm": "reinforce", "loss": "pg", "agg": "token_mean", "kl_coef": 0.0, **(config or {})}
    for d in range(dp):
        rec = TraceRecorder(root, config=cfg, trainer={"name": "hand", "version": "0"}, dp_rank=d, dp_size=dp)
        rec.begin_step(0)
        for j, (lengths, adv) in enumerate(zip(LENGTHS, ADV)):
            prompt, comp = masks(lengths)
            n_i = int(comp.sum())
            w = {"step": 1.0 / N, "micro_mean": 1.0 / (n_i * M) / dp, "twice": 1.0 / (N * M)}[weight]
            A = torch.tensor(adv, dtype=torch.float64)
            logp = torch.where(comp, -0.5 - 0.1 * torch.arange(T, dtype=torch.float64), 0.0)
            grad = torch.where(comp, -A[:, None] * w * dp, 0.0)  # x dp: each rank's loss undoes the all-reduce mean
            loss = (torch.where(comp, -A[:, None] * logp, 0.0) * w * dp).sum()
            tensors = dict(input_ids=torch.arange(2 * T).reshape(2, T) % 5 + 3, attention_mask=prompt | comp,
                           prompt_mask=prompt, completion_mask=comp, loss_mask=comp.clone(), logp=logp, grad_logp=grad,
                           advantages=A, rewards=A, loss=loss)
            if edit is not None:
                edit(j, tensors)
            rec.micro_batch(**tensors)
        rec.end_step()
    return root
