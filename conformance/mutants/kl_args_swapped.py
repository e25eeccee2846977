"""The KL estimator is called with policy and reference swapped: it estimates KL(π_ref ‖ π) with the
sign convention of d = ref_logp - logp.

lucidrains/PaLM-rlhf-pytorch#43 (2023-03-22): the arguments to the KL were reversed (the maintainer
agreed); RLinf#129 (the wrong parameter passed to the KL penalty); rlhf-book#162 on KL direction
conventions.
"""

import refimpl
from conformance.mutants.base import Mutant


def kl_penalty(logp, ref_logp, mask, **kwargs):
    return refimpl.kl_penalty(ref_logp, logp, mask, **kwargs)


MUTANT = Mutant(
    name="kl_args_swapped",
    bug_class="KL estimator arguments swapped (policy and reference log-probs exchanged)",
    catalogue=7,
    cites=("PaLM-rlhf-pytorch#43", "RLinf#129", "rlhf-book#162"),
    signature={
        "kl_penalty": (
            "property", "golden", "invariant:on_policy", "preset:areal", "preset:ms_swift",
            "preset:open_instruct", "preset:openrlhf", "preset:skyrl", "preset:trl", "preset:verl",
        ),
    },
    replace={"kl_penalty": kl_penalty},
)
