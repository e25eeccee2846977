"""Per-token policy losses and their gradients w.r.t. ``logp`` (``loss.pg``, ``loss.ppo``, ``loss.gspo``, ``loss.cispo``;
spec v1.1 adds ``loss.sapo``, ``loss.gmpo``, ``loss.dppo``, ``loss.dro``, ``loss.vespo``).

Every loss returns a [B, T] array; the scalar objective is ``aggregate(loss, mask, mode=...)``.
``advantages`` may be [B] (the sequence's advantage on every valid token) or [B, T].

Branch rule: ``max(unclipped, clipped)`` (and the dual clip's ``min``) pick the unclipped branch on a
tie, and its gradient is the one used. A clipped branch that is strictly selected is a constant in
``logp``, so its gradient is exactly 0.

``A · ratio`` with A = 0 is taken as 0 even if the ratio overflowed to inf (a zero advantage
contributes nothing), so a huge log-ratio at a token with A = 0 never produces NaN.
"""

from __future__ import annotations

import math

import numpy as np

from oracle.clipping import clip, clip_passes_gradient, clip_symmetric, max_ties_unclipped
from oracle.validation import (
    check_advantages,
    check_choice,
    check_mask,
    check_optional_real,
    check_real,
    check_token_array,
    check_token_upstream,
    to_float64,
)

__all__ = [
    "pg_token_loss", "pg_token_loss_grad", "ppo_token_loss", "ppo_token_loss_grad", "gspo_token_loss",
    "gspo_token_loss_grad", "cispo_token_loss", "cispo_token_loss_grad", "sapo_token_loss", "sapo_token_loss_grad",
    "gmpo_token_loss", "gmpo_token_loss_grad", "dppo_token_loss", "dppo_token_loss_grad", "dro_token_loss",
    "dro_token_loss_grad", "vespo_token_loss", "vespo_token_loss_grad",
]


# ----------------------------------------------------------------------------------------------
# small scalar helpers
# ----------------------------------------------------------------------------------------------


def _advantage_at(A: np.ndarray, b: int, t: int) -> float:
    """A_t for token (b, t): the sequence advantage A[b] ([B] form) or A[b, t] ([B, T] form)."""
    return float(A[b]) if A.ndim == 1 else float(A[b, t])


def _product(a: float, x: float) -> float:
    """a · x, with 0 · inf := 0 (a zero coefficient contributes nothing, even if a ratio overflowed)."""
    if a == 0.0:
        return 0.0
    return a * x


def _neg_A_times(A_t: float, x: float) -> float:
    """−A_t · x, with 0 · inf := 0 (a token with zero advantage contributes nothing)."""
    return _product(-A_t, x)


def _exp(d: float) -> float:
    """e^d in float64 (inf on overflow, no warning)."""
    with np.errstate(over="ignore"):
        return float(np.exp(d))


def _policy_inputs(fn, logp, old_logp, advantages, mask):
    mask = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, mask)
    old_logp = check_token_array(fn, "old_logp", old_logp, mask)
    A = check_advantages(fn, advantages, mask)
    return to_float64(logp), to_float64(old_logp), to_float64(A), mask


# ----------------------------------------------------------------------------------------------
# loss.pg
# ----------------------------------------------------------------------------------------------


def _pg_inputs(fn, logp, advantages, mask):
    mask = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, mask)
    A = check_advantages(fn, advantages, mask)
    return to_float64(logp), to_float64(A), mask


def pg_token_loss(logp, advantages, mask):
    """Vanilla policy-gradient (REINFORCE) surrogate.

    Spec: loss.pg (v1)
    Equation: L_t = −A_t · logp_t at valid t, 0 elsewhere.
    Source: Williams 1992; the policy-gradient estimator ĝ = Ê[∇ log π · Â] of PPO arXiv:1707.06347 eq. (1)-(2).
    Shapes: logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    """
    fn = "pg_token_loss"
    logp, A, mask = _pg_inputs(fn, logp, advantages, mask)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            loss[b, t] = -A_t * logp[b, t]
    return loss


def pg_token_loss_grad(logp, advantages, mask, upstream):
    """Vector-Jacobian product of :func:`pg_token_loss`: dL/d logp [B, T].

    Spec: loss.pg (v1), gradient.
    Derivative: ∂L_t/∂logp_t = −A_t, so dL/dlogp_t = −A_t · u_t (0 at masked t).
    """
    fn = "pg_token_loss_grad"
    logp, A, mask = _pg_inputs(fn, logp, advantages, mask)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            grad[b, t] = -A_t * u[b, t]
    return grad


# ----------------------------------------------------------------------------------------------
# loss.ppo
# ----------------------------------------------------------------------------------------------


