"""Spec quantities as pieces of a composition: a per-token array and its vector-Jacobian product with
respect to the log-probs (or the values), so that a framework's aggregated loss can be written from spec
pieces and its gradient is the chain of their `_grad` functions.

`compose(piece, mask, agg, key)` is ``aggregate(piece)`` with its gradient; `policy_piece` / `value_piece`
are the oracle's per-token losses on a batch (``logp``, ``old_logp``, ``advantages``, ``mask``;
``values``, ``old_values``, ``returns``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import oracle


@dataclass
class Piece:
    """A per-token array of the spec composition and its VJP w.r.t. logp: ``vjp(u) = u · d value / d logp``."""

    value: np.ndarray
    vjp: Callable[[np.ndarray], np.ndarray]


def scaled(piece: Piece, factor: np.ndarray) -> Piece:
    """A piece times a constant [B, T] factor (no gradient through the factor)."""
    return Piece(piece.value * factor, lambda u: piece.vjp(u * factor))


def aggregate_eval(x: np.ndarray, m: np.ndarray, agg: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """``aggregate(x, m, **agg)`` and its gradient w.r.t. ``token_loss``, as a candidate's ``evaluate``."""
    return lambda: {"value": oracle.aggregate(x, m, **agg), "grad[token_loss]": oracle.aggregate_grad(x, m, 1.0, **agg)}


def broadcast_advantages(batch: dict[str, np.ndarray]) -> np.ndarray:
    """The batch's advantages as ``[B, T]`` (``[B]`` ones broadcast over the tokens)."""
    a = batch["advantages"]
    return a if a.ndim == 2 else np.broadcast_to(a[:, None], batch["mask"].shape).copy()


def policy_piece(function: str, lp: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Piece:
    """The oracle's ``function`` (``ppo_token_loss``, ...) on the batch ``b`` at ``lp``, with its VJP."""
    loss, grad = getattr(oracle, function), getattr(oracle, f"{function}_grad")
    A, m, old = b["advantages"], b["mask"], b["old_logp"]
    return Piece(loss(lp, old, A, m, **kw), lambda u: grad(lp, old, A, m, u, **kw))


def value_piece(v: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Piece:
    """The oracle's ``value_token_loss`` on the batch ``b`` at ``v``, with its VJP."""
    m, old, R = b["mask"], b["old_values"], b["returns"]
    return Piece(oracle.value_token_loss(v, old, R, m, **kw), lambda u: oracle.value_token_loss_grad(v, old, R, m, u, **kw))


def compose(piece: Piece, m: np.ndarray, agg: dict[str, Any], grad_key: str) -> dict[str, Any]:
    """``{"value": aggregate(piece), grad_key: its gradient}`` (the chain through ``piece.vjp``)."""
    value = oracle.aggregate(piece.value, m, **agg)
    w = oracle.aggregate_grad(piece.value, m, 1.0, **agg)
    return {"value": value, grad_key: piece.vjp(w)}


def fmt(kw: dict[str, Any]) -> str:
    """``k=v, ...`` for a row's formula and labels."""
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


__all__ = ["Piece", "scaled", "aggregate_eval", "broadcast_advantages", "policy_piece", "value_piece", "compose", "fmt"]
