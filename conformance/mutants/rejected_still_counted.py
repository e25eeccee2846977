"""Rejected tokens still count in the loss denominator: the rejection (or OPSM) mask zeroes their
policy term instead of removing them from the aggregation mask, so a batch where half the tokens are
rejected has its gradient silently halved, and the KL of rejected tokens stays in the loss.

verl removes them (rollout_corr_helper.py:412 `modified_response_mask = response_mask * final_mask`);
TRL, OpenRLHF and AReaL multiply the loss instead (grpo_trainer.py:3140, loss.py:235, AReaL
functional.py:483) — the spec's `rejected="zero"` preset. As a bug it is bug-catalogue class 3 (a
count that includes tokens the numerator excludes).
"""

import refimpl
from conformance.mutants.base import Mutant


def corrected_policy_loss(*args, **kwargs):
    return refimpl.corrected_policy_loss(*args, **{**kwargs, "rejected": "zero"})


MUTANT = Mutant(
    name="rejected_still_counted",
    bug_class="rejected tokens still counted in the loss denominator (zeroed instead of removed)",
    catalogue=3,
    cites=("verl rollout_corr_helper.py:412", "trl grpo_trainer.py:3140", "bug-catalogue class 3"),
    signature={
        "corrected_policy_loss": ("property", "golden", "invariant:on_policy", "preset:ms_swift"),
    },
    replace={"corrected_policy_loss": corrected_policy_loss},
)
