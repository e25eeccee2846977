"""Off-policy and asynchronous training (spec v1.1): rollout importance weights, rejection masks,
AReaL's decoupled PPO, the version-aware proximal log-prob and DeepSeek-V3.2's off-policy sequence mask.

Spec ids ``offpolicy.is_weights``, ``offpolicy.rejection``, ``offpolicy.decoupled_ppo``,
``offpolicy.proximal``, ``offpolicy.opsm`` (api.md, "Spec v1.1: off-policy and asynchronous training").

Notation (at a valid token t of row b):

    δ_t = old_logp_t − rollout_logp_t = log ρ_t,    ρ_t = π_old(x_t) / π_rollout(x_t)

π_old is the trainer's recomputed log-prob of the sampled token, π_rollout the inference engine's
log-prob of the same token; ``n_b`` is the number of valid tokens of row b. Every output of this
module except the decoupled loss is a *constant* of the loss (no gradient reaches any input); every
output is exactly 0 / False at masked positions and for a row without valid tokens; masked positions
are never read. Bounds are inclusive and a bound of ``None`` is no bound.

Overflow: ``ρ = exp(s)`` is ``inf`` when s > ~709.78 (float64); an infinite ρ is truncated to ``hi``
(``mode="truncate"``), dropped (``mode="mask"``, ``hi`` set) or kept as ``inf`` (``mode="none"``, or no
upper bound). Products follow ``0 · inf := 0`` (a zero factor contributes nothing).
"""

from __future__ import annotations

import math

import numpy as np

from oracle.clipping import clip_symmetric
from oracle.kl import kl_estimate
from oracle.policy_losses import _advantage_at, _neg_A_times, _ppo_params, _ppo_token
from oracle.validation import (
    as_array,
    check_advantages,
    check_bool,
    check_choice,
    check_int,
    check_mask,
    check_optional_real,
    check_real,
    check_token_array,
    check_token_upstream,
    to_float64,
)

__all__ = [
    "rollout_is_weights", "rollout_rejection_mask", "decoupled_ppo_token_loss",
    "decoupled_ppo_token_loss_grad", "proximal_logp_interpolation", "off_policy_sequence_mask",
]

IS_LEVELS = ("token", "sequence")
IS_SEQ_STATS = ("product", "geometric")
IS_MODES = ("none", "truncate", "mask")
REJECTION_STATISTICS = ("ratio", "k1", "k2", "k3")
REJECTION_LEVELS = ("token", "seq_sum", "seq_mean", "seq_max", "seq_all")
KL_OF = ("rollout_old", "old_rollout")
BEHAV_MODES = ("truncate", "mask")
PROXIMAL_METHODS = ("loglinear", "linear")

# batch_normalize divides by the mean weight only when that mean exceeds this (verl's guard).
BATCH_NORMALIZE_MIN_MEAN = 1e-8


# ----------------------------------------------------------------------------------------------
# small scalar helpers
# ----------------------------------------------------------------------------------------------


