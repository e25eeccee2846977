"""What the golden entries of the records are written with: hand-readable arrays and the catalogue that
collects a module's entries.

Conventions: `mask("..xxx.")` has one string per row, `x` for a valid (trained) token and `.` for prompt or
padding; token id 0 is EOS (`EOS`), id 3 is a pad id distinct from EOS (`PAD`) where the case is not about
pad == eos; the policy losses build `logp = old_logp + d` (`policy_case`) so that the log-ratio `d` of every
token is written out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.records.cases import EOS_ID, Case
from conformance.records.record import GoldenCase

nan = float("nan")
inf = float("inf")
EOS = EOS_ID
PAD = 3


class Catalogue:
    """The golden entries of one records module, in the order they are added; `of(function)` gives one
    quantity's (its record's `golden`)."""

    def __init__(self) -> None:
        self.entries: list[GoldenCase] = []

    def add(self, case_id: str, description: str, build: Callable[[], Case], **extra: Any) -> None:
        self.entries.append(GoldenCase(case_id, description, build, **extra))

    def of(self, function: str) -> tuple[GoldenCase, ...]:
        return tuple(e for e in self.entries if e.function == function)


def mask(*rows: str) -> np.ndarray:
    """[B, T] bool mask, one string per row: 'x' valid, '.' not trained."""
    return np.array([[c == "x" for c in row] for row in rows], dtype=bool)


def f64(values: Any) -> np.ndarray:
    return np.array(values, dtype=np.float64)


def i64(values: Any) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def grid(shape: tuple[int, ...], scale: float = 1.0, phase: int = 0) -> np.ndarray:
    """A fixed, hand-readable pattern: element i is scale * (((7*i + phase) mod 11) - 5) / 2.5."""
    i = np.arange(int(np.prod(shape)))
    return (scale * (((7 * i + phase) % 11) - 5) / 2.5).reshape(shape)


def build(function: str, args: dict[str, Any], kwargs: dict[str, Any]) -> Case:
    return Case(function, args, dict(kwargs))


def where(m: np.ndarray, values: Any) -> np.ndarray:
    """`values` at valid positions, exact 0 elsewhere (for `expect`)."""
    return np.where(m, np.broadcast_to(f64(values), m.shape), 0.0)


def policy_case(function: str, d: Any, adv: Any, m: np.ndarray, old: Any = -4.0, **kw: Any) -> Callable[[], Case]:
    """A policy loss's case with log-ratios `d` written out: logp = old_logp + d (old_logp = -4 unless
    stated, so that every log-prob stays below 0)."""
    d = f64(d)
    old_logp = np.full(d.shape, old) if np.isscalar(old) else f64(old)
    return lambda: build(
        function,
        {"logp": old_logp + d, "old_logp": old_logp, "advantages": f64(adv), "mask": m},
        kw,
    )


M5 = mask(".xxxx")
M6 = mask(".xxxxx")
