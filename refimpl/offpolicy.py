"""Off-policy and asynchronous-training corrections (spec v1.1: ``offpolicy.is_weights``,
``offpolicy.rejection``, ``offpolicy.decoupled_ppo``, ``offpolicy.proximal``, ``offpolicy.opsm``).

Notation of api.md "Spec v1.1": ``δ = old_logp − rollout_logp`` at a valid token is log ρ,
ρ = π_old / π_rollout; ``n_b`` is the number of valid tokens of row ``b``.

Every output except the decoupled PPO loss is a constant of the loss: computed under
``torch.no_grad``, so no gradient reaches any input even when the inputs require one. Masked positions
are *selected* away (:func:`refimpl.masking.masked`) before any ``exp``, so NaN, ±inf or 1e30 there
never reach a valid output or a gradient. An ``exp`` that overflows gives ``inf`` (the exact value
rounded to the dtype, api.md "Numerical extremes"), which the bounds then truncate or mask.
Sequence-level results are per-row reductions (masked sums / maxima), broadcast back to the row's
valid tokens; nothing loops over rows or tokens.
"""

from __future__ import annotations

import math

import torch

from refimpl.policy_losses import _ppo_surrogate
from refimpl.masking import masked, masked_advantages, masked_output
from refimpl.validation import (
    check_advantages,
    check_bool,
    check_choice,
    check_finite,
    check_int,
    check_mask,
    check_optional_real,
    check_real,
    check_same_device,
    check_token_array,
    compute_dtypes,
)

__all__ = [
    "rollout_is_weights", "rollout_rejection_mask", "decoupled_ppo_token_loss",
    "proximal_logp_interpolation", "off_policy_sequence_mask",
]

IS_LEVELS = ("token", "sequence")
IS_SEQ_STATS = ("product", "geometric")
IS_MODES = ("none", "truncate", "mask")
REJECTION_STATISTICS = ("ratio", "k1", "k2", "k3")
REJECTION_LEVELS = ("token", "seq_sum", "seq_mean", "seq_max", "seq_all")
KL_OF = ("rollout_old", "old_rollout")
BEHAV_MODES = ("truncate", "mask")
PROXIMAL_METHODS = ("loglinear", "linear")

_BATCH_NORMALIZE_MIN = 1e-8  # verl: the mean weight is divided out only when it exceeds this


# ----------------------------------------------------------------------------------------------
# shared pieces
# ----------------------------------------------------------------------------------------------


def _bounds(fn: str, lo: object, hi: object, *, ratio: bool) -> tuple[float | None, float | None]:
    """Inclusive bounds ``lo <= s <= hi`` (None: no bound). A bound of a ratio must be > 0; ``lo > hi``
    is an empty interval (ValueError naming ``lo``)."""
    limits = {"gt": 0.0} if ratio else {}
    lo = check_optional_real(fn, "lo", lo, **limits)
    hi = check_optional_real(fn, "hi", hi, **limits)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{fn}: lo: expected a lower bound <= hi = {hi!r}, got {lo!r}")
    return lo, hi


def _in_bounds(s: torch.Tensor, lo: float | None, hi: float | None) -> torch.Tensor:
    """``lo <= s <= hi`` elementwise (a NaN is out of bounds)."""
    keep = torch.ones_like(s, dtype=torch.bool) if lo is None else s >= lo
    if hi is not None:
        keep = keep & (s <= hi)
    if lo is None and hi is None:
        keep = keep & ~torch.isnan(s)
    return keep


def _rollout_inputs(fn: str, old_logp: object, rollout_logp: object, mask: object):
    """Validated (mask, output dtype, δ = old_logp − rollout_logp with exact zeros at masked positions)."""
    m = check_mask(fn, mask)
    old_logp = check_token_array(fn, "old_logp", old_logp, m)
    rollout_logp = check_token_array(fn, "rollout_logp", rollout_logp, m)
    out_dtype, cdt = compute_dtypes(old_logp, rollout_logp)
    old, roll = masked(old_logp.detach(), m, cdt), masked(rollout_logp.detach(), m, cdt)
    check_finite(fn, ("old_logp", old_logp, m, old), ("rollout_logp", rollout_logp, m, roll))
    return m, out_dtype, old - roll


