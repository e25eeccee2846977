"""A rollout whose mask the planted bug rewrites (shared by the mask mutants)."""

from conformance.mutants.wiring.base import replace_attr
from refimpl.trainer import loop


def rewrite_mask(stack, rewrite):
    def generate(*args, **kw):
        batch = original(*args, **kw)
        batch.mask = rewrite(batch)
        return batch

    original = replace_attr(stack, loop, "generate", generate)
