"""The lower bound of the rollout weight is ignored: truncation only caps from above, and masking
only drops ratios above the upper bound, so tokens the trainer finds far less likely than the
engine did (ρ ≪ 1) stay in the update.

TRL exposes `vllm_importance_sampling_clip_min` (grpo_config.py) beside clip_max; IcePop and verl's
"lo_hi" thresholds bound both sides (rollout_corr_helper.py:93 `_parse_rollout_is_threshold`).
"""

import refimpl
from conformance.mutants.base import Mutant


def rollout_is_weights(old_logp, rollout_logp, mask, **kwargs):
    return refimpl.rollout_is_weights(old_logp, rollout_logp, mask, **{**kwargs, "lo": None})


MUTANT = Mutant(
    name="is_lower_bound_ignored",
    bug_class="lower bound of the rollout importance weight ignored (only the upper bound applied)",
    catalogue=16,
    cites=("trl grpo_config.py vllm_importance_sampling_clip_min", "verl rollout_corr_helper.py:93", "IcePop (Ring-1T, 2025)"),
    signature={"rollout_is_weights": ("property", "golden", "preset:openrlhf")},
    replace={"rollout_is_weights": rollout_is_weights},
)
