"""The high-entropy mask's threshold taken over the rank's (or micro-batch's) own tokens: each part of
the batch keeps its own top-ρ, so the parts' masks are not the batch's (a part holding only confident
tokens still keeps ρ of them). The `pooled_entropy` of the other parts is accepted and ignored; the
whole batch alone is still right, which is why only the partition check sees it (and the golden
vectors that pass a pool, which `tests/conformance/test_vectors.py` runs with every keyword).

trl#3833 ("Fix Entropy Mask Threshold Calculation when using Multi-GPU training": the threshold was
computed on local entropies, fixed with an all-gather); ms-swift#5270 (the same fix, closed unmerged:
swift/rlhf_trainers/grpo_trainer.py @ 006938be still takes torch.nanquantile of the rank's micro-batch);
miles#3205 (the threshold "over the active tokens this rank scores in the micro-batch").
"""

import refimpl
from conformance.mutants.base import Mutant


def entropy_top_mask(entropy, mask, *, rho=1.0, pooled_entropy=None):
    return refimpl.entropy_top_mask(entropy, mask, rho=rho)  # the quantile of this part's tokens only


MUTANT = Mutant(
    name="entropy_quantile_per_micro_batch",
    bug_class="high-entropy mask threshold taken per rank or micro-batch (the other parts' entropies ignored)",
    catalogue=12,
    cites=("trl#3833", "ms-swift#5270", "miles#3205"),
    signature={"entropy_top_mask": ("invariant:partition",)},
    replace={"entropy_top_mask": entropy_top_mask},
)
