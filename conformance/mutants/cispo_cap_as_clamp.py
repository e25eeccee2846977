"""CISPO's one-sided cap applied as a two-sided clamp: with no lower bound (eps_low None, the paper's
setting) the weight is floored at 1 − eps_high as well, so a token whose ratio fell below that gets a
larger coefficient than its ratio: w = max(r, 1 − ε) instead of r.

MiniMax-M1 (arXiv:2506.13585) uses no lower bound ("we did not impose a lower bound on the IS weight by
setting ε_low to a large value"); TRL (`torch.clamp(coef_1, max=self.epsilon_high)`, grpo_trainer.py:3110,
1.16.0), ms-swift and open-instruct cap from above only, while verl, rlhf-book and SkyRL clamp both ways
with their own ε_low: porting one as the other (a `clamp(r, 1 − ε, 1 + ε)` where only `max=` was meant)
is this bug. Expected values: A = 1, r = 0.5, ε_high = 0.28, no lower bound: gradient −0.5; the mutant
gives −0.72.
"""

import refimpl
from conformance.mutants.base import Mutant


def cispo_token_loss(logp, old_logp, advantages, mask, *, eps_low=None, eps_high=0.28, bound="relative",
                     surrogate="logp"):
    if eps_low is None and bound == "relative":
        eps_low = min(eps_high, 1.0)  # the bug: the upper cap mirrored as a lower one
    return refimpl.cispo_token_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high,
                                    bound=bound, surrogate=surrogate)


MUTANT = Mutant(
    name="cispo_cap_as_clamp",
    bug_class="CISPO's one-sided cap applied as a two-sided clamp (ratios below 1 − eps floored)",
    catalogue=28,
    cites=("arXiv:2506.13585", "trl grpo_trainer.py:3110"),
    signature={"cispo_token_loss": ("golden", "preset:open_instruct")},
    replace={"cispo_token_loss": cispo_token_loss},
)
