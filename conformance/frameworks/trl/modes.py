"""TRL's importance-sampling modes as spec keywords (shared by the adapter and its rows)."""

from __future__ import annotations

from typing import Any

# spec (level, mode) -> GRPOConfig.vllm_importance_sampling_mode (grpo_config.py:925-962, trl 1.16.0)
IS_MODES = {
    ("token", "truncate"): "token_truncate",
    ("token", "mask"): "token_mask",
    ("sequence", "truncate"): "sequence_truncate",
    ("sequence", "mask"): "sequence_mask",
}


def is_mode_to_spec(mode: str, clip_min: float | None, clip_max: float | None) -> dict[str, Any]:
    """A TRL ``vllm_importance_sampling_mode`` with its clip bounds, as ``rollout_is_weights`` keywords."""
    level, spec_mode = next(k for k, v in IS_MODES.items() if v == mode)
    return {"level": level, "mode": spec_mode, "lo": clip_min, "hi": clip_max}


__all__ = ["IS_MODES", "is_mode_to_spec"]
