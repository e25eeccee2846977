"""GDPO computed as GRPO on the weighted sum: the rewards are summed first and the sum normalised per
group (then over the batch), so a reward with a large spread drowns the others, which is what GDPO's
per-reward normalisation prevents. It is TRL's default ``multi_objective_aggregation="sum_then_normalize"``
(grpo_trainer.py:2761-2788) standing in for ``"normalize_then_sum"`` (:2790-2800).

Bug-catalogue class 22 (normalisation mode mis-wired); the vector
``gdpo_advantages/each-reward-normalised-before-the-sum`` (spreads 100 and 1 cancel) shows it.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant, upcast


def gdpo_advantages(rewards, group_size, *, reward_weights=None, std_ddof=1, eps=1e-6, batch_normalize=True,
                    singleton="zero"):
    (r,), out_dtype = upcast(rewards)
    w = torch.ones(r.shape[1], dtype=r.dtype) if reward_weights is None else torch.tensor(reward_weights, dtype=r.dtype)
    summed = (r * w).sum(dim=1)  # the weighted sum first ...
    s = refimpl.grpo_advantages(summed, group_size, std_ddof=std_ddof, eps=eps, singleton=singleton)  # ... then one z-score
    if batch_normalize and s.numel():
        c = s - s[:1]
        c = c - c.mean()
        n = s.numel() - std_ddof
        sd = torch.sqrt((c * c).sum() / n) if n > 0 else torch.zeros((), dtype=s.dtype)
        s = torch.where(sd + eps == 0, 0.0, c / (sd + eps))
    return s.to(out_dtype)


MUTANT = Mutant(
    name="gdpo_normalises_after_sum",
    bug_class="GDPO rewards summed before the group normalisation (GRPO on the weighted sum)",
    catalogue=22,
    cites=("trl grpo_trainer.py:2761-2800", "arXiv:2601.05242", "bug-catalogue class 22 [U]"),
    signature={"gdpo_advantages": ("property", "golden", "preset:trl", "preset:ms_swift")},
    replace={"gdpo_advantages": gdpo_advantages},
)
