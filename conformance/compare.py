"""Elementwise comparison against the oracle, and the mismatch report that names everything needed
to reproduce a failure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.tolerances import Tol


@dataclass(frozen=True)
class Mismatch:
    """Where and by how much `actual` missed `expected`."""

    what: str  # "value", "grad[logp]", ...
    shape: tuple[int, ...]
    n_bad: int
    n_total: int
    max_abs: float
    max_abs_index: tuple[int, ...]
    max_rel: float
    max_rel_index: tuple[int, ...]
    actual_at: float
    expected_at: float
    tol: Tol
    note: str = ""

    def describe(self) -> str:
        if self.note:
            return f"{self.what}: {self.note}"
        return (
            f"{self.what}: {self.n_bad}/{self.n_total} elements off; "
            f"greatest absolute difference {self.max_abs:.3g} at index {self.max_abs_index} "
            f"(actual {self.actual_at:.8g}, expected {self.expected_at:.8g}); "
            f"greatest relative difference {self.max_rel:.3g} at index {self.max_rel_index} "
            f"(allowed: atol {self.tol.atol:g} + rtol {self.tol.rtol:g}*|expected|)"
        )


def compare(actual: object, expected: np.ndarray, tol: Tol, what: str = "value") -> Mismatch | None:
    """None when `actual` is within `tol` of `expected` everywhere, else the Mismatch."""
    e = np.asarray(expected, dtype=np.float64)
    try:
        a = np.asarray(actual, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        return _shape_mismatch(what, e, tol, f"output is not an array of numbers ({exc})")
    if a.shape != e.shape:
        return _shape_mismatch(what, e, tol, f"shape {a.shape}, but should be {e.shape}")
    if a.size == 0:
        return None
    diff = np.abs(a - e)
    both_nan = np.isnan(a) & np.isnan(e)
    same_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
    diff = np.where(both_nan | same_inf, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    bad = diff > tol.atol + tol.rtol * np.abs(np.where(np.isfinite(e), e, 0.0))
    if not bad.any():
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        rel = diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny)
    rel = np.where(diff == 0, 0.0, rel)
    i_abs = np.unravel_index(int(np.argmax(diff)), diff.shape)
    i_rel = np.unravel_index(int(np.argmax(rel)), rel.shape)
    return Mismatch(
        what=what,
        shape=tuple(e.shape),
        n_bad=int(bad.sum()),
        n_total=int(bad.size),
        max_abs=float(diff[i_abs]),
        max_abs_index=tuple(int(i) for i in i_abs),
        max_rel=float(rel[i_rel]),
        max_rel_index=tuple(int(i) for i in i_rel),
        actual_at=float(a[i_abs]),
        expected_at=float(e[i_abs]),
        tol=tol,
    )


def _shape_mismatch(what: str, expected: np.ndarray, tol: Tol, note: str) -> Mismatch:
    return Mismatch(
        what=what,
        shape=tuple(expected.shape),
        n_bad=int(expected.size),
        n_total=int(expected.size),
        max_abs=float("inf"),
        max_abs_index=(),
        max_rel=float("inf"),
        max_rel_index=(),
        actual_at=float("nan"),
        expected_at=float("nan"),
        tol=tol,
        note=note,
    )
