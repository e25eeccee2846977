"""verl operations for the subprocess worker (``conformance/adapters/subprocess_worker.py``).

Runs inside the verl environment (``rlspec frameworks install verl``); imports only torch, NumPy and
verl. Every op calls the installed verl and returns what verl returns, in verl's conventions
(response tensors ``[B, R]`` with a ``response_mask``, group ids in ``index``, an ``ActorConfig`` for
the policy losses). The conversion to spec conventions happens in ``conformance/adapters/verl_adapter.py``.

What is called (verl 0.9.1, paths relative to the package root ``verl/``; line numbers as in
peer-conventions.md, which match 0.9.1 up to about line 1600):

| op | verl |
|---|---|
| ``agg_loss`` | ``trainer/ppo/core_algos.py::agg_loss`` (:1140) |
| ``kl_penalty`` | ``trainer/ppo/core_algos.py::kl_penalty`` (:2188) |
| ``policy_loss`` | ``core_algos.get_policy_loss_fn(name)``: ``compute_policy_loss_vanilla`` (:1286), ``_dppo_tv`` (:1379), ``_dppo_kl`` (:1460), ``_gspo`` (:1546), ``_sapo`` (:1622), ``_gpg`` (:1707), ``_geo_mean`` (:1928), ``_dro`` (:2014), ``_cispo`` (:2048), ``_bypass_mode`` (:2413), with ``workers/config/actor.py::ActorConfig`` (``policy_loss``: its ``PolicyLossConfig`` fields, e.g. ``dro_beta``); with ``rollout_correction`` the IS weights and rejection mask of verl's rollout correction first (see below); with ``per_row`` also the loss of each row alone (see below) |
| ``rollout_correction`` | ``trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_and_rejection_mask`` (:786), which builds ``log_ratio = old - rollout`` (:849) and calls ``compute_rollout_correction_weights`` (:522) and ``compute_rollout_rejection_mask`` (:197) |
| ``value_loss`` | ``trainer/ppo/core_algos.py::compute_value_loss`` (:2125) |
| ``advantage`` | ``core_algos.get_adv_estimator_fn(name)``: ``compute_gae_advantage_return`` (:216), ``compute_grpo_outcome_advantage`` (:268), ``compute_grpo_vectorized_outcome_advantage`` (:335), ``compute_rloo_outcome_advantage`` (:588), ``compute_rloo_vectorized_outcome_advantage`` (:834) |
| ``masked_whiten`` | ``utils/torch_functional.py::masked_whiten`` (:329) |
| ``logprobs_from_logits`` / ``entropy_from_logits`` | ``utils/torch_functional.py`` (:73, :231) |

Rollout correction (verl 0.9.1, ``trainer/ppo/rollout_corr_helper.py``). Every path in verl reaches
the weights and the rejection mask through ``compute_rollout_correction_and_rejection_mask`` (:786):
the driver's ``compute_rollout_correction_and_add_to_batch`` (:1013, called at
``trainer/ppo/ray_trainer.py:1658``) in decoupled mode, ``compute_policy_loss_bypass_mode``
(``core_algos.py:2496-2509``) in bypass mode. So the ``rollout_correction`` op calls it, with
``old_log_prob``, ``rollout_log_prob`` and ``response_mask`` and the ``RolloutCorrectionConfig`` fields
it reads (``rollout_is``, ``rollout_is_threshold``, ``rollout_is_batch_normalize``, ``rollout_rs``,
``rollout_rs_threshold``), and returns the weights (``rollout_is_weights``, when ``rollout_is`` is set)
and the modified ``response_mask``. ``policy_loss`` with a ``rollout_correction`` dict (a
``RolloutCorrectionConfig``) runs a mode end to end: decoupled (``bypass_mode`` False):
``compute_rollout_correction_and_add_to_batch`` on a ``DataProto`` of ``old_log_probs``,
``rollout_log_probs``, ``response_mask``, then the loss with the batch's modified ``response_mask``
and ``rollout_is_weights``, as ``workers/utils/losses.py:85-112`` passes them; bypass (``bypass_mode``
True): the config goes into ``ActorConfig.policy_loss`` (``loss_mode="bypass_mode"``) and the loss
computes weights and mask itself. In bypass mode the caller passes the rollout log-probs as
``old_log_prob``, which is what ``apply_bypass_mode`` does to the batch (``rollout_corr_helper.py:1138``).

The per-token loss of a policy or value loss is the matrix verl hands to ``agg_loss`` (``loss_mat``):
the op records it by wrapping ``core_algos.agg_loss`` for the duration of the call (the function
object verl's losses look up at call time), the way the TRL adapter records the fused head's output
with a forward hook. Nothing of verl is edited or copied. ``geo_mean`` (GMPO) never calls ``agg_loss``:
its scalar is ``torch.mean`` of one loss per row (core_algos.py:2000), so ``per_row=True`` calls the
same function on each row alone (``[b:b+1]`` slices, the same config) and returns those scalars as
``per_row`` ``[B]`` and as ``per_token`` = ``per_row[:, None] * response_mask`` (the row's loss at each of
its tokens, the spec's ``gmpo_token_loss`` layout), differentiable by the worker's autograd.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np


def load() -> dict[str, Any]:
    import torch
    import verl
    import verl.trainer.ppo.core_algos as core_algos
    import verl.trainer.ppo.rollout_corr_helper as rollout_corr
    import verl.utils.torch_functional as verl_F
    from verl.protocol import DataProto
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    @contextlib.contextmanager
    def record_agg_loss():
        seen: dict[str, Any] = {}
        real = core_algos.agg_loss

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen["loss_mat"] = kwargs["loss_mat"] if "loss_mat" in kwargs else args[0]
            out = real(*args, **kwargs)
            seen["agg"] = out
            return out

        core_algos.agg_loss = spy
        try:
            yield seen
        finally:
            core_algos.agg_loss = real

    def agg_loss(t: dict[str, Any], *, loss_agg_mode: str, dp_size: int = 1, batch_num_tokens: Any = None,
                 global_batch_size: Any = None, loss_scale_factor: Any = None) -> dict[str, Any]:
        loss = core_algos.agg_loss(t["loss_mat"], t["loss_mask"], loss_agg_mode, dp_size=dp_size,
                                   batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size,
                                   loss_scale_factor=loss_scale_factor)
        return {"loss": loss}

    def kl_penalty(t: dict[str, Any], *, kl_penalty: str) -> dict[str, Any]:
        return {"kl": core_algos.kl_penalty(t["logprob"], t["ref_logprob"], kl_penalty)}

    def policy_loss(t: dict[str, Any], *, name: str, loss_agg_mode: str = "token-mean",
                    config: dict[str, Any] | None = None, global_batch_info: dict[str, Any] | None = None,
                    rollout_correction: dict[str, Any] | None = None, policy_loss: dict[str, Any] | None = None,
                    per_row: bool = False) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if policy_loss is not None:  # PolicyLossConfig fields (dro_beta, clip_cov_ratio, ...; actor.py:76-100)
            extra["policy_loss"] = PolicyLossConfig(loss_mode=name, **policy_loss)
        response_mask, weights = t["response_mask"], None
        if rollout_correction is not None:
            rc = RolloutCorrectionConfig(**rollout_correction)
            if rc.bypass_mode:  # the loss computes weights and mask itself (core_algos.py:2413-2549)
                extra["policy_loss"] = PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=rc, **(policy_loss or {}))
            else:  # decoupled mode: the driver step, then the loss with what it put in the batch
                batch = DataProto.from_dict(tensors={"old_log_probs": t["old_log_prob"], "rollout_log_probs": t["rollout_log_prob"],
                                                     "response_mask": t["response_mask"]})
                batch, _ = rollout_corr.compute_rollout_correction_and_add_to_batch(batch, rc)
                response_mask = batch.batch["response_mask"]
                if "rollout_is_weights" in batch.batch.keys():  # noqa: SIM118 - TensorDict refuses `in` on itself
                    weights = batch.batch["rollout_is_weights"]
        cfg = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                          loss_agg_mode=loss_agg_mode, **(config or {}), **extra)
        cfg.global_batch_info.update(global_batch_info or {})
        fn = core_algos.get_policy_loss_fn(name)
        kwargs = {} if weights is None else {"rollout_is_weights": weights}
        with record_agg_loss() as seen:
            loss, metrics = fn(old_log_prob=t["old_log_prob"], log_prob=t["log_prob"], advantages=t["advantages"],
                               response_mask=response_mask, loss_agg_mode=loss_agg_mode, config=cfg, **kwargs)
        out = {"loss": loss, "metrics": {k: float(v) for k, v in metrics.items()},
               "clip_ratio_c": float(cfg.get("clip_ratio_c", 3.0)),
               "clip_ratio_low": float(cfg.clip_ratio_low if cfg.clip_ratio_low is not None else cfg.clip_ratio),
               "clip_ratio_high": float(cfg.clip_ratio_high if cfg.clip_ratio_high is not None else cfg.clip_ratio)}
        if "loss_mat" in seen:  # geo_mean never calls agg_loss (torch.mean over rows, core_algos.py:2000)
            out["per_token"] = seen["loss_mat"]
        if per_row:
            # each row's loss alone: the same function on that one row (B = 1). For a loss that is a mean
            # over rows (geo_mean) this is the row's loss L_b; per_token = L_b at every token of row b.
            rows = []
            for b in range(response_mask.shape[0]):
                kw_b = {} if weights is None else {"rollout_is_weights": weights[b:b + 1]}
                loss_b, _ = fn(old_log_prob=t["old_log_prob"][b:b + 1], log_prob=t["log_prob"][b:b + 1],
                               advantages=t["advantages"][b:b + 1], response_mask=response_mask[b:b + 1],
                               loss_agg_mode=loss_agg_mode, config=cfg, **kw_b)
                rows.append(loss_b.reshape(()))
            out["per_row"] = torch.stack(rows) if rows else response_mask.new_zeros((0,))
            out["per_token"] = out["per_row"][:, None] * response_mask
        if weights is not None:
            out["rollout_is_weights"] = weights
        if rollout_correction is not None:
            out["response_mask"] = response_mask
        return out

    def rollout_correction(t: dict[str, Any], **settings: Any) -> dict[str, Any]:
        weights, mask, _ = rollout_corr.compute_rollout_correction_and_rejection_mask(
            old_log_prob=t["old_log_prob"], rollout_log_prob=t["rollout_log_prob"], response_mask=t["response_mask"], **settings)
        out = {"response_mask": mask}
        if weights is not None:
            out["rollout_is_weights"] = weights.batch["rollout_is_weights"]
        return out

    def value_loss(t: dict[str, Any], *, cliprange_value: float, loss_agg_mode: str = "token-mean", dp_size: int = 1,
                   batch_num_tokens: Any = None, global_batch_size: Any = None, loss_scale_factor: Any = None) -> dict[str, Any]:
        with record_agg_loss() as seen:
            loss, clipfrac = core_algos.compute_value_loss(
                vpreds=t["vpreds"], returns=t["returns"], values=t["values"], response_mask=t["response_mask"],
                cliprange_value=cliprange_value, loss_agg_mode=loss_agg_mode, dp_size=dp_size,
                batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size,
                loss_scale_factor=loss_scale_factor)
        return {"loss": loss, "loss_mat": seen["loss_mat"], "agg": seen["agg"], "clipfrac": float(clipfrac)}

    def advantage(t: dict[str, Any], *, name: str, **kwargs: Any) -> dict[str, Any]:
        fn = core_algos.get_adv_estimator_fn(name)
        if name == "gae":
            adv, ret = fn(token_level_rewards=t["token_level_rewards"], values=t["values"],
                          response_mask=t["response_mask"], gamma=kwargs["gamma"], lam=kwargs["lam"])
        else:
            index = np.asarray(t["index"])
            adv, ret = fn(token_level_rewards=t["token_level_rewards"], response_mask=t["response_mask"],
                          index=index, **kwargs)
        return {"advantages": adv, "returns": ret}

    def masked_whiten(t: dict[str, Any], *, shift_mean: bool = True) -> dict[str, Any]:
        return {"out": verl_F.masked_whiten(t["values"], t["mask"], shift_mean=shift_mean)}

    def logprobs_from_logits(t: dict[str, Any]) -> dict[str, Any]:
        return {"logp": verl_F.logprobs_from_logits(t["logits"], t["labels"])}

    def entropy_from_logits(t: dict[str, Any]) -> dict[str, Any]:
        return {"entropy": verl_F.entropy_from_logits(t["logits"])}

    ops = {
        "agg_loss": agg_loss,
        "kl_penalty": kl_penalty,
        "policy_loss": policy_loss,
        "rollout_correction": rollout_correction,
        "value_loss": value_loss,
        "advantage": advantage,
        "masked_whiten": masked_whiten,
        "logprobs_from_logits": logprobs_from_logits,
        "entropy_from_logits": entropy_from_logits,
    }
    info = {
        "core_algos": core_algos.__file__,
        "flash_attn_cross_entropy": bool(getattr(verl_F, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", False)),
    }
    return {"version": verl.__version__, "ops": ops, "info": info}
