"""The engine-trainer KL metric logged with the wrong direction: the token mean of old − rollout (the k1
estimate of KL(π_train ‖ π_rollout) taken on tokens π_rollout sampled, which is no KL estimate at all)
instead of rollout − old, so a mismatch reads as a negative KL.

ms-swift#7145 (the rollout-training KL of ms-swift's mirror of verl's rollout_corr metrics, #6678, had its
sign reversed); verl 0.9.1 rollout_corr_helper.py:958-960 (``rollout_log_prob - old_log_prob``).
"""

import refimpl
from conformance.mutants.base import Mutant


def mismatch_metric(old_logp, rollout_logp, mask, *, metric="kl", agg="token_mean", log_ratio_clamp=None):
    if metric == "kl":  # the bug: arguments exchanged for the k1 metric
        return refimpl.mismatch_metric(rollout_logp, old_logp, mask, metric=metric, agg=agg,
                                       log_ratio_clamp=log_ratio_clamp)
    return refimpl.mismatch_metric(old_logp, rollout_logp, mask, metric=metric, agg=agg,
                                   log_ratio_clamp=log_ratio_clamp)


MUTANT = Mutant(
    name="mismatch_kl_direction_flipped",
    bug_class="engine-trainer KL metric with its direction reversed (mean of old − rollout log-probs)",
    catalogue=21,
    cites=("ms-swift#7145", "ms-swift#6678"),
    signature={"mismatch_metric": ("property", "golden", "preset:verl")},
    replace={"mismatch_metric": mismatch_metric},
)
