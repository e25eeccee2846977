"""Sequence-level advantages (spec ids ``adv.reinforce``, ``adv.rloo``, ``adv.grpo``).

Means are taken about a reference element (the group's first reward; :mod:`refimpl.whiten`: the
batch's first valid value): ``μ = x₀ + mean(x − x₀)``. An all-equal group then has ``x − μ`` exactly 0, so its advantage
is exactly 0 even with ``eps = 0``, and the shifted sums lose no precision on large offsets.
"""

from __future__ import annotations

import torch

from refimpl.validation import (
    check_choice,
    check_group_size,
    check_int,
    check_real,
    check_sequence_array,
    compute_dtypes,
)

__all__ = ["reinforce_advantages", "rloo_advantages", "grpo_advantages"]


def _safe_divide(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num/den, and exactly 0 (value and gradient) where den == 0."""
    zero = den == 0
    return torch.where(zero, 0.0, num / torch.where(zero, 1.0, den))


def _safe_sqrt(v: torch.Tensor) -> torch.Tensor:
    """sqrt(v) with value and gradient 0 at v == 0 (instead of an infinite gradient)."""
    pos = v > 0
    return torch.where(pos, torch.sqrt(torch.where(pos, v, 1.0)), 0.0)


def _var(centered: torch.Tensor, n: int, ddof: int, dim: int | None = None) -> torch.Tensor:
    """Σ centered² / (n − ddof) (over ``dim``, or everything), 0 when n − ddof <= 0."""
    sq = centered * centered
    total = sq.sum() if dim is None else sq.sum(dim)
    return total / (n - ddof) if n - ddof > 0 else torch.zeros_like(total)


@torch.no_grad()
def reinforce_advantages(rewards: torch.Tensor, *, baseline: str = "none") -> torch.Tensor:
    """Spec: adv.reinforce. A = r ("none") or r − mean(r) ("batch_mean"); float32 math for half inputs."""
    fn = "reinforce_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    baseline = check_choice(fn, "baseline", baseline, ("none", "batch_mean"))
    if baseline == "none" or r.numel() == 0:
        return r.clone()
    _, cdt = compute_dtypes(r)
    x = r.to(cdt)
    ref = x[:1].detach()
    return (x - ref - (x - ref).mean()).to(r.dtype)


@torch.no_grad()
def rloo_advantages(rewards: torch.Tensor, group_size: int, *, singleton: str = "zero") -> torch.Tensor:
    """Spec: adv.rloo. A_i = r_i − (Σ_g r − r_i)/(G − 1) over contiguous groups (G = 1: 0, or r with singleton="raw"); sums about the group's first reward."""
    fn = "rloo_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    singleton = check_choice(fn, "singleton", singleton, ("zero", "raw"))
    _, cdt = compute_dtypes(r)
    if G == 1:
        return r.clone() if singleton == "raw" else torch.zeros_like(r)
    x = r.to(cdt).view(-1, G)
    c = x - x[:, :1].detach()  # the baseline is shift-equivariant: A is unchanged by the shift
    A = c - (c.sum(dim=1, keepdim=True) - c) / (G - 1)
    return A.reshape(-1).to(r.dtype)


@torch.no_grad()
def grpo_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    scale: str = "group",
    std_ddof: int = 1,
    eps: float = 1e-6,
    singleton: str = "zero",
) -> torch.Tensor:
    """Spec: adv.grpo. (r − μ_g)/(σ + eps) with σ = σ_g ("group"), σ over all B ("batch"), or no division ("none"); 0 where the denominator is 0."""
    fn = "grpo_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    scale = check_choice(fn, "scale", scale, ("group", "batch", "none"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    singleton = check_choice(fn, "singleton", singleton, ("zero", "raw"))
    _, cdt = compute_dtypes(r)
    x = r.to(cdt)
    if G == 1:  # "raw" (verl): the singleton group's statistics are mean 0 and std 1
        if singleton == "zero" or scale == "none":
            return torch.zeros_like(r) if singleton == "zero" else r.clone()
        if scale == "group":
            return (x / (1.0 + eps)).to(r.dtype)
        batch_shifted = x - x[:1]
        sigma = _safe_sqrt(_var(batch_shifted - batch_shifted.mean(), x.numel(), std_ddof))
        return _safe_divide(x, sigma + eps).to(r.dtype)
    grouped = x.view(-1, G)
    shifted = grouped - grouped[:, :1].detach()
    centered = shifted - shifted.mean(dim=1, keepdim=True)  # r − μ_g, exactly 0 for an all-equal group
    if scale == "none":
        A = centered
    elif scale == "group":
        A = _safe_divide(centered, _safe_sqrt(_var(centered, G, std_ddof, dim=1)).unsqueeze(1) + eps)
    else:
        batch_shifted = x - x[:1].detach()
        sigma = _safe_sqrt(_var(batch_shifted - batch_shifted.mean(), x.numel(), std_ddof))
        A = _safe_divide(centered, sigma + eps)
    return A.reshape(-1).to(r.dtype)
