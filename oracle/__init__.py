"""rlspec oracle: the slow, literal NumPy float64 implementation of every quantity of spec v1 (and v1.1).

Each function reads like its paper (explicit loops over rows, tokens and group members, the
symbols of the equations) and states its spec id, equation, source and edge cases in its docstring.
Gradients are vector-Jacobian products ``<name>_grad(<positional args>, upstream, *, <keywords>)``
written from the hand derivation, stop-gradients included. The contract is
``conformance/spec/v1/api.md``. NumPy only: this package never imports torch, ``refimpl`` or
``conformance``.
"""

from oracle.advantages import grpo_advantages, reinforce_advantages, rloo_advantages
from oracle.estimators import (
    gdpo_advantages,
    gpg_advantages,
    grpo_passk_advantages,
    maxrl_advantages,
    opo_advantages,
    optimal_token_baseline_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    remax_advantages,
)
from oracle.aggregation import AGGREGATION_MODES, aggregate, aggregate_grad
from oracle.composite import corrected_policy_loss, corrected_policy_loss_grad, policy_loss, policy_loss_grad
from oracle.covariance import clip_cov_mask, kl_cov_token_loss, kl_cov_token_loss_grad
from oracle.controllers import entropy_coef_applied, entropy_coef_update, kl_controller_update
from oracle.entropy_terms import entropy_bonus, entropy_bonus_grad, entropy_top_mask
from oracle.fused_head import (
    token_entropy_from_hidden,
    token_entropy_from_hidden_grad,
    token_logprobs_from_hidden,
    token_logprobs_from_hidden_grad,
)
from oracle.gae import gae
from oracle.kl import KL_ESTIMATORS, kl_loss_term, kl_loss_term_grad, kl_penalty, kl_penalty_grad
from oracle.logprobs import token_entropy, token_entropy_grad, token_logprobs, token_logprobs_grad
from oracle.metrics import ppo_clipped_mask
from oracle.offpolicy import (
    decoupled_ppo_token_loss,
    decoupled_ppo_token_loss_grad,
    off_policy_sequence_mask,
    proximal_logp_interpolation,
    rollout_is_weights,
    rollout_rejection_mask,
)
from oracle.policy_losses import (
    cispo_token_loss,
    cispo_token_loss_grad,
    dppo_token_loss,
    dppo_token_loss_grad,
    dro_token_loss,
    dro_token_loss_grad,
    vespo_token_loss,
    vespo_token_loss_grad,
    gmpo_token_loss,
    gmpo_token_loss_grad,
    gspo_token_loss,
    gspo_token_loss_grad,
    pg_token_loss,
    pg_token_loss_grad,
    ppo_token_loss,
    ppo_token_loss_grad,
    sapo_token_loss,
    sapo_token_loss_grad,
)
from oracle.rewards import rlhf_token_rewards
from oracle.reward_shaping import overlong_penalty, shaped_rewards
from oracle.value_loss import value_token_loss, value_token_loss_grad
from oracle.whiten import whiten

__all__ = [
    # logprob.token / logprob.entropy
    "token_logprobs",
    "token_logprobs_grad",
    "token_entropy",
    "token_entropy_grad",
    # logprob.fused
    "token_logprobs_from_hidden",
    "token_logprobs_from_hidden_grad",
    "token_entropy_from_hidden",
    "token_entropy_from_hidden_grad",
    # adv.*
    "reinforce_advantages",
    "rloo_advantages",
    "grpo_advantages",
    "gae",
    "whiten",
    # reward.rlhf
    "rlhf_token_rewards",
    # kl.estimator
    "kl_penalty",
    "kl_penalty_grad",
    "KL_ESTIMATORS",
    # loss.*
    "pg_token_loss",
    "pg_token_loss_grad",
    "ppo_token_loss",
    "ppo_token_loss_grad",
    "gspo_token_loss",
    "gspo_token_loss_grad",
    "cispo_token_loss",
    "cispo_token_loss_grad",
    "value_token_loss",
    "value_token_loss_grad",
    # agg.*
    "aggregate",
    "aggregate_grad",
    "AGGREGATION_MODES",
    # loss.policy (composite)
    "policy_loss",
    "policy_loss_grad",
    # metric.clip
    "ppo_clipped_mask",
    # offpolicy.* (spec v1.1: off-policy and asynchronous training)
    "rollout_is_weights",
    "rollout_rejection_mask",
    "decoupled_ppo_token_loss",
    "decoupled_ppo_token_loss_grad",
    "proximal_logp_interpolation",
    "off_policy_sequence_mask",
    # offpolicy.loss (spec v1.1 composite)
    "corrected_policy_loss",
    "corrected_policy_loss_grad",
    # loss.sapo / loss.gmpo / loss.dppo / loss.dro (spec v1.1: policy losses of 2025-26)
    "sapo_token_loss",
    "sapo_token_loss_grad",
    "gmpo_token_loss",
    "gmpo_token_loss_grad",
    "dppo_token_loss",
    "dppo_token_loss_grad",
    "dro_token_loss",
    "dro_token_loss_grad",
    "vespo_token_loss",
    "vespo_token_loss_grad",
    # adv.reinforce_pp ... adv.gpg (spec v1.1: advantage estimators)
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "remax_advantages",
    "opo_advantages",
    "grpo_passk_advantages",
    "gdpo_advantages",
    "maxrl_advantages",
    "gpg_advantages",
    "optimal_token_baseline_advantages",  # adv.optimal_token_baseline (spec v1.1)
    # kl.loss (spec v1.1: the KL term's value and gradient as it enters a loss)
    "kl_loss_term",
    "kl_loss_term_grad",
    # select.clip_cov / loss.kl_cov (spec v1.1: covariance-selected tokens)
    "clip_cov_mask",
    "kl_cov_token_loss",
    "kl_cov_token_loss_grad",
    # entropy.top_mask / loss.entropy (spec v1.1: entropy terms)
    "entropy_top_mask",
    "entropy_bonus",
    "entropy_bonus_grad",
    # ctrl.kl / ctrl.entropy (spec v1.1: coefficient controllers)
    "kl_controller_update",
    "entropy_coef_update",
    "entropy_coef_applied",
    # reward.overlong / reward.shaping (spec v1.1: reward shaping before the advantage)
    "overlong_penalty",
    "shaped_rewards",
]