def _ppo_params(fn, eps_low, eps_high, dual_clip, log_ratio_clamp):
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    dual_clip = check_optional_real(fn, "dual_clip", dual_clip, gt=1.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    return eps_low, eps_high, dual_clip, log_ratio_clamp


def _ppo_token(logp_t, old_logp_t, A_t, eps_low, eps_high, dual_clip, log_ratio_clamp):
    """One token of the PPO clipped objective.

    Returns ``(L_t, branch, ratio, d_inside)``: branch is ``"unclipped"``, ``"clipped"`` or ``"dual"``;
    ``d_inside`` says whether the log-ratio clamp passes a gradient.
    """
    # log-ratio, optionally clamped
    d_raw = logp_t - old_logp_t
    d = clip_symmetric(d_raw, log_ratio_clamp)
    d_inside = clip_passes_gradient(d_raw, log_ratio_clamp)

    # r_t = π/π_old
    ratio = _exp(d)

    # L = max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high)); ties -> unclipped
    unclipped = _neg_A_times(A_t, ratio)
    clipped = _neg_A_times(A_t, clip(ratio, 1.0 - eps_low, 1.0 + eps_high))
    L_t, branch = max_ties_unclipped(unclipped, clipped)

    # dual clip (A < 0 only): L = min(L, −c·A); ties -> the branch already chosen
    if dual_clip is not None and A_t < 0:
        dual = -dual_clip * A_t
        if dual < L_t:
            L_t, branch = dual, "dual"
    return L_t, branch, ratio, d_inside


def ppo_token_loss(logp, old_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None,
                   log_ratio_clamp=None):
    """PPO clipped surrogate per token (with decoupled clip range and optional dual clip).

    Spec: loss.ppo (v1)
    Equation (valid t):
        d_t     = logp_t − old_logp_t                 (clipped to ±log_ratio_clamp if set)
        r_t     = exp(d_t)
        L_t     = max( −A_t · r_t, −A_t · clip(r_t, 1 − ε_low, 1 + ε_high) )
        if dual_clip = c and A_t < 0:   L_t = min( L_t, −c · A_t )
    Source: Schulman et al., PPO, arXiv:1707.06347 eq. (7) (L^CLIP, negated as a loss);
        decoupled ε_low/ε_high ("clip-higher") from DAPO arXiv:2503.14476; dual clip from Ye et al.,
        arXiv:1912.09729.
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: ties go to the unclipped branch; masked positions exactly 0 and never read;
        ε_low, ε_high >= 0, dual_clip > 1, log_ratio_clamp > 0.
    """
    fn = "ppo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _ppo_params(fn, eps_low, eps_high, dual_clip, log_ratio_clamp)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            L_t, _, _, _ = _ppo_token(logp[b, t], old_logp[b, t], _advantage_at(A, b, t), *params)
            loss[b, t] = L_t
    return loss


def ppo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, eps_low=0.2, eps_high=0.2,
                        dual_clip=None, log_ratio_clamp=None):
    """Vector-Jacobian product of :func:`ppo_token_loss`: dL/d logp [B, T].

    Spec: loss.ppo (v1), gradient (old_logp and advantages are constants).
    Derivative (∂r/∂logp = r · ∂d/∂logp, ∂d/∂logp = 1 inside the log-ratio clamp, 0 outside):
        unclipped branch selected:       ∂L_t/∂logp_t = −A_t · r_t · ∂d/∂logp
        clipped or dual branch selected: ∂L_t/∂logp_t = 0    (a constant: r is outside [1−ε_low, 1+ε_high],
                                                             or −c·A)
        dL/dlogp_t = u_t · ∂L_t/∂logp_t
    Example: ε = 0.2, r = 1.3, A = −1: L = 1.3, gradient 1.3; A = +1: L = −1.2, gradient 0.
    """
    fn = "ppo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _ppo_params(fn, eps_low, eps_high, dual_clip, log_ratio_clamp)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            _, branch, ratio, d_inside = _ppo_token(logp[b, t], old_logp[b, t], A_t, *params)
            if branch != "unclipped" or not d_inside:
                continue  # constant branch: exactly 0
            dL_dlogp = _neg_A_times(A_t, ratio)  # −A_t · r_t · 1
            grad[b, t] = _product(u[b, t], dL_dlogp)  # 0 · inf := 0 (a zero upstream, an overflowed ratio)
    return grad


# ----------------------------------------------------------------------------------------------
# loss.gspo
# ----------------------------------------------------------------------------------------------


def _gspo_params(fn, eps_low, eps_high, form):
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    form = check_choice(fn, "form", form, ("sequence", "token_sg"))
    return eps_low, eps_high, form


def _sequence_ratio(logp, old_logp, mask, b):
    """``(s_b, n_b, valid_t)``: s_b = exp( Σ_{t valid} (logp_t − old_logp_t) / n_b ); s_b = None if n_b = 0."""
    valid_t = [t for t in range(mask.shape[1]) if mask[b, t]]
    n_b = len(valid_t)
    if n_b == 0:
        return None, 0, valid_t
    sum_log_ratio = 0.0
    for t in valid_t:
        sum_log_ratio += logp[b, t] - old_logp[b, t]
    s_b = _exp(sum_log_ratio / n_b)
    return s_b, n_b, valid_t


def _gspo_token(s_b, A_t, eps_low, eps_high):
    """``(L_t, branch)``: L_t = max(−A_t·s_b, −A_t·clip(s_b, 1−ε_low, 1+ε_high)); ties -> unclipped."""
    unclipped = _neg_A_times(A_t, s_b)
    clipped = _neg_A_times(A_t, clip(s_b, 1.0 - eps_low, 1.0 + eps_high))
    return max_ties_unclipped(unclipped, clipped)


def gspo_token_loss(logp, old_logp, advantages, mask, *, eps_low=3e-4, eps_high=4e-4, form="sequence"):
    """GSPO: the clipped objective on the length-normalised sequence ratio, carried by every valid token.

    Spec: loss.gspo (v1)
    Equation (row b, n_b valid tokens):
        s_b = exp( (1/n_b) Σ_t m_t (logp_t − old_logp_t) ) = ( π(y_b)/π_old(y_b) )^(1/|y_b|)
        L_t = max( −A_t · s_b, −A_t · clip(s_b, 1 − ε_low, 1 + ε_high) )    at valid t
    ``form`` changes only the gradient (see :func:`gspo_token_loss_grad`); the value is the same.
    Source: Zheng et al., "Group Sequence Policy Optimization", arXiv:2507.18071 (sequence-level
        importance ratio and objective); ``"token_sg"`` is the GSPO-token form of the same paper as
        implemented by verl.
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: masked tokens never enter s_b; a row with no valid token is all 0; ties -> unclipped.
    """
    fn = "gspo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low, eps_high, form = _gspo_params(fn, eps_low, eps_high, form)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        s_b, n_b, valid_t = _sequence_ratio(logp, old_logp, mask, b)
        for t in valid_t:
            L_t, _ = _gspo_token(s_b, _advantage_at(A, b, t), eps_low, eps_high)
            loss[b, t] = L_t
    return loss


