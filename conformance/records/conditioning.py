"""Conditioning shared by several records: keep compared gradients away from kinks.

The spec's tie rule decides exact ties; inputs within rounding distance of a kink (a clip boundary) cannot be
compared across precisions, so a record's `well_conditioned(args, kwargs)` is False for them and the case is
left out of that comparison.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MARGIN = 1e-4


def far(x: np.ndarray, kinks: list[float]) -> bool:
    x = np.nan_to_num(x, nan=np.inf)
    return all(np.all(np.abs(x - k) > MARGIN * max(1.0, abs(k))) for k in kinks)


def ratio(args: dict[str, Any], clamp: float | None = None) -> np.ndarray:
    d = (args["logp"] - args["old_logp"])[args["mask"]]
    if clamp is not None:
        d = np.clip(d, -clamp, clamp)
    with np.errstate(over="ignore"):
        return np.exp(d)


def ppo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    d = (args["logp"] - args["old_logp"])[args["mask"]]
    kinks = [1 - kw.get("eps_low", 0.2), 1 + kw.get("eps_high", 0.2)]
    if kw.get("dual_clip") is not None:
        kinks.append(kw["dual_clip"])
    clamp = kw.get("log_ratio_clamp")
    far_clamp = clamp is None or far(d, [-clamp, clamp])
    return far_clamp and far(ratio(args, clamp), kinks)
