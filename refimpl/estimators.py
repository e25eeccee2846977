"""Advantage estimators beyond GRPO/RLOO/GAE (spec v1.1: ``adv.reinforce_pp``,
``adv.reinforce_pp_baseline``, ``adv.remax``, ``adv.opo``, ``adv.grpo_passk``, ``adv.gdpo``,
``adv.maxrl``, ``adv.gpg``, ``adv.optimal_token_baseline``), vectorised over groups ``[B/G, G]``.

Group means are taken about a reference member (``μ = x₀ + mean(x − x₀)``, as ``refimpl.advantages``):
an all-equal group then has ``x − μ`` exactly 0, so its advantage is exactly 0 whatever eps. Every
division whose denominator is 0 gives 0. Outputs are constants (computed under ``no_grad``), in the
rewards' dtype; half inputs are computed in float32.
"""

from __future__ import annotations

import math

import torch

from refimpl.whiten import whiten
from refimpl.gae import discounted_reverse_cumsum, gae
from refimpl.masking import masked, masked_output
from refimpl.validation import (
    check_bool,
    check_choice,
    check_finite,
    check_float,
    check_group_size,
    check_int,
    check_mask,
    check_real,
    check_sequence_array,
    check_token_array,
    compute_dtypes,
)

__all__ = [
    "reinforce_pp_advantages", "reinforce_pp_baseline_advantages", "remax_advantages", "opo_advantages",
    "grpo_passk_advantages", "gdpo_advantages", "maxrl_advantages", "gpg_advantages",
    "optimal_token_baseline_advantages",
]

SINGLETONS = ("zero", "raw")
GPG_ALPHAS = ("groups", "nonzero_rewards")


