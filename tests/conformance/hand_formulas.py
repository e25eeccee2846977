"""Independent vectorised readings of api.md, used only to cross-check the stored (oracle) values.

The oracle produces every golden file; these formulas were written separately from the spec text
(NumPy, whole-array, no loops where avoidable) so that a misreading shared by the oracle and refimpl
shows up as a disagreement in `tests/conformance/test_vectors.py`. They are not part of the
suite's contract and never write a file. `HAND[function](args, kwargs)` returns the outputs as a
tuple; `HAND_GRAD[function](args, kwargs, upstream)` returns dL/d(grad args) as a tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _zero_masked(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.where(m, x, 0.0)


def _clean(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`x` with masked positions replaced by 0 so that NaN/inf never enter arithmetic."""
    return np.where(m, x, 0.0)


def _read_rows(m: np.ndarray) -> np.ndarray:
    """read[b, s]: position s predicts a valid token s + 1."""
    read = np.zeros_like(m)
    read[:, :-1] = m[:, 1:]
    return read


def _log_softmax(z: np.ndarray) -> np.ndarray:
    zmax = z.max(axis=-1, keepdims=True)
    return z - zmax - np.log(np.exp(z - zmax).sum(axis=-1, keepdims=True))


def _shifted_logits(logits: np.ndarray, m: np.ndarray, tau: float) -> np.ndarray:
    """[B, T, V]: at position t the (temperature-scaled) logits of position t - 1 (0 where unread)."""
    z = np.where(_read_rows(m)[:, :, None], logits, 0.0) / tau
    out = np.zeros_like(z)
    out[:, 1:] = z[:, :-1]
    return out


