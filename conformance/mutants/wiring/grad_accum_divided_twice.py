"""The loss is divided by the step's global token count and then again by the gradient-accumulation steps
(the trainer's own division, added on top of a denominator that already counts every micro-batch): the
update is g/G for G accumulation steps.

ms-swift#10117 (2026-09: the DAPO/CISPO loss divided by the global token count and by the accumulation steps).
"""

from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import _dist


def plant(stack, cfg):
    def micro_batch_loss(*args, **kw):
        return original(*args, **kw) / cfg.grad_accum

    original = replace_attr(stack, _dist, "micro_batch_loss", micro_batch_loss)


MUTANT = WiringMutant(
    name="grad_accum_divided_twice",
    bug_class="the global token mean divided again by the gradient-accumulation steps (the update is g/G)",
    cites=("ms-swift#10117",),
    link="trace.grad",
    identifies="x1/2 (1/the accumulation steps M",
    plant=plant,
)