def _safe_divide(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num/den, and exactly 0 where den == 0."""
    zero = den == 0
    return torch.where(zero, 0.0, num / torch.where(zero, 1.0, den))


def _centered(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x − mean(x), mean(x)) along ``dim``, the mean taken about the first element: exact zeros for
    all-equal slices."""
    ref = x.narrow(dim, 0, 1)
    shifted = x - ref
    mean_shift = shifted.mean(dim=dim, keepdim=True)
    return shifted - mean_shift, ref + mean_shift


def _std(centered: torch.Tensor, ddof: int, dim: int) -> torch.Tensor:
    """sqrt(Σ centered² / (n − ddof)) along ``dim`` (kept), 0 when n − ddof <= 0."""
    n = centered.shape[dim]
    if n - ddof <= 0:
        return torch.zeros_like(centered.narrow(dim, 0, 1))
    return torch.sqrt((centered * centered).sum(dim=dim, keepdim=True) / (n - ddof))


# ----------------------------------------------------------------------------------------------
# adv.reinforce_pp
# ----------------------------------------------------------------------------------------------


def _reset_returns(r0: torch.Tensor, m: torch.Tensor, gamma: float) -> torch.Tensor:
    """Return-to-go restarted at every masked position: with D the positional discounted suffix sum
    (masked rewards 0) and e the first masked position after t, G_t = D_t − γ^(e − t)·D_e (float64)."""
    B, T = r0.shape
    D = torch.nn.functional.pad(discounted_reverse_cumsum(r0, gamma), (0, 1))  # D_T = 0
    pos = torch.arange(T, device=r0.device)
    stop = torch.where(m, T, pos).flip(1).cummin(dim=1).values.flip(1)  # first masked index >= t (T: none)
    stop = torch.where(m, stop, pos)
    distance = (stop - pos).to(torch.float64)
    decay = torch.pow(torch.tensor(gamma, dtype=torch.float64, device=r0.device), distance)
    return D[:, :T] - decay * D.gather(1, stop)


@torch.no_grad()
def reinforce_pp_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    gap: str = "skip",
    std_ddof: int = 1,
    eps: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spec: adv.reinforce_pp. (whiten(G), G), G the return-to-go over valid tokens: "skip" is
    ``gae(λ=1, V=0)``, "discount" a positional discounted suffix sum, "reset" that sum restarted at
    each masked gap (float64)."""
    fn = "reinforce_pp_advantages"
    m = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, m)
    gamma = check_real(fn, "gamma", gamma, ge=0.0, le=1.0)
    gap = check_choice(fn, "gap", gap, ("skip", "reset", "discount"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    out_dtype, cdt = compute_dtypes(r)
    r0 = masked(r, m, cdt)
    check_finite(fn, ("token_rewards", r, m, r0))
    if gap == "skip":  # G_k = r_k + γ·G_{k+1} over the valid positions: GAE with λ = 1 and V = 0
        G = gae(r0, torch.zeros_like(r0), m, gamma=gamma, lam=1.0)[0]
    else:  # positional sums in float64 ("reset" subtracts two of them)
        r64 = r0.double()
        G = discounted_reverse_cumsum(r64, gamma) if gap == "discount" else _reset_returns(r64, m, gamma)
        G = masked_output(G, m, cdt)
    advantages = whiten(G, m, shift_mean=True, std_ddof=std_ddof, eps=eps)
    return advantages.to(out_dtype), G.to(out_dtype)


# ----------------------------------------------------------------------------------------------
# adv.reinforce_pp_baseline
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor,
    group_size: int,
    mask: torch.Tensor,
    *,
    level: str = "token",
    std_ddof: int = 1,
    eps: float = 1e-8,
    singleton: str = "zero",
) -> torch.Tensor:
    """Spec: adv.reinforce_pp_baseline. a = r − μ_g broadcast to valid tokens, then whitened over the
    tokens ("token", adv.whiten) or scaled by the std of the B values of a ("sequence", eps on the std)."""
    fn = "reinforce_pp_baseline_advantages"
    m = check_mask(fn, mask)
    r = check_sequence_array(fn, "rewards", rewards, batch=m.shape[0])
    G = check_group_size(fn, group_size, r.shape[0])
    level = check_choice(fn, "level", level, ("token", "sequence"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    out_dtype, cdt = compute_dtypes(r)
    x = r.to(cdt)
    if G == 1 and singleton == "raw":
        a = x
    else:
        a = _centered(x.view(-1, G), 1)[0].reshape(-1)
    if level == "token":
        tokens = torch.where(m, a.unsqueeze(1), 0.0)
        return whiten(tokens, m, shift_mean=True, std_ddof=std_ddof, eps=eps).to(out_dtype)
    if a.numel() == 0:
        return torch.zeros(m.shape, dtype=out_dtype, device=m.device)
    centered, _ = _centered(a, 0)
    A = _safe_divide(centered, _std(centered, std_ddof, 0) + eps)
    return masked_output(A.unsqueeze(1), m, out_dtype)


# ----------------------------------------------------------------------------------------------
# adv.remax
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def remax_advantages(rewards: torch.Tensor, greedy_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Spec: adv.remax. A = r − the greedy reward of the row's prompt (``greedy_rewards[i // G]``)."""
    fn = "remax_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    b = check_float(fn, "greedy_rewards", greedy_rewards, 1, "[B / G]")
    if b.shape[0] != r.shape[0] // G:
        raise ValueError(f"{fn}: greedy_rewards: expected shape ({r.shape[0] // G},) (one reward per prompt, "
                         f"B / group_size), got {tuple(b.shape)}")
    b = check_sequence_array(fn, "greedy_rewards", b)
    out_dtype, cdt = compute_dtypes(r, b)
    return (r.to(cdt).view(-1, G) - b.to(cdt).unsqueeze(1)).reshape(-1).to(out_dtype)


# ----------------------------------------------------------------------------------------------
# adv.opo
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def opo_advantages(rewards: torch.Tensor, group_size: int, mask: torch.Tensor, *, singleton: str = "zero") -> torch.Tensor:
    """Spec: adv.opo. A = r − Σ l·r / Σ l over the group (l = valid tokens per row), about the group's
    longest row (exact zeros for equal rewards); 0 for a group without valid tokens."""
    fn = "opo_advantages"
    m = check_mask(fn, mask)
    r = check_sequence_array(fn, "rewards", rewards, batch=m.shape[0])
    G = check_group_size(fn, group_size, r.shape[0])
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    out_dtype, cdt = compute_dtypes(r)
    x = r.to(cdt).view(-1, G)
    if G == 1 and singleton == "raw":
        return r.clone()
    lengths = m.sum(dim=1).to(cdt).view(-1, G)
    ref = x.gather(1, lengths.argmax(dim=1, keepdim=True))  # a member with valid tokens, if any
    shifted = x - ref
    total = lengths.sum(dim=1, keepdim=True)
    baseline_shift = _safe_divide((lengths * shifted).sum(dim=1, keepdim=True), total)
    A = torch.where(total > 0, shifted - baseline_shift, 0.0)
    return A.reshape(-1).to(out_dtype)


# ----------------------------------------------------------------------------------------------
# adv.grpo_passk
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def grpo_passk_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    scale: str = "group",
    std_ddof: int = 1,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Spec: adv.grpo_passk. Only each group's first maximum gets (r₁ − r₂)/(σ_g + eps) (or r₁ − r₂);
    the rest 0."""
    fn = "grpo_passk_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    if G < 2:
        raise ValueError(f"{fn}: group_size: expected an int >= 2 (pass@k needs a runner-up), got {G}")
    scale = check_choice(fn, "scale", scale, ("group", "none"))
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    out_dtype, cdt = compute_dtypes(r)
    x = r.to(cdt).view(-1, G)
    best = x.argmax(dim=1, keepdim=True)  # the first maximum (argmax returns the first)
    r1 = x.gather(1, best)
    r2 = x.scatter(1, best, -math.inf).amax(dim=1, keepdim=True)
    margin = r1 - r2
    if scale == "group":
        margin = _safe_divide(margin, _std(_centered(x, 1)[0], std_ddof, 1) + eps)
    return torch.zeros_like(x).scatter(1, best, margin).reshape(-1).to(out_dtype)


# ----------------------------------------------------------------------------------------------
# adv.gdpo
# ----------------------------------------------------------------------------------------------


def _reward_weights(fn: str, reward_weights: object, K: int) -> list[float]:
    if reward_weights is None:
        return [1.0] * K
    if not isinstance(reward_weights, (list, tuple)):
        raise TypeError(f"{fn}: reward_weights: expected None or a list of {K} numbers, got {type(reward_weights).__name__}")
    weights = [check_real(fn, "reward_weights", w) for w in reward_weights]
    if len(weights) != K:
        raise ValueError(f"{fn}: reward_weights: expected {K} numbers (one per reward column), got {len(weights)}")
    return weights


@torch.no_grad()
def gdpo_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    reward_weights: list[float] | None = None,
    std_ddof: int = 1,
    eps: float = 1e-6,
    batch_normalize: bool = True,
    singleton: str = "zero",
) -> torch.Tensor:
    """Spec: adv.gdpo. Per column a group z-score (σ + eps), the weighted sum over columns, then a batch
    z-score (σ + eps)."""
    fn = "gdpo_advantages"
    r = check_float(fn, "rewards", rewards, 2, "[B, K]")
    if r.shape[1] < 1:
        raise ValueError(f"{fn}: rewards: expected at least one reward column [B, K >= 1], got shape {tuple(r.shape)}")
    finite = torch.isfinite(r)
    if not bool(finite.all()):
        where = tuple(int(i) for i in (~finite).nonzero()[0])
        raise ValueError(f"{fn}: rewards: expected finite values everywhere in a [B, K] tensor, got {r[where].item()!r} at {where}")
    G = check_group_size(fn, group_size, r.shape[0])
    B, K = r.shape
    weights = _reward_weights(fn, reward_weights, K)
    std_ddof = check_int(fn, "std_ddof", std_ddof, ge=0)
    eps = check_real(fn, "eps", eps, ge=0.0)
    batch_normalize = check_bool(fn, "batch_normalize", batch_normalize)
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    out_dtype, cdt = compute_dtypes(r)
    x = r.to(cdt).view(-1, G, K)
    if G == 1:  # "raw" (verl): mean 0, std 1
        z = x / (1.0 + eps) if singleton == "raw" else torch.zeros_like(x)
    else:
        centered, _ = _centered(x, 1)
        z = _safe_divide(centered, _std(centered, std_ddof, 1) + eps)
    s = (z * torch.tensor(weights, dtype=cdt, device=r.device)).sum(dim=2).reshape(-1)
    if not batch_normalize or B == 0:
        return s.to(out_dtype)
    centered, _ = _centered(s, 0)
    return _safe_divide(centered, _std(centered, std_ddof, 0) + eps).to(out_dtype)


# ----------------------------------------------------------------------------------------------
# adv.maxrl / adv.gpg
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def maxrl_advantages(rewards: torch.Tensor, group_size: int, *, eps: float = 1e-6, singleton: str = "zero") -> torch.Tensor:
    """Spec: adv.maxrl. A = (r − μ_g)/(μ_g + eps), 0 where the denominator is 0."""
    fn = "maxrl_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    eps = check_real(fn, "eps", eps, ge=0.0)
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    out_dtype, cdt = compute_dtypes(r)
    if G == 1 and singleton == "raw":
        return r.clone()
    centered, mu = _centered(r.to(cdt).view(-1, G), 1)
    return _safe_divide(centered, mu + eps).reshape(-1).to(out_dtype)


@torch.no_grad()
def gpg_advantages(rewards: torch.Tensor, group_size: int, *, singleton: str = "zero",
                   alpha: str = "groups") -> torch.Tensor:
    """Spec: adv.gpg. A = α·(r − μ_g), α = B / (B − M); M = the members of all-equal groups ("groups") or the
    zero rewards ("nonzero_rewards", verl); α = 1 when M = B."""
    fn = "gpg_advantages"
    r = check_sequence_array(fn, "rewards", rewards)
    G = check_group_size(fn, group_size, r.shape[0])
    singleton = check_choice(fn, "singleton", singleton, SINGLETONS)
    alpha = check_choice(fn, "alpha", alpha, GPG_ALPHAS)
    out_dtype, cdt = compute_dtypes(r)
    B = r.shape[0]
    if alpha == "groups":
        grouped = r.view(-1, G)
        M = G * int((grouped == grouped[:, :1]).all(dim=1).sum())
    else:
        M = B - int(torch.count_nonzero(r))
    scale = B / (B - M) if M < B else 1.0
    x = r.to(cdt)
    centered = x if (G == 1 and singleton == "raw") else _centered(x.view(-1, G), 1)[0].reshape(-1)
    return (scale * centered).to(out_dtype)


# ----------------------------------------------------------------------------------------------
# adv.optimal_token_baseline
# ----------------------------------------------------------------------------------------------

ALIGNMENTS = ("position", "valid_token")
TAIL_LENGTHS = ("extent", "count")


def _group_baseline(returns: torch.Tensor, W: torch.Tensor, present: torch.Tensor, G: int, eps: float) -> torch.Tensor:
    """[B, U] per-step baselines Σ G·W / (Σ W + eps) over each group's present members (0 where the
    denominator is 0), taken about the first present member's return g₀: g₀ + Σ (G − g₀)·W / den − g₀·eps / den,
    so equal returns give exactly g₀ when eps = 0."""
    g, w, p = returns.view(-1, G, returns.shape[1]), W.view(-1, G, W.shape[1]), present.view(-1, G, present.shape[1])
    ref = g.gather(1, p.to(torch.int8).argmax(dim=1, keepdim=True))  # the first present member's return
    den = (w * p).sum(dim=1, keepdim=True) + eps
    spread = (torch.where(p, g - ref, 0.0) * w).sum(dim=1, keepdim=True)
    b = ref + _safe_divide(spread, den) - _safe_divide(ref * eps, den)
    return torch.where(den == 0, 0.0, b).expand(-1, G, -1).reshape(returns.shape)


@torch.no_grad()
def optimal_token_baseline_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_size: int,
    old_logp: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    is_weights: torch.Tensor | None = None,
    *,
    align: str = "position",
    zero_tail: bool = True,
    tail_length: str = "extent",
    eps: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spec: adv.optimal_token_baseline. (G − B, G): G the return-to-go, B per group and aligned step
    Σ G·W / (Σ W + eps), W the cumulative sum of (1 − 2π + Σπ²)·ρ² over valid tokens. Each row is
    scattered to its aligned steps (columns, or valid-token indices with a dummy column for masked
    positions), the baselines are group sums there, gathered back; the zero tail from the rows' extents
    (top-2 per group). Computed in float64."""
    fn = "optimal_token_baseline_advantages"
    m = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, m)
    G = check_group_size(fn, group_size, m.shape[0])
    lp = check_token_array(fn, "old_logp", old_logp, m)
    s2 = check_token_array(fn, "sum_pi_squared", sum_pi_squared, m)
    rho = None if is_weights is None else check_token_array(fn, "is_weights", is_weights, m)
    align = check_choice(fn, "align", align, ALIGNMENTS)
    zero_tail = check_bool(fn, "zero_tail", zero_tail)
    tail_length = check_choice(fn, "tail_length", tail_length, TAIL_LENGTHS)
    eps = check_real(fn, "eps", eps, ge=0.0)
    floats = (r, lp, s2) if rho is None else (r, lp, s2, rho)
    out_dtype, _ = compute_dtypes(*floats)
    f64 = torch.float64
    r0, lp0, s20 = masked(r, m, f64), masked(lp, m, f64), masked(s2, m, f64)
    rho0 = None if rho is None else masked(rho, m, f64)
    check_finite(fn, ("token_rewards", r, m, r0), ("old_logp", lp, m, lp0), ("sum_pi_squared", s2, m, s20),
                 *(() if rho is None else (("is_weights", rho, m, rho0),)))
    if bool((lp0 > 0).any()):
        raise ValueError(f"{fn}: old_logp: expected log-probabilities <= 0 at valid positions, got {float(lp0.max())!r}")
    if rho0 is not None and bool((rho0 < 0).any()):
        raise ValueError(f"{fn}: is_weights: expected weights >= 0 at valid positions, got {float(rho0.min())!r}")
    returns = torch.where(m, r0.flip(1).cumsum(dim=1).flip(1), 0.0)  # G_t = Σ_{s ≥ t} r_s (masked r_s = 0)
    w = 1.0 - 2.0 * torch.exp(lp0) + s20
    if rho0 is not None:
        w = w * rho0 * rho0
    W = torch.where(m, torch.where(m, w, 0.0).cumsum(dim=1), 0.0)
    A = otb_advantages_from_paths(returns, W, m, G, align=align, zero_tail=zero_tail, tail_length=tail_length, eps=eps)
    return A.to(out_dtype), returns.to(out_dtype)


