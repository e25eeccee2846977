"""The behaviour importance weight w = π_prox/π_behav of the decoupled PPO objective is left on the
graph: the loss value and dL/dlogp are right, but a gradient reaches the proximal and behaviour
log-probs, which are constants of the objective (AReaL computes `behave_imp_weight` from detached
log-probs: functional.py apply_rejection_sampling `proximal_logprobs.detach()`).

arXiv:2505.24298; the same class as cispo_weight_not_detached (bug-catalogue #28).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def decoupled_ppo_token_loss(logp, prox_logp, behav_logp, advantages, mask, *, behav_cap=None,
                             behav_mode="truncate", **kwargs):
    m = mask.bool()
    base = refimpl.decoupled_ppo_token_loss(logp, prox_logp, prox_logp, advantages, mask, **kwargs)  # w = 1
    dtype = torch.promote_types(logp.dtype, torch.float32)
    w = torch.exp(torch.where(m, prox_logp.to(dtype) - behav_logp.to(dtype), 0.0))  # no detach
    if behav_cap is not None:
        w = w.clamp(max=behav_cap) if behav_mode == "truncate" else torch.where(w <= behav_cap, w, 0.0)
    loss = torch.where(w == 0, 0.0, w * base.to(dtype))  # a zero weight contributes 0 (0 * inf := 0)
    return torch.where(m, loss, 0.0).to(logp.dtype)


MUTANT = Mutant(
    name="decoupled_weight_attached",
    bug_class="decoupled PPO behaviour weight left attached (a gradient reaches the proximal and behaviour log-probs)",
    catalogue=28,
    cites=("arXiv:2505.24298", "AReaL functional.py apply_rejection_sampling"),
    signature={"decoupled_ppo_token_loss": ("invariant:detached",)},
    replace={"decoupled_ppo_token_loss": decoupled_ppo_token_loss},
)
