"""KL-Cov penalises the tokens of largest |log-ratio| instead of the tokens of largest covariance
(A − Ā)·(logp − l̄): the n = max(1, ⌊fraction·N⌋) tokens that drifted most from π_old get
coef·|logp − old_logp|, i.e. a top-k KL trust region. It reads "KL-Cov" as "KL on the largest KL"; the
method ranks by the covariance of log-prob and advantage, the quantity that drives the entropy down.
The ratio term −A·r is right, so on-policy (every |Δ| = 0, no penalty) it is invisible.

arXiv:2505.22617 (KL-Cov ranks by Cov(log π, A)); verl core_algos.py:1905-1907 and SkyRL ppo_utils.py
compute_policy_loss_kl_cov (`torch.topk(cov_lst_all, k)`); a wrong tensor in the ranking slot, as in
bug-catalogue class 10.
"""

import math

import torch

from conformance.mutants.base import Mutant, upcast
from refimpl.masking import exp_zero_safe, masked_advantages


def kl_cov_token_loss(logp, old_logp, advantages, mask, *, fraction=2e-4, coef=0.1):
    m = mask.bool()
    (lp, old), out_dtype = upcast(logp, old_logp)
    lp, old = torch.where(m, lp, 0.0), torch.where(m, old, 0.0).detach()
    A = masked_advantages(advantages, m, lp.dtype).detach()
    d = lp - old
    selected = torch.zeros(m.numel(), dtype=torch.bool)
    valid = m.flatten().nonzero().squeeze(1)
    if valid.numel():
        n = max(1, math.floor(fraction * valid.numel()))
        by_drift = torch.sort(-d.detach().abs().flatten()[valid], stable=True).indices[:n]  # the bug: |d|, not cov
        selected[valid[by_drift]] = True
    selected = selected.view(m.shape)
    ratio_loss = torch.where(A == 0, 0.0, -A * exp_zero_safe(d))
    penalty = torch.where(selected, coef * d.abs(), 0.0)
    return torch.where(m, ratio_loss + penalty, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="kl_cov_selects_by_abs_logratio",
    bug_class="KL-Cov ranks tokens by |log-ratio| instead of by the covariance of log-prob and advantage",
    catalogue=10,
    cites=("arXiv:2505.22617", "verl core_algos.py:1905-1907", "SkyRL ppo_utils.py compute_policy_loss_kl_cov"),
    signature={"kl_cov_token_loss": ("property", "golden", "preset:skyrl")},
    replace={"kl_cov_token_loss": kl_cov_token_loss},
)