def gspo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, eps_low=3e-4, eps_high=4e-4,
                         form="sequence"):
    """Vector-Jacobian product of :func:`gspo_token_loss`: dL/d logp [B, T].

    Spec: loss.gspo (v1), gradient.
    Derivative (u = upstream; ∂L_t/∂s = −A_t on the unclipped branch, 0 on a strictly selected clip):
        "sequence" (paper): s_b depends on every valid token, ∂s_b/∂logp_v = s_b / n_b, so
            dL/dlogp_v = Σ_{t valid} u_t · ∂L_t/∂s · s_b / n_b           (the same for every valid v of row b)
        "token_sg" (verl): s_{b,t} = sg(s_b) · exp(logp_t − sg(logp_t)), ∂s_{b,t}/∂logp_v = s_b · [v = t], so
            dL/dlogp_t = u_t · ∂L_t/∂s · s_b
    With a per-sequence A and u_t = 1/(S·n_b) (seq_mean_token_mean) both give −A·s_b/(S·n_b).
    Example: token log-ratios [0.1, 0.3], A = −1, u = 1 on both: s = e^0.2, each gradient 2·s/2 = s.
    """
    fn = "gspo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low, eps_high, form = _gspo_params(fn, eps_low, eps_high, form)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        s_b, n_b, valid_t = _sequence_ratio(logp, old_logp, mask, b)
        if n_b == 0:
            continue
        # ∂L_t/∂s for each valid t
        dL_ds = {}
        for t in valid_t:
            A_t = _advantage_at(A, b, t)
            _, branch = _gspo_token(s_b, A_t, eps_low, eps_high)
            dL_ds[t] = -A_t if branch == "unclipped" else 0.0

        if form == "sequence":
            # dL/ds_b = Σ_t u_t · ∂L_t/∂s ;  ∂s_b/∂logp_v = s_b / n_b
            dL_ds_b = 0.0
            for t in valid_t:
                dL_ds_b += u[b, t] * dL_ds[t]
            for v in valid_t:
                grad[b, v] = _product(dL_ds_b, s_b) / n_b  # dL/ds_b · s_b / n_b
        else:  # token_sg
            for t in valid_t:
                grad[b, t] = _product(u[b, t] * dL_ds[t], s_b)  # u_t · ∂L_t/∂s · s_b
    return grad


# ----------------------------------------------------------------------------------------------
# loss.cispo
# ----------------------------------------------------------------------------------------------


CISPO_SURROGATES = ("logp", "ratio")


def _cispo_params(fn, eps_low, eps_high, bound, surrogate):
    eps_low = check_optional_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    bound = check_choice(fn, "bound", bound, ("relative", "absolute"))
    check_choice(fn, "surrogate", surrogate, CISPO_SURROGATES)
    low = None if eps_low is None else 1.0 - eps_low
    high = 1.0 + eps_high if bound == "relative" else eps_high
    if low is not None and high < low:
        raise ValueError(
            f"{fn}: eps_high: expected an upper bound >= the lower bound 1 - eps_low = {low!r}, "
            f"got upper bound {high!r} (bound={bound!r})"
        )
    return low, high


def _cispo_weight(logp_t, old_logp_t, low, high):
    """w_t = clip(r_t, low, high), r_t = exp(logp_t − old_logp_t) (a stop-gradient weight)."""
    ratio = _exp(logp_t - old_logp_t)
    return clip(ratio, low, high)


def _cispo_token(logp_t, old_logp_t, A_t, low, high, surrogate):
    """(L_t, ∂L_t/∂logp_t) of one valid token.

        surrogate "logp":  L_t = −sg(w_t)·A_t·logp_t,   ∂L_t/∂logp_t = −w_t·A_t
        surrogate "ratio": L_t = −w_t·A_t (w_t on the graph: ∂w_t/∂logp_t = r_t where lo <= r_t <= hi,
                           0 where the clip is active),   ∂L_t/∂logp_t = −r_t·A_t or 0
    """
    w_t = _cispo_weight(logp_t, old_logp_t, low, high)
    if surrogate == "logp":
        return -w_t * A_t * logp_t, -w_t * A_t
    r_t = _exp(logp_t - old_logp_t)
    inside = (low is None or r_t >= low) and r_t <= high
    return -w_t * A_t, (-r_t * A_t if inside else 0.0)


def cispo_token_loss(logp, old_logp, advantages, mask, *, eps_low=None, eps_high=0.28, bound="relative",
                     surrogate="logp"):
    """CISPO: REINFORCE with a clipped, stop-gradient importance-sampling weight.

    Spec: loss.cispo (v1), the ``surrogate`` keyword spec v1.1
    Equation (valid t):
        r_t = exp(logp_t − old_logp_t)
        w_t = clip(r_t, lo, hi),  hi = 1 + ε_high ("relative") or ε_high ("absolute", TRL's ε_max),
                                  lo = 1 − ε_low, or no lower bound when ε_low is None
        L_t = −sg(w_t) · A_t · logp_t         (surrogate "logp", the paper's)
        L_t = −w_t · A_t                      (surrogate "ratio", torchrl's CISPOLoss: the clipped ratio
                                               on the graph, no log-prob factor)
    Source: MiniMax-M1, arXiv:2506.13585, eqs. (4)-(5) (CISPO).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: unlike PPO the token keeps a gradient when r is clipped (only the weight is capped),
        except with surrogate "ratio", where a clipped token has none; ε_low, ε_high >= 0 and the
        upper bound must not be below the lower bound.
    """
    fn = "cispo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    low, high = _cispo_params(fn, eps_low, eps_high, bound, surrogate)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            loss[b, t], _ = _cispo_token(logp[b, t], old_logp[b, t], A_t, low, high, surrogate)
    return loss


