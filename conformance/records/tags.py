"""The input features a case exercises, read off its arrays: the tags a row's failures are grouped by
(`conformance.runner.verdict`, "failure modes") and the vocabulary of the input domains of [20].

A tag names a feature a framework may never produce in real use (a batch with no valid token, a group
of one, a log-ratio beyond float32's exp range), so that a divergence on it is seen apart from one on
ordinary inputs. Tags are computed from the arguments by name (the spec's argument vocabulary, api.md),
never from how a case was drawn: a golden vector and a property case with the same feature get the same tag.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# tag -> what it means (docs/checking.md, "Failure modes", is generated from this table's order)
TAGS: dict[str, str] = {
    "no valid token": "the mask has no True entry at all",
    "empty row": "some row of the mask has no valid token",
    "one-token row": "some row of the mask has exactly one valid token",
    "gapped mask": "some row's valid tokens are not contiguous (a masked tool or observation token inside)",
    "group of one": "group_size = 1 (one completion per prompt)",
    "all-equal group": "some group's rewards are all equal (zero spread)",
    "|log-ratio| > 88": "some valid token's log-ratio between two log-prob arguments exceeds 88 in magnitude, "
                        "where exp overflows float32",
    "non-finite at masked": "NaN or ±inf at a position the mask excludes",
}

LOG_PROBS = ("logp", "old_logp", "ref_logp", "rollout_logp", "prox_logp", "behav_logp")
EXP_RANGE = 88.0  # exp(88.7) is float32's largest finite value


def _rows(mask: np.ndarray) -> np.ndarray:
    return mask.reshape(-1, mask.shape[-1]) if mask.ndim >= 1 and mask.shape else mask.reshape(1, -1)


def case_tags(args: dict[str, Any]) -> tuple[str, ...]:
    """The TAGS a case's arguments exercise, in TAGS order."""
    found: set[str] = set()
    mask = args.get("mask")
    if isinstance(mask, np.ndarray) and mask.dtype == bool and mask.size:
        rows = _rows(mask)
        valid = rows.sum(axis=1)
        if not mask.any():
            found.add("no valid token")
        if (valid == 0).any():
            found.add("empty row")
        if (valid == 1).any():
            found.add("one-token row")
        for row in rows:
            idx = np.flatnonzero(row)
            if idx.size >= 2 and idx[-1] - idx[0] + 1 != idx.size:
                found.add("gapped mask")
                break
        for value in args.values():
            if isinstance(value, np.ndarray) and value.shape == mask.shape and value.dtype.kind == "f":
                if not np.isfinite(value[~mask]).all():
                    found.add("non-finite at masked")
                    break
        present = [args[n] for n in LOG_PROBS if isinstance(args.get(n), np.ndarray) and args[n].shape == mask.shape]
        with np.errstate(invalid="ignore"):
            for i, a in enumerate(present):
                for b in present[i + 1:]:
                    if (np.abs(a - b)[mask] > EXP_RANGE).any():
                        found.add("|log-ratio| > 88")
    group = args.get("group_size")
    if isinstance(group, (int, np.integer)) and not isinstance(group, bool):
        if group == 1:
            found.add("group of one")
        rewards = args.get("rewards")
        if group > 1 and isinstance(rewards, np.ndarray) and rewards.ndim == 1 and rewards.size % group == 0:
            groups = rewards.reshape(-1, group)
            if (groups == groups[:, :1]).all(axis=1).any():
                found.add("all-equal group")
    return tuple(t for t in TAGS if t in found)


__all__ = ["TAGS", "case_tags"]
