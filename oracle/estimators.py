"""Advantage estimators beyond GRPO/RLOO/GAE (spec v1.1, ids ``adv.reinforce_pp``,
``adv.reinforce_pp_baseline``, ``adv.remax``, ``adv.opo``, ``adv.grpo_passk``, ``adv.gdpo``,
``adv.maxrl``, ``adv.gpg``, ``adv.optimal_token_baseline``).

Groups are contiguous blocks of ``group_size`` rows, as in ``oracle.advantages``. Advantages are
constants for every loss: no function here has a gradient.

Literal transcription: loops over groups, members, rows and valid positions; the per-token
whitening step is ``oracle.whiten`` (spec ``adv.whiten``), called as the equations say.
"""

from __future__ import annotations

import numpy as np

from oracle.advantages import std_with_ddof
from oracle.validation import (
    check_bool,
    check_choice,
    check_group_size,
    check_int,
    check_mask,
    check_real,
    check_sequence_array,
    check_token_array,
    float_array,
    to_float64,
)
from oracle.whiten import whiten

__all__ = [
    "reinforce_pp_advantages", "reinforce_pp_baseline_advantages", "remax_advantages", "opo_advantages",
    "grpo_passk_advantages", "gdpo_advantages", "maxrl_advantages", "gpg_advantages",
    "optimal_token_baseline_advantages",
]

SINGLETONS = ("zero", "raw")
GPG_ALPHAS = ("groups", "nonzero_rewards")


def _mean(values: list[float]) -> float:
    """The mean of ``values``; exactly the common value when all are equal (no summation residue)."""
    if all(v == values[0] for v in values):
        return values[0]
    total = 0.0
    for v in values:
        total += v
    return total / len(values)


