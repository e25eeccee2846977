"""Per-token policy losses (spec ids ``loss.pg``, ``loss.ppo``, ``loss.gspo``, ``loss.cispo``; spec v1.1
``loss.sapo``, ``loss.gmpo``, ``loss.dppo``, ``loss.dro``, ``loss.vespo``).

Ties between a clipped and an unclipped branch go to the unclipped one: every ``max``/``min`` is a
``torch.where`` on ``>=``/``<=`` that keeps the unclipped branch on equality, so autograd takes its
gradient. Ratios are :func:`refimpl.masking.exp_zero_safe` of the log-ratio: an overflowing ratio is
``inf`` (the true value rounded, api.md "Numerical extremes"), and on an unselected branch or times a zero
advantage it passes an exact 0 gradient, never ``0·inf = NaN``.
"""

from __future__ import annotations

import math

import torch

from refimpl.masking import capped_exp_arg, exp_zero_safe, masked, masked_advantages, masked_output
from refimpl.validation import (
    check_advantages,
    check_choice,
    check_clip_interval,
    check_finite,
    check_mask,
    check_optional_real,
    check_real,
    check_token_array,
    compute_dtypes,
)

__all__ = [
    "pg_token_loss", "ppo_token_loss", "gspo_token_loss", "cispo_token_loss",
    "sapo_token_loss", "gmpo_token_loss", "dppo_token_loss", "dro_token_loss", "vespo_token_loss",
]


def _policy_inputs(fn: str, logp: object, old_logp: object | None, advantages: object, mask: object, *, with_old: bool = True):
    """Validated (mask, output dtype, masked logp, masked old_logp or None, masked [B, T] advantages).
    `with_old=False` (pg_token_loss): no old_logp argument; otherwise old_logp is required (None is a
    TypeError naming it, not a crash in the arithmetic)."""
    m = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, m)
    tensors = [logp]
    if with_old:
        old_logp = check_token_array(fn, "old_logp", old_logp, m)
        tensors.append(old_logp)
    adv = check_advantages(fn, advantages, m)
    out_dtype, cdt = compute_dtypes(*tensors, adv)
    lp = masked(logp, m, cdt)
    old = None if old_logp is None else masked(old_logp, m, cdt)
    A = masked_advantages(adv, m, cdt)
    items = [("logp", logp, m, lp)]
    if old is not None:
        items.append(("old_logp", old_logp, m, old))
    if adv.dim() == 2:  # a [B] advantage was checked everywhere by check_advantages
        items.append(("advantages", adv, m, A))
    check_finite(fn, *items)
    return m, out_dtype, lp, old, A


