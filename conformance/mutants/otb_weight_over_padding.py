"""The Optimal Token Baseline's cumulative path weight W summed over every position of the row, masked ones
included: ``w.cumsum(-1)`` without the mask. Prompt, padding and tool-observation positions add their
meaningless 1 - 2π + Σπ² (times ρ²) to every later W, so the weights of the group's per-step baseline are
off, and a NaN or inf there (which the spec never reads) reaches W and the advantages. The returns are
right.

verl masks before the sum, ``(w_per_timestep * response_mask).cumsum(dim=-1)`` (core_algos.py:937, :1053,
0.9.1); this is the mask the mutant drops. Bug-catalogue class 11 (masked positions leak into valid tokens:
tool tokens, values past EOS); the vector ``optimal_token_baseline_advantages/valid-token-alignment`` (a tool
token before the step the rows share: W = 2 instead of 1) shows it.
"""

import torch

from conformance.mutants.base import Mutant
from refimpl.estimators import otb_advantages_from_paths


def optimal_token_baseline_advantages(token_rewards, mask, group_size, old_logp, sum_pi_squared, is_weights=None, *,
                                      align="position", zero_tail=True, tail_length="extent", eps=0.0):
    m = mask.bool()
    f64 = torch.float64
    returns = torch.where(m, torch.where(m, token_rewards.to(f64), 0.0).flip(1).cumsum(dim=1).flip(1), 0.0)
    w = 1.0 - 2.0 * torch.exp(old_logp.to(f64)) + sum_pi_squared.to(f64)
    if is_weights is not None:
        w = w * is_weights.to(f64) ** 2
    W = torch.where(m, w.cumsum(dim=1), 0.0)  # the bug: masked positions' w enter the running sum
    A = otb_advantages_from_paths(returns, W, m, group_size, align=align, zero_tail=zero_tail, tail_length=tail_length, eps=eps)
    return A.to(token_rewards.dtype), returns.to(token_rewards.dtype)


MUTANT = Mutant(
    name="otb_weight_over_padding",
    bug_class="Optimal Token Baseline path weight W accumulated over masked positions (prompt, padding, tool tokens)",
    catalogue=11,
    cites=("verl core_algos.py:937 (0.9.1), the mask it applies",),
    signature={"optimal_token_baseline_advantages": ("property", "golden", "invariant:mask", "preset:verl")},
    replace={"optimal_token_baseline_advantages": optimal_token_baseline_advantages},
)
