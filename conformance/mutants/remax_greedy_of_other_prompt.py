"""ReMax baseline of another prompt: the B/G greedy rewards are tiled (``repeat``) instead of repeated in
place (``repeat_interleave``), so sample i is compared with the greedy completion of prompt i mod (B/G)
rather than of its own prompt i // G. verl attaches the greedy reward to the prompt batch before
``batch.repeat(n, interleave=True)`` (ray_trainer.py:1534-1538); the non-interleaved layout is the
classic mistake of that step.

Bug-catalogue class 10 (advantage plumbing: the right tensor broadcast along the wrong axis); the vector
``remax_advantages/greedy-of-own-prompt`` (G = 3, greedy [0, 1]) shows it.
"""

from conformance.mutants.base import Mutant, upcast


def remax_advantages(rewards, greedy_rewards, group_size):
    (r, b), out_dtype = upcast(rewards, greedy_rewards)
    return (r - b.repeat(group_size)).to(out_dtype)  # [b0, b1, b0, b1, ...], not [b0, b0, b1, b1, ...]


MUTANT = Mutant(
    name="remax_greedy_of_other_prompt",
    bug_class="ReMax baseline taken from another prompt's greedy completion (baselines tiled, not interleaved)",
    catalogue=10,
    cites=("verl ray_trainer.py:1534-1538", "bug-catalogue class 10 [U]"),
    signature={"remax_advantages": ("property", "golden")},
    replace={"remax_advantages": remax_advantages},
)