def cispo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, eps_low=None, eps_high=0.28,
                          bound="relative", surrogate="logp"):
    """Vector-Jacobian product of :func:`cispo_token_loss`: dL/d logp [B, T].

    Spec: loss.cispo (v1), gradient.
    Derivative:
        surrogate "logp" (w_t a stop-gradient constant):  ∂L_t/∂logp_t = −w_t · A_t
        surrogate "ratio":  ∂L_t/∂logp_t = −r_t · A_t where lo <= r_t <= hi (the boundary passes), else 0
        dL/dlogp_t = u_t · ∂L_t/∂logp_t
    Examples (A = 1, ε_high = 0.28): r = 1.1 -> −1.1; r = 2.0 -> −1.28 (not 0 as in PPO; 0 with "ratio").
    """
    fn = "cispo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    low, high = _cispo_params(fn, eps_low, eps_high, bound, surrogate)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            _, dL_dlogp = _cispo_token(logp[b, t], old_logp[b, t], A_t, low, high, surrogate)
            grad[b, t] = u[b, t] * dL_dlogp
    return grad


# ----------------------------------------------------------------------------------------------
# loss.sapo (spec v1.1)
# ----------------------------------------------------------------------------------------------


def _sigmoid(x: float) -> float:
    """σ(x) = 1 / (1 + e^(−x)), in the form whose exponential never overflows (σ(+inf) = 1, σ(−inf) = 0)."""
    if x >= 0:
        return 1.0 / (1.0 + _exp(-x))
    e = _exp(x)
    return e / (1.0 + e)


def _sapo_params(fn, tau_pos, tau_neg, log_ratio_clamp):
    tau_pos = check_real(fn, "tau_pos", tau_pos, gt=0.0)
    tau_neg = check_real(fn, "tau_neg", tau_neg, gt=0.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    return tau_pos, tau_neg, log_ratio_clamp


def _sapo_token(logp_t, old_logp_t, A_t, tau_pos, tau_neg, log_ratio_clamp):
    """One token of SAPO: ``(L_t, dL_t/dlogp_t, d_inside)``; ``d_inside`` says whether the clamp passes a gradient."""
    # log-ratio, optionally clamped; r = π/π_old (inf on overflow)
    d_raw = logp_t - old_logp_t
    d = clip_symmetric(d_raw, log_ratio_clamp)
    d_inside = clip_passes_gradient(d_raw, log_ratio_clamp)
    r = _exp(d)

    # τ = τ_pos where A > 0, else τ_neg (A = 0 included)
    tau = tau_pos if A_t > 0 else tau_neg

    # gate f(r) = (4/τ) · σ(τ(r − 1));  r = inf: τ(r − 1) = inf, σ = 1 (saturated)
    x = tau * (r - 1.0)
    sigma = _sigmoid(x)
    one_minus_sigma = _sigmoid(-x)  # 1 − σ(x) = σ(−x), without the cancellation of 1 − σ near σ = 1
    gate = (4.0 / tau) * sigma

    # L = −A · f(r)
    L_t = _neg_A_times(A_t, gate)

    # ∂f/∂logp = (4/τ) · σ(1 − σ) · τ · r = 4 · σ · (1 − σ) · r; saturated: σ(1 − σ) = 0 and 0 · inf := 0
    dgate_dlogp = _product(4.0 * sigma * one_minus_sigma, r)
    dL_dlogp = _neg_A_times(A_t, dgate_dlogp)
    return L_t, dL_dlogp, d_inside


def sapo_token_loss(logp, old_logp, advantages, mask, *, tau_pos=1.0, tau_neg=1.05, log_ratio_clamp=None):
    """SAPO: a smooth, sign-aware sigmoid gate on the token ratio in place of PPO's hard clip.

    Spec: loss.sapo (v1), added by spec v1.1
    Equation (valid t):
        d_t = logp_t − old_logp_t                 (clipped to ±log_ratio_clamp if set)
        r_t = exp(d_t)
        τ_t = τ_pos if A_t > 0, else τ_neg
        L_t = −A_t · (4/τ_t) · σ(τ_t · (r_t − 1)),    σ(x) = 1 / (1 + e^(−x))
    Source: "Soft Adaptive Policy Optimization", arXiv:2511.20347 (the gate f(r) = σ(τ(r − 1))·4/τ,
        whose derivative at r = 1 is 1, and the asymmetric τ_neg > τ_pos); defaults τ_pos = 1.0,
        τ_neg = 1.05 as in verl, TRL and AReaL.
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: on-policy (r = 1) L = −A·2/τ with gradient −A; r = inf (d beyond ~709.78) saturates the
        gate: L = −A·4/τ, gradient 0, never NaN; A = 0 gives 0 (0 · inf := 0); masked positions exactly 0
        and never read; τ_pos, τ_neg > 0, log_ratio_clamp > 0.
    """
    fn = "sapo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _sapo_params(fn, tau_pos, tau_neg, log_ratio_clamp)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            logp_t, old_logp_t = float(logp[b, t]), float(old_logp[b, t])
            L_t, _, _ = _sapo_token(logp_t, old_logp_t, _advantage_at(A, b, t), *params)
            loss[b, t] = L_t
    return loss


def sapo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, tau_pos=1.0, tau_neg=1.05,
                         log_ratio_clamp=None):
    """Vector-Jacobian product of :func:`sapo_token_loss`: dL/d logp [B, T].

    Spec: loss.sapo (v1), added by spec v1.1, gradient (old_logp and advantages are constants).
    Derivative (σ' = σ(1 − σ), ∂r/∂logp = r inside the log-ratio clamp, 0 where it binds):
        ∂L_t/∂logp_t = −A_t · (4/τ) · σ(1 − σ) · τ · r_t = −A_t · 4 · σ(1 − σ) · r_t
        dL/dlogp_t   = u_t · ∂L_t/∂logp_t
    Example: r = 1: σ = 1/2, gradient −A (the PPO gradient on-policy); r = inf: 0.
    """
    fn = "sapo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _sapo_params(fn, tau_pos, tau_neg, log_ratio_clamp)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            logp_t, old_logp_t = float(logp[b, t]), float(old_logp[b, t])
            _, dL_dlogp, d_inside = _sapo_token(logp_t, old_logp_t, _advantage_at(A, b, t), *params)
            if not d_inside:
                continue  # the log-ratio clamp binds: r is a constant, exactly 0
            grad[b, t] = _product(float(u[b, t]), dL_dlogp)
    return grad


