"""The entropy bonus as each micro-batch's (or rank's) own token mean: the step's `num_tokens` /
`num_seqs` are accepted and ignored, so with uneven micro-batches a token of a short micro-batch weighs
more than one of a long micro-batch, and the parts do not sum to the step's bonus.

TRL 1.16.0 grpo_trainer.py:3192-3201 computes the bonus this way by design (`(entropies *
effective_mask).sum() / effective_mask.sum().clamp(min=1.0) / accumulation_factor`, its comment at
:3196-3198 noting that it can differ from the window-global mean); the same local-count pattern as
bug-catalogue class 1 (trl#2647, verl#5625) for the policy term.
"""

import refimpl
from conformance.mutants.base import Mutant


def entropy_bonus(entropy, mask, *, entropy_coef, mode, norm_length=None, num_tokens=None, num_seqs=None):
    return refimpl.entropy_bonus(entropy, mask, entropy_coef=entropy_coef, mode=mode, norm_length=norm_length)


MUTANT = Mutant(
    name="entropy_bonus_local_token_mean",
    bug_class="entropy bonus normalised by each micro-batch's own token count (the step's counts ignored)",
    catalogue=1,
    cites=("trl grpo_trainer.py:3192-3201", "trl#2647", "verl#5625"),
    signature={"entropy_bonus": ("invariant:partition",)},
    replace={"entropy_bonus": entropy_bonus},
)
