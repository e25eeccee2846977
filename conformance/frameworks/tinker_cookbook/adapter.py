"""The tinker-cookbook adapter: what tinker-cookbook computes locally, called through the installed
tinker-cookbook, in spec v1 conventions.

tinker-cookbook 0.6.1 trains on the Tinker service: every policy loss (``importance_sampling``, ``ppo``,
``cispo``, ``dro``, ``gspo``, ``stable_reinforce``; tinker 0.38.0's ``LossFnType``) runs there, behind
``TrainingClient.forward_backward``, and cannot be called (there is nothing local to call, and no request
ever leaves this machine). Only what the cookbook
computes on the client before it sends a batch is checked: the group-centred advantages, the constant-reward
group filter and the KL penalty folded into the advantages (``rl/metrics.py::incorporate_kl_penalty``). It
runs in its own environment (``rlspec frameworks install tinker_cookbook``: ``tinker-cookbook==0.6.1
--no-deps`` with torch, the ``tinker`` client and the modules its RL code imports) and is driven through a
worker process (``conformance/frameworks/subprocess_worker.py``; the calls are in
``conformance/frameworks/tinker_cookbook/ops.py``). A NumPy adapter without gradients: every quantity the
cookbook computes locally is a constant of the loss (no autograd).

What is called (tinker-cookbook 0.6.1; paths relative to ``tinker_cookbook/``):

| spec function | tinker-cookbook |
|---|---|
| ``grpo_advantages`` | ``rl/data_processing.py::compute_advantages`` (:24-43): ``rewards_G - rewards_G.mean()`` per ``TrajectoryGroup`` (:38-40), i.e. ``scale="none"``, the only setting; ``"group"`` and ``"batch"`` are not implemented (no std division anywhere). A one-sample group gives 0 (``singleton="zero"``, canonical) |

Everything else the spec defines is computed by the Tinker service or not at all: ``token_logprobs``,
``token_entropy``, the policy and value losses, ``aggregate`` (the service's losses are sums over the datum's
tokens) and ``kl_penalty`` as a loss term are not offered (the attributes are ``None``: "not implemented"
rows). The cookbook's k1 log-ratio, its batch token mean and its discounted sum are checked where they occur,
inside ``incorporate_kl_penalty``, by the framework rows of ``conformance/frameworks/tinker_cookbook/checks.py``
(the composition ``A + c·(aggregate(kl_penalty(k1), token_mean) − kl_penalty(k1))``, discounted by
``reinforce_pp_advantages(gap="discount")``'s returns), together with the whole local chain the trainer runs
(``rl/train.py::prepare_minibatch``) and the constant-reward filter.

Conventions this adapter converts: ``[B]`` rewards in contiguous groups of ``group_size`` become one
``TrajectoryGroup`` per group whose trajectories have no transitions, so ``get_total_rewards()`` is the group
reward itself; the ``[B]`` advantages are the concatenation of the groups' ``(G,)`` tensors.

Precision: ``compute_advantages`` builds ``torch.tensor(traj_group.get_total_rewards())`` from Python floats
(:38), a float32 tensor whatever the rewards' precision, so float64 rewards get float32 advantages (a
precision finding, float32 class). Its group mean is a float32 sum divided by G: an all-equal group whose
reward is not exact in a float32 sum (0.3 six times, 0.1 seven times) keeps a residue of one float32 ulp
(2.98e-08, -7.45e-09) on every member where the spec's edge case is exactly 0; the residue is inside the float32
tolerance (the README's findings).

Importing this module never starts tinker-cookbook; constructing the adapter does, and a missing environment
raises ``AdapterLoadError("... cannot import ...")`` so ``rlspec check`` shows a "not installed" row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.frameworks import spec_io as io
from conformance.frameworks.subprocess_adapter import SubprocessAdapter


class TinkerCookbookAdapter(SubprocessAdapter):
    """Spec v1 adapter for tinker-cookbook's local computations (see the module docstring)."""

    name = "tinker_cookbook"
    dtypes = ("float64", "float32")
    supports_grad = False  # the advantages are constants of the loss; the loss itself runs on the Tinker service
    checks_module = "conformance.frameworks.tinker_cookbook.checks"
    precision_notes = {
        "grpo_advantages": "torch.tensor(get_total_rewards()) is a float32 tensor (rl/data_processing.py:38)",
    }
    unsupported_kwargs = {"grpo_advantages": {"scale": ("group", "batch")}}

    # Computed by the Tinker service (forward_backward), or not at all: nothing local to call. None is the
    # runner's "not implemented" (conformance/runner/verdict.py). The abstract hooks of SubprocessAdapter that shape
    # those calls are None too.
    token_logprobs = token_logprobs_grad = token_entropy = token_entropy_grad = None
    kl_penalty = kl_penalty_grad = None
    ppo_token_loss = ppo_token_loss_grad = gspo_token_loss = gspo_token_loss_grad = None
    value_token_loss = value_token_loss_grad = None
    micro_batched_loss = micro_batched_loss_grad = None
    kl_controller_update = None
    _logprob_request = _ppo_params = _gspo_params = _value_params = _kl = _micro_batched = None

    def grpo_advantages(self, rewards: Any, group_size: int, *, scale: str = "group") -> np.ndarray:
        """``compute_advantages`` (rl/data_processing.py:24-43) on one ``TrajectoryGroup`` per group:
        ``r - mean_g``; only ``scale="none"``."""
        fn = "grpo_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        io.choice(fn, "scale", scale)
        if scale != "none":
            raise NotImplementedError("compute_advantages only centres each group, rewards_G - rewards_G.mean() "
                                      "(rl/data_processing.py:38-40): no standard deviation divides, so only scale='none'")
        out = self._worker.call("compute_advantages", {"rewards": r}, {"group_size": G})["outputs"]["advantages"]
        return np.asarray(out, dtype=np.float64).astype(r.dtype)

    def constant_group_filter(self, rewards: Any, group_size: int) -> np.ndarray:
        """``remove_constant_reward_groups`` (rl/data_processing.py:305-332) on one ``TrajectoryGroup`` per
        group: the indices of the groups it keeps."""
        r, G = io.check_groups("remove_constant_reward_groups", rewards, group_size)
        return np.asarray(self._worker.call("remove_constant_reward_groups", {"rewards": r}, {"group_size": G})["outputs"]["kept"])

    def prepare_minibatch(self, batch: dict[str, np.ndarray], group_size: int, *, kl_penalty_coef: float = 0.0,
                          kl_discount_factor: float = 0.0, remove_constant_reward_groups: bool = False) -> dict[str, Any]:
        """``rl/train.py::prepare_minibatch`` on a spec-layout batch (``ops.py`` says how rows become
        trajectories): ``mask``, ``action`` ([B, T] bool), ``logp`` (sampled log-probs at action positions),
        ``ref_logp`` (reference log-probs), ``step_rewards`` and ``final_rewards`` ([B]). Returns the datums'
        ``advantages`` and ``datum_mask`` in the spec layout, ``covered`` (the positions a datum has), ``kept``
        ([B]: the row's group survived the filter) and the ``kl_policy_base`` metric."""
        arrays = {k: np.asarray(batch[k]) for k in ("mask", "action", "logp", "ref_logp", "step_rewards", "final_rewards")}
        params = {"group_size": int(group_size), "kl_penalty_coef": float(kl_penalty_coef),
                  "kl_discount_factor": float(kl_discount_factor), "remove_constant_reward_groups": bool(remove_constant_reward_groups)}
        return self._worker.call("prepare_minibatch", arrays, params)["outputs"]


__all__ = ["TinkerCookbookAdapter"]