# ----------------------------------------------------------------------------------------------
# loss.gmpo (spec v1.1)
# ----------------------------------------------------------------------------------------------


def _gmpo_params(fn, eps_low, eps_high):
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    return eps_low, eps_high


def _sign(x: float) -> float:
    """sgn(x) ∈ {−1, 0, 1}."""
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return 0.0


def _gmpo_log_ratio(d_t, A_t, eps_low, eps_high):
    """``(s_t, passes)``: GMPO's sign-aware clipped log-ratio and whether it passes d_t's gradient.

        s_t = sgn(A_t) · min( sgn(A_t) · d_t, sgn(A_t) · clip(d_t, −ε_low, ε_high) )
    i.e. min(d_t, clip(d_t)) for A_t > 0 (clipped only above ε_high), max(d_t, clip(d_t)) for A_t < 0
    (clipped only below −ε_low), and 0 for A_t = 0 (sgn 0: a constant). A tie (d_t on a bound, or inside
    the range) takes the unclipped d_t, whose gradient passes.
    """
    sgn = _sign(A_t)
    if sgn == 0.0:
        return 0.0, False
    d_clipped = clip(d_t, -eps_low, eps_high)
    if sgn * d_clipped < sgn * d_t:
        return d_clipped, False  # the clip strictly selected: a constant in logp
    return d_t, True


def _gmpo_row(logp, old_logp, A, mask, b, eps_low, eps_high):
    """Row b of GMPO: ``(valid_t, n_b, rho_b, A_bar_b, passes)``; ``rho_b = A_bar_b = None`` when n_b = 0.

        ρ_b = exp( Σ_t m_t · s_t / n_b )     (the geometric mean of the clipped token ratios)
        Ā_b = Σ_t m_t · A_t / n_b             (A[b] itself for a [B] advantage: the mean of n_b equal values)
    """
    valid_t = [t for t in range(mask.shape[1]) if mask[b, t]]
    n_b = len(valid_t)
    if n_b == 0:
        return valid_t, 0, None, None, {}
    passes = {}
    sum_s = 0.0
    sum_A = 0.0
    for t in valid_t:
        A_t = _advantage_at(A, b, t)
        s_t, passes[t] = _gmpo_log_ratio(float(logp[b, t]) - float(old_logp[b, t]), A_t, eps_low, eps_high)
        sum_s += s_t
        sum_A += A_t
    rho_b = _exp(sum_s / n_b)
    A_bar_b = float(A[b]) if A.ndim == 1 else sum_A / n_b
    return valid_t, n_b, rho_b, A_bar_b, passes


def gmpo_token_loss(logp, old_logp, advantages, mask, *, eps_low=0.4, eps_high=0.4):
    """GMPO: the geometric mean of the sign-aware, log-space-clipped token ratios, one loss per row.

    Spec: loss.gmpo (v1), added by spec v1.1
    Equation (row b, n_b valid tokens, d_t = logp_t − old_logp_t):
        s_t = sgn(A_t) · min( sgn(A_t) · d_t, sgn(A_t) · clip(d_t, −ε_low, ε_high) )
        ρ_b = exp( (1/n_b) Σ_t m_t · s_t )
        Ā_b = (1/n_b) Σ_t m_t · A_t
        L_t = −Ā_b · ρ_b                        at every valid t of row b
    so ``aggregate(loss, mask, mode="seq_mean_token_mean")`` is the mean of −Ā_b·ρ_b over the rows.
    Source: "Geometric-Mean Policy Optimization", arXiv:2507.20673 (the geometric mean of the token
        ratios, token-level clipping in log space, clip range (e^−0.4, e^0.4)).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: a row without valid tokens is 0; masked tokens never enter ρ_b or Ā_b; a token with
        A_t = 0 contributes s_t = 0; ρ_b may overflow to inf (A < 0, huge d): L = ±inf, or 0 when Ā_b = 0
        (0 · inf := 0); ε_low, ε_high >= 0.
    """
    fn = "gmpo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low, eps_high = _gmpo_params(fn, eps_low, eps_high)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        valid_t, n_b, rho_b, A_bar_b, _ = _gmpo_row(logp, old_logp, A, mask, b, eps_low, eps_high)
        if n_b == 0:
            continue
        L_b = _neg_A_times(A_bar_b, rho_b)  # −Ā_b · ρ_b
        for t in valid_t:
            loss[b, t] = L_b
    return loss


