"""token_mean as the mean of the ranks' token means: each data-parallel rank divides by its own tokens (all
its micro-batches), DDP averages the ranks, so a rank with short completions weighs its tokens more.

SkyRL#925 / SkyRL#1296 (token_mean a mean of micro-batch and rank means, fixed by all-reducing the counts).
"""

import refimpl.distributed
from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import _dist


def plant(stack, cfg):
    def step_counts(masks, **kw):
        return refimpl.distributed.StepCounts(float(sum(m.sum() for m in masks)), float(sum(m.shape[0] for m in masks)))

    replace_attr(stack, _dist, "step_counts", step_counts)


MUTANT = WiringMutant(
    name="token_mean_of_rank_means",
    bug_class="token mean over each rank's own tokens, averaged over the data-parallel ranks",
    cites=("SkyRL#925", "SkyRL#1296"),
    link="trace.grad",
    identifies="over each rank's own counts, averaged over the ranks",
    plant=plant,
    world_size=2,
)
