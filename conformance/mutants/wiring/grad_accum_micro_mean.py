"""Gradient accumulation with a per-micro-batch token mean: each micro-batch's loss is divided by its own
token count, then by the accumulation steps, so a token's weight depends on how long the other completions of
its micro-batch are (the step's global token mean was meant).

trl#3021 (GRPOTrainer's bnpo/dapo normalised per micro-batch under gradient accumulation, fixed by counting
the tokens of the whole accumulated batch); the same class as SkyRL#925.
"""

import refimpl.distributed
from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import _dist


def plant(stack, cfg):
    def micro_batch_loss(token_loss, mask, counts, *, mode, norm_length=None, dp_world_size=None, **kw):
        own = refimpl.distributed.StepCounts(float(mask.sum()), float(mask.shape[0]))
        loss = original(token_loss, mask, own, mode=mode, norm_length=norm_length, dp_world_size=dp_world_size, **kw)
        return loss / cfg.grad_accum

    original = replace_attr(stack, _dist, "micro_batch_loss", micro_batch_loss)


MUTANT = WiringMutant(
    name="grad_accum_micro_mean",
    bug_class="gradient accumulation normalised per micro-batch: each micro-batch's own token mean, averaged over the accumulation steps",
    cites=("trl#3021",),
    link="trace.grad",
    identifies="of each micro-batch (its own counts), averaged over the accumulation steps",
    plant=plant,
)