def gmpo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, eps_low=0.4, eps_high=0.4):
    """Vector-Jacobian product of :func:`gmpo_token_loss`: dL/d logp [B, T].

    Spec: loss.gmpo (v1), added by spec v1.1, gradient (old_logp and advantages are constants).
    Derivative (every valid t of row b carries L_b = −Ā_b · ρ_b; ρ_b depends on every valid token):
        ∂s_v/∂logp_v = 1 where s_v = d_v (not clipped, A_v ≠ 0), 0 where the clip selected a constant or A_v = 0
        ∂ρ_b/∂logp_v = ρ_b / n_b · ∂s_v/∂logp_v
        dL/dlogp_v   = (Σ_{t valid} u_t) · (−Ā_b) · ρ_b / n_b · ∂s_v/∂logp_v
    Example: row d = [0.1, 0.3], A = +1, ε = 0.4, u = 1 on both: ρ = e^0.2, L = −e^0.2 on both tokens,
        each gradient 2 · (−1) · e^0.2 / 2 = −e^0.2.
    """
    fn = "gmpo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low, eps_high = _gmpo_params(fn, eps_low, eps_high)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        valid_t, n_b, rho_b, A_bar_b, passes = _gmpo_row(logp, old_logp, A, mask, b, eps_low, eps_high)
        if n_b == 0:
            continue
        # dL/dρ_b = Σ_t u_t · ∂L_t/∂ρ_b = (Σ_t u_t) · (−Ā_b)
        sum_u = 0.0
        for t in valid_t:
            sum_u += float(u[b, t])
        dL_drho = _neg_A_times(A_bar_b, sum_u)
        for v in valid_t:
            if not passes[v]:
                continue  # s_v is a constant: exactly 0
            grad[b, v] = _product(dL_drho, rho_b) / n_b  # dL/dρ_b · ρ_b / n_b (0 · inf := 0)
    return grad


# ----------------------------------------------------------------------------------------------
# loss.dppo (spec v1.1)
# ----------------------------------------------------------------------------------------------

DPPO_DIVERGENCES = ("tv", "kl")


