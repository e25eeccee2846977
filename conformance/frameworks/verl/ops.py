"""verl operations for the subprocess worker (``conformance/frameworks/subprocess_worker.py``).

Runs inside the verl environment (``rlspec frameworks install verl``); imports only torch, NumPy, verl
and ``shared_ops.py`` (the worker loads it). Every op calls the installed verl and returns what verl
returns, in verl's conventions (response tensors ``[B, R]`` with a ``response_mask``, group ids in
``index``, an ``ActorConfig`` for the policy losses). The conversion to spec conventions happens in ``conformance/frameworks/verl/adapter.py``.

What is called (verl 0.9.1, paths relative to the package root ``verl/``; line numbers as in
peer-conventions.md, which match 0.9.1 up to about line 1600):

| op | verl |
|---|---|
| ``agg_loss`` | ``trainer/ppo/core_algos.py::agg_loss`` (:1140) |
| ``kl_penalty`` | ``trainer/ppo/core_algos.py::kl_penalty`` (:2188) |
| ``policy_loss`` | ``core_algos.get_policy_loss_fn(name)``: ``compute_policy_loss_vanilla`` (:1286), ``_dppo_tv`` (:1379), ``_dppo_kl`` (:1460), ``_gspo`` (:1546), ``_sapo`` (:1622), ``_gpg`` (:1707), ``_clip_cov`` (:1743), ``_kl_cov`` (:1848), ``_geo_mean`` (:1928), ``_dro`` (:2014), ``_cispo`` (:2048), ``_bypass_mode`` (:2413), with ``workers/config/actor.py::ActorConfig`` (``policy_loss``: its ``PolicyLossConfig`` fields, e.g. ``dro_beta``, ``clip_cov_ratio``, ``kl_cov_ratio``); with ``rollout_correction`` the IS weights and rejection mask of verl's rollout correction first (see below); with ``per_row`` also the loss of each row alone (see below); with a ``clip_cov_draws`` array Clip-Cov's random cut decided by those draws (see below) |
| ``offpolicy_metrics`` | ``trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics`` (:904-1010): every metric it returns (``kl``, ``k3_kl``, ``log_ppl_diff``, ``ppl_ratio``, ``chi2_token``, ...), logged as ``rollout_corr/<name>`` |
| ``rollout_correction`` | ``trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_and_rejection_mask`` (:786), which builds ``log_ratio = old - rollout`` (:849) and calls ``compute_rollout_correction_weights`` (:522) and ``compute_rollout_rejection_mask`` (:197) |
| ``value_loss`` | ``trainer/ppo/core_algos.py::compute_value_loss`` (:2125) |
| ``advantage`` | ``core_algos.get_adv_estimator_fn(name)``: ``compute_gae_advantage_return`` (:216), ``compute_grpo_outcome_advantage`` (:268), ``compute_grpo_vectorized_outcome_advantage`` (:335), ``compute_rloo_outcome_advantage`` (:588), ``compute_rloo_vectorized_outcome_advantage`` (:834); spec v1.1 ``compute_gdpo_outcome_advantage`` (:362), ``_grpo_passk_`` (:472), ``_reinforce_plus_plus_baseline_`` (:536), ``_opo_`` (:640), ``_reinforce_plus_plus_`` (:694), ``_remax_`` (:735), ``_gpg_`` (:771), ``compute_optimal_token_baseline_advantage`` (:872), ``compute_multi_turn_optimal_token_baseline_advantage`` (:991), called as ``ray_trainer.compute_advantage`` calls them (an ``AlgoConfig`` from ``algo``, ``index``, ``reward_baselines``; GDPO's per-key scores as ``non_tensor_batch`` with a one-token prompt in ``batch``; the optimal token baselines' ``old_log_probs``, ``sum_pi_squared`` and ``rollout_is_weights``, ray_trainer.py:264-276) |
| ``masked_whiten`` | ``utils/torch_functional.py::masked_whiten`` (:329) |
| ``logprobs_from_logits`` / ``entropy_from_logits`` | ``utils/torch_functional.py`` (:73, :231) |
| ``dapo_overlong`` | ``workers/reward_manager/dapo.py::DAPORewardManager`` (:25-154) with ``overlong_buffer_cfg`` enabled and a score function returning 0: each row's reward is its overlong penalty (:119-127) |
| ``kl_controller`` | ``trainer/ppo/core_algos.py::AdaptiveKLController`` (:153-174): built with ``init_kl_coef``, ``target_kl``, ``horizon``, one ``update(current_kl, n_steps)``, its ``value`` |

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

Clip-Cov (``clip_cov``, core_algos.py:1743-1845) cuts ``top_k_idx[perm[:n]]``, ``top_k_idx =
torch.nonzero(candidates)`` (:1820, the candidates in row-major order) and ``perm =
torch.randperm(len(top_k_idx))`` (:1823): a random draw. The spec takes the draw as an input
(``clip_cov_mask``'s ``draws``: the candidates with the smallest draws are cut, equal draws in row-major
order). Given ``clip_cov_draws`` ``[B, R]``, the op makes verl's draw that one for the duration of the
call (``clip_cov_draws``, ``conformance/frameworks/shared_ops.py``): ``torch.nonzero`` is wrapped to remember the last ``[K, 2]`` index list it
returned (verl's candidate list), and ``torch.randperm(K)`` returns the stable argsort of the draws at
those K positions (it refuses a K that is not that list's length), so ``perm[:n]`` are the candidates of
smallest draw, ties to the earlier one: exactly the spec's rule, applied to verl's own candidate list and
verl's own ``n``. ``torch.ones_like`` is wrapped to remember its first result, verl's ``corr`` (:1808),
whose zeros after the call (:1828) are the tokens cut: returned as ``clip_cov_keep``. The three
functions are restored after the call; nothing of verl is edited or copied.
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
    from rlspec_shared_ops import clip_cov_draws
    from verl.protocol import DataProto
    from verl.trainer.config.algorithm import AlgoConfig, RolloutCorrectionConfig
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
        draws = t.get("clip_cov_draws")
        with record_agg_loss() as seen, clip_cov_draws(draws) as cut:
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
        if "corr" in cut:  # Clip-Cov's corr after the call: 0 where a token was cut
            out["clip_cov_keep"] = cut["corr"].detach()
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

    def offpolicy_metrics(t: dict[str, Any]) -> dict[str, Any]:
        return rollout_corr.compute_offpolicy_metrics(
            old_log_prob=t["old_log_prob"], rollout_log_prob=t["rollout_log_prob"], response_mask=t["response_mask"])

    def value_loss(t: dict[str, Any], *, cliprange_value: float, loss_agg_mode: str = "token-mean", dp_size: int = 1,
                   batch_num_tokens: Any = None, global_batch_size: Any = None, loss_scale_factor: Any = None) -> dict[str, Any]:
        with record_agg_loss() as seen:
            loss, clipfrac = core_algos.compute_value_loss(
                vpreds=t["vpreds"], returns=t["returns"], values=t["values"], response_mask=t["response_mask"],
                cliprange_value=cliprange_value, loss_agg_mode=loss_agg_mode, dp_size=dp_size,
                batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size,
                loss_scale_factor=loss_scale_factor)
        return {"loss": loss, "loss_mat": seen["loss_mat"], "agg": seen["agg"], "clipfrac": float(clipfrac)}

    def advantage(t: dict[str, Any], *, name: str, algo: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        fn = core_algos.get_adv_estimator_fn(name)
        if name == "gae":
            adv, ret = fn(token_level_rewards=t["token_level_rewards"], values=t["values"],
                          response_mask=t["response_mask"], gamma=kwargs["gamma"], lam=kwargs["lam"])
            return {"advantages": adv, "returns": ret}
        # what ray_trainer.compute_advantage (:248-279) passes a registered estimator: the rewards, the
        # mask, the AlgoConfig, the group ids and the greedy baselines when the batch has them
        if algo is not None:
            kwargs["config"] = AlgoConfig(**algo)
        if "index" in t:
            kwargs["index"] = np.asarray(t["index"])
        if "reward_baselines" in t:
            kwargs["reward_baselines"] = t["reward_baselines"]
        for key in ("old_log_probs", "sum_pi_squared", "rollout_is_weights"):  # the optimal token baselines (:264-276)
            if key in t:
                kwargs[key] = t[key]
        if "gdpo_scores" in t:  # GDPO's per-key scores (core_algos.py:416-440): non_tensor_batch and batch
            scores = np.asarray(t["gdpo_scores"])
            kwargs["non_tensor_batch"] = {key: scores[:, k] for k, key in enumerate(algo["gdpo_reward_keys"])}
            m = t["response_mask"]
            kwargs["batch"] = {"prompts": torch.zeros((m.shape[0], 1), dtype=torch.long),
                               "attention_mask": torch.cat([torch.ones((m.shape[0], 1)), m], dim=1).long()}
        adv, ret = fn(token_level_rewards=t["token_level_rewards"], response_mask=t["response_mask"], **kwargs)
        return {"advantages": adv, "returns": ret}

    def masked_whiten(t: dict[str, Any], *, shift_mean: bool = True) -> dict[str, Any]:
        return {"out": verl_F.masked_whiten(t["values"], t["mask"], shift_mean=shift_mean)}

    def logprobs_from_logits(t: dict[str, Any]) -> dict[str, Any]:
        return {"logp": verl_F.logprobs_from_logits(t["logits"], t["labels"])}

    def entropy_from_logits(t: dict[str, Any]) -> dict[str, Any]:
        return {"entropy": verl_F.entropy_from_logits(t["logits"])}

    def dapo_overlong(t: dict[str, Any], *, max_resp_len: int, buffer_len: int, penalty_factor: float) -> dict[str, Any]:
        # DAPORewardManager.__call__ (workers/reward_manager/dapo.py:58-154) on responses whose attention
        # mask holds `lengths` tokens (:82), with a score function that returns 0: each row's reward is the
        # overlong penalty alone (:119-127), placed at valid_response_length - 1 (:132)
        import types

        from verl.workers.reward_manager.dapo import DAPORewardManager

        lengths = t["lengths"].long()
        B = lengths.shape[0]
        R = max(int(lengths.max()) if B else 1, 1)
        valid = (torch.arange(R)[None, :] < lengths[:, None]).long()
        data = DataProto.from_dict(
            tensors={"prompts": torch.zeros(B, 1, dtype=torch.long), "responses": torch.zeros(B, R, dtype=torch.long),
                     "attention_mask": torch.cat([torch.ones(B, 1, dtype=torch.long), valid], dim=1)},
            non_tensors={"data_source": np.array(["rlspec"] * B, dtype=object),
                         "reward_model": np.array([{"ground_truth": ""} for _ in range(B)], dtype=object)})
        tokenizer = types.SimpleNamespace(eos_token="</s>", decode=lambda ids, skip_special_tokens=True: "")
        cfg = types.SimpleNamespace(enable=True, len=buffer_len, penalty_factor=penalty_factor, log=False)
        manager = DAPORewardManager(tokenizer=tokenizer, num_examine=0, compute_score=lambda **kwargs: 0.0,
                                    max_resp_len=max_resp_len, overlong_buffer_cfg=cfg)
        reward = manager(data, return_dict=True)["reward_tensor"]
        return {"penalty": reward.sum(dim=-1), "reward_tensor": reward}

    def kl_controller(t: dict[str, Any], *, kl_coef: float, current_kl: float, n_steps: int, target: float,
                      horizon: float) -> dict[str, Any]:
        controller = core_algos.AdaptiveKLController(init_kl_coef=kl_coef, target_kl=target, horizon=horizon)
        controller.update(current_kl=current_kl, n_steps=n_steps)
        return {"value": float(controller.value)}

    ops = {
        "agg_loss": agg_loss,
        "kl_penalty": kl_penalty,
        "policy_loss": policy_loss,
        "rollout_correction": rollout_correction,
        "offpolicy_metrics": offpolicy_metrics,
        "value_loss": value_loss,
        "advantage": advantage,
        "masked_whiten": masked_whiten,
        "logprobs_from_logits": logprobs_from_logits,
        "entropy_from_logits": entropy_from_logits,
        "dapo_overlong": dapo_overlong,
        "kl_controller": kl_controller,
    }
    info = {
        "core_algos": core_algos.__file__,
        "flash_attn_cross_entropy": bool(getattr(verl_F, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", False)),
        # every advantage estimator verl registers (core_algos.py register_adv_est): verl_checks gives each a row
        "adv_estimators": sorted(core_algos.ADV_ESTIMATOR_REGISTRY),
    }
    return {"version": verl.__version__, "ops": ops, "info": info}
