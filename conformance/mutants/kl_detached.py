"""The in-loss KL term is computed under no_grad / on detached log-probs: it has the right value and
contributes no gradient, so it does not regularise.

open-instruct#531 (2025-01-29, fixes #530): "KL loss should be differentiable in GRPO".
"""

import refimpl
from conformance.mutants.base import Mutant


def kl_penalty(logp, ref_logp, mask, **kwargs):
    return refimpl.kl_penalty(logp.detach(), ref_logp, mask, **kwargs)


MUTANT = Mutant(
    name="kl_detached",
    bug_class="KL term detached: the right value but no gradient",
    catalogue=7,
    cites=("open-instruct#531",),
    signature={
        "kl_penalty": (
            "property", "golden", "invariant:on_policy", "preset:areal", "preset:ms_swift",
            "preset:open_instruct", "preset:openrlhf", "preset:skyrl", "preset:trl", "preset:verl",
        ),
    },
    replace={"kl_penalty": kl_penalty},
)
