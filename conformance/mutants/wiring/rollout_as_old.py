"""The inference engine's (behaviour) log-probs are used as PPO's old log-probs in a trainer that recomputes
them: the ratio mixes the engine/trainer mismatch (precision, kernels, staleness) into the clipping.

verl#2331-style rollout/old confusion; the reason every asynchronous trainer recomputes pi_old (AReaL's
decoupled PPO, verl's rollout correction).
"""

from dataclasses import replace

from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer.rollout import Batch


def plant(stack, cfg):
    def rows(self, start, stop):
        mb = original(self, start, stop)
        return replace(mb, old_logp=mb.behav_logp) if mb.old_logp is not None and mb.behav_logp is not None else mb

    original = replace_attr(stack, Batch, "rows", rows)


MUTANT = WiringMutant(
    name="rollout_as_old",
    bug_class="rollout (engine) log-probs used as the old log-probs of the PPO ratio",
    cites=("bug catalogue: old vs rollout log-probs",),
    link="trace.grad",
    identifies="rollout (engine) log-probs used as pi_old",
    plant=plant,
    config=dict(asynchronous=True, max_staleness=1, actor_dtype="bfloat16", num_actors=1),
)
