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
    max_rel: float  # NaN: no element off where |expected| > atol (a relative error means nothing there)
    max_rel_index: tuple[int, ...]
    actual_at: float
    expected_at: float
    tol: Tol
    note: str = ""

    def describe(self) -> str:
        if self.note:
            return f"{self.what}: {self.note}"
        rel = (
            f"greatest relative difference {self.max_rel:.3g} at index {self.max_rel_index}"
            if self.max_rel == self.max_rel
            else "no relative difference (|expected| <= atol wherever it is off)"
        )
        return (
            f"{self.what}: {self.n_bad}/{self.n_total} elements off; of those, the "
            f"greatest absolute difference {self.max_abs:.3g} at index {self.max_abs_index} "
            f"(actual {self.actual_at:.8g}, expected {self.expected_at:.8g}); "
            f"{rel} (allowed: atol {self.tol.atol:g} + rtol {self.tol.rtol:g}*|expected|)"
        )


def differences(actual: np.ndarray, expected: np.ndarray, atol: float) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise |actual - expected| (0 where both are NaN or the same infinity, inf where only
    one is NaN) and the relative difference |actual - expected| / |expected|, NaN where |expected|
    <= atol: near zero a relative error is meaningless (it would read 1e+306 next to an expected 0)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(actual - expected)
        both_nan = np.isnan(actual) & np.isnan(expected)
        same_inf = np.isinf(actual) & np.isinf(expected) & (np.sign(actual) == np.sign(expected))
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        scale = np.abs(expected)
        meaningful = np.isfinite(scale) & (scale > atol)
        rel = np.where(meaningful, diff / np.where(meaningful, scale, 1.0), np.nan)
        rel = np.where(meaningful & (diff == 0), 0.0, rel)
    return diff, rel


def greatest(x: np.ndarray) -> tuple[float, tuple[int, ...]]:
    """The largest element ignoring NaN (NaN and () when every element is NaN) and its index."""
    if x.size == 0 or np.all(np.isnan(x)):
        return float("nan"), ()
    i = np.unravel_index(int(np.nanargmax(x)), x.shape)
    return float(x[i]), tuple(int(k) for k in i)


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
    diff, rel = differences(a, e, tol.atol)
    bad = diff > tol.atol + tol.rtol * np.abs(np.where(np.isfinite(e), e, 0.0))
    if not bad.any():
        return None
    max_abs, i_abs = greatest(np.where(bad, diff, np.nan))  # among the elements that are off
    max_rel, i_rel = greatest(np.where(bad, rel, np.nan))
    return Mismatch(
        what=what,
        shape=tuple(e.shape),
        n_bad=int(bad.sum()),
        n_total=int(bad.size),
        max_abs=max_abs,
        max_abs_index=i_abs,
        max_rel=max_rel,
        max_rel_index=i_rel,
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
