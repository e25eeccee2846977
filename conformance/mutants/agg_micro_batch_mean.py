"""Per-micro-batch token mean, rescaled by the micro-batch's share of the *sequences*.

The gradient-accumulation bug: each micro-batch computes its own token mean and is then scaled by
a sample-count ratio (micro-batch size / mini-batch size) instead of being divided by the global
token count. verl#5625 (2026-03-16): "the scale factor used a sample-count ratio while agg_loss
divided by the local token count"; verl 695bdbb / verl#141; transformers#34191 (the "GA bug",
huggingface/blog#2414); trl d14f7f3 / trl#2647; open-instruct#1161. Sequence modes come out right
(their normaliser is a sequence count); token_mean and token_sum do not.
"""

import refimpl
from conformance.mutants.base import Mutant


def aggregate(token_loss, mask, *, mode, norm_length=None, num_tokens=None, num_seqs=None):
    local = refimpl.aggregate(token_loss, mask, mode=mode, norm_length=norm_length)  # local mean
    if num_seqs is None:
        return local
    return local * (mask.shape[0] / float(num_seqs))  # loss * micro_bsz / mini_bsz


MUTANT = Mutant(
    name="agg_micro_batch_mean",
    bug_class="loss averaged per micro-batch and rescaled by sequence share instead of the global token count",
    catalogue=1,
    cites=("verl#5625", "verl#141 (695bdbb)", "transformers#34191", "trl#2647 (d14f7f3)", "open-instruct#1161"),
    signature={"aggregate": ("invariant:partition",)},
    replace={"aggregate": aggregate},
)
