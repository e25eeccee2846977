"""rlspec refimpl: the fast PyTorch implementation of spec v1 (values; gradients by autograd).

Every function takes and returns torch tensors on any device, with the names, positional arguments
and keywords of ``conformance/spec/v1/api.md``. Half-precision inputs are computed with float32
accumulation and returned in their input dtype. Masked inputs never reach an output or a gradient.
"""

from refimpl.advantages import grpo_advantages, reinforce_advantages, rloo_advantages, whiten
from refimpl.estimators import (
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
from refimpl.aggregation import aggregate, global_counts
from refimpl.composite import corrected_policy_loss, policy_loss
from refimpl.covariance import clip_cov_mask, kl_cov_token_loss
from refimpl.controllers import entropy_coef_applied, entropy_coef_update, kl_controller_update
from refimpl.entropy_terms import entropy_bonus, entropy_top_mask
from refimpl.fused_logprobs import (
    token_entropy_from_hidden,
    token_logprobs_and_entropy_from_hidden,
    token_logprobs_from_hidden,
)
from refimpl.gae import gae
from refimpl.kl import kl_loss_term, kl_penalty
from refimpl.logprobs import token_entropy, token_logprobs
from refimpl.losses import (
    cispo_token_loss,
    dppo_token_loss,
    dro_token_loss,
    vespo_token_loss,
    gmpo_token_loss,
    gspo_token_loss,
    pg_token_loss,
    ppo_token_loss,
    sapo_token_loss,
    value_token_loss,
)
from refimpl.metrics import ppo_clipped_mask
from refimpl.offpolicy import (
    decoupled_ppo_token_loss,
    off_policy_sequence_mask,
    proximal_logp_interpolation,
    rollout_is_weights,
    rollout_rejection_mask,
)
from refimpl.rewards import rlhf_token_rewards
from refimpl.reward_shaping import overlong_penalty, shaped_rewards
from refimpl.distributed import StepCounts, micro_batch_loss, step_counts  # noqa: E402  (DP-exact aggregation)
from refimpl.vocab_parallel import (  # noqa: E402  (tensor-parallel LM head)
    vocab_parallel_token_entropy,
    vocab_parallel_token_entropy_from_hidden,
    vocab_parallel_token_logprobs,
    vocab_parallel_token_logprobs_and_entropy_from_hidden,
    vocab_parallel_token_logprobs_from_hidden,
)
from refimpl.packed import (
    pack_boundary_mask,
    packed_aggregate,
    packed_segments,
    packed_token_entropy,
    packed_token_logprobs,
)

__all__ = [
    "token_logprobs",
    "token_entropy",
    "token_logprobs_from_hidden",
    "token_entropy_from_hidden",
    "token_logprobs_and_entropy_from_hidden",
    "reinforce_advantages",
    "rloo_advantages",
    "grpo_advantages",
    "rlhf_token_rewards",
    "gae",
    "whiten",
    "kl_penalty",
    "pg_token_loss",
    "ppo_token_loss",
    "gspo_token_loss",
    "cispo_token_loss",
    "value_token_loss",
    "aggregate",
    "global_counts",
    "policy_loss",
    "corrected_policy_loss",
    "ppo_clipped_mask",
    # spec v1.1: off-policy and asynchronous training (refimpl.offpolicy)
    "rollout_is_weights",
    "rollout_rejection_mask",
    "decoupled_ppo_token_loss",
    "proximal_logp_interpolation",
    "off_policy_sequence_mask",
    # spec v1.1: policy losses of 2025-26 (refimpl.losses)
    "sapo_token_loss",
    "gmpo_token_loss",
    "dppo_token_loss",
    "dro_token_loss",
    "vespo_token_loss",
    # spec v1.1: advantage estimators (refimpl.estimators)
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "remax_advantages",
    "opo_advantages",
    "grpo_passk_advantages",
    "gdpo_advantages",
    "maxrl_advantages",
    "gpg_advantages",
    "optimal_token_baseline_advantages",
    # spec v1.1: the KL term's value and gradient as it enters a loss (refimpl.kl)
    "kl_loss_term",
    # spec v1.1: covariance-selected tokens (refimpl.covariance)
    "clip_cov_mask",
    "kl_cov_token_loss",
    # spec v1.1: entropy terms and coefficient controllers (refimpl.entropy_terms, refimpl.controllers)
    "entropy_top_mask",
    "entropy_bonus",
    "kl_controller_update",
    "entropy_coef_update",
    "entropy_coef_applied",
    # spec v1.1: reward shaping before the advantage (refimpl.reward_shaping)
    "overlong_penalty",
    "shaped_rewards",
    # multi-GPU / packing (refimpl.distributed, refimpl.vocab_parallel, refimpl.packed)
    "StepCounts",
    "step_counts",
    "micro_batch_loss",
    "vocab_parallel_token_logprobs",
    "vocab_parallel_token_entropy",
    "vocab_parallel_token_logprobs_from_hidden",
    "vocab_parallel_token_entropy_from_hidden",
    "vocab_parallel_token_logprobs_and_entropy_from_hidden",
    "packed_token_logprobs",
    "packed_token_entropy",
    "packed_aggregate",
    "packed_segments",
    "pack_boundary_mask",
]
