"""rlspec refimpl: the fast PyTorch implementation of spec v1 (values; gradients by autograd).

Every function takes and returns torch tensors on any device, with the names, positional arguments
and keywords of ``conformance/spec/v1/api.md``. Half-precision inputs are computed with float32
accumulation and returned in their input dtype. Masked inputs never reach an output or a gradient.

The package exports the `__all__` of each module below (`refimpl.policy_losses.__all__`, ...): a function is public
when its module lists it, and nothing here lists a function. Beyond the spec functions: the data-parallel
helpers (`distributed`), the tensor-parallel LM head (`vocab_parallel`), packed rows (`packed`) and context
parallelism (`context_parallel`).
"""

from refimpl import (
    advantages,
    aggregation,
    composite,
    context_parallel,
    controllers,
    covariance,
    distributed,
    entropy_terms,
    estimators,
    fused_head,
    gae,
    kl,
    logprobs,
    metrics,
    offpolicy,
    packed,
    policy_losses,
    reward_shaping,
    rewards,
    sampling,
    value_loss,
    vocab_parallel,
    whiten,
)

_MODULES = (logprobs, sampling, fused_head, advantages, rewards, gae, whiten, kl, policy_losses, value_loss, aggregation, composite,
            metrics, offpolicy, estimators, covariance, entropy_terms, controllers, reward_shaping, distributed, vocab_parallel, packed,
            context_parallel)

__all__: list[str] = [name for module in _MODULES for name in module.__all__]
globals().update({name: getattr(module, name) for module in _MODULES for name in module.__all__})
