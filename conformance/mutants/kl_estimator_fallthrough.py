"""The estimator switch falls through (`if`/`if` instead of `if`/`elif`): whatever is configured, k3
is computed.

AReaL#408 (2025-09-30, review): the fall-through always selected k3; slime#397 (`kl_coef` ignored for
GRPO) is the same kind of silently ignored setting. The catalogue's test: selecting each of k1, k2,
k3 in turn must give different values.
"""

import refimpl
from conformance.mutants.base import Mutant


def kl_penalty(logp, ref_logp, mask, *, estimator="k1", **kwargs):
    return refimpl.kl_penalty(logp, ref_logp, mask, estimator="k3", **kwargs)


MUTANT = Mutant(
    name="kl_estimator_fallthrough",
    bug_class="KL estimator setting ignored (switch falls through to k3)",
    catalogue=7,
    cites=("AReaL#408", "slime#397"),
    signature={
        "kl_penalty": ("property", "golden", "invariant:on_policy", "preset:areal", "preset:openrlhf"),
    },
    replace={"kl_penalty": kl_penalty},
)