def otb_advantages_from_paths(returns: torch.Tensor, W: torch.Tensor, m: torch.Tensor, G: int, *, align: str,
                              zero_tail: bool, tail_length: str, eps: float) -> torch.Tensor:
    """The optimal-token-baseline advantages G − B [B, T] (float64, 0 at masked positions) from validated
    returns G and cumulative weights W (exact zeros at masked positions)."""
    B, T = m.shape
    if B == 0 or T == 0:
        return torch.zeros(m.shape, dtype=returns.dtype, device=m.device)
    # aligned steps: the column, or the index among the row's valid tokens; masked positions -> column T (dropped)
    pos = torch.arange(T, device=m.device).expand(B, T)
    step = pos if align == "position" else m.long().cumsum(dim=1) - 1
    index = torch.where(m, step, T)
    zeros = torch.zeros((B, T + 1), dtype=returns.dtype, device=m.device)
    present = torch.zeros((B, T + 1), dtype=torch.bool, device=m.device).scatter(1, index, m)[:, :T]
    if G == 1:
        baseline = torch.zeros_like(returns)  # a group of one has no baseline
    else:
        b_step = _group_baseline(zeros.scatter(1, index, returns)[:, :T], zeros.scatter(1, index, W)[:, :T], present, G, eps)
        baseline = torch.nn.functional.pad(b_step, (0, 1)).gather(1, index)
        if zero_tail:
            counts = m.sum(dim=1)
            any_valid = counts > 0
            if align == "position" and tail_length == "extent":
                extent = torch.where(any_valid, T - m.flip(1).to(torch.int8).argmax(dim=1), 0)  # 1 + last valid position
            else:
                extent = counts
            top = extent.view(-1, G).topk(2, dim=1)
            alone = top.values[:, 0] > top.values[:, 1]  # one member has the largest extent
            cut = top.values[:, 1]
            if align == "position" and tail_length == "count":  # verl: the count laid out from the group's first column
                first = torch.where(any_valid, m.to(torch.int8).argmax(dim=1), T)
                cut = cut + first.view(-1, G).min(dim=1).values
            member = torch.arange(G, device=m.device).expand(B // G, G)
            longest = (member == top.indices[:, :1]) & alone[:, None]
            tail = longest.reshape(B, 1) & m & (step >= cut.repeat_interleave(G).unsqueeze(1))
            baseline = torch.where(tail, 0.0, baseline)
    return torch.where(m, returns - baseline, 0.0)
