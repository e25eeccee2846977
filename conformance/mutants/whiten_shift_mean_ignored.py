"""`shift_mean=False` ignored: rewards whitened for PPO keep their mean in the OpenAI/TRL convention
(whiten rewards with shift_mean=False, advantages with shift_mean=True), but this always subtracts it.

Catalogue class 32 ("reward whitening wrongly shifting the mean: no real instance found", [U]); the
convention is in the N+ implementation details paper (arXiv:2403.17031) and its ICLR-2024 blog post,
and summarize_from_feedback_details PR#17 on `whiten_rewards`.
"""

import refimpl
from conformance.mutants.base import Mutant


def whiten(x, mask, *, shift_mean=True, **kwargs):
    return refimpl.whiten(x, mask, shift_mean=True, **kwargs)


MUTANT = Mutant(
    name="whiten_shift_mean_ignored",
    bug_class="shift_mean=False ignored: reward whitening removes the mean",
    catalogue=32,
    cites=("arXiv:2403.17031", "summarize_from_feedback_details PR#17", "bug-catalogue class 32 [U]"),
    signature={
        "whiten": ("property", "golden", "preset:torchtune"),
    },
    replace={"whiten": whiten},
)
