"""The Optimal Token Baseline without its path weights: at each step the baseline is the plain mean of the
present members' returns-to-go (every W taken as 1), the per-token group mean that OTB replaces. This is
what a trainer computes when the Σπ² it needs never reaches the estimator and the weight falls back to a
constant. Outcome rewards still give 0 for an all-equal group; unequal returns get the wrong baseline
wherever the members' W differ.

Li et al., arXiv:2602.07078 (the group-mean baseline that the W-weighted optimal baseline improves on).
Bug-catalogue class 10 (a tensor that never reaches its slot); the vector
``optimal_token_baseline_advantages/worked-example`` (W = 0.5 and 0.75 at the first step: B = 0.4, not 0.5)
shows it.
"""

import torch

from conformance.mutants.base import Mutant
from refimpl.estimators import otb_advantages_from_paths


def optimal_token_baseline_advantages(token_rewards, mask, group_size, old_logp, sum_pi_squared, is_weights=None, *,
                                      align="position", zero_tail=True, tail_length="extent", eps=0.0):
    m = mask.bool()
    returns = torch.where(m, torch.where(m, token_rewards.to(torch.float64), 0.0).flip(1).cumsum(dim=1).flip(1), 0.0)
    W = m.to(torch.float64)  # the bug: every present member weighs 1 (old_logp, sum_pi_squared, is_weights unused)
    A = otb_advantages_from_paths(returns, W, m, group_size, align=align, zero_tail=zero_tail, tail_length=tail_length, eps=eps)
    return A.to(token_rewards.dtype), returns.to(token_rewards.dtype)


MUTANT = Mutant(
    name="otb_unweighted_baseline",
    bug_class="Optimal Token Baseline averaged without its path weights W (a plain per-step group mean of the returns)",
    catalogue=10,
    cites=("arXiv:2602.07078 (the group-mean baseline OTB replaces)",),
    signature={"optimal_token_baseline_advantages": ("property", "golden", "preset:verl")},
    replace={"optimal_token_baseline_advantages": optimal_token_baseline_advantages},
)
