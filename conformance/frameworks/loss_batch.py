"""What the frameworks' loss rows share: the seeded loss batch (token-aligned [B, T], ragged, with finite
garbage at every masked position), the batch rounded to a framework's dtype, how a subprocess framework's
aggregation op is called on it (whole, or split over data-parallel ranks), and the value-loss candidates
(canonical, then the framework's preset)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.frameworks.subprocess_adapter import SubprocessAdapter
from conformance.records import cases
from conformance.records.pieces import compose, fmt, value_piece
from conformance.records.presets import preset_kwargs
from conformance.runner.composite import Candidate


B, T = 6, 9
# (first completion column, completion length, masked tool column or None) per row
ROWS = ((2, 7, None), (5, 4, None), (7, 1, None), (2, 6, 4), (3, 0, None), (4, 5, None))
ADVANTAGE_SIGNS = np.array([1.0, -1.0, -1.0, 1.0, 1.0, -1.0])


def loss_mask() -> np.ndarray:
    m = np.zeros((B, T), dtype=bool)
    for b, (start, n, tool) in enumerate(ROWS):
        m[b, start:start + n] = True
        if tool is not None:
            m[b, tool] = False
    return m


def _far(x: float, kinks: tuple[float, ...], margin: float) -> bool:
    return all(abs(x - k) > margin for k in kinks)


def log_ratios(rng: np.random.Generator, mask: np.ndarray, kinks: tuple[float, ...], margin: float = 0.03,
               seq_kinks: tuple[float, ...] = ()) -> np.ndarray:
    """Per-token log(pi/pi_old): inside, just outside and far outside every clip range, including
    ratios above 3 (verl's dual-clip constant) and below 0.2; each kept ``margin`` from every kink (and
    each row's mean log-ratio from ``seq_kinks``)."""
    d = np.zeros(mask.shape)
    for b in range(mask.shape[0]):
        while True:
            for t in range(mask.shape[1]):
                while True:
                    u = rng.random()
                    if u < 0.35:
                        x = float(rng.uniform(-0.15, 0.15))
                    elif u < 0.7:
                        x = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 0.8))
                    else:
                        x = float(rng.choice([-1.0, 1.0]) * rng.uniform(1.3, 2.3))
                    if _far(x, kinks, margin):
                        d[b, t] = x
                        break
            n = mask[b].sum()
            if n == 0 or _far(float(d[b][mask[b]].mean()), seq_kinks, margin):
                break
    return d


def loss_batch(seed: int, *, per_token_advantages: bool = False, kinks: tuple[float, ...] = (),
               seq_kinks: tuple[float, ...] = ()) -> dict[str, np.ndarray]:
    """Seeded float64 batch: ``logp``, ``old_logp`` (= logp - d), ``ref_logp``, ``advantages`` ([B] or
    [B, T]), ``values``, ``old_values``, ``returns``, ``token_loss``, ``mask``. Masked positions hold
    finite garbage (what padding holds in a real batch), never zeros."""
    rng = np.random.default_rng(seed)
    m = loss_mask()
    logp = -np.abs(rng.normal(0.0, 1.5, size=(B, T))) - 1e-3
    d = log_ratios(rng, m, kinks, seq_kinks=seq_kinks)
    k = rng.uniform(-0.6, 0.6, size=(B, T))
    k[0, 3], k[5, 5] = -3.4, 2.5  # ref far above logp (k3 > 10: verl's clamp binds) and below
    if per_token_advantages:
        adv = rng.normal(0.0, 1.0, size=(B, T))
    else:
        adv = ADVANTAGE_SIGNS * (0.3 + np.abs(rng.normal(0.0, 1.0, size=B)))
    values = rng.normal(0.0, 2.0, size=(B, T))
    delta = np.zeros((B, T))
    for idx in np.ndindex(B, T):
        while True:
            x = float(rng.normal(0.0, 0.6))
            if _far(abs(x), (0.2, 0.5), 0.03):
                delta[idx] = x
                break
    garbage = ~m
    out = {
        "logp": logp,
        "old_logp": logp - d,
        "ref_logp": logp - k,
        "advantages": adv,
        "values": values + delta,
        "old_values": values,
        "returns": rng.normal(0.0, 2.0, size=(B, T)),
        "token_loss": rng.normal(0.0, 1.0, size=(B, T)),
        "token_rewards": rng.normal(0.0, 1.0, size=(B, T)),
        "mask": m,
    }
    for name in ("logp", "old_logp", "ref_logp", "values", "old_values", "returns", "token_loss", "token_rewards"):
        out[name] = np.where(garbage, rng.uniform(-3.0, 0.0, size=(B, T)), out[name])
    if per_token_advantages:
        out["advantages"] = np.where(garbage, rng.normal(0.0, 5.0, size=(B, T)), out["advantages"])
    return out