def _ppo_inputs(fn: str, logp: object, old_logp: object, advantages: object, mask: object, eps_low: object,
                eps_high: object, dual_clip: object, log_ratio_clamp: object):
    """``_policy_inputs`` and the PPO keywords, validated: (mask, output dtype, the log-ratio
    logp − old_logp clamped to ±log_ratio_clamp if set, masked advantages, eps_low, eps_high, dual_clip)."""
    m, out_dtype, lp, old, A = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    dual_clip = check_optional_real(fn, "dual_clip", dual_clip, gt=1.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    d = lp - old
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    return m, out_dtype, d, A, eps_low, eps_high, dual_clip


def _clipped_surrogate(ratio: torch.Tensor, A: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """max(−A·r, −A·clip(r, 1−eps_low, 1+eps_high)); a tie keeps the unclipped −A·r."""
    unclipped = -A * ratio
    clipped = -A * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return torch.where(unclipped >= clipped, unclipped, clipped)


def _ppo_surrogate(d: torch.Tensor, A: torch.Tensor, eps_low: float, eps_high: float, dual_clip: float | None) -> torch.Tensor:
    """PPO's token loss of the (masked, clamped) log-ratio ``d``: the clipped surrogate of r = e^d, then
    min(·, −c·A) for A < 0 with dual_clip c; ties to the unclipped branch, 0·inf := 0 (shared by
    ``ppo_token_loss`` and ``refimpl.offpolicy.decoupled_ppo_token_loss``)."""
    L = _clipped_surrogate(exp_zero_safe(d), A, eps_low, eps_high)
    if dual_clip is not None:
        cap = -dual_clip * A
        L = torch.where((A < 0) & (L > cap), cap, L)
    return L


def pg_token_loss(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Spec: loss.pg. L = −A·logp at valid tokens."""
    m, out_dtype, lp, _, A = _policy_inputs("pg_token_loss", logp, None, advantages, mask, with_old=False)
    return masked_output(-A * lp, m, out_dtype)


def ppo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Spec: loss.ppo. max(−A·r, −A·clip(r, 1−ε_l, 1+ε_h)), then min(·, −c·A) for A < 0 with dual_clip c; ties to the unclipped branch."""
    m, out_dtype, d, A, eps_low, eps_high, dual_clip = _ppo_inputs(
        "ppo_token_loss", logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, log_ratio_clamp
    )
    return masked_output(_ppo_surrogate(d, A, eps_low, eps_high, dual_clip), m, out_dtype)


def gspo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    form: str = "sequence",
) -> torch.Tensor:
    """Spec: loss.gspo. s_b = exp(masked mean of logp − old); every valid token carries max(−A·s, −A·clip(s)); "token_sg": value s_b, gradient s_b·[u=t]."""
    fn = "gspo_token_loss"
    m, out_dtype, lp, old, A = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    form = check_choice(fn, "form", form, ("sequence", "token_sg"))
    n = m.sum(dim=1, keepdim=True).clamp(min=1).to(lp.dtype)
    log_s = (lp - old).sum(dim=1, keepdim=True) / n  # masked mean: masked terms are exact zeros
    if form == "sequence":
        ratio = exp_zero_safe(log_s).expand(m.shape)
    else:  # logp − sg(logp) is exactly 0: value s_b, gradient s_b·[u = t]
        ratio = exp_zero_safe(lp - lp.detach() + log_s.detach())
    return masked_output(_clipped_surrogate(ratio, A, eps_low, eps_high), m, out_dtype)


def cispo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float | None = None,
    eps_high: float = 0.28,
    bound: str = "relative",
    surrogate: str = "logp",
) -> torch.Tensor:
    """Spec: loss.cispo. L = −sg(clip(r, lo, hi))·A·logp ("logp") or −clip(r, lo, hi)·A with the clip on the
    graph ("ratio", torchrl); hi = 1+ε_h ("relative") or ε_h ("absolute"), lo = 1−ε_l or none."""
    fn = "cispo_token_loss"
    m, out_dtype, lp, old, A = _policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low = check_optional_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    bound = check_choice(fn, "bound", bound, ("relative", "absolute"))
    surrogate = check_choice(fn, "surrogate", surrogate, ("logp", "ratio"))
    low = None if eps_low is None else 1.0 - eps_low
    high = 1.0 + eps_high if bound == "relative" else eps_high
    check_clip_interval(fn, low, high, bound)
    if surrogate == "ratio":
        return masked_output(-torch.exp(capped_exp_arg(lp - old)).clamp(min=low, max=high) * A, m, out_dtype)
    with torch.no_grad():
        weight = torch.exp(capped_exp_arg(lp - old)).clamp(min=low, max=high)
    return masked_output(-weight * A * lp, m, out_dtype)


# ----------------------------------------------------------------------------------------------
# spec v1.1: policy losses of 2025-26 (api.md "Spec v1.1: policy losses of 2025-26")
#
# ``old_logp`` and the advantages are constants of these losses (detached): only ``logp`` gets a
# gradient. Where a float32 computation could round a factor to 0 or inf although the spec's product
# is in range (a ratio beyond e^±80), the batch is recomputed in float64 and rounded once, as
# ``refimpl.offpolicy.decoupled_ppo_token_loss`` does (rare: only such batches take that path).
# ----------------------------------------------------------------------------------------------

_SAFE_LOG_F32 = 80.0  # e^±80 is well inside float32's normal range (e^88.7 overflows, e^−87.3 is subnormal)


def _constant_policy_inputs(fn: str, logp: object, old_logp: object, advantages: object, mask: object):
    """``_policy_inputs`` with ``old_logp`` and the advantages detached (constants of the loss):
    (mask, output dtype, compute dtype, masked logp, masked old_logp, masked [B, T] advantages)."""
    m, out_dtype, lp, old, A = _policy_inputs(fn, logp, old_logp, advantages, mask)
    return m, out_dtype, lp.dtype, lp, old.detach(), A.detach()


class _SapoGate(torch.autograd.Function):
    """SAPO's gate ``(4/τ)·σ(τ·(e^d − 1))`` of the log-ratio ``d`` (``τ`` a constant tensor), with the
    gradient ``4·σ(1−σ)·e^d`` evaluated as ``4·exp(d + log σ(x) + log σ(−x))``, ``x = τ·(e^d − 1)``:
    exact where ``σ(1−σ)`` or ``e^d`` alone would under- or overflow (``e^d = inf`` saturates σ: the
    gradient is 0, never ``0·inf``); a zero incoming gradient gives an exact 0."""

    @staticmethod
    def forward(ctx, d: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x = tau * torch.expm1(d)  # r − 1 without cancellation near r = 1; inf when r overflows
        ctx.save_for_backward(d, x)
        return (4.0 / tau) * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        d, x = ctx.saved_tensors
        logsig = torch.nn.functional.logsigmoid
        slope = 4.0 * torch.exp(d + logsig(x) + logsig(-x))
        return torch.where(g == 0, 0.0, g * slope), None


class _TimesConstant(torch.autograd.Function):
    """``c·x`` for a constant ``c`` (no gradient to it), with ``0·inf := 0`` in the value (a zero ``c``
    or ``x``) and in the gradient ``g·c`` (a zero ``g`` or ``c``)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(c)
        return torch.where((c == 0) | (x == 0), 0.0, c * x)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (c,) = ctx.saved_tensors
        return torch.where((g == 0) | (c == 0), 0.0, g * c), None


def sapo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Spec: loss.sapo. L = −A·(4/τ)·σ(τ·(r − 1)), τ = tau_pos where A > 0 else tau_neg, r = e^d (d clamped to
    ±log_ratio_clamp if set); gradient −A·4·σ(1−σ)·r (0 where the clamp binds; 0, not NaN, where r overflows)."""
    fn = "sapo_token_loss"
    m, out_dtype, _, lp, old, A = _constant_policy_inputs(fn, logp, old_logp, advantages, mask)
    tau_pos = check_real(fn, "tau_pos", tau_pos, gt=0.0)
    tau_neg = check_real(fn, "tau_neg", tau_neg, gt=0.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    d = lp - old
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    tau = torch.full_like(A, tau_neg).masked_fill_(A > 0, tau_pos)
    gate = _SapoGate.apply(d, tau)  # in (0, 4/τ]: finite for every finite d
    return masked_output(torch.where(A == 0, 0.0, -A * gate), m, out_dtype)


def gmpo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.4,
    eps_high: float = 0.4,
) -> torch.Tensor:
    """Spec: loss.gmpo. s_t = sgn(A)·min(sgn(A)·d, sgn(A)·clip(d, −ε_l, ε_h)) (A > 0: min(d, ε_h); A < 0:
    max(d, −ε_l); A = 0: 0), ρ_b = exp(masked mean of s), Ā_b = masked mean of A; every valid token carries
    −Ā_b·ρ_b. The gradient flows through ρ_b (ρ_b/n_b per unclipped token, 0 per clipped one); ties unclipped."""
    fn = "gmpo_token_loss"
    m, out_dtype, cdt, lp, old, A = _constant_policy_inputs(fn, logp, old_logp, advantages, mask)
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    d = lp - old
    # clamp passes the gradient on its bounds (ties to the unclipped branch); A = 0 (and every masked
    # position) is the constant 0: the sign factor sgn(A) = 0
    s = torch.where(A > 0, d.clamp(max=eps_high), torch.where(A < 0, d.clamp(min=-eps_low), 0.0))
    n = m.sum(dim=1, keepdim=True)
    nf = n.clamp(min=1).to(cdt)
    log_rho = s.sum(dim=1, keepdim=True) / nf
    if advantages.dim() == 1:  # a [B] advantage is its own row mean, exactly
        A_bar = advantages.detach().to(cdt).unsqueeze(1)
    else:
        A_bar = A.sum(dim=1, keepdim=True) / nf
    if cdt == torch.float32 and bool(((n > 0) & (A_bar != 0) & (log_rho.detach().abs() > _SAFE_LOG_F32)).any()):
        # Ā·ρ can be in range while ρ = e^(>80) overflows or underflows float32: the exact product, rounded once
        return gmpo_token_loss(logp.double(), old_logp.double(), advantages.double(), m,
                               eps_low=eps_low, eps_high=eps_high).to(out_dtype)
    rho = exp_zero_safe(log_rho)  # inf on overflow; an exact 0 gradient where Ā = 0
    L = torch.where(A_bar == 0, 0.0, -A_bar * rho)  # 0·inf := 0
    return masked_output(L.expand(m.shape), m, out_dtype)


def _prob_difference(lp: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """p − p_old = ±e^max(logp, old_logp)·(1 − e^−|logp − old_logp|): the same number, but exact (with
    its sign) where e^logp or e^old_logp alone under- or overflows; 0 at logp = old_logp."""
    magnitude = torch.exp(torch.maximum(lp, old) + torch.log(-torch.expm1(-(lp - old).abs())))
    return torch.where(lp > old, magnitude, -magnitude)


def _binary_kl(old: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
    """D = p_old·log(p_old/p) + (1 − p_old)·log((1 − p_old)/(1 − p)) from log-probabilities, with
    0·log 0 := 0 (p_old = 1) and D = inf at p = 1 > p_old. A positive log-prob (not a probability) has no
    binary KL: D := inf, outside every trust region (only the p-vs-p_old clause can keep the token)."""
    q_bar = -torch.expm1(old)  # 1 − p_old, exact near p_old = 1
    p_bar = -torch.expm1(lp)  # 1 − p (0 at p = 1: log gives −inf, D = +inf)
    first = torch.exp(old) * (old - lp)
    second = torch.where(q_bar == 0, 0.0, q_bar * (torch.log(q_bar) - torch.log(p_bar)))
    return torch.where((lp > 0) | (old > 0), torch.inf, first + second)


def dppo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    divergence: str = "tv",
    delta_low: float = 0.2,
    delta_high: float = 0.2,
    ratio_cap: float | None = None,
    log_ratio_clamp: float | None = None,
) -> torch.Tensor:
    """Spec: loss.dppo. keep (constant): "tv": A > 0 and p − p_old ≤ δ_h, or A ≤ 0 and p − p_old ≥ −δ_l; "kl":
    A > 0 and (D ≤ δ_h or p ≤ p_old), or A ≤ 0 and (D ≤ δ_l or p ≥ p_old), D the binary KL.
    L = −A·sg(min(r, ratio_cap))·logp·keep, r = e^d (d clamped if set); gradient −A·sg(min(r, cap))·keep; 0·inf := 0."""
    fn = "dppo_token_loss"
    m, out_dtype, cdt, lp, old, A = _constant_policy_inputs(fn, logp, old_logp, advantages, mask)
    divergence = check_choice(fn, "divergence", divergence, ("tv", "kl"))
    delta_low = check_real(fn, "delta_low", delta_low, ge=0.0)
    delta_high = check_real(fn, "delta_high", delta_high, ge=0.0)
    ratio_cap = check_optional_real(fn, "ratio_cap", ratio_cap, gt=0.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    with torch.no_grad():  # the keep mask and the ratio are constants
        lp_c = lp.detach()
        pos = A > 0
        if divergence == "tv":
            diff = _prob_difference(lp_c, old)
            keep = torch.where(pos, diff <= delta_high, diff >= -delta_low)
        else:
            D = _binary_kl(old, lp_c)  # p ≤ p_old ⇔ logp ≤ old_logp: compared exactly in log space
            keep = torch.where(pos, (D <= delta_high) | (lp_c <= old), (D <= delta_low) | (lp_c >= old))
        active = m & keep & (A != 0)
        d = lp_c - old
        if log_ratio_clamp is not None:
            d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
        log_w = d if ratio_cap is None else d.clamp(max=math.log(ratio_cap))
        extreme = cdt == torch.float32 and bool((active & (log_w.abs() > _SAFE_LOG_F32)).any())
        if not extreme:
            r = torch.exp(d)  # inf on overflow
            w = r if ratio_cap is None else r.clamp(max=ratio_cap)
            c = torch.where(active, -A * w, 0.0)  # −A·sg(min(r, cap))·keep, 0·inf := 0
    if extreme:  # A·w·logp can be in range while w = e^(>80) overflows (or e^(<−80) underflows) float32
        return dppo_token_loss(logp.double(), old_logp.double(), advantages.double(), m, divergence=divergence,
                               delta_low=delta_low, delta_high=delta_high, ratio_cap=ratio_cap,
                               log_ratio_clamp=log_ratio_clamp).to(out_dtype)
    return masked_output(_TimesConstant.apply(lp, c), m, out_dtype)  # value c·logp, gradient c


def dro_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float,
) -> torch.Tensor:
    """Spec: loss.dro. L = −(A·logp − ½·β·d²), d = logp − old_logp; gradient −A + β·d; β > 0 required."""
    fn = "dro_token_loss"
    m, out_dtype, cdt, lp, old, A = _constant_policy_inputs(fn, logp, old_logp, advantages, mask)
    if beta is None:
        raise ValueError(f"{fn}: beta: expected a number > 0 (beta is required: there is no default), got None")
    beta = check_real(fn, "beta", beta, gt=0.0)
    d = lp - old
    L = (0.5 * beta * d) * d - A * lp  # ½β·d² as (½β·d)·d: in range wherever the product is
    if cdt == torch.float32 and bool(torch.isnan(L.detach()).any()):
        # inf − inf: both terms beyond float32 (|d| > 2.6e19 and |A·logp| > 3.4e38) at a token; the
        # exact difference, rounded once
        return dro_token_loss(logp.double(), old_logp.double(), advantages.double(), m, beta=beta).to(out_dtype)
    return masked_output(L, m, out_dtype)


def vespo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
    log_ratio_clamp: float | None = None,
    w_min: float | None = None,
    w_max: float | None = None,
) -> torch.Tensor:
    """Spec: loss.vespo. L = −sg(φ)·A·logp with φ = exp(λ + k·S − λ·e^S), S = Σ_t m·d_t per row (clamped),
    (k, λ) by the sign of A (A ≥ 0: the positive pair); φ is a constant, so the gradient is −φ·A."""
    fn = "vespo_token_loss"
    m, out_dtype, cdt, lp, old, A = _constant_policy_inputs(fn, logp, old_logp, advantages, mask)
    k_pos = check_real(fn, "k_pos", k_pos, ge=0.0)
    lambda_pos = check_real(fn, "lambda_pos", lambda_pos, gt=0.0)
    k_neg = check_real(fn, "k_neg", k_neg, ge=0.0)
    lambda_neg = check_real(fn, "lambda_neg", lambda_neg, gt=0.0)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    w_min = check_optional_real(fn, "w_min", w_min, gt=0.0)
    w_max = check_optional_real(fn, "w_max", w_max, gt=0.0)
    if w_min is not None and w_max is not None and w_min > w_max:
        raise ValueError(f"{fn}: w_min: expected w_min <= w_max, got {w_min!r} > {w_max!r}")
    with torch.no_grad():
        # the row sum and the weight in float64 ([B, T], cheap): a sum of large log-ratios of both signs
        # cancels, and φ = exp(…) turns its float32 rounding into a relative error of k·|Σd|·2^-24
        d = lp.detach().double() - old.double()
        if log_ratio_clamp is not None:
            d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
        S = torch.where(m, d, 0.0).sum(dim=1, keepdim=True)
        if w_min is not None or w_max is not None:
            S = S.clamp(min=None if w_min is None else math.log(w_min), max=None if w_max is None else math.log(w_max))
        nonneg = A >= 0
        k = torch.where(nonneg, k_pos, k_neg).double()
        lam = torch.where(nonneg, lambda_pos, lambda_neg).double()
        # log φ = λ + k·S − λ·e^S: −inf (φ = 0) where e^S overflows; k·S = 0 when k = 0 whatever S
        log_phi = lam + torch.where(k == 0, 0.0, k * S) - lam * torch.exp(S)
        coefficient = (torch.exp(log_phi) * A.double()).to(cdt)  # φ·A, a constant
    loss = torch.where(coefficient == 0, 0.0, -coefficient * lp)  # 0 · inf := 0
    return masked_output(loss, m, out_dtype)