def _row_count(m: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """n_b as a [B] float, at least 1 (a row without valid tokens divides a zero sum)."""
    return m.sum(dim=1).clamp(min=1).to(dtype)


def _row_max(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Max of ``x`` over each row's valid positions, [B]; −inf for a row without valid tokens."""
    filled = torch.where(m, x, float("-inf"))
    if filled.shape[1] == 0:
        return filled.new_full(filled.shape[:1], float("-inf"))
    return filled.amax(dim=1)


def _rows_to_tokens(row_values: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """A per-row [B] value on every position of its row, [B, T] (masked by the caller)."""
    return row_values.unsqueeze(1).expand(m.shape)


# ----------------------------------------------------------------------------------------------
# offpolicy.is_weights
# ----------------------------------------------------------------------------------------------


def _is_weight(s: torch.Tensor, mode: str, lo: float | None, hi: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(w, log w) of the statistic ``s = log ρ``. ``w`` is the spec's weight of ρ = exp(s) (inf on
    overflow); ``log w`` is the same weight in log space (−inf for a masked-out weight), used only to
    normalise a batch whose mean weight overflowed."""
    rho = torch.exp(s)
    if mode == "none":
        return rho, s
    if mode == "truncate":
        if lo is None and hi is None:
            return rho, s
        log_lo = None if lo is None else math.log(lo)
        log_hi = None if hi is None else math.log(hi)
        return rho.clamp(min=lo, max=hi), s.clamp(min=log_lo, max=log_hi)
    keep = _in_bounds(rho, lo, hi)  # "mask": w = ρ inside [lo, hi], else 0
    return torch.where(keep, rho, 0.0), torch.where(keep, s, float("-inf"))


def _batch_normalized(w: torch.Tensor, log_w: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
    """``w / mean(w over units)`` when that mean exceeds 1e-8, else ``w`` (verl's batch normalisation).

    A mean that overflows the compute dtype (an infinite weight, or a sum of huge ones) is taken in
    log space, ``exp(log w − log mean)``, so the normalised weights are the exact values rounded
    (never ``inf / inf = NaN``). No host sync: both forms are selected by ``torch.where``."""
    count = units.sum().clamp(min=1).to(w.dtype)
    mean = torch.where(units, w, 0.0).sum() / count
    # log space about the largest log-weight (an exact 0 for it), so the normalised value is not
    # rounded at the magnitude of log w (e.g. 800) but at the magnitude of the result
    log_w = torch.where(units, log_w, float("-inf"))
    top = log_w.amax() if log_w.numel() else log_w.new_zeros(())
    rel = log_w - torch.where(torch.isfinite(top), top, 0.0)
    log_mean_rel = torch.exp(rel).sum().log() - count.log()
    scaled = torch.where(torch.isfinite(mean), w / mean, torch.exp(rel - log_mean_rel))
    return torch.where(mean > _BATCH_NORMALIZE_MIN, scaled, w)


@torch.no_grad()
def rollout_is_weights(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    level: str = "token",
    seq_stat: str = "product",
    mode: str = "truncate",
    lo: float | None = None,
    hi: float | None = 2.0,
    log_ratio_clamp: float | None = None,
    batch_normalize: bool = False,
) -> torch.Tensor:
    """Spec: offpolicy.is_weights. s = δ (token) or Σ_t m·δ ("product") / Σ_t m·δ / n_b ("geometric") per row,
    clipped to ±log_ratio_clamp; ρ = exp(s); w = ρ ("none"), min(max(ρ, lo), hi) ("truncate"), ρ·[lo ≤ ρ ≤ hi]
    ("mask"); optionally ÷ the batch mean weight (> 1e-8). A constant: no gradient."""
    fn = "rollout_is_weights"
    m, out_dtype, delta = _rollout_inputs(fn, old_logp, rollout_logp, mask)
    level = check_choice(fn, "level", level, IS_LEVELS)
    seq_stat = check_choice(fn, "seq_stat", seq_stat, IS_SEQ_STATS)
    mode = check_choice(fn, "mode", mode, IS_MODES)
    lo, hi = _bounds(fn, lo, hi, ratio=True)
    log_ratio_clamp = check_optional_real(fn, "log_ratio_clamp", log_ratio_clamp, gt=0.0)
    batch_normalize = check_bool(fn, "batch_normalize", batch_normalize)

    if level == "token":
        s, units = delta, m
    else:  # one statistic per row; masked terms of delta are exact zeros
        s = delta.sum(dim=1)
        if seq_stat == "geometric":
            s = s / _row_count(m, s.dtype)
        units = m.any(dim=1)
    if log_ratio_clamp is not None:
        s = s.clamp(-log_ratio_clamp, log_ratio_clamp)
    w, log_w = _is_weight(s, mode, lo, hi)
    if batch_normalize:
        w = _batch_normalized(w, log_w, units)
    if level == "sequence":
        w = _rows_to_tokens(w, m)
    return masked_output(w, m, out_dtype)


# ----------------------------------------------------------------------------------------------
# offpolicy.rejection
# ----------------------------------------------------------------------------------------------


def _rejection_statistic(delta: torch.Tensor, statistic: str, kl_of: str) -> torch.Tensor:
    """The per-token statistic: ρ = e^δ ("ratio"), or k1 = d, k2 = d²/2, k3 = e^(−d) − 1 + d of
    d = −δ ("rollout_old") or δ ("old_rollout"). For "ratio" the log-ratio δ itself (exponentiated by
    the caller, after any sequence sum or mean)."""
    if statistic == "ratio":
        return delta
    d = -delta if kl_of == "rollout_old" else delta
    if statistic == "k1":
        return d
    if statistic == "k2":
        return 0.5 * d * d
    return torch.expm1(-d) + d  # k3 (expm1: no cancellation near d = 0; inf where e^(−d) overflows)


@torch.no_grad()
def rollout_rejection_mask(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    statistic: str = "ratio",
    level: str = "token",
    lo: float | None = None,
    hi: float | None = None,
    kl_of: str = "rollout_old",
) -> torch.Tensor:
    """Spec: offpolicy.rejection. Keep (True) the valid tokens whose statistic (ρ = e^δ, or k1/k2/k3 of d) is in
    [lo, hi] ("token"), or whole rows by the sum / mean / max of their valid tokens' statistics ("seq_sum",
    "seq_mean", "seq_max"; for "ratio" the product and geometric mean of ρ) or by all of them ("seq_all")."""
    fn = "rollout_rejection_mask"
    m, _, delta = _rollout_inputs(fn, old_logp, rollout_logp, mask)
    statistic = check_choice(fn, "statistic", statistic, REJECTION_STATISTICS)
    level = check_choice(fn, "level", level, REJECTION_LEVELS)
    lo, hi = _bounds(fn, lo, hi, ratio=statistic == "ratio")
    kl_of = check_choice(fn, "kl_of", kl_of, KL_OF)

    x = _rejection_statistic(delta, statistic, kl_of)  # per token; log ρ for "ratio"
    to_value = torch.exp if statistic == "ratio" else (lambda v: v)
    if level == "token":
        keep = _in_bounds(to_value(x), lo, hi)
    elif level == "seq_all":
        token_ok = _in_bounds(to_value(x), lo, hi) | ~m
        keep = _rows_to_tokens(token_ok.all(dim=1), m)
    else:
        x = torch.where(m, x, 0.0)  # masked statistics are not read (k3 of a masked 0 is already 0)
        if level == "seq_max":
            row = _row_max(to_value(x), m)
        else:
            row = x.sum(dim=1)
            if level == "seq_mean":
                row = row / _row_count(m, row.dtype)
            row = to_value(row)
        keep = _rows_to_tokens(_in_bounds(row, lo, hi), m)
    return keep & m


# ----------------------------------------------------------------------------------------------
# offpolicy.decoupled_ppo
# ----------------------------------------------------------------------------------------------


class _ScaleGrad(torch.autograd.Function):
    """Identity in the forward pass; the backward multiplies the gradient by the constant ``w``, with
    ``0 · inf := 0`` (a zero gradient or a zero weight gives an exact 0, whatever the other factor)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(w)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        (w,) = ctx.saved_tensors
        return torch.where((g == 0) | (w == 0), 0.0, g * w), None


class _ScaleValue(torch.autograd.Function):
    """``w · x`` (``0 · inf := 0``) in the forward pass; the gradient passes unchanged (the factor ``w``
    is applied on the input side by :class:`_ScaleGrad`)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.where((w == 0) | (x == 0), 0.0, w * x)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        return g, None


_SAFE_LOG_F32 = 80.0  # e^±80 is well inside float32's normal range (e^88.7 overflows, e^−87.3 is subnormal)


def _extreme_factor(d: torch.Tensor, log_w: torch.Tensor, m: torch.Tensor, behav_cap: float | None,
                    behav_mode: str) -> bool:
    """True when a valid token's ratio r = e^d or (capped, not masked-out) behaviour weight w = e^log_w
    is beyond e^±80, so that w·r may not be the exact product rounded once in float32."""
    if behav_cap is not None:
        log_cap = math.log(behav_cap)
        if behav_mode == "truncate":
            log_w = log_w.clamp(max=log_cap)
        else:  # a weight above the cap is an exact 0
            log_w = torch.where(log_w <= log_cap, log_w, 0.0)
    return bool((m & ((d.abs() > _SAFE_LOG_F32) | (log_w.abs() > _SAFE_LOG_F32))).any())


def decoupled_ppo_token_loss(
    logp: torch.Tensor,
    prox_logp: torch.Tensor,
    behav_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    behav_cap: float | None = None,
    behav_mode: str = "truncate",
) -> torch.Tensor:
    """Spec: offpolicy.decoupled_ppo. L = sg(w)·PPO(r), r = exp(logp − prox_logp), w = exp(prox_logp − behav_logp)
    capped at behav_cap ("truncate": min(w, cap); "mask": w·[w ≤ cap]); PPO's clip, dual clip and ties; 0·inf := 0.
    Only logp receives a gradient (w times PPO's)."""
    fn = "decoupled_ppo_token_loss"
    m = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, m)
    prox_logp = check_token_array(fn, "prox_logp", prox_logp, m)
    behav_logp = check_token_array(fn, "behav_logp", behav_logp, m)
    adv = check_advantages(fn, advantages, m)
    eps_low = check_real(fn, "eps_low", eps_low, ge=0.0)
    eps_high = check_real(fn, "eps_high", eps_high, ge=0.0)
    dual_clip = check_optional_real(fn, "dual_clip", dual_clip, gt=1.0)
    behav_cap = check_optional_real(fn, "behav_cap", behav_cap, gt=0.0)
    behav_mode = check_choice(fn, "behav_mode", behav_mode, BEHAV_MODES)
    out_dtype, cdt = compute_dtypes(logp, prox_logp, behav_logp, adv)
    lp = masked(logp, m, cdt)
    prox = masked(prox_logp.detach(), m, cdt)
    behav = masked(behav_logp.detach(), m, cdt)
    A = masked_advantages(adv.detach(), m, cdt)
    items = [("logp", logp, m, lp), ("prox_logp", prox_logp, m, prox), ("behav_logp", behav_logp, m, behav)]
    if adv.dim() == 2:  # a [B] advantage was checked everywhere by check_advantages
        items.append(("advantages", adv, m, A))
    check_finite(fn, *items)
    if cdt == torch.float32 and _extreme_factor(lp.detach() - prox, prox - behav, m, behav_cap, behav_mode):
        # w·r = e^(logp − behav) can be in range while one factor over- or underflows float32 (w = e^−100,
        # r = e^100): the spec's value is the exact product rounded once, so compute in float64
        # (rare: only batches with a log-ratio beyond ±80 take this path)
        return decoupled_ppo_token_loss(
            logp.double(), prox_logp.double(), behav_logp.double(), adv.double(), m, eps_low=eps_low,
            eps_high=eps_high, dual_clip=dual_clip, behav_cap=behav_cap, behav_mode=behav_mode,
        ).to(out_dtype)

    with torch.no_grad():  # the behaviour weight is a constant
        w = torch.exp(prox - behav)  # inf on overflow
        if behav_cap is not None:
            w = w.clamp(max=behav_cap) if behav_mode == "truncate" else torch.where(w <= behav_cap, w, 0.0)
    # L = w·PPO(logp) with dL/dlogp = w·PPO'(logp). PPO acts position by position (its Jacobian in logp
    # is diagonal), so the factor w is applied to the gradient where it enters logp rather than where it
    # leaves the loss: PPO's backward then sees the finite upstream, and an infinite weight times a zero
    # PPO derivative (clipped branch, dual clip, A = 0) is an exact 0 instead of inf·0 = NaN inside it.
    L = _ppo_surrogate(_ScaleGrad.apply(lp, w) - prox, A, eps_low, eps_high, dual_clip)
    return masked_output(_ScaleValue.apply(L, w), m, out_dtype)


# ----------------------------------------------------------------------------------------------
# offpolicy.proximal
# ----------------------------------------------------------------------------------------------


def _check_versions(fn: str, value: object, m: torch.Tensor, version: int) -> torch.Tensor:
    """``behav_version`` [B] or [B, T]: an integer tensor with 0 <= v <= version at valid tokens (other
    positions are not read: AReaL's prompt tokens carry −1). Returns it as int64 [B, T], ``version`` at
    the positions that are not read."""
    name = "behav_version"
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{fn}: {name}: expected an integer torch.Tensor [B] or [B, T], got {type(value).__name__}")
    v = value.detach()
    if v.dtype == torch.bool or v.is_floating_point() or v.is_complex():
        raise TypeError(f"{fn}: {name}: expected an integer tensor [B] or [B, T], got dtype {v.dtype}")
    if v.dim() == 1:
        if v.shape[0] != m.shape[0]:
            raise ValueError(f"{fn}: {name}: expected shape ({m.shape[0]},) ([B] of mask), got {tuple(v.shape)}")
        v = v.unsqueeze(1).expand(m.shape)
    elif v.dim() == 2:
        if v.shape != m.shape:
            raise ValueError(
                f"{fn}: {name}: expected shape {tuple(m.shape)} ([B, T] of mask), got {tuple(v.shape)}"
            )
    else:
        raise ValueError(f"{fn}: {name}: expected 1-D [B] or 2-D [B, T], got shape {tuple(v.shape)}")
    check_same_device(fn, name, v, m)
    bad = m & ((v < 0) | (v > version))
    if bool(bad.any()):
        b, t = (int(i) for i in bad.nonzero()[0])
        at = f"({b},)" if value.dim() == 1 else f"({b}, {t})"
        raise ValueError(
            f"{fn}: {name}: expected integers 0 <= v <= version={version} at valid (mask=True) positions, "
            f"got {int(v[b, t])} at {at}"
        )
    return torch.where(m, v.to(torch.int64), version)


@torch.no_grad()
def proximal_logp_interpolation(
    logp: torch.Tensor,
    behav_logp: torch.Tensor,
    behav_version: torch.Tensor,
    mask: torch.Tensor,
    *,
    version: int,
    method: str = "loglinear",
) -> torch.Tensor:
    """Spec: offpolicy.proximal. α = clip((version − 1 − v)/(version − v), 0, 1) (0 when version − v ≤ 0);
    "loglinear": behav + α·(logp − behav); "linear": log((1 − α)·e^behav + α·e^logp). A constant: no gradient."""
    fn = "proximal_logp_interpolation"
    m = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, m)
    behav_logp = check_token_array(fn, "behav_logp", behav_logp, m)
    version = check_int(fn, "version", version, ge=0)
    v = _check_versions(fn, behav_version, m, version)
    method = check_choice(fn, "method", method, PROXIMAL_METHODS)
    out_dtype, cdt = compute_dtypes(logp, behav_logp)
    lp, behav = masked(logp, m, cdt), masked(behav_logp, m, cdt)
    check_finite(fn, ("logp", logp, m, lp), ("behav_logp", behav_logp, m, behav))

    lag = version - v  # exact integers, >= 0 (0 at positions that are not read)
    alpha = torch.where(lag > 0, (lag - 1).to(cdt) / lag.clamp(min=1).to(cdt), 0.0).clamp(0.0, 1.0)
    if method == "loglinear":
        out = behav + alpha * (lp - behav)
    else:  # log((1 − α)e^behav + α·e^logp) as a log-sum-exp: no overflow, log 0 = −inf drops a term
        out = torch.logaddexp(torch.log1p(-alpha) + behav, torch.log(alpha) + lp)
    return masked_output(out, m, out_dtype)


# ----------------------------------------------------------------------------------------------
# offpolicy.opsm
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def off_policy_sequence_mask(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    threshold: float,
) -> torch.Tensor:
    """Spec: offpolicy.opsm. D_b = Σ_t m·(old_logp − logp)/n_b; a valid token is kept (True) when its advantage
    is ≥ 0 or D_b ≤ threshold. A constant: no gradient."""
    fn = "off_policy_sequence_mask"
    m = check_mask(fn, mask)
    logp = check_token_array(fn, "logp", logp, m)
    old_logp = check_token_array(fn, "old_logp", old_logp, m)
    adv = check_advantages(fn, advantages, m)
    threshold = check_real(fn, "threshold", threshold)
    _, cdt = compute_dtypes(logp, old_logp, adv)
    lp, old = masked(logp, m, cdt), masked(old_logp, m, cdt)
    A = masked_advantages(adv, m, cdt)
    items = [("logp", logp, m, lp), ("old_logp", old_logp, m, old)]
    if adv.dim() == 2:
        items.append(("advantages", adv, m, A))
    check_finite(fn, *items)

    D = (old - lp).sum(dim=1) / _row_count(m, cdt)
    return ((A >= 0) | _rows_to_tokens(D <= threshold, m)) & m
