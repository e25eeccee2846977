"""Context parallelism with the token count all-reduced over the data-parallel group only: each CP rank divides
its shard's token losses by the tokens of its own shard (summed over the DP ranks), not of the whole sequences,
so token_mean is too large by about the CP size and weighs the shards unequally.

verl#6049 (the token count all-reduced over the DP group, undercounting by the CP size).
"""

import torch.distributed as dist

from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import _dist


def plant(stack, cfg):
    cp = cfg.cp_size
    world, rank = dist.get_world_size(), dist.get_rank()
    groups = [dist.new_group(list(range(c, world, cp))) for c in range(cp)]  # every rank creates every DP group
    dp_group = groups[rank % cp]

    def cp_step_counts(masks, *, cp_rank, group=None, seqs_per_mask=None):
        return original(masks, cp_rank=cp_rank, group=dp_group, seqs_per_mask=seqs_per_mask)

    original = replace_attr(stack, _dist, "cp_step_counts", cp_step_counts)


MUTANT = WiringMutant(
    name="cp_count_dp_only",
    bug_class="context parallelism: the token count all-reduced over the data-parallel group only",
    cites=("verl#6049",),
    link="trace.grad",
    identifies="all-reduced over the data-parallel group only",
    plant=plant,
    cp_size=2,
)
