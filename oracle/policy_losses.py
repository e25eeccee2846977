"""Per-token policy losses and their gradients w.r.t. ``logp`` (``loss.pg``, ``loss.ppo``, ``loss.gspo``, ``loss.cispo``).

Every loss returns a [B, T] array; the scalar objective is ``aggregate(loss, mask, mode=...)``.
``advantages`` may be [B] (the sequence's advantage on every valid token) or [B, T].

Branch rule: ``max(unclipped, clipped)`` (and the dual clip's ``min``) pick the unclipped branch on a
tie, and its gradient is the one used. A clipped branch that is strictly selected is a constant in
``logp``, so its gradient is exactly 0.

``A · ratio`` with A = 0 is taken as 0 even if the ratio overflowed to inf (a zero advantage
contributes nothing), so a huge log-ratio at a token with A = 0 never produces NaN.
"""

from __future__ import annotations

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
    "pg_token_loss",
    "pg_token_loss_grad",
    "ppo_token_loss",
    "ppo_token_loss_grad",
    "gspo_token_loss",
    "gspo_token_loss_grad",
    "cispo_token_loss",
    "cispo_token_loss_grad",
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


def _cispo_params(fn, eps_low, eps_high, bound):
    eps_low = check_optional_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    bound = check_choice(fn, "bound", bound, ("relative", "absolute"))
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


def cispo_token_loss(logp, old_logp, advantages, mask, *, eps_low=None, eps_high=0.28, bound="relative"):
    """CISPO: REINFORCE with a clipped, stop-gradient importance-sampling weight.

    Spec: loss.cispo (v1)
    Equation (valid t):
        r_t = exp(logp_t − old_logp_t)
        w_t = clip(r_t, lo, hi),  hi = 1 + ε_high ("relative") or ε_high ("absolute", TRL's ε_max),
                                  lo = 1 − ε_low, or no lower bound when ε_low is None
        L_t = −sg(w_t) · A_t · logp_t
    Source: MiniMax-M1, arXiv:2506.13585, eqs. (4)-(5) (CISPO).
    Shapes: logp, old_logp [B, T], advantages [B] or [B, T], mask [B, T] -> [B, T] float64.
    Edge cases: unlike PPO the token keeps a gradient when r is clipped (only the weight is capped);
        ε_low, ε_high >= 0 and the upper bound must not be below the lower bound.
    """
    fn = "cispo_token_loss"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    low, high = _cispo_params(fn, eps_low, eps_high, bound)
    B, T = mask.shape
    loss = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            w_t = _cispo_weight(logp[b, t], old_logp[b, t], low, high)
            A_t = _advantage_at(A, b, t)
            loss[b, t] = -w_t * A_t * logp[b, t]
    return loss


def cispo_token_loss_grad(logp, old_logp, advantages, mask, upstream, *, eps_low=None, eps_high=0.28,
                          bound="relative"):
    """Vector-Jacobian product of :func:`cispo_token_loss`: dL/d logp [B, T].

    Spec: loss.cispo (v1), gradient.
    Derivative (w_t is a stop-gradient constant):
        ∂L_t/∂logp_t = −w_t · A_t,    dL/dlogp_t = u_t · (−w_t · A_t)
    Examples (A = 1, ε_high = 0.28): r = 1.1 -> −1.1; r = 2.0 -> −1.28 (not 0 as in PPO).
    """
    fn = "cispo_token_loss_grad"
    logp, old_logp, A, mask = _policy_inputs(fn, logp, old_logp, advantages, mask)
    low, high = _cispo_params(fn, eps_low, eps_high, bound)
    u = to_float64(check_token_upstream(fn, upstream, mask))
    B, T = mask.shape
    grad = np.zeros((B, T), dtype=np.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            w_t = _cispo_weight(logp[b, t], old_logp[b, t], low, high)
            A_t = _advantage_at(A, b, t)
            grad[b, t] = u[b, t] * (-w_t * A_t)
    return grad
