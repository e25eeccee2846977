"""k3 = exp(-d) - 1 + d computed without the configured clamps: the log-ratio is not clipped before
the exp and the estimate is not clipped after it, so one far-off token gives a huge (or overflowing)
KL and gradient.

OpenRLHF#1160 (2025-12-17, clamp before exp); OpenRLHF#525 (abnormally large k3 values); verl#891
(`low_var_kl` NaN); verl#2928 (why verl clamps the kld at ±10). verl's preset clamps the log-ratio at
±20 and k3 at ±10; OpenRLHF's clamps the estimate at ±10.
"""

import refimpl
from conformance.mutants.base import Mutant


def kl_penalty(logp, ref_logp, mask, *, estimator="k1", log_ratio_clamp=None, clamp=None):
    return refimpl.kl_penalty(logp, ref_logp, mask, estimator=estimator)  # clamps ignored


MUTANT = Mutant(
    name="kl_k3_unclamped",
    bug_class="KL estimate computed without its clamps (k3's exp of an unclipped log-ratio overflows)",
    catalogue=16,
    cites=("OpenRLHF#1160", "OpenRLHF#525", "verl#891", "verl#2928"),
    signature={
        "kl_penalty": ("preset:ms_swift", "preset:skyrl", "preset:verl"),
    },
    replace={"kl_penalty": kl_penalty},
)
