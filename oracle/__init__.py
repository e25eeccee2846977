"""rlspec oracle: the slow, literal NumPy float64 implementation of every quantity of spec v1 (and v1.1).

Each function reads like its paper (explicit loops over rows, tokens and group members, the
symbols of the equations) and states its spec id, equation, source and edge cases in its docstring.
Gradients are vector-Jacobian products ``<name>_grad(<positional args>, upstream, *, <keywords>)``
written from the hand derivation, stop-gradients included. The contract is
``conformance/spec/v1/api.md``. NumPy only: this package never imports torch, ``refimpl`` or
``conformance``.

The package exports the `__all__` of each family module below (`oracle.policy_losses.__all__`, ...): a function
is public when its module lists it, and nothing here lists a function.
"""

from oracle import (
    advantages,
    aggregation,
    composite,
    controllers,
    covariance,
    entropy_terms,
    estimators,
    fused_head,
    gae,
    kl,
    logprobs,
    metrics,
    offpolicy,
    policy_losses,
    reward_shaping,
    rewards,
    sampling,
    value_loss,
    whiten,
)

_FAMILIES = (logprobs, sampling, fused_head, advantages, gae, whiten, rewards, kl, policy_losses, value_loss, aggregation,
             composite, metrics, offpolicy, estimators, covariance, entropy_terms, controllers, reward_shaping)

__all__: list[str] = [name for module in _FAMILIES for name in module.__all__]
globals().update({name: getattr(module, name) for module in _FAMILIES for name in module.__all__})
