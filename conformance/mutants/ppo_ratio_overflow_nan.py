"""The importance ratio is exp'd on the raw tensors and the mask is *multiplied* in afterwards: a
padded position with a garbage or huge log-ratio gives inf or NaN, and inf·0 = NaN·0 = NaN reaches
the loss and every gradient; a valid token with an overflowing ratio and A = 0 gives 0·inf = NaN.

PaddleNLP#10596 (NaN after 1000+ steps from exp of padded deltas of 30-40); OpenRLHF#1240 (NaN in
masked `old_log_probs`); verl 5cbad83 / verl#2377 (`torch.where`-safe masked mean); radixark/miles#1363
(clamp the log-ratio before exp); Flash-RL#19.
"""

import torch

from conformance.mutants.base import Mutant, upcast


def ppo_token_loss(logp, old_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None,
                   log_ratio_clamp=None):
    (lp, old, A), out_dtype = upcast(logp, old_logp, advantages)
    d = lp - old
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    ratio = torch.exp(d)
    A = A.unsqueeze(1) if A.dim() == 1 else A
    loss = torch.maximum(-A * ratio, -A * ratio.clamp(1 - eps_low, 1 + eps_high))
    if dual_clip is not None:
        loss = torch.where(A < 0, torch.minimum(loss, -dual_clip * A), loss)
    return (loss * mask.to(loss.dtype)).to(out_dtype)  # masked by multiplication


MUTANT = Mutant(
    name="ppo_ratio_overflow_nan",
    bug_class="ratio exp'd on unmasked tensors and masked by multiplication (inf or NaN times 0 is NaN)",
    catalogue=15,
    cites=("PaddleNLP#10596", "OpenRLHF#1240", "verl#2377 (5cbad83)", "miles#1363"),
    signature={"ppo_token_loss": ("golden", "invariant:mask")},
    replace={"ppo_token_loss": ppo_token_loss},
)
