"""token-mean silently falls back to the micro-batch's own denominator: each micro-batch's loss is its token
mean, and the accumulated micro-batches add up (no division by the accumulation steps, no global count), so
the update is about G times the step's token mean, weighted by each micro-batch's length.

verl#7321 / verl#7200 (token-mean with the micro-batch denominator when the global batch info is missing).
"""

import refimpl.distributed
from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import _dist


def plant(stack, cfg):
    def micro_batch_loss(token_loss, mask, counts, *, mode, norm_length=None, dp_world_size=None, **kw):
        own = refimpl.distributed.StepCounts(float(mask.sum()), float(mask.shape[0]))
        return original(token_loss, mask, own, mode=mode, norm_length=norm_length, dp_world_size=dp_world_size, **kw)

    original = replace_attr(stack, _dist, "micro_batch_loss", micro_batch_loss)


MUTANT = WiringMutant(
    name="micro_batch_denominator",
    bug_class="token mean over each micro-batch's own tokens, the micro-batches summed (no global count)",
    cites=("verl#7321", "verl#7200"),
    link="trace.grad",
    identifies="of each micro-batch (its own counts), summed over the accumulation steps",
    plant=plant,
)