def token_logprobs(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    lsm = _log_softmax(_shifted_logits(a["logits"], m, kw.get("temperature", 1.0)))
    ids = np.where(m, a["input_ids"], 0)
    return (_zero_masked(m, np.take_along_axis(lsm, ids[:, :, None], axis=-1)[..., 0]),)


def token_entropy(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    lsm = _log_softmax(_shifted_logits(a["logits"], m, kw.get("temperature", 1.0)))
    return (_zero_masked(m, -(np.exp(lsm) * lsm).sum(axis=-1)),)


def _logits_from_hidden(a: dict[str, Any]) -> dict[str, Any]:
    read = _read_rows(a["mask"])[:, :, None]
    return {**a, "logits": np.where(read, a["hidden"], 0.0) @ a["weight"].T}


def token_logprobs_from_hidden(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return token_logprobs(_logits_from_hidden(a), kw)


def token_entropy_from_hidden(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return token_entropy(_logits_from_hidden(a), kw)


def reinforce_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    r = a["rewards"]
    return (r - r.mean() if kw.get("baseline", "none") == "batch_mean" else r.copy(),)


def rloo_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    G = a["group_size"]
    r = a["rewards"].reshape(-1, G)
    if G == 1:  # singleton "raw" (spec v1.1, verl's loop rloo): no baseline
        return (r.ravel().copy() if kw.get("singleton", "zero") == "raw" else np.zeros(r.size),)
    return (((r - (r.sum(axis=1, keepdims=True) - r) / (G - 1))).ravel(),)


def _std(x: np.ndarray, ddof: int, axis: Any = None) -> np.ndarray:
    n = x.shape[-1] if axis == 1 else x.size
    if n - ddof <= 0:
        return np.zeros(x.shape[0]) if axis == 1 else np.float64(0.0)
    return np.sqrt(((x - x.mean(axis=axis, keepdims=True)) ** 2).sum(axis=axis) / (n - ddof))


def grpo_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    G = a["group_size"]
    r = a["rewards"]
    scale, ddof = kw.get("scale", "group"), kw.get("std_ddof", 1)
    eps, singleton = kw.get("eps", 1e-6), kw.get("singleton", "zero")
    if G == 1:  # "raw" (verl): mean 0, std 1 for a size-1 group
        if singleton == "zero":
            return (np.zeros_like(r),)
        if scale == "none":
            return (r.copy(),)
        den = 1.0 + eps if scale == "group" else _std(r, ddof) + eps
        return (r / den if den > 0 else np.zeros_like(r),)
    g = r.reshape(-1, G)
    num = g - g.mean(axis=1, keepdims=True)
    if scale == "none":
        return (num.ravel(),)
    den = _std(g, ddof, axis=1)[:, None] + eps if scale == "group" else _std(r, ddof) + eps
    den = np.broadcast_to(den, num.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0).ravel(),)


def _kl(logp: np.ndarray, ref: np.ndarray, m: np.ndarray, kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(k, dk/dlogp) at valid positions."""
    d = _clean(m, logp) - _clean(m, ref)
    lrc, clamp, est = kw.get("log_ratio_clamp"), kw.get("clamp"), kw.get("estimator", "k1")
    dd = np.ones_like(d)
    if lrc is not None:
        dd = np.where(np.abs(d) < lrc, 1.0, 0.0)
        d = np.clip(d, -lrc, lrc)
    k = {"k1": d, "k2": d * d / 2, "k3": np.expm1(-d) + d}[est]
    dk = {"k1": np.ones_like(d), "k2": d, "k3": -np.expm1(-d)}[est] * dd
    if clamp is not None:
        dk = np.where(np.abs(k) < clamp, dk, 0.0)
        k = np.clip(k, -clamp, clamp)
    return _zero_masked(m, k), _zero_masked(m, dk)


def kl_penalty(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_kl(a["logp"], a["ref_logp"], a["mask"], kw)[0],)


def rlhf_token_rewards(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    out = -kw["kl_coef"] * _kl(a["logp"], a["ref_logp"], m, kw)[0]
    for b in range(m.shape[0]):
        valid = np.flatnonzero(m[b])
        if valid.size:
            out[b, valid[-1]] += a["scores"][b]
    return (_zero_masked(m, out),)


def gae(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    gamma, lam = kw.get("gamma", 1.0), kw.get("lam", 1.0)
    adv = np.zeros(m.shape)
    for b in range(m.shape[0]):
        valid = np.flatnonzero(m[b])
        r, v = a["token_rewards"][b, valid], a["values"][b, valid]
        v_next = np.append(v[1:], 0.0)
        delta = r + gamma * v_next - v
        running = 0.0
        for k in range(valid.size - 1, -1, -1):
            running = delta[k] + gamma * lam * running
            adv[b, valid[k]] = running
    return adv, _zero_masked(m, adv + _clean(m, a["values"]))


def whiten(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    x = a["x"][m]
    if x.size == 0:
        return (np.zeros(m.shape),)
    mu = x.mean()
    ddof = kw.get("std_ddof", 1)
    var = ((x - mu) ** 2).sum() / (x.size - ddof) if x.size - ddof > 0 else 0.0
    den = np.sqrt(var + kw.get("eps", 1e-8))
    z = (_clean(m, a["x"]) - mu) / den if den > 0 else np.zeros(m.shape)
    return (_zero_masked(m, z if kw.get("shift_mean", True) else z + mu),)


def _exp(x: np.ndarray) -> np.ndarray:
    """exp that may overflow to inf (a finite but huge log-ratio is a valid input)."""
    with np.errstate(over="ignore"):
        return np.exp(x)


def _times_neg_A(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """-A * x with 0 where A = 0, even for x = inf."""
    return np.where(A == 0, 0.0, -A * np.where(A == 0, 0.0, x))


def _adv(a: dict[str, Any]) -> np.ndarray:
    A = a["advantages"]
    A = np.broadcast_to(A[:, None], a["mask"].shape) if A.ndim == 1 else A
    return _clean(a["mask"], A)


def pg_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    return (_zero_masked(m, -_adv(a) * _clean(m, a["logp"])),)


def _ppo(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(loss, dloss/dlogp) of PPO."""
    m, A = a["mask"], _adv(a)
    d = _clean(m, a["logp"]) - _clean(m, a["old_logp"])
    lrc = kw.get("log_ratio_clamp")
    dd = np.ones_like(d) if lrc is None else np.where(np.abs(d) < lrc, 1.0, 0.0)
    r = _exp(d if lrc is None else np.clip(d, -lrc, lrc))
    lo, hi = 1 - kw.get("eps_low", 0.2), 1 + kw.get("eps_high", 0.2)
    unclipped, clipped = _times_neg_A(A, r), _times_neg_A(A, np.clip(r, lo, hi))
    loss = np.maximum(unclipped, clipped)
    grad = np.where(unclipped >= clipped, _times_neg_A(A, r) * dd, 0.0)  # ties: the unclipped branch
    c = kw.get("dual_clip")
    if c is not None:
        capped = (A < 0) & (-c * A < loss)
        loss = np.where(capped, -c * A, loss)
        grad = np.where(capped, 0.0, grad)
    return _zero_masked(m, loss), _zero_masked(m, grad)


def ppo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_ppo(a, kw)[0],)


def _gspo(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(loss, s [B,1], n [B,1], dL_t/ds per token)."""
    m, A = a["mask"], _adv(a)
    d = _clean(m, a["logp"]) - _clean(m, a["old_logp"])
    n = m.sum(axis=1, keepdims=True)
    s = _exp(d.sum(axis=1, keepdims=True) / np.maximum(n, 1))
    lo, hi = 1 - kw.get("eps_low", 3e-4), 1 + kw.get("eps_high", 4e-4)
    unclipped, clipped = _times_neg_A(A, s), _times_neg_A(A, np.clip(s, lo, hi))
    loss = np.maximum(unclipped, clipped)
    dl_ds = np.where(unclipped >= clipped, -A, 0.0)
    return _zero_masked(m, loss), s, n, _zero_masked(m, dl_ds)


def gspo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_gspo(a, kw)[0],)


def _cispo_weight(a: dict[str, Any], kw: dict[str, Any]) -> np.ndarray:
    m = a["mask"]
    r = _exp(_clean(m, a["logp"]) - _clean(m, a["old_logp"]))
    eps_low, eps_high = kw.get("eps_low"), kw.get("eps_high", 0.28)
    hi = 1 + eps_high if kw.get("bound", "relative") == "relative" else eps_high
    return np.clip(r, None if eps_low is None else 1 - eps_low, hi)


def cispo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    if kw.get("surrogate", "logp") == "ratio":  # torchrl: -clip(r)·A
        return (_zero_masked(m, -_cispo_weight(a, kw) * _adv(a)),)
    return (_zero_masked(m, -_cispo_weight(a, kw) * _adv(a) * _clean(m, a["logp"])),)


def _cispo_grad(a: dict[str, Any], kw: dict[str, Any], u: np.ndarray) -> tuple[np.ndarray, ...]:
    """−w·A·u, or for the "ratio" surrogate −r·A·u where the clip is inactive (0 where it is active)."""
    m, A, u = a["mask"], _adv(a), _clean(a["mask"], u)
    w = _cispo_weight(a, kw)
    if kw.get("surrogate", "logp") == "ratio":
        r = _exp(_clean(m, a["logp"]) - _clean(m, a["old_logp"]))
        return (_zero_masked(m, np.where(w == r, -r * A * u, 0.0)),)
    return (_zero_masked(m, -w * A * u),)


def _value(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m = a["mask"]
    V, Vold, R = (_clean(m, a[k]) for k in ("values", "old_values", "returns"))
    c = kw.get("clip")
    if c is None:
        return _zero_masked(m, 0.5 * (V - R) ** 2), _zero_masked(m, V - R)
    Vc = Vold + np.clip(V - Vold, -c, c)
    un, cl = (V - R) ** 2, (Vc - R) ** 2
    return _zero_masked(m, 0.5 * np.maximum(un, cl)), _zero_masked(m, np.where(un >= cl, V - R, 0.0))


def value_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_value(a, kw)[0],)


def _agg_weights(a: dict[str, Any], kw: dict[str, Any]) -> np.ndarray:
    m = a["mask"]
    mode = kw["mode"]
    n = m.sum(axis=1, keepdims=True).astype(np.float64)
    N = kw.get("num_tokens") or n.sum()
    S = kw.get("num_seqs") or m.shape[0]
    w = {
        "token_mean": np.full(m.shape, 1.0 / N if N else 0.0),
        "seq_mean_token_mean": np.broadcast_to(np.where(n > 0, 1.0 / (S * np.maximum(n, 1)), 0.0), m.shape),
        "seq_mean_token_sum": np.full(m.shape, 1.0 / S),
        "seq_mean_token_sum_norm": np.full(m.shape, 1.0 / (S * (kw.get("norm_length") or 1))),
        "token_sum": np.ones(m.shape),
    }[mode]
    return _zero_masked(m, w)


def aggregate(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    return (float((_agg_weights(a, kw) * _clean(a["mask"], a["token_loss"])).sum()),)


def ppo_clipped_mask(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m, A = a["mask"], _adv(a)
    d = _clean(m, a["logp"]) - _clean(m, a["old_logp"])
    lrc = kw.get("log_ratio_clamp")
    r = _exp(d if lrc is None else np.clip(d, -lrc, lrc))
    lo, hi = 1 - kw.get("eps_low", 0.2), 1 + kw.get("eps_high", 0.2)
    clipped = ((A > 0) & (r > hi)) | ((A < 0) & (r < lo))
    if kw.get("dual_clip") is not None:
        clipped |= (A < 0) & (r > kw["dual_clip"])
    return (_zero_masked(m, clipped.astype(np.float64)),)


def _policy(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, np.ndarray]:
    """(loss, dloss/dlogp) of the composite: aggregate(ppo + beta * kl)."""
    m = a["mask"]
    ppo_loss, ppo_grad = _ppo(a, kw)
    k, dk = _kl(a["logp"], a["ref_logp"], m, {"estimator": kw.get("kl_estimator", "k3")})
    beta = kw.get("kl_coef", 0.0)
    agg_kw = {"mode": kw.get("mode", "token_mean"), "norm_length": kw.get("norm_length"),
              "num_tokens": kw.get("num_tokens"), "num_seqs": kw.get("num_seqs")}
    w = _agg_weights({"mask": m}, agg_kw)
    return float((w * (ppo_loss + beta * k)).sum()), w * (ppo_grad + beta * dk)


def policy_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    return (_policy(a, kw)[0],)


# spec v1.1 (api.md "Spec v1.1"): delta = old_logp - rollout_logp


def _row_sum(m: np.ndarray, x: np.ndarray) -> np.ndarray:
    return _clean(m, x).sum(axis=1, keepdims=True)


def _in_bounds(x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    keep = np.ones(x.shape, dtype=bool)
    if lo is not None:
        keep &= x >= lo
    if hi is not None:
        keep &= x <= hi
    return keep


def rollout_is_weights(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    delta = _clean(m, a["old_logp"]) - _clean(m, a["rollout_logp"])
    n = m.sum(axis=1, keepdims=True)
    if kw.get("level", "token") == "token":
        s = delta
    else:
        total = _row_sum(m, delta)
        s = np.broadcast_to(total if kw.get("seq_stat", "product") == "product" else total / np.maximum(n, 1), m.shape)
    c = kw.get("log_ratio_clamp")
    rho = _exp(s if c is None else np.clip(s, -c, c))
    lo, hi, mode = kw.get("lo"), kw.get("hi", 2.0), kw.get("mode", "truncate")
    if mode == "truncate":
        w = np.minimum(np.maximum(rho, -np.inf if lo is None else lo), np.inf if hi is None else hi)
    elif mode == "mask":
        w = np.where(_in_bounds(rho, lo, hi), rho, 0.0)
    else:
        w = rho
    w = _zero_masked(m, w)
    if kw.get("batch_normalize", False):
        rows = n[:, 0] > 0
        mean = w.sum() / max(m.sum(), 1) if kw.get("level", "token") == "token" else w.max(axis=1)[rows].sum() / max(rows.sum(), 1)
        w = w / mean if mean > 1e-8 else w
    return (w,)


def rollout_rejection_mask(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    delta = _clean(m, a["old_logp"]) - _clean(m, a["rollout_logp"])
    d = -delta if kw.get("kl_of", "rollout_old") == "rollout_old" else delta
    statistic, level = kw.get("statistic", "ratio"), kw.get("level", "token")
    per_token = {"ratio": delta, "k1": d, "k2": d * d / 2, "k3": _exp(-d) - 1 + d}[statistic]
    n = m.sum(axis=1, keepdims=True)
    if level in ("token", "seq_all"):
        stat = per_token
    elif level == "seq_max":
        stat = np.broadcast_to(np.where(m, per_token, -np.inf).max(axis=1, keepdims=True), m.shape)
    else:
        total = _row_sum(m, per_token)
        stat = np.broadcast_to(total if level == "seq_sum" else total / np.maximum(n, 1), m.shape)
    if statistic == "ratio":
        stat = _exp(stat)
    keep = _in_bounds(stat, kw.get("lo"), kw.get("hi")) & m
    if level == "seq_all":
        keep = np.broadcast_to((keep | ~m).all(axis=1, keepdims=True), m.shape) & m
    return (keep,)


def _decoupled(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m = a["mask"]
    w = _exp(_clean(m, a["prox_logp"]) - _clean(m, a["behav_logp"]))
    cap = kw.get("behav_cap")
    if cap is not None:
        w = np.minimum(w, cap) if kw.get("behav_mode", "truncate") == "truncate" else np.where(w <= cap, w, 0.0)
    loss, grad = _ppo({**a, "old_logp": a["prox_logp"]}, kw)
    return _zero_masked(m, _times_neg_A(-w, loss)), _zero_masked(m, _times_neg_A(-w, grad))


def decoupled_ppo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_decoupled(a, kw)[0],)


def proximal_logp_interpolation(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m, v = a["mask"], kw["version"]
    vb = a["behav_version"]
    vb = np.broadcast_to(vb[:, None], m.shape) if vb.ndim == 1 else vb
    gap = v - vb.astype(np.float64)
    alpha = np.clip(np.where(gap > 0, (gap - 1) / np.where(gap > 0, gap, 1.0), 0.0), 0.0, 1.0)
    lp, blp = _clean(m, a["logp"]), _clean(m, a["behav_logp"])
    if kw.get("method", "loglinear") == "loglinear":
        out = blp + alpha * (lp - blp)
    else:
        out = np.log((1 - alpha) * np.exp(blp) + alpha * np.exp(lp))
    return (_zero_masked(m, out),)


def off_policy_sequence_mask(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    D = _row_sum(m, _clean(m, a["old_logp"]) - _clean(m, a["logp"])) / np.maximum(m.sum(axis=1, keepdims=True), 1)
    return ((_adv(a) >= 0) | (D <= kw["threshold"])) & m,


def _corrected(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, np.ndarray]:
    """(loss, dloss/dlogp) of corrected_policy_loss: the weighted, kept policy term plus the KL,
    aggregated over the counted tokens."""
    m = a["mask"]
    keep = np.asarray(a["keep_mask"], dtype=bool) & m
    counted = keep if kw.get("rejected", "drop") == "drop" else m
    coef = np.where(keep, _clean(m, a["is_weights"]), 0.0)
    kl_scale = kw.get("kl_coef", 0.0) * (_clean(m, a["is_weights"]) if kw.get("weight_kl", False) else 1.0)
    ppo_loss, ppo_grad = _ppo(a, kw)
    k, dk = _kl(a["logp"], a["ref_logp"], m, {"estimator": kw.get("kl_estimator", "k3")})
    agg_kw = {"mode": kw.get("mode", "token_mean"), "norm_length": kw.get("norm_length"),
              "num_tokens": kw.get("num_tokens"), "num_seqs": kw.get("num_seqs")}
    weights = _agg_weights({"mask": counted}, agg_kw)
    token = _clean(counted, _times_neg_A(-coef, ppo_loss) + kl_scale * k)
    grad = _clean(counted, _times_neg_A(-coef, ppo_grad) + kl_scale * dk)
    return float((weights * token).sum()), weights * grad


def corrected_policy_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    return (_corrected(a, kw)[0],)


# spec v1.1 policy losses (api.md "Spec v1.1: policy losses of 2025-26")


def _log_ratio(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(d clipped to +-log_ratio_clamp, dd/dlogp: 0 where the clamp binds)."""
    m = a["mask"]
    d = _clean(m, a["logp"]) - _clean(m, a["old_logp"])
    c = kw.get("log_ratio_clamp")
    if c is None:
        return d, np.ones_like(d)
    return np.clip(d, -c, c), np.where(np.abs(d) < c, 1.0, 0.0)


def _sapo(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m, A = a["mask"], _adv(a)
    d, dd = _log_ratio(a, kw)
    tau = np.where(A > 0, kw.get("tau_pos", 1.0), kw.get("tau_neg", 1.05))
    with np.errstate(over="ignore"):
        r = np.exp(d)
        x = tau * (r - 1)
        sig = 1 / (1 + np.exp(-x))
        one_minus = 1 / (1 + np.exp(x))
    slope = sig * one_minus * np.where(np.isinf(r), 0.0, r)  # a saturated gate has no slope
    return _zero_masked(m, _times_neg_A(A, 4 / tau * sig)), _zero_masked(m, _times_neg_A(A, 4 * slope * dd))


def sapo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_sapo(a, kw)[0],)


def gmpo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m, A = a["mask"], _adv(a)
    d = _clean(m, a["logp"]) - _clean(m, a["old_logp"])
    sign = np.sign(A)
    s = sign * np.minimum(sign * d, sign * np.clip(d, -kw.get("eps_low", 0.4), kw.get("eps_high", 0.4)))
    n = np.maximum(m.sum(axis=1, keepdims=True), 1)
    rho = np.exp(_clean(m, s).sum(axis=1, keepdims=True) / n)
    A_bar = A.sum(axis=1, keepdims=True) / n
    return (_zero_masked(m, np.broadcast_to(-A_bar * rho, m.shape)),)


def _dppo(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m, A = a["mask"], _adv(a)
    lp, old = _clean(m, a["logp"]), _clean(m, a["old_logp"])
    d, _ = _log_ratio(a, kw)
    p, q = np.exp(lp), np.exp(old)
    lo, hi = kw.get("delta_low", 0.2), kw.get("delta_high", 0.2)
    if kw.get("divergence", "tv") == "tv":
        keep = np.where(A > 0, p - q <= hi, p - q >= -lo)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = q * (old - lp) + (1 - q) * (np.log1p(-q) - np.log1p(-p))
        keep = np.where(A > 0, (kl <= hi) | (p <= q), (kl <= lo) | (p >= q))
    cap = kw.get("ratio_cap")
    with np.errstate(over="ignore"):
        w = np.exp(d) if cap is None else np.minimum(np.exp(d), cap)
    coef = np.where(keep & m, w, 0.0)
    return _zero_masked(m, _times_neg_A(A, _times_neg_A(-coef, lp))), _zero_masked(m, _times_neg_A(A, coef))


def dppo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_dppo(a, kw)[0],)


def _dro(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m, A, beta = a["mask"], _adv(a), kw["beta"]
    lp = _clean(m, a["logp"])
    d = lp - _clean(m, a["old_logp"])
    return _zero_masked(m, -(A * lp - 0.5 * beta * d * d)), _zero_masked(m, -A + beta * d)


def dro_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_dro(a, kw)[0],)


def _vespo(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m, A = a["mask"], _adv(a)
    d, _ = _log_ratio(a, kw)
    S = _clean(m, d).sum(axis=1, keepdims=True)
    lo = -np.inf if kw.get("w_min") is None else np.log(kw["w_min"])
    hi = np.inf if kw.get("w_max") is None else np.log(kw["w_max"])
    S = np.clip(S, lo, hi)
    pos = A >= 0
    k = np.where(pos, kw.get("k_pos", 2.0), kw.get("k_neg", 3.0))
    lam = np.where(pos, kw.get("lambda_pos", 3.0), kw.get("lambda_neg", 2.0))
    with np.errstate(over="ignore"):
        phi = np.exp(lam + k * S - lam * np.exp(S))
    coef = _times_neg_A(A, phi)  # -A·phi
    return _zero_masked(m, _times_neg_A(-coef, _clean(m, a["logp"]))), _zero_masked(m, coef)


def vespo_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_vespo(a, kw)[0],)


def _covariance(a: dict[str, Any]) -> np.ndarray:
    """(A - mean A)(logp - mean logp), both means over every valid token of the batch (0 where masked)."""
    m = a["mask"]
    A, lp = _adv(a), _clean(m, a["logp"])
    N = max(int(m.sum()), 1)
    return _zero_masked(m, (A - A.sum() / N) * (lp - lp.sum() / N))


def _first_n(eligible: np.ndarray, key: np.ndarray, n: int) -> np.ndarray:
    """The n eligible positions of smallest key, equal keys in row-major order (np.lexsort, flat index last)."""
    flat = np.flatnonzero(eligible)
    chosen = np.zeros(eligible.size, dtype=bool)
    chosen[flat[np.lexsort((flat, key.ravel()[flat]))][:n]] = True
    return chosen.reshape(eligible.shape)


def clip_cov_mask(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    A = _adv(a)
    r = _exp(_clean(m, a["logp"]) - _clean(m, a["old_logp"]))
    clipped = ((A > 0) & (r > 1 + kw.get("eps_high", 0.2))) | ((A < 0) & (r < 1 - kw.get("eps_low", 0.2)))
    cov = _covariance(a)
    candidates = m & ~clipped & (cov > kw.get("cov_low", 1.0)) & (cov < kw.get("cov_high", 5.0))
    n = max(1, int(np.floor(kw.get("fraction", 2e-4) * m.sum())))
    return (m & ~_first_n(candidates, _clean(m, a["draws"]), n),)


def _kl_cov(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    m, A = a["mask"], _adv(a)
    d, _ = _log_ratio(a, {})
    n = max(1, int(np.floor(kw.get("fraction", 2e-4) * m.sum())))
    selected = _first_n(m, -_covariance(a), n)
    coef = kw.get("coef", 0.1)
    pg = _times_neg_A(A, _exp(d))
    loss = pg + np.where(selected, coef * np.abs(d), 0.0)
    return _zero_masked(m, loss), _zero_masked(m, pg + np.where(selected, coef * np.sign(d), 0.0))


def kl_cov_token_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_kl_cov(a, kw)[0],)


def _kl_loss(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """kl.loss: (value, dvalue/dlogp) at valid positions, from the table of kl.loss.md."""
    m = a["mask"]
    d = _clean(m, a["logp"]) - _clean(m, a["ref_logp"])
    lrc, clamp, est = kw.get("log_ratio_clamp"), kw.get("clamp"), kw.get("estimator", "k3")
    gradient, cap = kw.get("gradient", "estimator"), kw.get("weight_cap", 10.0)
    dc = d if lrc is None else np.clip(d, -lrc, lrc)
    live = np.ones_like(d, dtype=bool) if lrc is None else np.abs(d) <= lrc  # the clips pass the gradient
    with np.errstate(over="ignore"):
        k = {"k1": dc, "k2": dc * dc / 2, "k3": np.expm1(-dc) + dc, "abs": np.abs(dc)}[est]
        dk = {"k1": np.ones_like(dc), "k2": dc, "k3": -np.expm1(-dc), "abs": np.sign(dc)}[est]
    if clamp is not None:
        live &= np.abs(k) <= clamp
        k = np.clip(k, -clamp, clamp)
    dk = np.where(live, dk, 0.0)
    if gradient in ("unbiased", "bias_corrected"):
        with np.errstate(over="ignore"):
            r = np.exp(_clean(m, a["logp"]) - _clean(m, a["old_logp"]))
    if gradient == "estimator":
        value, grad = k, dk
    elif gradient == "straight_through":
        value, grad = k, d
    elif gradient == "unbiased":
        value, grad = k, _times(r if cap is None else np.minimum(r, cap), d)
    else:  # K r, gradient r (dK + K) = r d for an unclipped k3
        value, grad = _times(k, r), _times(r, np.where(live, d if est == "k3" else dk + k, k))
    return _zero_masked(m, value), _zero_masked(m, grad)


def _times(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b with 0 * inf := 0 (no invalid-value warning)."""
    zero = (a == 0) | (b == 0)
    return np.where(zero, 0.0, np.where(zero, 1.0, a) * np.where(zero, 1.0, b))


def kl_loss_term(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return (_kl_loss(a, kw)[0],)


def entropy_top_mask(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Keep mask ∧ H ≥ numpy's linear quantile of the pool (the valid entropies, or pooled_entropy)."""
    m = a["mask"]
    H = _clean(m, a["entropy"])
    pooled = kw.get("pooled_entropy")
    pool = H[m] if pooled is None else np.asarray(pooled, dtype=np.float64)
    if pool.size == 0:
        return (np.zeros(m.shape),)
    tau = np.quantile(pool, 1.0 - kw.get("rho", 1.0), method="linear")
    return (np.where(m & (H >= tau), 1.0, 0.0),)


def entropy_bonus(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    return (-kw["entropy_coef"] * aggregate({"token_loss": a["entropy"], "mask": a["mask"]}, kw)[0],)


def kl_controller_update(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    error = np.clip(a["current_kl"] / kw["target"] - 1.0, -0.2, 0.2)
    return (a["kl_coef"] * (1.0 + error * a["n_steps"] / kw["horizon"]),)


def entropy_coef_update(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    c, delta = a["coef"], kw.get("delta", 0.005)
    if a["current_entropy"] <= kw.get("target", 0.2):
        return (np.minimum(c + delta, kw.get("coef_max", 1.0)),)
    return (np.maximum(c - delta, kw.get("coef_min", 0.0)),)


def entropy_coef_applied(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    return (a["coef"] if a["last_entropy"] <= kw.get("target", 0.2) else 0.0,)


def overlong_penalty(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """-factor times the fraction of the buffer used, min(max(L - L_start, 0) / buffer, 1) (no cap for
    beyond='linear'); buffer 0 is the step at max_length."""
    L = a["lengths"].astype(np.float64)
    L_max, buf, f = kw["max_length"], kw["buffer"], kw.get("factor", 1.0)
    if buf == 0:
        return (np.where(L > L_max, -f, 0.0),)
    used = np.maximum(L - (L_max - buf), 0.0) / buf
    if kw.get("beyond", "floor") == "floor":
        used = np.minimum(used, 1.0)
    return (-f * used + 0.0,)


def shaped_rewards(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    r, t = a["rewards"], a["truncated"].astype(bool)
    value = kw.get("truncated_value")
    rule = np.full_like(r, value) if value is not None else kw.get("truncated_scale", 1.0) * r
    out = np.where(t, rule + kw.get("truncated_shift", 0.0), r)
    lo, hi = kw.get("clip_low"), kw.get("clip_high")
    return (np.clip(out, -np.inf if lo is None else lo, np.inf if hi is None else hi),)


# spec v1.1 advantage estimators: group statistics about each group's first member (an all-equal group
# is exactly 0), zero denominators give 0


def _div0(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    den = np.broadcast_to(den, np.broadcast(num, den).shape)
    return np.where(den == 0, 0.0, num / np.where(den == 0, 1.0, den))


def _dev(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """x minus its mean along ``axis``, exact zeros for all-equal slices."""
    c = x - np.take(x, [0], axis=axis)
    return c - c.mean(axis=axis, keepdims=True)


def _sd(dev: np.ndarray, ddof: int, axis: int = -1) -> np.ndarray:
    n = dev.shape[axis]
    if n - ddof <= 0:
        return np.zeros(np.delete(dev.shape, axis if axis >= 0 else dev.ndim + axis))
    return np.sqrt((dev ** 2).sum(axis=axis) / (n - ddof))


def _token_whiten(x: np.ndarray, m: np.ndarray, ddof: int, eps: float) -> np.ndarray:
    v = x[m]
    if v.size == 0:
        return np.zeros(m.shape)
    d = _dev(v)
    den = np.sqrt((d ** 2).sum() / (v.size - ddof) + eps) if v.size - ddof > 0 else np.sqrt(eps)
    out = np.zeros(m.shape)
    out[m] = _div0(d, np.float64(den))
    return out


def reinforce_pp_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m, r = a["mask"], a["token_rewards"]
    gamma, gap = kw.get("gamma", 1.0), kw.get("gap", "skip")
    G = np.zeros(m.shape)
    for b in range(m.shape[0]):
        v = np.flatnonzero(m[b])
        k = np.arange(v.size)
        steps = (k[None, :] - k[:, None]) if gap == "skip" else (v[None, :] - v[:, None])  # [from, to]
        keep = steps >= 0
        if gap == "reset":  # only a contiguous stretch of valid positions carries the return
            keep &= (v[None, :] - v[:, None]) == (k[None, :] - k[:, None])
        weights = np.where(keep, float(gamma) ** np.maximum(steps, 0), 0.0)
        G[b, v] = weights @ r[b, v]
    return _token_whiten(G, m, kw.get("std_ddof", 1), kw.get("eps", 1e-8)), G


def _group_dev(r: np.ndarray, G: int, singleton: str) -> np.ndarray:
    """r − group mean (G = 1, "raw": r itself)."""
    if G == 1 and singleton == "raw":
        return r.copy()
    return _dev(r.reshape(-1, G)).ravel()


def reinforce_pp_baseline_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m, ddof = a["mask"], kw.get("std_ddof", 1)
    dev = _group_dev(a["rewards"], a["group_size"], kw.get("singleton", "zero"))
    if kw.get("level", "token") == "token":
        return (_token_whiten(np.where(m, dev[:, None], 0.0), m, ddof, kw.get("eps", 1e-8)),)
    z = _div0(_dev(dev), _sd(_dev(dev), ddof) + kw.get("eps", 1e-8))
    return (np.where(m, z[:, None], 0.0),)


def remax_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    G = a["group_size"]
    return ((a["rewards"].reshape(-1, G) - a["greedy_rewards"][:, None]).ravel(),)


def opo_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    G, r = a["group_size"], a["rewards"]
    if G == 1 and kw.get("singleton", "zero") == "raw":
        return (r.copy(),)
    rg, lg = r.reshape(-1, G), a["mask"].sum(axis=1).reshape(-1, G).astype(np.float64)
    total = lg.sum(axis=1, keepdims=True)
    baseline = _div0((lg * rg).sum(axis=1, keepdims=True), total)
    return (np.where(total > 0, rg - baseline, 0.0).ravel(),)


def grpo_passk_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    G = a["group_size"]
    g = a["rewards"].reshape(-1, G)
    first = np.argmax(g, axis=1)  # numpy's argmax returns the first maximum
    onehot = np.arange(G)[None, :] == first[:, None]
    margin = g.max(axis=1) - np.where(onehot, -np.inf, g).max(axis=1)
    if kw.get("scale", "group") == "group":
        margin = _div0(margin, _sd(_dev(g), kw.get("std_ddof", 1)) + kw.get("eps", 1e-6))
    return (np.where(onehot, margin[:, None], 0.0).ravel(),)


def gdpo_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    r, G = a["rewards"], a["group_size"]
    B, K = r.shape
    ddof, eps = kw.get("std_ddof", 1), kw.get("eps", 1e-6)
    w = np.ones(K) if kw.get("reward_weights") is None else np.asarray(kw["reward_weights"], dtype=np.float64)
    x = r.reshape(-1, G, K)
    if G == 1:
        z = x / (1.0 + eps) if kw.get("singleton", "zero") == "raw" else np.zeros_like(x)
    else:
        z = _div0(_dev(x, axis=1), _sd(_dev(x, axis=1), ddof, axis=1)[:, None, :] + eps)
    s = (z * w).sum(axis=2).ravel()
    if not kw.get("batch_normalize", True):
        return (s,)
    return (_div0(_dev(s), _sd(_dev(s), ddof) + eps),)


def maxrl_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    G, r = a["group_size"], a["rewards"]
    if G == 1 and kw.get("singleton", "zero") == "raw":
        return (r.copy(),)
    g = r.reshape(-1, G)
    return (_div0(_dev(g), g.mean(axis=1, keepdims=True) + kw.get("eps", 1e-6)).ravel(),)


def gpg_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    r, G = a["rewards"], a["group_size"]
    if kw.get("alpha", "groups") == "groups":  # members of groups whose max equals their min
        grouped = r.reshape(-1, G)
        no_signal = G * int(np.sum(grouped.max(axis=1) == grouped.min(axis=1)))
    else:
        no_signal = r.size - np.count_nonzero(r)
    alpha = r.size / (r.size - no_signal) if no_signal < r.size else 1.0
    return (alpha * _group_dev(r, G, kw.get("singleton", "zero")),)


def optimal_token_baseline_advantages(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Every token placed on its aligned step by a one-hot [B, T, U] tensor; the group's sums of G·W and W
    per step by einsum; the zero tail from the sorted extents of each group."""
    m, G, eps = a["mask"], a["group_size"], kw.get("eps", 0.0)
    B, T = m.shape
    returns = np.where(m, np.cumsum(_clean(m, a["token_rewards"])[:, ::-1], axis=1)[:, ::-1], 0.0)
    w = 1.0 - 2.0 * np.exp(_clean(m, a["old_logp"])) + _clean(m, a["sum_pi_squared"])
    if a.get("is_weights") is not None:
        w = w * _clean(m, a["is_weights"]) ** 2
    W = np.where(m, np.cumsum(_clean(m, w), axis=1), 0.0)
    position = kw.get("align", "position") == "position"
    step = np.broadcast_to(np.arange(T), (B, T)) if position else np.cumsum(m, axis=1) - 1
    onehot = ((step[:, :, None] == np.arange(T)) & m[:, :, None]).astype(np.float64)  # [B, T, U]
    num = np.einsum("btu,bt->bu", onehot, returns * W).reshape(-1, G, T).sum(axis=1)
    den = np.einsum("btu,bt->bu", onehot, W).reshape(-1, G, T).sum(axis=1) + eps
    per_step = np.repeat(_div0(num, den), G, axis=0) if G > 1 else np.zeros((B, T))
    baseline = np.einsum("btu,bu->bt", onehot, per_step)
    if kw.get("zero_tail", True) and G > 1:
        count_rule = kw.get("tail_length", "extent") == "count"
        last = np.where(m.any(axis=1), T - np.argmax(m[:, ::-1], axis=1), 0)
        extent = (last if position and not count_rule else m.sum(axis=1)).reshape(-1, G)
        ordered = np.sort(extent, axis=1)
        cut = ordered[:, -2].copy()
        if position and count_rule:
            cut += np.where(m.any(axis=1), np.argmax(m, axis=1), T).reshape(-1, G).min(axis=1)
        alone = (np.arange(G) == np.argmax(extent, axis=1)[:, None]) & (ordered[:, -1] > ordered[:, -2])[:, None]
        tail = alone.reshape(B, 1) & m & (step >= np.repeat(cut, G)[:, None])
        baseline = np.where(tail, 0.0, baseline)
    return np.where(m, returns - baseline, 0.0), returns


def _kept(logits: np.ndarray, m: np.ndarray, kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(a, keep) at every position t, both [B, T, V]: a = z[t-1] / τ and the sampler's kept support, read
    from api.md's rule as whole-array comparisons (min-p on p, top-k as "fewer than k strictly larger",
    top-p as "strictly-more-probable mass of the top-k renormalised q below p")."""
    a = _shifted_logits(logits, m, kw.get("temperature", 1.0))
    p = np.exp(_log_softmax(a))
    keep = p >= kw.get("min_p", 0.0) * p.max(axis=-1, keepdims=True)
    k = kw.get("top_k", 0)
    if k > 0:
        larger = ((a[..., None, :] > a[..., :, None]) & keep[..., None, :]).sum(axis=-1)  # kept z_u > z_v
        keep &= larger < k
    q = np.where(keep, p, 0.0)
    q = q / q.sum(axis=-1, keepdims=True)
    top_p = kw.get("top_p", 1.0)
    if top_p < 1.0:
        above = (q[..., None, :] * (q[..., None, :] > q[..., :, None])).sum(axis=-1)
        keep &= above < top_p
    return a, keep


def _kept_logsumexp(a: np.ndarray, keep: np.ndarray) -> np.ndarray:
    top = np.where(keep, a, -np.inf).max(axis=-1, keepdims=True)
    return (top + np.log(np.where(keep, np.exp(a - top), 0.0).sum(axis=-1, keepdims=True)))[..., 0]


def sampling_logprobs(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    z, keep = _kept(a["logits"], m, kw)
    ids = np.where(m, a["input_ids"], 0)[:, :, None]
    inside = np.take_along_axis(keep, ids, axis=-1)[..., 0]
    value = np.take_along_axis(z, ids, axis=-1)[..., 0] - _kept_logsumexp(z, keep)
    return (np.where(m, np.where(inside, value, -np.inf), 0.0),)


def sampling_log_mass(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    z, keep = _kept(a["logits"], m, kw)
    return (_zero_masked(m, _kept_logsumexp(z, keep) - _kept_logsumexp(z, np.ones_like(keep))),)


def _sampling_grad(a: dict[str, Any], kw: dict[str, Any], u: np.ndarray, mass: bool) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    z, keep = _kept(a["logits"], m, kw)
    q = np.where(keep, np.exp(z - _kept_logsumexp(z, keep)[..., None]), 0.0)
    if mass:
        g = q - np.exp(_log_softmax(z))
    else:
        ids = np.where(m, a["input_ids"], 0)[:, :, None]
        onehot = (np.arange(z.shape[-1]) == ids).astype(np.float64)
        g = (onehot - q) * np.take_along_axis(keep, ids, axis=-1)
    g = g * (_clean(m, u) * m)[:, :, None] / kw.get("temperature", 1.0)
    out = np.zeros_like(g)
    out[:, :-1] = g[:, 1:]  # position t's value reads the logits of t - 1
    return (out,)


def _given_support(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(a, keep) [B, T, V] with keep the recorded support of each position (all True where masked)."""
    m = a["mask"]
    keep = np.where(m[:, :, None], np.asarray(a["support"]) == 1, True)
    return _shifted_logits(a["logits"], m, kw.get("temperature", 1.0)), keep


def support_logprobs(a: dict[str, Any], kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    z, keep = _given_support(a, kw)
    ids = np.where(m, a["input_ids"], 0)[:, :, None]
    inside = np.take_along_axis(keep, ids, axis=-1)[..., 0]
    value = np.take_along_axis(z, ids, axis=-1)[..., 0] - _kept_logsumexp(z, keep)
    return (np.where(m, np.where(inside, value, -np.inf), 0.0),)


def _support_grad(a: dict[str, Any], kw: dict[str, Any], u: np.ndarray) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    z, keep = _given_support(a, kw)
    q = np.where(keep, np.exp(z - _kept_logsumexp(z, keep)[..., None]), 0.0)
    ids = np.where(m, a["input_ids"], 0)[:, :, None]
    onehot = (np.arange(z.shape[-1]) == ids).astype(np.float64)
    g = (onehot - q) * np.take_along_axis(keep, ids, axis=-1) * (_clean(m, u) * m)[:, :, None] / kw.get("temperature", 1.0)
    out = np.zeros_like(g)
    out[:, :-1] = g[:, 1:]  # position t's value reads the logits of t - 1
    return (out,)


def _mismatch_deltas(a: dict[str, Any], kw: dict[str, Any]):
    m = a["mask"]
    d = np.where(m, _clean(m, a["old_logp"]) - _clean(m, a["rollout_logp"]), 0.0)
    c = kw.get("log_ratio_clamp")
    return m, d, m.sum(axis=1), (lambda x: x) if c is None else (lambda x: np.clip(x, -c, c))


def mismatch_metric(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    m, d, n, bound = _mismatch_deltas(a, kw)
    if not n.any():
        return (0.0,)
    metric = kw.get("metric", "kl")
    s = np.where(m, {"kl": lambda: -d, "k3_kl": lambda: np.expm1(d) - d, "chi2_token": lambda: np.exp(2 * bound(d)),
                     "token_mult_prob_error": lambda: np.exp(np.abs(d)), "logprob_abs_diff": lambda: np.abs(d)}[metric](), 0.0)
    rows = n > 0
    value = s.sum() / n.sum() if kw.get("agg", "token_mean") == "token_mean" else np.mean(s.sum(axis=1)[rows] / n[rows])
    return (float(value - 1.0) if metric == "chi2_token" else float(value),)


def sequence_mismatch_metric(a: dict[str, Any], kw: dict[str, Any]) -> tuple[float, ...]:
    m, d, n, bound = _mismatch_deltas(a, kw)
    rows = n > 0
    if not rows.any():
        return (0.0,)
    metric = kw.get("metric", "log_ppl_diff")
    total = d.sum(axis=1)[rows]
    per_row = {"log_ppl_diff": -total / n[rows], "log_ppl_abs_diff": np.abs(total / n[rows]),
               "ppl_ratio": np.exp(-total / n[rows]), "chi2_seq": np.exp(2 * bound(total))}[metric]
    return (float(per_row.mean() - 1.0) if metric == "chi2_seq" else float(per_row.mean()),)

HAND: dict[str, Callable[[dict[str, Any], dict[str, Any]], tuple[Any, ...]]] = {
    "token_logprobs": token_logprobs,
    "token_entropy": token_entropy,
    "token_logprobs_from_hidden": token_logprobs_from_hidden,
    "token_entropy_from_hidden": token_entropy_from_hidden,
    "sampling_logprobs": sampling_logprobs,
    "sampling_log_mass": sampling_log_mass,
    "support_logprobs": support_logprobs,
    "mismatch_metric": mismatch_metric,
    "sequence_mismatch_metric": sequence_mismatch_metric,
    "reinforce_advantages": reinforce_advantages,
    "rloo_advantages": rloo_advantages,
    "grpo_advantages": grpo_advantages,
    "rlhf_token_rewards": rlhf_token_rewards,
    "gae": gae,
    "whiten": whiten,
    "kl_penalty": kl_penalty,
    "pg_token_loss": pg_token_loss,
    "ppo_token_loss": ppo_token_loss,
    "gspo_token_loss": gspo_token_loss,
    "cispo_token_loss": cispo_token_loss,
    "value_token_loss": value_token_loss,
    "aggregate": aggregate,
    "ppo_clipped_mask": ppo_clipped_mask,
    "policy_loss": policy_loss,
    "rollout_is_weights": rollout_is_weights,
    "rollout_rejection_mask": rollout_rejection_mask,
    "decoupled_ppo_token_loss": decoupled_ppo_token_loss,
    "proximal_logp_interpolation": proximal_logp_interpolation,
    "off_policy_sequence_mask": off_policy_sequence_mask,
    "corrected_policy_loss": corrected_policy_loss,
    "sapo_token_loss": sapo_token_loss,
    "gmpo_token_loss": gmpo_token_loss,
    "dppo_token_loss": dppo_token_loss,
    "dro_token_loss": dro_token_loss,
    "vespo_token_loss": vespo_token_loss,
    "reinforce_pp_advantages": reinforce_pp_advantages,
    "reinforce_pp_baseline_advantages": reinforce_pp_baseline_advantages,
    "remax_advantages": remax_advantages,
    "opo_advantages": opo_advantages,
    "grpo_passk_advantages": grpo_passk_advantages,
    "gdpo_advantages": gdpo_advantages,
    "maxrl_advantages": maxrl_advantages,
    "gpg_advantages": gpg_advantages,
    "optimal_token_baseline_advantages": optimal_token_baseline_advantages,
    "clip_cov_mask": clip_cov_mask,
    "kl_cov_token_loss": kl_cov_token_loss,
    "kl_loss_term": kl_loss_term,
    "entropy_top_mask": entropy_top_mask,
    "entropy_bonus": entropy_bonus,
    "kl_controller_update": kl_controller_update,
    "entropy_coef_update": entropy_coef_update,
    "entropy_coef_applied": entropy_coef_applied,
    "overlong_penalty": overlong_penalty,
    "shaped_rewards": shaped_rewards,
}


def _gspo_grad(a: dict[str, Any], kw: dict[str, Any], u: np.ndarray) -> tuple[np.ndarray, ...]:
    m = a["mask"]
    _, s, n, dl_ds = _gspo(a, kw)
    u = _clean(m, u)
    if kw.get("form", "sequence") == "token_sg":
        return (_zero_masked(m, u * dl_ds * np.where(dl_ds == 0, 0.0, s)),)
    per_row = (u * dl_ds).sum(axis=1, keepdims=True)
    per_row = per_row * np.where(per_row == 0, 0.0, s) / np.maximum(n, 1)
    return (_zero_masked(m, np.broadcast_to(per_row, m.shape)),)


def _logit_grad(a: dict[str, Any], kw: dict[str, Any], u: np.ndarray, entropy: bool) -> np.ndarray:
    """dL/dlogits for token_logprobs / token_entropy, [B, T, V]."""
    m = a["mask"]
    tau = kw.get("temperature", 1.0)
    lsm = _log_softmax(_shifted_logits(a["logits"], m, tau))
    p = np.exp(lsm)
    u = _clean(m, u)[:, :, None]
    if entropy:
        H = -(p * lsm).sum(axis=-1, keepdims=True)
        g_z = -p * (lsm + H)  # dH/dz (z = logits / tau)
    else:
        onehot = np.zeros_like(p)
        ids = np.where(m, a["input_ids"], 0)
        np.put_along_axis(onehot, ids[:, :, None], 1.0, axis=-1)
        g_z = onehot - p
    g = np.where(m[:, :, None], u * g_z / tau, 0.0)
    out = np.zeros_like(g)
    out[:, :-1] = g[:, 1:]  # position t's loss reads the logits of t - 1
    return out


def _fused_grad(a: dict[str, Any], kw: dict[str, Any], u: np.ndarray, entropy: bool) -> tuple[np.ndarray, ...]:
    full = _logits_from_hidden(a)
    g = _logit_grad(full, kw, u, entropy)  # [B, T, V]
    read = _read_rows(a["mask"])[:, :, None]
    hidden = np.where(read, a["hidden"], 0.0)
    return g @ a["weight"], np.einsum("btv,btd->vd", g, hidden)


HAND_GRAD: dict[str, Callable[[dict[str, Any], dict[str, Any], Any], tuple[Any, ...]]] = {
    "token_logprobs": lambda a, kw, u: (_logit_grad(a, kw, u, entropy=False),),
    "token_entropy": lambda a, kw, u: (_logit_grad(a, kw, u, entropy=True),),
    "token_logprobs_from_hidden": lambda a, kw, u: _fused_grad(a, kw, u, entropy=False),
    "token_entropy_from_hidden": lambda a, kw, u: _fused_grad(a, kw, u, entropy=True),
    "sampling_logprobs": lambda a, kw, u: _sampling_grad(a, kw, u, mass=False),
    "sampling_log_mass": lambda a, kw, u: _sampling_grad(a, kw, u, mass=True),
    "support_logprobs": _support_grad,
    "kl_penalty": lambda a, kw, u: (_clean(a["mask"], u) * _kl(a["logp"], a["ref_logp"], a["mask"], kw)[1],),
    "pg_token_loss": lambda a, kw, u: (_zero_masked(a["mask"], -_adv(a) * _clean(a["mask"], u)),),
    "ppo_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _ppo(a, kw)[1],),
    "gspo_token_loss": _gspo_grad,
    "cispo_token_loss": _cispo_grad,
    "value_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _value(a, kw)[1],),
    "aggregate": lambda a, kw, u: (u * _agg_weights(a, kw),),
    "policy_loss": lambda a, kw, u: (u * _policy(a, kw)[1],),
    "decoupled_ppo_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _decoupled(a, kw)[1],),
    "corrected_policy_loss": lambda a, kw, u: (u * _corrected(a, kw)[1],),
    "sapo_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _sapo(a, kw)[1],),
    "dppo_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _dppo(a, kw)[1],),
    "dro_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _dro(a, kw)[1],),
    "vespo_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _vespo(a, kw)[1],),
    "kl_cov_token_loss": lambda a, kw, u: (_clean(a["mask"], u) * _kl_cov(a, kw)[1],),
    "kl_loss_term": lambda a, kw, u: (_times(_clean(a["mask"], u), _kl_loss(a, kw)[1]),),
    "entropy_bonus": lambda a, kw, u: (-kw["entropy_coef"] * u * _agg_weights(a, kw),),
}