def _dppo_params(fn, divergence, delta_low, delta_high, ratio_cap, log_ratio_clamp):
    divergence = check_choice(fn, "divergence", divergence, DPPO_DIVERGENCES)
    delta_low = check_real(fn, "delta_low", delta_low, ge=0.0)
    delta_high = check_real(fn, "delta_high", delta_high, ge=0.0)
    ratio_cap = check_optional_real(fn, "ratio_cap", ratio_cap, gt=0.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    return divergence, delta_low, delta_high, ratio_cap, log_ratio_clamp


def _prob_difference(logp_t: float, old_logp_t: float) -> float:
    """p − p_old with p = e^logp, p_old = e^old_logp.

    Written as ±e^max(logp, old_logp) · (1 − e^(−|logp − old_logp|)), the same number, so that there is
    no cancellation between two nearby probabilities and no inf − inf = NaN where both exponentials
    overflow (log-"probs" above ~709.78, not probabilities); 0 exactly when logp = old_logp.
    """
    if logp_t == old_logp_t:
        return 0.0
    larger = max(logp_t, old_logp_t)
    gap = abs(logp_t - old_logp_t)
    magnitude = _exp(larger + math.log(-math.expm1(-gap)))  # e^larger · (1 − e^(−gap))
    return magnitude if logp_t > old_logp_t else -magnitude


def _binary_kl(logp_t: float, old_logp_t: float) -> float:
    """D = p_old · log(p_old/p) + (1 − p_old) · log((1 − p_old)/(1 − p)): KL(Bernoulli(p_old) ‖ Bernoulli(p)).

    1 − p is computed as −expm1(logp) (exact near p = 1). p_old = 1 makes the second term 0 (0 · log 0 := 0);
    p = 1 > p_old makes it +inf. A positive log-prob (p or p_old > 1, not a probability) has no binary KL:
    D := +inf, outside every trust region.
    """
    if logp_t > 0.0 or old_logp_t > 0.0:
        return math.inf
    p_old = _exp(old_logp_t)
    first = p_old * (old_logp_t - logp_t)  # p_old · log(p_old / p)
    one_minus_p_old = -math.expm1(old_logp_t)  # 1 − p_old
    one_minus_p = -math.expm1(logp_t)  # 1 − p
    if one_minus_p_old == 0.0:
        second = 0.0  # p_old = 1: 0 · log(0 / (1 − p)) := 0
    elif one_minus_p == 0.0:
        second = math.inf  # p = 1 > p_old: log((1 − p_old) / 0) = +inf
    else:
        second = one_minus_p_old * (math.log(one_minus_p_old) - math.log(one_minus_p))
    return first + second


def _dppo_keep(logp_t, old_logp_t, A_t, divergence, delta_low, delta_high) -> bool:
    """DPPO's trust region on the probability of the sampled token (a 0/1 constant of the loss).

    "tv": A > 0 keeps p − p_old ≤ δ_high; A ≤ 0 keeps p − p_old ≥ −δ_low.
    "kl": A > 0 keeps D ≤ δ_high or p ≤ p_old; A ≤ 0 keeps D ≤ δ_low or p ≥ p_old (moving the probability
          against the advantage's push is always allowed; p ≤ p_old is compared as logp ≤ old_logp, the
          same order since exp is increasing).
    Bounds are inclusive.
    """
    if divergence == "tv":
        diff = _prob_difference(logp_t, old_logp_t)  # p − p_old
        if A_t > 0:
            return diff <= delta_high
        return diff >= -delta_low
    D = _binary_kl(logp_t, old_logp_t)
    if A_t > 0:
        return D <= delta_high or logp_t <= old_logp_t
    return D <= delta_low or logp_t >= old_logp_t


def _dppo_token(logp_t, old_logp_t, A_t, divergence, delta_low, delta_high, ratio_cap, log_ratio_clamp):
    """``(keep, w)``: the trust-region keep flag and the stop-gradient weight w = min(r, ratio_cap)."""
    # r = exp(d), d clipped to ±log_ratio_clamp if set (r is a constant: its clamp never blocks a gradient)
    d = clip_symmetric(logp_t - old_logp_t, log_ratio_clamp)
    r = _exp(d)
    w = r if ratio_cap is None else min(r, ratio_cap)
    keep = _dppo_keep(logp_t, old_logp_t, A_t, divergence, delta_low, delta_high)
    return keep, w


def dppo_token_loss(logp, old_logp, advantages, mask, *, divergence="tv", delta_low=0.2, delta_high=0.2,
                    ratio_cap=None, log_ratio_clamp=None):
    """DPPO: REINFORCE with a stop-gradient (truncated) ratio, masked by a trust region on the probability.

    Spec: loss.dppo (v1), added by spec v1.1
    Equation (valid t, p = e^logp_t, p_old = e^old_logp_t):
        d_t    = logp_t − old_logp_t            (clipped to ±log_ratio_clamp if set)
        r_t    = exp(d_t),   w_t = min(r_t, ratio_cap)   (w_t = r_t when ratio_cap is None)
        "tv":  keep_t = [p − p_old ≤ δ_high]  if A_t > 0,   [p − p_old ≥ −δ_low]  if A_t ≤ 0
        "kl":  D_t = p_old·log(p_old/p) + (1 − p_old)·log((1 − p_old)/(1 − p))
               keep_t = [D_t ≤ δ_high or p ≤ p_old]  if A_t > 0,   [D_t ≤ δ_low or p ≥ p_old]  if A_t ≤ 0
        L_t    = −A_t · sg(w_t) · logp_t · keep_t
    Source: Qi et al., "Rethinking the Trust Region in LLM Reinforcement Learning", arXiv:2602.04879
        (Divergence Proximal Policy Optimization, its Binary-TV and Binary-KL approximations of the
        trust region on the sampled token's probability; the truncated importance weight in place of
        the dual clip, its Section 5.4), as implemented by verl (``dppo_tv``, ``dppo_kl``).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: keep and w are constants; bounds are inclusive; A = 0 uses the A ≤ 0 rule (its loss is 0);
        a positive log-prob has no binary KL (D := +inf); r = inf without a cap gives ±inf unless A = 0,
        logp = 0 or keep = 0 (0 · inf := 0); δ_low, δ_high >= 0, ratio_cap > 0, log_ratio_clamp > 0.
    """
    fn = "dppo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _dppo_params(fn, divergence, delta_low, delta_high, ratio_cap, log_ratio_clamp)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            logp_t, old_logp_t = float(logp[b, t]), float(old_logp[b, t])
            keep, w = _dppo_token(logp_t, old_logp_t, A_t, *params)
            if not keep:
                continue  # outside the trust region: exactly 0
            loss[b, t] = _neg_A_times(A_t, _product(logp_t, w))  # −A · w · logp (0 · inf := 0)
    return loss


def dppo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, divergence="tv", delta_low=0.2,
                         delta_high=0.2, ratio_cap=None, log_ratio_clamp=None):
    """Vector-Jacobian product of :func:`dppo_token_loss`: dL/d logp [B, T].

    Spec: loss.dppo (v1), added by spec v1.1, gradient (w and keep are stop-gradient constants).
    Derivative:
        ∂L_t/∂logp_t = −A_t · w_t · keep_t,     dL/dlogp_t = u_t · ∂L_t/∂logp_t
    Example: A = 1, r = 1.1, inside the region: −1.1; outside: 0; r = 5 with ratio_cap = 3: −3.
    """
    fn = "dppo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _dppo_params(fn, divergence, delta_low, delta_high, ratio_cap, log_ratio_clamp)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            keep, w = _dppo_token(float(logp[b, t]), float(old_logp[b, t]), A_t, *params)
            if not keep:
                continue
            grad[b, t] = _product(float(u[b, t]), _neg_A_times(A_t, w))  # u · (−A · w) (0 · inf := 0)
    return grad


# ----------------------------------------------------------------------------------------------
# loss.dro (spec v1.1)
# ----------------------------------------------------------------------------------------------


def _dro_params(fn, beta):
    if beta is None:
        raise ValueError(f"{fn}: beta: expected a number > 0 (DRO has no default beta), got None")
    return check_real(fn, "beta", beta, gt=0.0)


def dro_token_loss(logp, old_logp, advantages, mask, *, beta):
    """DRO: the policy-gradient surrogate with a quadratic penalty on the log-ratio.

    Spec: loss.dro (v1), added by spec v1.1
    Equation (valid t):
        d_t = logp_t − old_logp_t
        L_t = −( A_t · logp_t − ½ · β · d_t² )
    Source: DRO, the per-token objective log π·A − ½β·(log π/π_old)² of verl's ``dro`` policy loss and
        Tinker's ``dro`` loss, which cite Richemond et al., arXiv:2405.19107 (Direct Reward
        Optimisation) and Kimi k1.5, arXiv:2501.12599 (the squared log-ratio regulariser).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: β > 0 is required (no default; None or β <= 0 is a ValueError); on-policy (d = 0) it is
        ``loss.pg``; no clip, no ratio; ½·β·d² is evaluated as ((½·β)·d)·d, so it is inf only where the
        value itself exceeds the float64 range (not where d² alone would); masked positions 0.
    """
    fn = "dro_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    beta = _dro_params(fn, beta)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            logp_t = float(logp[b, t])
            d_t = logp_t - float(old_logp[b, t])
            penalty = 0.5 * beta * d_t * d_t  # ((½·β)·d)·d: no premature overflow of d²
            loss[b, t] = -(A_t * logp_t - penalty)
    return loss


