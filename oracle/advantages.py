"""Sequence-level advantages from scalar rewards (spec ids ``adv.reinforce``, ``adv.rloo``, ``adv.grpo``).

Groups are contiguous blocks of ``group_size`` rows: group ``g`` holds rows ``g·G … g·G + G − 1``
(the G completions sampled for one prompt). ``B % G != 0`` is a ValueError.

Literal transcription: loops over groups and over the members of a group.
"""

from __future__ import annotations

import math

import numpy as np

from oracle.validation import (
    check_choice,
    check_group_size,
    check_int,
    check_real,
    check_sequence_array,
    to_float64,
)

__all__ = ["reinforce_advantages", "rloo_advantages", "grpo_advantages"]


def std_with_ddof(x: list[float], mu: float, ddof: int) -> float:
    """``std(x, ddof) = sqrt( Σ_i (x_i − μ)² / (n − ddof) )``, defined as 0 when ``n − ddof <= 0``."""
    n = len(x)
    if n - ddof <= 0:
        return 0.0
    sum_sq = 0.0
    for x_i in x:
        sum_sq += (x_i - mu) ** 2
    return math.sqrt(sum_sq / (n - ddof))


def reinforce_advantages(rewards, *, baseline="none"):
    """REINFORCE advantages: the reward itself, or the reward minus the batch mean.

    Spec: adv.reinforce (v1)
    Equation:
        "none":        A_i = r_i
        "batch_mean":  A_i = r_i − (1/B) Σ_j r_j
    Source: Williams 1992 (REINFORCE with a constant baseline); the RLHF form in Ahmadian et al.,
        "Back to Basics", arXiv:2402.14740, sec. 3.
    Shapes: rewards [B] float -> [B] float64.
    Edge cases: B = 0 gives an empty array; rewards must be finite everywhere.
    """
    fn = "reinforce_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    baseline = check_choice(fn, "baseline", baseline, ("none", "batch_mean"))
    r = to_float64(r)
    B = r.shape[0]
    A = np.zeros(B, dtype=np.float64)
    if baseline == "none":
        for i in range(B):
            A[i] = r[i]
        return A
    mean_r = 0.0
    for j in range(B):
        mean_r += r[j]
    mean_r /= B if B > 0 else 1
    for i in range(B):
        A[i] = r[i] - mean_r
    return A


def rloo_advantages(rewards, group_size, *, singleton="zero"):
    """REINFORCE Leave-One-Out advantages.

    Spec: adv.rloo (v1)
    Equation (within each group g of G members):
        A_i = r_i − (1/(G−1)) Σ_{j∈g, j≠i} r_j
    Source: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
        from Human Feedback in LLMs", arXiv:2402.14740 (RLOO estimator; leave-one-out baseline of
        Kool et al. 2019).
    Shapes: rewards [B] float, group_size int dividing B -> [B] float64.
    Edge cases: a group of size 1 has no other member: ``singleton="zero"`` (canonical) gives A = 0;
        ``singleton="raw"`` (spec v1.1, verl's loop ``rloo``) leaves A = r.
    """
    fn = "rloo_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    singleton = check_choice(fn, "singleton", singleton, ("zero", "raw"))
    r = to_float64(r)
    B = r.shape[0]
    A = np.zeros(B, dtype=np.float64)
    if G == 1:
        if singleton == "raw":  # verl: no baseline for a one-sample group, the score itself
            for i in range(B):
                A[i] = r[i]
        return A
    for g in range(B // G):
        members = range(g * G, (g + 1) * G)
        for i in members:
            sum_others = 0.0
            for j in members:
                if j != i:
                    sum_others += r[j]
            baseline_i = sum_others / (G - 1)
            A[i] = r[i] - baseline_i
    return A


def grpo_advantages(rewards, group_size, *, scale="group", std_ddof=1, eps=1e-6, singleton="zero"):
    """Group-relative (GRPO) advantages: reward minus the group mean, optionally over a std.

    Spec: adv.grpo (v1)
    Equation (group g of G members, μ_g its mean):
        μ_g        = (1/G) Σ_{j∈g} r_j
        std(x, k)  = sqrt( Σ (x − μ)² / (n − k) ),  0 when n − k <= 0     (k = std_ddof)
        "group":   A_i = (r_i − μ_g) / (σ_g + eps),        σ_g = std(rewards of g, k)
        "batch":   A_i = (r_i − μ_g) / (σ_batch + eps),    σ_batch = std(all B rewards, k)
        "none":    A_i = r_i − μ_g                          (Dr. GRPO, arXiv:2503.20783)
    Source: Shao et al., DeepSeekMath, arXiv:2402.03300, sec. 4.1.2 (outcome supervision,
        Â_i = (r_i − mean(r)) / std(r)); batch scaling as in TRL ``scale_rewards="batch"``.
    Shapes: rewards [B] float, group_size int dividing B -> [B] float64.
    Edge cases:
        - an all-equal group gives A = 0 exactly (μ_g is taken as the common value, so no rounding
          residue of the summation reaches the division);
        - a zero denominator (eps = 0 and a zero std) gives A = 0, never NaN;
        - G == 1: ``singleton="zero"`` (canonical) gives A = 0; ``singleton="raw"`` (verl) replaces
          the group's statistics by μ_g = 0 and σ_g = 1, so A = r/(1 + eps) ("group"),
          r/(σ_batch + eps) ("batch"), r ("none").
    """
    fn = "grpo_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    scale = check_choice(fn, "scale", scale, ("group", "batch", "none"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    singleton = check_choice(fn, "singleton", singleton, ("zero", "raw"))
    r = to_float64(r)
    B = r.shape[0]
    A = np.zeros(B, dtype=np.float64)

    # σ_batch over all B rewards (used by scale="batch" only)
    all_rewards = [r[i] for i in range(B)]
    mu_batch = sum(all_rewards) / B if B > 0 else 0.0
    sigma_batch = std_with_ddof(all_rewards, mu_batch, std_ddof)

    if G == 1:
        for i in range(B):
            if singleton == "zero":
                A[i] = 0.0
                continue
            # verl: a size-1 group gets μ_g = 0 and σ_g = 1
            mu_g, sigma_g = 0.0, 1.0
            numerator = r[i] - mu_g
            if scale == "none":
                A[i] = numerator
            else:
                denominator = (sigma_g if scale == "group" else sigma_batch) + eps
                A[i] = numerator / denominator if denominator > 0 else 0.0
        return A

    for g in range(B // G):
        members = range(g * G, (g + 1) * G)
        r_g = [r[i] for i in members]
        all_equal = all(r_i == r_g[0] for r_i in r_g)
        # μ_g = (1/G) Σ r_j; an all-equal group has μ_g = r exactly (no summation rounding residue,
        # so that r_i − μ_g is exactly 0 and A_i = 0 even with eps = 0)
        mu_g = r_g[0] if all_equal else sum(r_g) / G
        sigma_g = std_with_ddof(r_g, mu_g, std_ddof)
        for i in members:
            numerator = r[i] - mu_g
            if scale == "none":
                A[i] = numerator
                continue
            denominator = (sigma_g if scale == "group" else sigma_batch) + eps
            A[i] = numerator / denominator if denominator > 0 else 0.0
    return A