def _safe_ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, and 0 where the denominator is 0 (never NaN or inf)."""
    return numerator / denominator if denominator != 0 else 0.0


def _groups(B: int, G: int) -> list[range]:
    return [range(g * G, (g + 1) * G) for g in range(B // G)]


# ----------------------------------------------------------------------------------------------
# adv.reinforce_pp
# ----------------------------------------------------------------------------------------------


def reinforce_pp_advantages(token_rewards, mask, *, gamma=1.0, gap="skip", std_ddof=1, eps=1e-8):
    """REINFORCE++ advantages: the discounted return-to-go of each valid token, whitened over the batch.

    Spec: adv.reinforce_pp (v1), added by spec v1.1
    Equation (row b, valid positions t_1 < … < t_n, r_t = token_rewards[b, t]):
        G_{t_n} = r_{t_n}
        "skip":     G_{t_k} = r_{t_k} + γ · G_{t_{k+1}}                    (masked positions skipped)
        "reset":    G_{t_k} = r_{t_k} + γ · G_{t_{k+1}}  if t_{k+1} = t_k + 1, else r_{t_k}
                    (a masked position ends the return: each span of valid tokens is its own episode)
        "discount": G_{t_k} = r_{t_k} + γ^(t_{k+1} − t_k) · G_{t_{k+1}}   (masked positions hold reward
                    0 and still discount)
        returns    = G at valid positions
        advantages = whiten(returns, mask, shift_mean=True, std_ddof, eps)   (adv.whiten, over the batch)
    Source: Hu, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models",
        arXiv:2501.03262 (token-level return with γ, then global advantage normalisation).
    Shapes: token_rewards [B, T], mask [B, T] -> (advantages, returns), [B, T] each, float64.
    Edge cases: masked positions are 0 in both outputs and never read; a row with no valid token is 0;
        the whitening rules of adv.whiten (n − std_ddof <= 0: var 0; all-equal returns: advantages 0).
    """
    fn = "reinforce_pp_advantages"
    mask = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, mask)
    gamma = check_real(fn, "gamma", gamma, ge=0.0, le=1.0)
    gap = check_choice(fn, "gap", gap, ("skip", "reset", "discount"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    r = to_float64(r)
    B, T = mask.shape
    returns = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        valid = [t for t in range(T) if mask[b, t]]
        G_next, t_next = 0.0, None  # the return of the next valid position (none after the last)
        for t in reversed(valid):
            if t_next is None:
                G_t = r[b, t]
            elif gap == "skip":
                G_t = r[b, t] + gamma * G_next
            elif gap == "reset":
                G_t = r[b, t] + gamma * G_next if t_next == t + 1 else r[b, t]
            else:  # "discount": one factor γ per position, masked ones included
                G_t = r[b, t] + gamma ** (t_next - t) * G_next
            returns[b, t] = G_t
            G_next, t_next = G_t, t
    advantages = whiten(returns, mask, shift_mean=True, std_ddof=std_ddof, eps=eps)
    return advantages, returns


# ----------------------------------------------------------------------------------------------
# adv.reinforce_pp_baseline
# ----------------------------------------------------------------------------------------------


def reinforce_pp_baseline_advantages(rewards, group_size, mask, *, level="token", std_ddof=1, eps=1e-8,
                                     singleton="zero"):
    """REINFORCE++-baseline: the reward minus its group mean, normalised over the batch.

    Spec: adv.reinforce_pp_baseline (v1), added by spec v1.1
    Equation (group g of G members, μ_g its mean reward):
        a_i = r_i − μ_g                       (G = 1: "zero" gives a_i = 0, "raw" a_i = r_i, μ = 0)
        "token":    x[b, t] = a_b at every valid token; A = whiten(x, mask, shift_mean=True,
                    std_ddof, eps) (adv.whiten: eps inside the square root, stats over valid tokens)
        "sequence": ā = (1/B) Σ_b a_b, σ = std(a_1..a_B, std_ddof);
                    A[b, t] = (a_b − ā) / (σ + eps) at every valid token (eps on the std, every row
                    counted once, empty rows included)
    Source: Hu, arXiv:2501.03262 (REINFORCE++-baseline: group-mean baseline, then global
        normalisation); verl ``reinforce_plus_plus_baseline``, OpenRLHF ``reinforce_baseline``.
    Shapes: rewards [B], group_size G dividing B, mask [B, T] -> [B, T] float64, 0 where masked.
    Edge cases: an all-equal group has a = 0 exactly; every a equal gives A = 0; a zero denominator
        gives 0 (never NaN); ā = 0 whenever every group has G >= 2 or singleton="zero".
    """
    fn = "reinforce_pp_baseline_advantages"
    mask = check_mask(fn, mask)
    r = check_sequence_array(fn, "rewards", rewards, batch=mask.shape[0])
    G = check_group_size(fn, group_size, r.shape[0])
    level = check_choice(fn, "level", level, ("token", "sequence"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    r = to_float64(r)
    B, T = mask.shape

    # a_i = r_i − μ_g
    a = np.zeros(B, dtype=np.float64)
    for members in _groups(B, G):
        if G == 1 and singleton == "raw":
            mu_g = 0.0  # verl: a one-sample group has mean 0
        else:
            mu_g = _mean([r[i] for i in members])
        for i in members:
            a[i] = r[i] - mu_g

    if level == "token":
        x = np.zeros((B, T), dtype=np.float64)
        for b in range(B):
            for t in range(T):
                if mask[b, t]:
                    x[b, t] = a[b]
        return whiten(x, mask, shift_mean=True, std_ddof=std_ddof, eps=eps)

    values = [a[b] for b in range(B)]
    a_bar = _mean(values) if B > 0 else 0.0
    sigma = std_with_ddof(values, a_bar, std_ddof)
    out = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        A_b = _safe_ratio(a[b] - a_bar, sigma + eps)
        for t in range(T):
            if mask[b, t]:
                out[b, t] = A_b
    return out


# ----------------------------------------------------------------------------------------------
# adv.remax
# ----------------------------------------------------------------------------------------------


def remax_advantages(rewards, greedy_rewards, group_size):
    """ReMax: each sampled reward minus the reward of the greedy completion of the same prompt.

    Spec: adv.remax (v1), added by spec v1.1
    Equation (prompt g = the group of rows g·G … g·G + G − 1):
        A_i = r_i − b_g,   b_g = greedy_rewards[g]
    Source: Li et al., "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for
        Aligning Large Language Models", arXiv:2310.10505 (the greedy rollout's reward as baseline).
    Shapes: rewards [B], greedy_rewards [B / G] (one per prompt), group_size G dividing B -> [B] float64.
    Edge cases: G = 1 is one sample per prompt (the paper's setting); a sample equal to its greedy
        completion's reward gets 0.
    """
    fn = "remax_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    b = float_array(fn, "greedy_rewards", greedy_rewards, 1, "[B / G]")
    if b.shape[0] != r.shape[0] // G:
        raise ValueError(f"{fn}: greedy_rewards: expected shape ({r.shape[0] // G},) (one reward per prompt, "
                         f"B / group_size), got {b.shape}")
    b = check_sequence_array(fn, "greedy_rewards", b)
    r, b = to_float64(r), to_float64(b)
    B = r.shape[0]
    A = np.zeros(B, dtype=np.float64)
    for g, members in enumerate(_groups(B, G)):
        for i in members:
            A[i] = r[i] - b[g]
    return A


# ----------------------------------------------------------------------------------------------
# adv.opo
# ----------------------------------------------------------------------------------------------


def opo_advantages(rewards, group_size, mask, *, singleton="zero"):
    """OPO: the reward minus the length-weighted mean reward of its group (the optimal baseline).

    Spec: adv.opo (v1), added by spec v1.1
    Equation (group g, l_i = Σ_t mask[i, t] the number of valid tokens of row i):
        b_g = Σ_{j∈g} l_j · r_j / Σ_{j∈g} l_j ,   A_i = r_i − b_g
        Σ_{j∈g} l_j = 0 (no valid token in the group): A_i = 0
        G = 1: "zero" follows the formula (b = r, A = 0); "raw" (verl) takes b = 0, A = r
    Source: Hao et al., "On-Policy RL with Optimal Reward Baseline", arXiv:2505.23585 (the
        length-weighted baseline for outcome rewards under sequence-sum losses).
    Shapes: rewards [B], group_size G dividing B, mask [B, T] -> [B] float64.
    Edge cases: an all-equal group gives 0 exactly; rows without valid tokens weigh 0 in b_g but still
        get r_i − b_g.
    """
    fn = "opo_advantages"
    mask = check_mask(fn, mask)
    r = check_sequence_array(fn, "rewards", rewards, batch=mask.shape[0])
    G = check_group_size(fn, group_size, r.shape[0])
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    r = to_float64(r)
    B, T = mask.shape
    lengths = [sum(1 for t in range(T) if mask[i, t]) for i in range(B)]
    A = np.zeros(B, dtype=np.float64)
    for members in _groups(B, G):
        if G == 1 and singleton == "raw":
            for i in members:
                A[i] = r[i]
            continue
        total_length = sum(lengths[j] for j in members)
        if total_length == 0:
            continue  # no valid token in the group: A = 0
        r_g = [r[j] for j in members if lengths[j] > 0]
        if all(x == r_g[0] for x in r_g):
            b_g = r_g[0]  # every weighted reward equal: the baseline is that value exactly
        else:
            weighted = 0.0
            for j in members:
                weighted += lengths[j] * r[j]
            b_g = weighted / total_length
        for i in members:
            A[i] = r[i] - b_g
    return A


# ----------------------------------------------------------------------------------------------
# adv.grpo_passk
# ----------------------------------------------------------------------------------------------


def grpo_passk_advantages(rewards, group_size, *, scale="group", std_ddof=1, eps=1e-6):
    """GRPO pass@k: only the best member of each group gets an advantage, its margin over the runner-up.

    Spec: adv.grpo_passk (v1), added by spec v1.1
    Equation (group g of G >= 2 members):
        i* = the lowest index i ∈ g with r_i = max_g r          (tie rule)
        r₁ = r_{i*},  r₂ = max_{j∈g, j≠i*} r_j
        "group": A_{i*} = (r₁ − r₂) / (σ_g + eps),  σ_g = std(rewards of g, std_ddof)
        "none":  A_{i*} = r₁ − r₂
        A_j = 0 for every other member j
    Source: Tang et al., "Optimizing Language Models for Inference Time Objectives using
        Reinforcement Learning", arXiv:2503.19595 (the pass@k objective with k = G); verl
        ``grpo_passk``.
    Shapes: rewards [B], group_size G >= 2 dividing B -> [B] float64.
    Edge cases: a shared maximum gives r₁ = r₂, so every advantage of the group is 0 whichever member
        the tie rule names; an all-equal group is 0; a zero denominator gives 0; G = 1 is a ValueError
        (there is no runner-up).
    """
    fn = "grpo_passk_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    if G < 2:
        raise ValueError(f"{fn}: group_size: expected an int >= 2 (pass@k needs a runner-up), got {G}")
    scale = check_choice(fn, "scale", scale, ("group", "none"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    r = to_float64(r)
    B = r.shape[0]
    A = np.zeros(B, dtype=np.float64)
    for members in _groups(B, G):
        i_star = members[0]
        for i in members:
            if r[i] > r[i_star]:
                i_star = i
        r1 = r[i_star]
        r2 = max(r[j] for j in members if j != i_star)
        margin = r1 - r2
        if scale == "none":
            A[i_star] = margin
            continue
        r_g = [r[i] for i in members]
        sigma_g = std_with_ddof(r_g, _mean(r_g), std_ddof)
        A[i_star] = _safe_ratio(margin, sigma_g + eps)
    return A


# ----------------------------------------------------------------------------------------------
# adv.gdpo
# ----------------------------------------------------------------------------------------------


def _check_reward_weights(fn: str, reward_weights, K: int) -> list[float]:
    if reward_weights is None:
        return [1.0] * K
    if not isinstance(reward_weights, (list, tuple)):
        raise TypeError(f"{fn}: reward_weights: expected None or a list of {K} numbers, "
                        f"got {type(reward_weights).__name__}")
    weights = [check_real(fn, "reward_weights", w) for w in reward_weights]
    if len(weights) != K:
        raise ValueError(f"{fn}: reward_weights: expected {K} numbers (one per reward column), got {len(weights)}")
    return weights


def gdpo_advantages(rewards, group_size, *, reward_weights=None, std_ddof=1, eps=1e-6, batch_normalize=True,
                    singleton="zero"):
    """GDPO: each reward normalised within its group, the weighted sum, then normalised over the batch.

    Spec: adv.gdpo (v1), added by spec v1.1
    Equation (rewards [B, K], group g, column k, weights w_k):
        A_{i,k} = (r_{i,k} − μ_{g,k}) / (σ_{g,k} + eps)      σ_{g,k} = std(column k of g, std_ddof)
                  (G = 1: "zero" gives 0; "raw" (verl) takes μ = 0, σ = 1: r/(1 + eps))
        s_i     = Σ_k w_k · A_{i,k}
        batch_normalize: A_i = (s_i − mean(s)) / (std(s_1..s_B, std_ddof) + eps);  else A_i = s_i
    Source: "GDPO: Group reward-Decoupled Normalization Policy Optimization", arXiv:2601.05242; TRL
        ``multi_objective_aggregation="normalize_then_sum"``, ms-swift ``scale_rewards="gdpo"``, verl
        ``gdpo`` (its batch step at token level: a composition with adv.whiten).
    Shapes: rewards [B, K] (K >= 1), group_size G dividing B, reward_weights None (all 1) or K numbers
        -> [B] float64.
    Edge cases: an all-equal column of a group contributes 0 exactly; all s equal gives 0; a zero
        denominator gives 0 (never NaN).
    """
    fn = "gdpo_advantages"
    r = float_array(fn, "rewards", rewards, 2, "[B, K]")
    if r.shape[1] < 1:
        raise ValueError(f"{fn}: rewards: expected at least one reward column [B, K >= 1], got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(r))[0])
        raise ValueError(f"{fn}: rewards: expected finite values everywhere in a [B, K] array, "
                         f"got {r[where].item()!r} at {where}")
    G = check_group_size(fn, group_size, r.shape[0])
    B, K = r.shape
    weights = _check_reward_weights(fn, reward_weights, K)
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    batch_normalize = check_bool(fn, "batch_normalize", batch_normalize)
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    r = to_float64(r)

    # per column k: A_{i,k} = (r_{i,k} − μ_{g,k}) / (σ_{g,k} + eps), then s_i = Σ_k w_k A_{i,k}
    s = np.zeros(B, dtype=np.float64)
    for k in range(K):
        for members in _groups(B, G):
            column = [r[i, k] for i in members]
            if G == 1:
                mu, sigma = (0.0, 1.0) if singleton == "raw" else (column[0], 0.0)
            else:
                mu = _mean(column)
                sigma = std_with_ddof(column, mu, std_ddof)
            for i in members:
                s[i] += weights[k] * _safe_ratio(r[i, k] - mu, sigma + eps)
    if not batch_normalize or B == 0:
        return s

    values = [s[i] for i in range(B)]
    mu_s = _mean(values)
    sigma_s = std_with_ddof(values, mu_s, std_ddof)
    A = np.zeros(B, dtype=np.float64)
    for i in range(B):
        A[i] = _safe_ratio(s[i] - mu_s, sigma_s + eps)
    return A


# ----------------------------------------------------------------------------------------------
# adv.maxrl
# ----------------------------------------------------------------------------------------------


def maxrl_advantages(rewards, group_size, *, eps=1e-6, singleton="zero"):
    """MaxRL: the reward minus its group mean, divided by the group mean (the success rate).

    Spec: adv.maxrl (v1), added by spec v1.1
    Equation (group g, μ_g its mean reward):
        A_i = (r_i − μ_g) / (μ_g + eps)        (0 where μ_g + eps = 0)
        G = 1: "zero" follows the formula (A = 0); "raw" (SkyRL) gives A = r
    Source: Tajwar et al., "Maximum Likelihood Reinforcement Learning", arXiv:2602.02710 (for binary
        rewards the maximum-likelihood gradient weights the policy gradient by 1/p, p the success
        rate, estimated by μ_g); SkyRL ``maxrl``.
    Shapes: rewards [B], group_size G dividing B -> [B] float64.
    Edge cases: an all-equal group (in particular an all-failed one, μ_g = 0) gives 0 exactly. Meant
        for rewards in [0, 1]; a negative μ_g flips the sign of the scale (computed as written).
    """
    fn = "maxrl_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    eps = check_real(fn, "eps", eps, ge=0.0)
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    r = to_float64(r)
    B = r.shape[0]
    A = np.zeros(B, dtype=np.float64)
    for members in _groups(B, G):
        if G == 1 and singleton == "raw":
            for i in members:
                A[i] = r[i]
            continue
        mu_g = _mean([r[i] for i in members])
        for i in members:
            A[i] = _safe_ratio(r[i] - mu_g, mu_g + eps)
    return A


# ----------------------------------------------------------------------------------------------
# adv.gpg
# ----------------------------------------------------------------------------------------------


def gpg_advantages(rewards, group_size, *, singleton="zero", alpha="groups"):
    """GPG: the group-centred reward scaled by α = B / (B − M), M the samples that carry no signal.

    Spec: adv.gpg (v1), added by spec v1.1, α corrected to the paper's code in v1.2
    Equation (group g of G members, μ_g its mean reward, over the whole batch of B rewards):
        alpha="groups" (the paper's code):   M = G · #{groups whose rewards all equal each other}
        alpha="nonzero_rewards" (verl):       M = #{i : r_i = 0}
        α = B / (B − M) if M < B, else 1
        A_i = α · (r_i − μ_g)     (G = 1: "zero" follows the formula, A = 0; "raw" (verl) takes μ = 0)
    Source: Chu et al., "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
        Reasoning", arXiv:2504.02546; AMAP-ML/GPG open-r1/src/open_r1/gpg_trainer.py (e096da8):
        inverse_alpha = (#groups − #groups with zero std) / #groups (:541-554, :625); verl's ``gpg``
        (core_algos.py:810-811, 0.9.1) counts non-zero rewards.
    Shapes: rewards [B], group_size G dividing B -> [B] float64.
    Edge cases: M = B (no signal anywhere: every group all-equal, or every reward 0) gives α = 1 and
        A = 0; an all-equal group gives 0 exactly; a group of one is all-equal; α is a batch statistic
        (call on the gathered batch to reproduce a multi-rank trainer).
    """
    fn = "gpg_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    alpha = check_choice(fn, "alpha", alpha, GPG_ALPHAS)
    r = to_float64(r)
    B = r.shape[0]
    if alpha == "groups":
        M = 0
        for members in _groups(B, G):
            if all(r[i] == r[members[0]] for i in members):
                M += G
    else:
        M = sum(1 for i in range(B) if r[i] == 0)
    a = B / (B - M) if M < B else 1.0
    A = np.zeros(B, dtype=np.float64)
    for members in _groups(B, G):
        mu_g = 0.0 if (G == 1 and singleton == "raw") else _mean([r[i] for i in members])
        for i in members:
            A[i] = a * (r[i] - mu_g)
    return A


# ----------------------------------------------------------------------------------------------
# adv.optimal_token_baseline
# ----------------------------------------------------------------------------------------------

ALIGNMENTS = ("position", "valid_token")
TAIL_LENGTHS = ("extent", "count")


def optimal_token_baseline_advantages(token_rewards, mask, group_size, old_logp, sum_pi_squared, is_weights=None, *,
                                      align="position", zero_tail=True, tail_length="extent", eps=0.0):
    """Optimal Token Baseline: per group and aligned step, the return-to-go weighted by each path's
    cumulative variance proxy W is the baseline of that step.

    Spec: adv.optimal_token_baseline (v1), added by spec v1.1
    Equation (row b, valid positions t_1 < … < t_n, n = l_b; r = token_rewards, π_t = exp(old_logp[b, t]),
    S_t = sum_pi_squared[b, t] = Σ_v π_v², ρ_t = is_weights[b, t]):
        G_{t_k} = Σ_{j ≥ k} r_{t_j}                          return-to-go over valid tokens (returns)
        w_t     = 1 − 2π_t + S_t   (times ρ_t² when is_weights is given)
        W_{t_k} = Σ_{j ≤ k} w_{t_j}                          cumulative path-variance proxy
        aligned step u of token t_k:  u = t_k ("position": the column)  or  u = k ("valid_token":
                 the index among the row's valid tokens; tool tokens between them do not count)
        group g, step u, P = the members with a token at step u:
            B_u = Σ_{i∈P} G_i(u)·W_i(u) / (Σ_{i∈P} W_i(u) + eps)      (0 where the denominator is 0)
        group_size 1: B = 0 (no baseline)
        zero tail (zero_tail, G ≥ 2): with e_i a member's extent on the step axis ("extent":
            1 + its last valid position for "position", l_i for "valid_token"), if one member i*
            has the largest extent alone, B = 0 at its steps u ≥ c, c the largest extent of the
            others (there i* is the only member present). tail_length="count" (verl's
            optimal_token_baseline): e_i = l_i, and for "position" the cut is the column s_g + c,
            s_g the group's first valid position (the second-longest count laid out from the start
            of the group's completions); for "valid_token" the two rules agree.
        A_t = G_t − B_u(t) at valid positions
    Source: Li et al., "The Optimal Token Baseline: Variance Reduction for Long-Horizon LLM-RL",
        arXiv:2602.07078 (B_t* = E[G_t·W_t] / E[W_t], W_t the cumulative squared score norm, and the
        Logit-Gradient Proxy ‖s_t‖² ≈ 1 − 2π_t + Σπ²); verl ``optimal_token_baseline`` and
        ``tir_optimal_token_baseline`` (the tool-integrated, valid-token-aligned form).
    Shapes: token_rewards, old_logp, sum_pi_squared, is_weights (None or) [B, T]; mask [B, T]; group_size G
        dividing B -> (advantages, returns), [B, T] each, float64.
    Edge cases: masked positions are never read and are 0 in both outputs; a row with no valid token
        weighs nothing; every present member with the same return gives B = that return (A = 0
        exactly when eps = 0); a step with one member present has B = its own return unless the zero
        tail applies; a tie for the largest extent has no zero tail; old_logp > 0 (not a log-prob)
        and is_weights < 0 are ValueErrors.
    """
    fn = "optimal_token_baseline_advantages"
    mask = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, mask)
    G = check_group_size(fn, group_size, mask.shape[0])
    lp = check_token_array(fn, "old_logp", old_logp, mask)
    s2 = check_token_array(fn, "sum_pi_squared", sum_pi_squared, mask)
    rho = None if is_weights is None else check_token_array(fn, "is_weights", is_weights, mask)
    align = check_choice(fn, "align", align, ALIGNMENTS)
    zero_tail = check_bool(fn, "zero_tail", zero_tail)
    tail_length = check_choice(fn, "tail_length", tail_length, TAIL_LENGTHS)
    eps = check_real(fn, "eps", eps, ge=0.0)
    r, lp, s2 = to_float64(r), to_float64(lp), to_float64(s2)
    rho = None if rho is None else to_float64(rho)
    B, T = mask.shape
    for b in range(B):
        for t in range(T):
            if mask[b, t] and lp[b, t] > 0:
                raise ValueError(f"{fn}: old_logp: expected log-probabilities <= 0 at valid positions, "
                                 f"got {lp[b, t]!r} at {(b, t)}")
            if mask[b, t] and rho is not None and rho[b, t] < 0:
                raise ValueError(f"{fn}: is_weights: expected weights >= 0 at valid positions, "
                                 f"got {rho[b, t]!r} at {(b, t)}")

    # G_t (return-to-go) and W_t (cumulative w) over each row's valid tokens
    returns = np.zeros((B, T), dtype=np.float64)
    W = np.zeros((B, T), dtype=np.float64)
    valid = [[t for t in range(T) if mask[b, t]] for b in range(B)]
    for b in range(B):
        G_t = 0.0
        for t in reversed(valid[b]):
            G_t = r[b, t] + G_t
            returns[b, t] = G_t
        W_t = 0.0
        for t in valid[b]:
            pi_t = np.exp(lp[b, t])
            w_t = 1.0 - 2.0 * pi_t + s2[b, t]
            if rho is not None:
                w_t = w_t * rho[b, t] ** 2
            W_t = W_t + w_t
            W[b, t] = W_t

    # each row's tokens by aligned step u: {u: t}
    steps = [{(t if align == "position" else k): t for k, t in enumerate(valid[b])} for b in range(B)]

    baseline = np.zeros((B, T), dtype=np.float64)
    for members in _groups(B, G):
        if G == 1:
            continue  # a group of one has no baseline: A = G
        for u in sorted({u for i in members for u in steps[i]}):
            present = [(i, steps[i][u]) for i in members if u in steps[i]]
            returns_u = [returns[i, t] for i, t in present]
            S = 0.0
            for i, t in present:
                S += W[i, t]
            if S + eps == 0:
                B_u = 0.0
            elif eps == 0 and all(g == returns_u[0] for g in returns_u):
                B_u = returns_u[0]  # the weighted mean of equal returns is that return, exactly
            else:
                numerator = 0.0
                for i, t in present:
                    numerator += returns[i, t] * W[i, t]
                B_u = numerator / (S + eps)
            for i, t in present:
                baseline[i, t] = B_u

        if not zero_tail:
            continue
        by_count = tail_length == "count" or align == "valid_token"
        extent = {i: len(valid[i]) if by_count else (valid[i][-1] + 1 if valid[i] else 0) for i in members}
        longest = max(extent.values())
        holders = [i for i in members if extent[i] == longest]
        if len(holders) != 1:
            continue  # a tie for the longest: no zero tail
        i_star = holders[0]
        c = max(extent[j] for j in members if j != i_star)
        if align == "position" and tail_length == "count":
            c = min(valid[i][0] for i in members if valid[i]) + c  # s_g + the second-longest count
        for u, t in steps[i_star].items():
            if u >= c:
                baseline[i_star, t] = 0.0

    advantages = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in valid[b]:
            advantages[b, t] = returns[b, t] - baseline[b, t]
    return advantages, returns