def round_batch(batch: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The batch as the framework sees it in ``dtype``, held in float64 for the oracle."""
    return {k: (cases.round_to(v, dtype) if v.dtype.kind == "f" else v) for k, v in batch.items()}


def upstream_for(shape: tuple[int, ...], seed: int, dtype: str) -> np.ndarray:
    return cases.round_to(np.random.default_rng(seed).normal(0.0, 1.0, size=shape), dtype)


NP = {"float64": np.float64, "float32": np.float32}


def loss_call(adapter: SubprocessAdapter, op: str, loss_name: str, x: np.ndarray, m: np.ndarray, params: dict[str, Any]) -> dict[str, Any]:
    """The framework's aggregation ``op`` on float32 (``loss_name`` = ``x``, ``loss_mask`` = ``m``):
    ``{"value": loss, "grad[token_loss]": d loss / d x}``."""
    r = adapter.call(op, {loss_name: x.astype(np.float32), "loss_mask": m.astype(np.float32)}, params,
                     wrt=[loss_name], upstream={"loss": 1.0})
    return {"value": r["outputs"]["loss"], "grad[token_loss]": r["grads"][loss_name]}


def mean_over_ranks(call: Callable[[np.ndarray], dict[str, Any]], m: np.ndarray, dp: int) -> dict[str, Any]:
    """The batch's rows split over ``dp`` data-parallel ranks, ``call(rows)`` per rank (a ``loss_call``);
    DDP averages the ranks' gradients, so the effective loss is the mean of the rank losses."""
    value, grad = 0.0, np.zeros(m.shape)
    for rows in np.array_split(np.arange(m.shape[0]), dp):
        r = call(rows)
        value += float(r["value"]) / dp
        grad[rows] = r["grad[token_loss]"] / dp
    return {"value": value, "grad[token_loss]": grad}


def value_loss_candidates(framework: str, batch: dict[str, np.ndarray], agg: dict[str, Any],
                          asked: dict[str, Any]) -> list[Candidate]:
    """An aggregated value loss: ``aggregate(value_token_loss(**asked), **agg)`` (canonical), then with
    ``framework``'s value preset (value and gradient w.r.t. ``values``)."""
    m = batch["mask"]

    def ev(kwargs: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        return lambda: compose(value_piece(batch["values"], batch, **kwargs), m, agg, "grad[values]")

    preset = {**preset_kwargs(framework, "value_token_loss"), **asked}
    cands = [Candidate("canonical", f"aggregate(value_token_loss({fmt(asked)}), {fmt(agg)})", ev(asked))]
    if preset != asked:
        cands.append(Candidate(fmt(preset), f"aggregate(value_token_loss({fmt(preset)}), {fmt(agg)})", ev(preset),
                               preset=framework, kwargs=preset))
    return cands


__all__ = ["B", "T", "ROWS", "ADVANTAGE_SIGNS", "NP", "loss_mask", "log_ratios", "loss_batch", "round_batch", "upstream_for",
           "loss_call", "mean_over_ranks", "value_loss_candidates"]