def dro_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, beta):
    """Vector-Jacobian product of :func:`dro_token_loss`: dL/d logp [B, T].

    Spec: loss.dro (v1), added by spec v1.1, gradient (old_logp and advantages are constants).
    Derivative (∂d_t/∂logp_t = 1):
        ∂L_t/∂logp_t = −A_t + β · d_t,     dL/dlogp_t = u_t · (−A_t + β · d_t)
    Example: A = 1, β = 0.5, d = 0.4: −1 + 0.2 = −0.8.
    """
    fn = "dro_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    beta = _dro_params(fn, beta)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            d_t = float(logp[b, t]) - float(old_logp[b, t])
            grad[b, t] = _product(float(u[b, t]), -A_t + beta * d_t)
    return grad


# ----------------------------------------------------------------------------------------------
# loss.vespo (spec v1.1)
# ----------------------------------------------------------------------------------------------


def _vespo_params(fn, k_pos, lambda_pos, k_neg, lambda_neg, log_ratio_clamp, w_min, w_max):
    k_pos = check_real(fn, "k_pos", k_pos, ge=0.0)
    lambda_pos = check_real(fn, "lambda_pos", lambda_pos, gt=0.0)
    k_neg = check_real(fn, "k_neg", k_neg, ge=0.0)
    lambda_neg = check_real(fn, "lambda_neg", lambda_neg, gt=0.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    w_min = check_optional_real(fn, "w_min", w_min, gt=0.0)
    w_max = check_optional_real(fn, "w_max", w_max, gt=0.0)
    if w_min is not None and w_max is not None and w_min > w_max:
        raise ValueError(f"{fn}: w_min: expected w_min <= w_max, got {w_min!r} > {w_max!r}")
    return k_pos, lambda_pos, k_neg, lambda_neg, log_ratio_clamp, w_min, w_max


def _vespo_weights(logp, old_logp, A, mask, k_pos, lambda_pos, k_neg, lambda_neg, log_ratio_clamp, w_min, w_max):
    """φ[b, t]: the gamma weight of row b's sequence ratio, with token t's (k, λ)."""
    B, T = mask.shape
    phi = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        # S_b = Σ_t d_t over the row's valid tokens (each clipped first when log_ratio_clamp is set)
        S_b = 0.0
        for t in range(T):
            if mask[b, t]:
                d_t = float(logp[b, t]) - float(old_logp[b, t])
                if log_ratio_clamp is not None:
                    d_t = min(max(d_t, -log_ratio_clamp), log_ratio_clamp)
                S_b += d_t
        if w_min is not None:
            S_b = max(S_b, math.log(w_min))
        if w_max is not None:
            S_b = min(S_b, math.log(w_max))
        w_b = _exp(S_b)
        for t in range(T):
            if not mask[b, t]:
                continue
            A_t = _advantage_at(A, b, t)
            k, lam = (k_pos, lambda_pos) if A_t >= 0 else (k_neg, lambda_neg)
            log_phi = lam + k * S_b - lam * w_b  # -inf when w_b overflows: φ = 0
            phi[b, t] = _exp(log_phi)
    return phi


def vespo_token_loss(logp, old_logp, advantages, mask, *, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0,
                     log_ratio_clamp=None, w_min=None, w_max=None):
    """VESPO: REINFORCE weighted by a gamma function of the sequence importance ratio.

    Spec: loss.vespo (v1), added by spec v1.1
    Equation (valid t of row b):
        S_b = Σ_t d_t,  d_t = logp_t − old_logp_t (each clipped to ±log_ratio_clamp when set),
              S_b clipped to [log w_min, log w_max] when set;  w_b = e^(S_b)
        (k, λ) = (k_pos, λ_pos) if A_t ≥ 0 else (k_neg, λ_neg)
        φ_t = e^λ · w_b^k · e^(−λ·w_b) = exp(λ + k·S_b − λ·w_b)     (φ(1) = 1)
        L[b, t] = −sg(φ_t) · A_t · logp_t
    Source: TRL ``loss_type="vespo"`` (grpo_trainer.py ``get_gamma_weights``, "φ(w) = e^λ × w^k × e^{−λw}",
        defaults k± = 2/3, λ± = 3/2), the VESPO paper cited there.
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: on-policy (S_b = 0) φ = 1: REINFORCE; a sequence ratio that overflows gives φ = 0 (the
        gamma weight vanishes, computed in log space, never NaN); masked positions 0.
    """
    fn = "vespo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _vespo_params(fn, k_pos, lambda_pos, k_neg, lambda_neg, log_ratio_clamp, w_min, w_max)
    phi = _vespo_weights(logp, old_logp, A, mask, *params)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                loss[b, t] = _product(-phi[b, t] * _advantage_at(A, b, t), float(logp[b, t]))
    return loss


def vespo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, k_pos=2.0, lambda_pos=3.0, k_neg=3.0,
                          lambda_neg=2.0, log_ratio_clamp=None, w_min=None, w_max=None):
    """Vector-Jacobian product of :func:`vespo_token_loss`: dL/d logp [B, T].

    Spec: loss.vespo (v1), gradient: φ is a constant (sg), so dL_t/dlogp_t = −φ_t·A_t and nothing else.
    """
    fn = "vespo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    params = _vespo_params(fn, k_pos, lambda_pos, k_neg, lambda_neg, log_ratio_clamp, w_min, w_max)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    phi = _vespo_weights(logp, old_logp, A, mask, *params)
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if mask[b, t]:
                grad[b, t] = _product(float(u[b, t]), -phi[b, t] * _advantage_at(A, b, t))
    return grad