def _exp(s: float) -> float:
    """e^s in float64 (inf on overflow, 0 on underflow, no warning)."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.exp(s))


def _log(x: float) -> float:
    """log x for x >= 0, with log 0 = −inf (no warning)."""
    return -math.inf if x == 0.0 else math.log(x)


def _times(a: float, x: float) -> float:
    """a · x with 0 · inf := 0 on either side (a zero factor contributes nothing)."""
    if a == 0.0 or x == 0.0:
        return 0.0
    return a * x


def _in_bounds(x: float, lo: float | None, hi: float | None) -> bool:
    """lo <= x <= hi, inclusive; a bound that is None is absent."""
    return (lo is None or lo <= x) and (hi is None or x <= hi)


def _valid_positions(mask: np.ndarray, b: int) -> list[int]:
    return [t for t in range(mask.shape[1]) if mask[b, t]]


# ----------------------------------------------------------------------------------------------
# validation shared by the functions of this module
# ----------------------------------------------------------------------------------------------


def _rollout_inputs(fn, old_logp, rollout_logp, mask):
    mask = check_mask(fn, mask)
    old_logp = check_token_array(fn, "old_logp", old_logp, mask)
    rollout_logp = check_token_array(fn, "rollout_logp", rollout_logp, mask)
    return to_float64(old_logp), to_float64(rollout_logp), mask


def _ordered_bounds(fn, lo, hi):
    """lo <= hi when both are set."""
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{fn}: lo: expected lo <= hi, got lo={lo!r} > hi={hi!r}")
    return lo, hi


def _ratio_bounds(fn, lo, hi):
    """Bounds on a ratio: None or a finite number > 0, with lo <= hi."""
    lo = check_optional_real(fn, "lo", lo, gt=0.0)
    hi = check_optional_real(fn, "hi", hi, gt=0.0)
    return _ordered_bounds(fn, lo, hi)


def _check_behav_version(fn, behav_version, mask, version):
    """``behav_version`` [B] (one version per row) or [B, T] (per token): an integer array whose entries
    read at valid tokens satisfy 0 <= v_b <= version. Returns an int64 copy."""
    arr = as_array(fn, "behav_version", behav_version)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{fn}: behav_version: expected an integer array [B] or [B, T], got dtype {arr.dtype}")
    B, T = mask.shape
    if arr.ndim == 1:
        if arr.shape != (B,):
            raise ValueError(f"{fn}: behav_version: expected shape ({B},) ([B] of mask), got {arr.shape}")
        per_token = np.repeat(arr.astype(np.int64)[:, None], T, axis=1)  # a row's version, read at its valid tokens
    elif arr.ndim == 2:
        if arr.shape != mask.shape:
            raise ValueError(f"{fn}: behav_version: expected shape {mask.shape} ([B, T] of mask), got {arr.shape}")
        per_token = arr.astype(np.int64)
    else:
        raise ValueError(f"{fn}: behav_version: expected 1-D [B] or 2-D [B, T], got shape {arr.shape}")
    bad = mask & ((per_token < 0) | (per_token > version))
    if bad.any():
        b, t = (int(i) for i in np.argwhere(bad)[0])
        where = (b,) if arr.ndim == 1 else (b, t)
        raise ValueError(
            f"{fn}: behav_version: expected integers 0 <= v_b <= version={version} at valid tokens, "
            f"got {int(per_token[b, t])} at {where}"
        )
    return per_token


# ----------------------------------------------------------------------------------------------
# offpolicy.is_weights
# ----------------------------------------------------------------------------------------------


def _bounded_weight(s: float, mode: str, lo, hi) -> tuple[float, float]:
    """``(w, log w)`` for the log-ratio statistic s: ρ = exp(s), then the mode's bound rule.

        "none":     w = ρ
        "truncate": w = min(max(ρ, lo), hi)                       (TIS)
        "mask":     w = ρ if lo <= ρ <= hi else 0                 (masked IS, IcePop)
    ``log w`` is carried exactly (s, log lo, log hi or −inf) so that batch normalisation stays exact
    when ρ overflowed.
    """
    rho = _exp(s)
    if mode == "none":
        return rho, s
    if mode == "truncate":
        if lo is not None and rho < lo:
            return lo, math.log(lo)
        if hi is not None and rho > hi:
            return hi, math.log(hi)
        return rho, s
    # mask
    if _in_bounds(rho, lo, hi):
        return rho, s
    return 0.0, -math.inf


def rollout_is_weights(old_logp, rollout_logp, mask, *, level="token", seq_stat="product", mode="truncate",
                       lo=None, hi=2.0, log_ratio_clamp=None, batch_normalize=False):
    """Importance weights that correct the trainer for the rollout engine's distribution (TIS / IcePop / MIS).

    Spec: offpolicy.is_weights (v1), added by spec v1.1 (api.md, "Spec v1.1: off-policy and
        asynchronous training").
    Equation (row b, valid t, δ_t = old_logp_t − rollout_logp_t = log ρ_t):
        statistic   s_{b,t} = δ_t                  level="token"
                    s_b     = Σ_t m_t·δ_t          level="sequence", seq_stat="product"   (ρ_b = Π_t ρ_t)
                    s_b     = Σ_t m_t·δ_t / n_b    level="sequence", seq_stat="geometric" (geometric mean)
        clamp       s ← clip(s, −c, c)             if log_ratio_clamp = c (verl's SAFETY_BOUND)
        ratio       ρ = exp(s)                     (inf on overflow)
        weight      "none": w = ρ;   "truncate": w = min(max(ρ, lo), hi);   "mask": w = ρ·[lo <= ρ <= hi]
        batch_normalize: w ← w / w̄ with w̄ the mean weight over the valid tokens (token level) or over
                    the rows with a valid token, one weight per row (sequence level), when w̄ > 1e-8.
        A sequence-level weight is the same on every valid token of its row; 0 at masked t.
    Source: TIS: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
        Training" (fengyao.notion.site/off-policy-rl); IcePop: Ling Team, Ring-1T (arXiv:2510.18855);
        masked IS (MIS): Liu, Li et al. 2025, "When Speed Kills Stability" (richardli.xyz/rl-collapse);
        framework forms: TRL ``vllm_importance_sampling_mode``, verl ``compute_rollout_correction_weights``.
    Shapes: old_logp, rollout_logp, mask [B, T] -> [B, T] float64, a constant (no gradient).
    Edge cases: bounds inclusive; an overflowed ρ is truncated to hi, masked to 0 or kept as inf;
        with batch_normalize and an infinite ρ the normalised weight is the exact w_i / w̄ (finite,
        <= the number of weights averaged); a row without valid tokens is all 0.
    """
    fn = "rollout_is_weights"
    old_logp, rollout_logp, mask = _rollout_inputs(fn, old_logp, rollout_logp, mask)
    level = check_choice(fn, "level", level, IS_LEVELS)
    seq_stat = check_choice(fn, "seq_stat", seq_stat, IS_SEQ_STATS)
    mode = check_choice(fn, "mode", mode, IS_MODES)
    lo, hi = _ratio_bounds(fn, lo, hi)
    c = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    batch_normalize = check_bool(fn, "batch_normalize", batch_normalize)

    B, T = mask.shape
    w = np.zeros((B, T), dtype=np.float64)
    log_w = np.full((B, T), -math.inf, dtype=np.float64)
    units = []  # (w, log w) of each weight that batch normalisation averages
    for b in range(B):
        valid_t = _valid_positions(mask, b)
        if not valid_t:
            continue
        if level == "token":
            for t in valid_t:
                s = old_logp[b, t] - rollout_logp[b, t]  # δ_t = log ρ_t
                s = clip_symmetric(s, c)
                w[b, t], log_w[b, t] = _bounded_weight(s, mode, lo, hi)
                units.append((w[b, t], log_w[b, t]))
        else:
            s_b = 0.0
            for t in valid_t:
                s_b += old_logp[b, t] - rollout_logp[b, t]  # Σ_t δ_t = log Π_t ρ_t
            if seq_stat == "geometric":
                s_b = s_b / len(valid_t)  # mean δ = log of the geometric mean of ρ
            s_b = clip_symmetric(s_b, c)
            w_b, log_w_b = _bounded_weight(s_b, mode, lo, hi)
            for t in valid_t:
                w[b, t], log_w[b, t] = w_b, log_w_b
            units.append((w_b, log_w_b))

    if batch_normalize and units:
        K = len(units)
        # w̄ = (1/K) Σ_k w_k
        total = 0.0
        for w_k, _ in units:
            total += w_k
        w_mean = total / K
        if w_mean > BATCH_NORMALIZE_MIN_MEAN:
            if math.isfinite(w_mean):
                for b in range(B):
                    for t in _valid_positions(mask, b):
                        w[b, t] = w[b, t] / w_mean
            else:
                # Σ w overflowed (a ρ = inf with no upper bound): the exact
                # w_i / w̄ = K·exp(ℓ_i − logsumexp_k ℓ_k) with ℓ = log w, finite and <= K
                log_total = -math.inf
                for _, log_w_k in units:
                    log_total = float(np.logaddexp(log_total, log_w_k))
                log_w_mean = log_total - math.log(K)
                for b in range(B):
                    for t in _valid_positions(mask, b):
                        w[b, t] = _exp(log_w[b, t] - log_w_mean)
    return w


# ----------------------------------------------------------------------------------------------
# offpolicy.rejection
# ----------------------------------------------------------------------------------------------


def _token_statistic(old_t: float, rollout_t: float, statistic: str, kl_of: str) -> float:
    """The per-token quantity that is aggregated: δ = log ρ for "ratio" (aggregated in log space and
    exponentiated), else the KL estimate k1/k2/k3 of d (kl_of="rollout_old": d = rollout − old;
    "old_rollout": d = old − rollout), the kl.estimator formulas: k1 = d, k2 = d²/2, k3 = e^(−d) − 1 + d."""
    if statistic == "ratio":
        return old_t - rollout_t
    if kl_of == "rollout_old":
        return kl_estimate(rollout_t, old_t, statistic, None, None)  # d = rollout_logp − old_logp
    return kl_estimate(old_t, rollout_t, statistic, None, None)  # d = old_logp − rollout_logp


def _tested_value(x: float, statistic: str) -> float:
    """What is compared with [lo, hi]: ρ = exp(x) for "ratio" (x a log-ratio, or its sum / mean / max),
    x itself for k1/k2/k3."""
    return _exp(x) if statistic == "ratio" else x


def rollout_rejection_mask(old_logp, rollout_logp, mask, *, statistic="ratio", level="token", lo=None, hi=None,
                           kl_of="rollout_old"):
    """Tokens (or whole rows) kept by a rejection test on the rollout/trainer mismatch.

    Spec: offpolicy.rejection (v1), added by spec v1.1 (api.md, "Spec v1.1: off-policy and
        asynchronous training").
    Equation (row b, valid t):
        per-token x_t:  "ratio": x_t = δ_t = old_logp_t − rollout_logp_t   (tested as ρ = e^x)
                        "k1": d,  "k2": d²/2,  "k3": e^(−d) − 1 + d,  with
                              d = rollout_logp − old_logp   (kl_of="rollout_old": KL(π_rollout ‖ π_old), verl)
                              d = old_logp − rollout_logp   (kl_of="old_rollout": AReaL's kl_k*)
        "token":     keep_t = [lo <= v(x_t) <= hi]
        "seq_sum":   keep_b = [lo <= v(Σ_t x_t) <= hi]      ("ratio": Π_t ρ_t)
        "seq_mean":  keep_b = [lo <= v(Σ_t x_t / n_b) <= hi] ("ratio": the geometric mean of ρ)
        "seq_max":   keep_b = [lo <= v(max_t x_t) <= hi]    ("ratio": max_t ρ_t)
        "seq_all":   keep_b = Π_t [lo <= v(x_t) <= hi]      (one outlier token drops its row)
        v(x) = e^x for "ratio", x otherwise; a kept row keeps every valid token; False at masked t.
        Several criteria combine by logical AND of their masks.
    Source: verl ``compute_rollout_rejection_mask`` (token / seq_sum / seq_mean / seq_max × k1/k2/k3);
        IcePop (Ring-1T, arXiv:2510.18855) and masked IS (Liu, Li et al. 2025) for the ratio test;
        AReaL ``apply_rejection_sampling`` (metric ratio / kl_k1..3, agg sum / mean / max);
        SkyRL's outlier-token sequence mask for "seq_all".
    Shapes: old_logp, rollout_logp, mask [B, T] -> [B, T] bool (True = kept), a constant.
    Edge cases: bounds inclusive, None = no bound; an overflowed ρ or k3 (inf) fails a finite hi;
        a row without valid tokens is all False.
    """
    fn = "rollout_rejection_mask"
    old_logp, rollout_logp, mask = _rollout_inputs(fn, old_logp, rollout_logp, mask)
    statistic = check_choice(fn, "statistic", statistic, REJECTION_STATISTICS)
    level = check_choice(fn, "level", level, REJECTION_LEVELS)
    if statistic == "ratio":
        lo, hi = _ratio_bounds(fn, lo, hi)
    else:
        lo = check_optional_real(fn, "lo", lo)
        hi = check_optional_real(fn, "hi", hi)
        lo, hi = _ordered_bounds(fn, lo, hi)
    kl_of = check_choice(fn, "kl_of", kl_of, KL_OF)

    B, T = mask.shape
    keep = np.zeros((B, T), dtype=bool)
    for b in range(B):
        valid_t = _valid_positions(mask, b)
        if not valid_t:
            continue
        x = {t: _token_statistic(old_logp[b, t], rollout_logp[b, t], statistic, kl_of) for t in valid_t}

        if level == "token":
            for t in valid_t:
                keep[b, t] = _in_bounds(_tested_value(x[t], statistic), lo, hi)
            continue

        if level == "seq_all":
            keep_b = all(_in_bounds(_tested_value(x[t], statistic), lo, hi) for t in valid_t)
        else:
            if level == "seq_max":
                agg = max(x[t] for t in valid_t)
            else:
                agg = 0.0
                for t in valid_t:
                    agg += x[t]
                if level == "seq_mean":
                    agg = agg / len(valid_t)
            keep_b = _in_bounds(_tested_value(agg, statistic), lo, hi)
        for t in valid_t:
            keep[b, t] = keep_b
    return keep


# ----------------------------------------------------------------------------------------------
# offpolicy.decoupled_ppo
# ----------------------------------------------------------------------------------------------


def _decoupled_inputs(fn, logp, prox_logp, behav_logp, advantages, mask, eps_low, eps_high, dual_clip, behav_cap,
                      behav_mode):
    mask = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, mask)
    prox_logp = check_token_array(fn, "prox_logp", prox_logp, mask)
    behav_logp = check_token_array(fn, "behav_logp", behav_logp, mask)
    A = check_advantages(fn, advantages, mask)
    # PPO's clip parameters, checked under this function's name (no log-ratio clamp in this loss)
    ppo_params = _ppo_params(fn, eps_low, eps_high, dual_clip, None)
    behav_cap = check_optional_real(fn, "behav_cap", behav_cap, gt=0.0)
    behav_mode = check_choice(fn, "behav_mode", behav_mode, BEHAV_MODES)
    return (to_float64(logp), to_float64(prox_logp), to_float64(behav_logp), to_float64(A), mask, ppo_params,
            behav_cap, behav_mode)


def _behaviour_weight(prox_t: float, behav_t: float, behav_cap, behav_mode: str) -> float:
    """w_t = exp(prox_logp_t − behav_logp_t) = π_prox/π_behav (a constant), capped when behav_cap is set:
    "truncate": min(w, cap); "mask": w if w <= cap else 0."""
    w = _exp(prox_t - behav_t)
    if behav_cap is None:
        return w
    if behav_mode == "truncate":
        return min(w, behav_cap)
    return w if w <= behav_cap else 0.0


def decoupled_ppo_token_loss(logp, prox_logp, behav_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2,
                             dual_clip=None, behav_cap=None, behav_mode="truncate"):
    """Decoupled PPO: the clip is taken against the proximal policy, the behaviour policy is corrected by w.

    Spec: offpolicy.decoupled_ppo (v1), added by spec v1.1 (api.md, "Spec v1.1: off-policy and
        asynchronous training").
    Equation (valid t):
        r_t   = exp(logp_t − prox_logp_t)                       (π_θ / π_prox)
        w_t   = exp(prox_logp_t − behav_logp_t)                 (π_prox / π_behav, a constant)
                "truncate": w_t ← min(w_t, behav_cap);  "mask": w_t ← w_t·[w_t <= behav_cap]   (if behav_cap set)
        L_t   = w_t · L^PPO_t,   L^PPO = ppo_token_loss(logp, prox_logp, A, mask, eps_low, eps_high, dual_clip)
              = w_t · max(−A_t·r_t, −A_t·clip(r_t, 1 − ε_low, 1 + ε_high))
                (then min with −c·A_t inside if dual_clip = c and A_t < 0)
        with 0 · inf := 0; 0 at masked t.
    Source: Fu et al., "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language
        Reasoning", arXiv:2505.24298 (decoupled PPO objective); the proximal/behaviour decoupling of
        Hilton, Cobbe, Schulman, "Batch size-invariance for policy optimization", arXiv:2110.00641;
        AReaL 1.0.4 ``ppo_actor_loss_fn`` (``areal/utils/functional/functional.py``).
    Shapes: logp, prox_logp, behav_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: PPO's clip, dual clip, tie rule (unclipped branch) and 0·inf rule; w = 0 (masked by the
        cap) gives 0 even if r overflowed; masked positions never read.
    """
    fn = "decoupled_ppo_token_loss"
    logp, prox_logp, behav_logp, A, mask, ppo_params, behav_cap, behav_mode = _decoupled_inputs(
        fn, logp, prox_logp, behav_logp, advantages, mask, eps_low, eps_high, dual_clip, behav_cap, behav_mode
    )
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            w_t = _behaviour_weight(prox_logp[b, t], behav_logp[b, t], behav_cap, behav_mode)
            # L^PPO_t against the proximal policy (loss.ppo, same clip / dual clip / tie rules)
            L_ppo, _, _, _ = _ppo_token(logp[b, t], prox_logp[b, t], _advantage_at(A, b, t), *ppo_params)
            loss[b, t] = _times(w_t, L_ppo)
    return loss


def decoupled_ppo_token_loss_grad(logp, prox_logp, behav_logp, advantages, mask, upstream, *, eps_low=0.2,
                                  eps_high=0.2, dual_clip=None, behav_cap=None, behav_mode="truncate"):
    """Vector-Jacobian product of :func:`decoupled_ppo_token_loss`: dL/d logp [B, T].

    Spec: offpolicy.decoupled_ppo (v1), gradient (prox_logp, behav_logp, advantages and w are constants).
    Derivative (u = upstream): w_t times PPO's,
        unclipped branch selected:       dL/dlogp_t = u_t · w_t · (−A_t · r_t)
        clipped or dual branch selected: dL/dlogp_t = 0
    with 0 · inf := 0 (w = 0, u = 0 or A = 0 give 0). Example: r = 1.1, A = 1, w = 2: −2.2·u.
    """
    fn = "decoupled_ppo_token_loss_grad"
    logp, prox_logp, behav_logp, A, mask, ppo_params, behav_cap, behav_mode = _decoupled_inputs(
        fn, logp, prox_logp, behav_logp, advantages, mask, eps_low, eps_high, dual_clip, behav_cap, behav_mode
    )
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            w_t = _behaviour_weight(prox_logp[b, t], behav_logp[b, t], behav_cap, behav_mode)
            _, branch, ratio, _ = _ppo_token(logp[b, t], prox_logp[b, t], A_t, *ppo_params)
            if branch != "unclipped":
                continue  # a clipped or dual-clip branch is a constant in logp: exactly 0
            dLppo_dlogp = _neg_A_times(A_t, ratio)  # −A_t · r_t
            grad[b, t] = _times(w_t, _times(u[b, t], dLppo_dlogp))
    return grad


# ----------------------------------------------------------------------------------------------
# offpolicy.proximal
# ----------------------------------------------------------------------------------------------


def _alpha(version: int, v_b: int) -> float:
    """α = clip((version − 1 − v_b) / (version − v_b), 0, 1); 0 when version − v_b <= 0."""
    gap = version - v_b
    if gap <= 0:
        return 0.0
    return min(max((version - 1 - v_b) / gap, 0.0), 1.0)


def proximal_logp_interpolation(logp, behav_logp, behav_version, mask, *, version, method="loglinear"):
    """AReaL's version-aware approximation of the proximal policy's log-probs (one version behind ``version``).

    Spec: offpolicy.proximal (v1), added by spec v1.1 (api.md, "Spec v1.1: off-policy and
        asynchronous training").
    Equation (valid t of row b, v_b = behav_version[b] or behav_version[b, t]):
        α_t = clip( (version − 1 − v_b) / (version − v_b), 0, 1 ),   α_t = 0 when version − v_b <= 0
        "loglinear": prox_t = behav_logp_t + α_t · (logp_t − behav_logp_t)
        "linear":    prox_t = log( (1 − α_t)·e^behav_logp_t + α_t·e^logp_t )
        0 at masked t.
    Source: Li, Wu, Shen, "A-3PO: Accelerating Asynchronous LLM Training with Staleness-aware Proximal
        Policy Approximation", arXiv:2512.06547; AReaL 1.0.4 ``compute_prox_logp_approximations``
        (``areal/trainer/ppo/actor.py``). It approximates the proximal policy of the decoupled
        objective (AReaL, arXiv:2505.24298) without a forward pass.
    Shapes: logp, behav_logp [B, T], behav_version [B] or [B, T] integers, mask [B, T] -> [B, T]
        float64, a constant (no gradient reaches logp or behav_logp).
    Edge cases: v_b = version − 1 (the proximal version itself) and v_b = version give α = 0, i.e.
        behav_logp; "linear" is evaluated as logaddexp(log(1−α) + behav_logp, log α + logp) with
        log 0 = −inf, the same value without underflow of e^logp; behav_version is read only at
        valid tokens (AReaL's prompt tokens carry −1).
    """
    fn = "proximal_logp_interpolation"
    mask = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, mask)
    behav_logp = check_token_array(fn, "behav_logp", behav_logp, mask)
    version = check_int(fn, "version", version, ge=0)
    v = _check_behav_version(fn, behav_version, mask, version)
    method = check_choice(fn, "method", method, PROXIMAL_METHODS)
    logp, behav_logp = to_float64(logp), to_float64(behav_logp)

    B, T = mask.shape
    prox = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            alpha = _alpha(version, int(v[b, t]))
            if method == "loglinear":
                prox[b, t] = behav_logp[b, t] + alpha * (logp[b, t] - behav_logp[b, t])
            else:
                # log((1 − α)·e^behav + α·e^logp), each term in log space (log 0 = −inf)
                prox[b, t] = float(np.logaddexp(_log(1.0 - alpha) + behav_logp[b, t], _log(alpha) + logp[b, t]))
    return prox


# ----------------------------------------------------------------------------------------------
# offpolicy.opsm
# ----------------------------------------------------------------------------------------------


def off_policy_sequence_mask(logp, old_logp, advantages, mask, *, threshold):
    """DeepSeek-V3.2's off-policy sequence mask (OPSM): drop negative-advantage tokens of rows that drifted.

    Spec: offpolicy.opsm (v1), added by spec v1.1 (api.md, "Spec v1.1: off-policy and
        asynchronous training").
    Equation (row b, valid t):
        D_b    = Σ_t m_t · (old_logp_t − logp_t) / n_b          (the row's mean k1 estimate of KL(π_old ‖ π_θ))
        keep_t = [A_t >= 0]  or  [D_b <= threshold]
        False at masked t.
    Source: DeepSeek-AI, DeepSeek-V3.2, arXiv:2512.02556, eq. 9 (off-policy sequence masking, δ = threshold);
        TRL 1.16.0 ``GRPOTrainer.get_off_policy_mask`` (``off_policy_mask_threshold``).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] bool (True = kept),
        a constant.
    Edge cases: A = 0 is kept; D_b <= threshold inclusive; a row without valid tokens is all False.
    """
    fn = "off_policy_sequence_mask"
    mask = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, mask)
    old_logp = check_token_array(fn, "old_logp", old_logp, mask)
    A = check_advantages(fn, advantages, mask)
    threshold = check_real(fn, "threshold", threshold)
    logp, old_logp, A = to_float64(logp), to_float64(old_logp), to_float64(A)

    B, T = mask.shape
    keep = np.zeros((B, T), dtype=bool)
    for b in range(B):
        valid_t = _valid_positions(mask, b)
        if not valid_t:
            continue
        # D_b = mean over the row's valid tokens of old_logp − logp
        D_b = 0.0
        for t in valid_t:
            D_b += old_logp[b, t] - logp[b, t]
        D_b = D_b / len(valid_t)
        low_drift = D_b <= threshold
        for t in valid_t:
            keep[b, t] = _advantage_at(A, b, t) >= 0.0 or low_drift
    return keep
