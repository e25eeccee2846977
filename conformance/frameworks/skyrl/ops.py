"""SkyRL operations for the subprocess worker (``conformance/frameworks/subprocess_worker.py``).

Runs inside the SkyRL environment (``rlspec frameworks install skyrl``); imports only torch, NumPy,
SkyRL and ``shared_ops.py`` (the worker loads it). Every op calls the installed SkyRL (skyrl 0.3.0, its
skyrl-train backend ``skyrl/backends/skyrl_train``) in SkyRL's conventions (response tensors ``[B, R]``
with a float ``loss_mask``, prompt ids in ``index``, an ``AlgorithmConfig``); the conversion to spec
conventions is in ``conformance/frameworks/skyrl/adapter.py``.

What is called (skyrl 0.3.0; ``S`` = ``skyrl/backends/skyrl_train/utils/ppo_utils.py``, ``SO`` =
``skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py``, ``TU`` =
``skyrl/backends/skyrl_train/utils/torch_utils.py``, ``TR`` = ``skyrl/train/trainer.py``):

| op | SkyRL |
|---|---|
| ``policy_loss`` | ``S::PolicyLossRegistry.get(name)`` (:478-514) as the worker looks it up (``workers/worker.py:756``, :858-865): ``ppo_policy_loss`` (:554, ``regular`` / ``dual_clip``), ``sapo_policy_loss`` (:589), ``gspo_policy_loss`` (:662), ``compute_policy_loss_cispo`` (:731), ``rollout_is_policy_loss`` (:767), ``dppo_policy_loss`` (:809), ``compute_policy_loss_clip_cov`` (:881), ``compute_policy_loss_kl_cov`` (:944), ``cross_entropy_loss`` (:999), ``importance_sampling_loss`` (:1038), with an ``AlgorithmConfig`` (``skyrl/train/config/config.py:596-657``) built by ``AlgorithmConfig.from_dict_config`` (the worker's own override path, ``worker.py:868-876``) and, when given, ``rollout_logprobs`` (the off-policy correction of ``SO::apply_off_policy_correction``, :351, inside every loss that calls it); see below for ``normalize``, ``kl`` and ``clip_cov_draws`` |
| ``reduce`` | ``S::apply_loss_reduction_to_advantages_minibatch`` (:1095-1164) on a token loss in the advantages' place, then ``S::reduce_loss`` (:1088) per micro-batch (``chunks``), times ``dp_size`` (``worker.py:983-989``) |
| ``advantages`` | ``S::compute_advantages_and_returns`` (:1379-1403), the trainer's entry (``TR:1168-1178``): ``AdvantageEstimatorRegistry`` ``gae`` (:1256), ``grpo`` (:1287), ``rloo`` (:1203), ``reinforce++`` (:1168), ``maxrl`` (:1340) |
| ``kl`` | ``S::compute_approx_kl`` (:88-125) with ``loss_mask`` |
| ``masked_whiten`` | ``S::masked_whiten`` (:146) |
| ``value_loss`` | ``S::ppo_critic_loss`` (:155-175) with ``AlgorithmConfig(value_clip=...)`` |
| ``logprobs_from_logits`` / ``entropy_from_logits`` | ``TU::logprobs_from_logits`` (:115; without flash-attn its ``logprobs_from_logits_v2``, :158) / ``TU::chunked_entropy_from_logits`` (:58, ``requires_grad=True``), as ``workers/model_wrapper.py:333-386`` calls them on ``logits / temperature`` |
| ``off_policy`` | ``SO::compute_tis_ratio`` (:24), ``compute_outlier_token_mask`` (:75), ``compute_token_mask`` (:137), ``compute_sequence_mask`` (:191), ``compute_off_policy_correction`` (:257) with an ``OffPolicyCorrectionConfig`` (``config.py:567-592``) |
| ``normalize_advantages`` | ``TR::RayPPOTrainer._normalize_advantages`` (:1439-1478) |
| ``reward_kl`` | ``TR::RayPPOTrainer.apply_reward_kl_penalty`` (:1381-1437) |
| ``kl_controller`` | ``S::AdaptiveKLController`` (:45-60): built with ``init_kl_coef``, ``target``, ``horizon``, one ``update(current, n_steps)``, its ``value`` |

The per-token loss of a policy loss is the matrix SkyRL hands to ``reduce_loss`` (``(loss * loss_mask).sum()``,
:1088-1092; after the off-policy correction, so the TIS weight is in it and the mask is the corrected one):
``policy_loss`` records both arguments by wrapping ``ppo_utils.reduce_loss`` for the duration of the call
(the module global every loss looks up at call time), the way verl's ops wrap ``agg_loss``. The value
loss's matrix is the first argument of ``ppo_utils.masked_mean(..., dim=-1)`` inside ``ppo_critic_loss``
(:170), recorded the same way. Nothing of SkyRL is edited or copied.

``policy_loss`` with ``normalize`` first runs the trainer's ``RayPPOTrainer._normalize_advantages`` (the
optional z-scoring of ``advantage_batch_normalize``, then ``apply_loss_reduction_to_advantages_minibatch`` per
mini-batch, TR:1439-1478) on a ``TrainingInputBatch`` of the advantages and masks, with ``self`` a namespace
holding only the ``cfg`` fields it reads (``trainer.algorithm``, ``trainer.micro_train_batch_size_per_gpu``),
and hands the loss those pre-scaled advantages, as the worker gets them (``worker.py:851``, :894-901); with ``kl``
it then adds the worker's KL term, ``compute_approx_kl`` reduced by ``masked_mean(..., dim=-1).mean()`` times
``kl_loss_coef`` (``worker.py:970-989``, one micro-batch on one rank: ``microbatch_weight`` = 1,
``dp_size`` = 1). ``reward_kl`` calls ``apply_reward_kl_penalty`` with ``self`` holding ``cfg``,
``reward_kl_controller = None`` and ``all_metrics``.

Clip-Cov (``compute_policy_loss_clip_cov``, S:881-941) cuts ``top_k_idx[perm[:n]]`` with ``top_k_idx =
torch.nonzero(candidates)`` (:917, row-major) and ``perm = torch.randperm(len(top_k_idx))`` (:920): a random
draw. Given ``clip_cov_draws`` ``[B, R]``, the op makes that draw the order of the draws over SkyRL's own
candidate list with the ``clip_cov_draws`` of ``conformance/frameworks/shared_ops.py`` (verl's op uses it too,
verl's code being identical): ``torch.nonzero`` is wrapped to remember the last ``[K, 2]`` list it returned, ``torch.randperm(K)`` returns
the stable argsort of the draws at those K positions (refusing any other K), and ``torch.ones_like`` is
wrapped to remember its first result, SkyRL's ``corr`` (:927), whose zeros after the call are the tokens
cut (``clip_cov_keep``). The three functions are restored after the call.

Importing on CPU (Python 3.11). ``skyrl/backends/__init__.py`` imports ``skyrl/tinker/types.py``, whose
pydantic model ``RenderedModelInput`` has a field typed with ``MultiModalKwargs(typing.TypedDict)``
(types.py:9, :132-139); pydantic refuses ``typing.TypedDict`` on Python < 3.12 ("Please use
``typing_extensions.TypedDict``"), so ``import skyrl.backends`` fails on the Python 3.11 that skyrl 0.3.0
declares it supports (``Requires-Python >=3.11``). When, and only when, the plain import fails with that
error, the worker binds ``typing.TypedDict`` to ``typing_extensions.TypedDict`` while SkyRL's modules are
imported and restores it after; every SkyRL module then loads unmodified. ``info.stubs`` in the worker's
hello says so. ``flash_attn`` is absent, so ``TU::logprobs_from_logits`` takes its pure-torch path (TU:23-28,
:140-144). ``ray`` is installed and never initialised: the registries stay local (S:285-320, :323-346).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from typing import Any

import numpy as np

TYPED_DICT_ERROR = "typing_extensions.TypedDict"
MODULES = {
    "ppo": "skyrl.backends.skyrl_train.utils.ppo_utils",
    "opc": "skyrl.backends.skyrl_train.utils.off_policy_correction_utils",
    "tu": "skyrl.backends.skyrl_train.utils.torch_utils",
    "config": "skyrl.train.config",
}
TRAINER_MODULES = {
    "trainer": "skyrl.train.trainer",
    "batch": "skyrl.backends.skyrl_train.training_batch",
    "preprocess": "skyrl.train.dataset.preprocess",
}


def _import_all(names: dict[str, str]) -> dict[str, Any]:
    return {key: importlib.import_module(path) for key, path in names.items()}


def _import() -> tuple[dict[str, Any], list[str]]:
    stubs: list[str] = []
    shim = False
    try:
        found = _import_all(MODULES)
    except Exception as exc:  # pydantic's PydanticUserError on Python < 3.12, re-raised otherwise
        if TYPED_DICT_ERROR not in str(exc):
            raise
        for key in [k for k in sys.modules if k == "skyrl" or k.startswith("skyrl.")]:
            del sys.modules[key]  # the half-imported package of the failed attempt
        shim = True
        stubs.append("typing.TypedDict bound to typing_extensions.TypedDict while skyrl is imported (pydantic refuses "
                     "typing.TypedDict on Python < 3.12: skyrl/tinker/types.py:9, :132-139)")
    import typing

    import typing_extensions

    real = typing.TypedDict
    if shim:
        typing.TypedDict = typing_extensions.TypedDict
    try:
        if shim:
            found = _import_all(MODULES)
        try:
            found.update(_import_all(TRAINER_MODULES))
        except ImportError as exc:
            found["trainer_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        typing.TypedDict = real
    return found, stubs


def load() -> dict[str, Any]:
    import torch

    found, stubs = _import()
    ppo, opc, tu, config = found["ppo"], found["opc"], found["tu"], found["config"]
    AlgorithmConfig, OffPolicyCorrectionConfig = config.AlgorithmConfig, config.OffPolicyCorrectionConfig
    from omegaconf import OmegaConf
    from rlspec_shared_ops import clip_cov_draws

    def algorithm(fields: dict[str, Any] | None) -> Any:
        """``AlgorithmConfig`` from a (nested) dict, as the worker builds one from overrides (worker.py:859-866)."""
        return AlgorithmConfig.from_dict_config(OmegaConf.create(dict(fields or {})))

    @contextlib.contextmanager
    def record(module: Any, name: str, keep: Any = None):
        """``module.<name>`` wrapped for the call: ``seen`` holds the arguments of the last call ``keep(args,
        kwargs)`` accepts (every call by default)."""
        seen: dict[str, Any] = {}
        real = getattr(module, name)

        def spy(*args: Any, **kwargs: Any) -> Any:
            if keep is None or keep(args, kwargs):
                seen["args"], seen["kwargs"] = args, kwargs
            return real(*args, **kwargs)

        setattr(module, name, spy)
        try:
            yield seen
        finally:
            setattr(module, name, real)

    def trainer_self(cfg: Any, micro_batch_size: int = 1) -> Any:
        """The ``self`` of a ``RayPPOTrainer`` method that reads only ``cfg`` (and the KL-in-reward state)."""
        trainer_cfg = types.SimpleNamespace(algorithm=cfg, micro_train_batch_size_per_gpu=micro_batch_size)
        return types.SimpleNamespace(cfg=types.SimpleNamespace(trainer=trainer_cfg), reward_kl_controller=None,
                                     all_metrics={})

    def require_trainer() -> None:
        if "trainer" not in found:
            raise ImportError(f"skyrl.train.trainer does not import here: {found.get('trainer_error')}")

    def normalized(t: dict[str, Any], cfg: Any, normalize: dict[str, Any]) -> Any:
        """``RayPPOTrainer._normalize_advantages`` (TR:1439-1478) on the batch's advantages."""
        require_trainer()
        B = t["advantages"].shape[0]
        data = found["batch"].TrainingInputBatch({"advantages": t["advantages"].detach().clone(),
                                                  "response_mask": t["loss_mask"].clone(), "loss_mask": t["loss_mask"].clone()})
        data.metadata = {}
        bounds = [tuple(b) for b in normalize.get("mini_batch_boundaries") or [(0, B)]]
        uids = normalize.get("uids")
        prompts = found["preprocess"].compute_prompt_boundaries(list(uids)) if uids is not None else None
        me = trainer_self(cfg, int(normalize.get("micro_batch_size", 1)))
        out = found["trainer"].RayPPOTrainer._normalize_advantages(me, data, bounds, prompts)
        return out["advantages"]

    def policy_loss(t: dict[str, Any], *, name: str, config: dict[str, Any] | None = None,
                    normalize: dict[str, Any] | None = None, kl: dict[str, Any] | None = None) -> dict[str, Any]:
        cfg = algorithm({**(config or {}), "policy_loss_type": name})
        advantages = t["advantages"]
        out: dict[str, Any] = {}
        if normalize is not None:
            advantages = normalized(t, cfg, normalize)
            out["advantages"] = advantages
        fn = ppo.PolicyLossRegistry.get(name)
        draws = t.get("clip_cov_draws")
        with record(ppo, "reduce_loss") as seen, clip_cov_draws(draws) as cut:
            loss, metrics = fn(t["log_probs"], t["old_log_probs"], advantages, config=cfg, loss_mask=t["loss_mask"],
                               rollout_logprobs=t.get("rollout_logprobs"))
        out["policy_loss"] = loss
        out["metrics"] = {k: float(v) for k, v in metrics.items()}
        if seen:  # reduce_loss(loss, loss_mask): the matrix summed and the (corrected) mask it is summed over
            args = list(seen["args"]) + [seen["kwargs"].get(k) for k in ("loss", "loss_mask") if k in seen["kwargs"]]
            out["per_token"], out["reduced_mask"] = args[0], args[1].detach()
        if "corr" in cut:
            out["clip_cov_keep"] = cut["corr"].detach()
        total = loss
        if kl is not None:  # worker.py:970-989 with one micro-batch (weight 1) on one rank (dp_size 1)
            kl_tok = ppo.compute_approx_kl(t["log_probs"], t["base_log_probs"], loss_mask=t["loss_mask"],
                                           kl_estimator_type=kl["estimator"])
            kl_loss = ppo.masked_mean(kl_tok, t["loss_mask"], dim=-1).mean()
            out["kl_loss"] = kl_loss
            total = loss + kl_loss * float(kl["coef"])
        out["loss"] = total
        return out

    def reduce(t: dict[str, Any], *, loss_reduction: str, max_seq_len: int | None = None, micro_batch_size: int = 1,
               chunks: list[list[int]] | None = None, dp_size: int = 1, uids: list[str] | None = None) -> dict[str, Any]:
        x, m = t["token_loss"], t["loss_mask"]
        prompts = found["preprocess"].compute_prompt_boundaries(list(uids)) if uids is not None else None
        scaled = ppo.apply_loss_reduction_to_advantages_minibatch(x, m, loss_reduction, micro_batch_size, max_seq_len,
                                                                 prompt_boundaries=prompts)
        rows = chunks or [[0, x.shape[0]]]
        losses = torch.stack([ppo.reduce_loss(scaled[s:e], m[s:e]) * dp_size for s, e in rows])
        return {"losses": losses, "loss": losses.sum()}

    def advantages(t: dict[str, Any], *, name: str, gamma: float = 1.0, lambd: float = 1.0, grpo_norm_by_std: bool = True,
                   config: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        index = [str(int(i)) for i in np.asarray(t["index"])] if "index" in t else [str(i) for i in range(t["response_mask"].shape[0])]
        adv, ret = ppo.compute_advantages_and_returns(
            token_level_rewards=t["token_level_rewards"], response_mask=t["response_mask"], index=index, adv_estimator=name,
            config=algorithm(config), values=t.get("values"), gamma=gamma, lambd=lambd, grpo_norm_by_std=grpo_norm_by_std,
            **kwargs)
        return {"advantages": adv, "returns": ret}

    def kl(t: dict[str, Any], *, estimator: str) -> dict[str, Any]:
        return {"kl": ppo.compute_approx_kl(t["log_probs"], t["log_probs_base"], loss_mask=t["loss_mask"],
                                            kl_estimator_type=estimator)}

    def masked_whiten(t: dict[str, Any], *, shift_mean: bool = True) -> dict[str, Any]:
        return {"out": ppo.masked_whiten(t["values"], t["mask"], shift_mean=shift_mean)}

    def value_loss(t: dict[str, Any], *, value_clip: float | None) -> dict[str, Any]:
        with record(ppo, "masked_mean", keep=lambda a, kw: kw.get("dim") == -1) as seen:
            loss, clipfrac = ppo.ppo_critic_loss(t["values"], t["old_values"], t["returns"], algorithm({"value_clip": value_clip}),
                                                 loss_mask=t["loss_mask"])
        return {"loss": loss, "loss_mat": seen["args"][0], "clipfrac": clipfrac}

    def logprobs_from_logits(t: dict[str, Any]) -> dict[str, Any]:
        return {"logp": tu.logprobs_from_logits(t["logits"], t["labels"])}

    def entropy_from_logits(t: dict[str, Any]) -> dict[str, Any]:
        # chunked over dim 1 of [B, S, V]: the rows are one sequence of N positions
        return {"entropy": tu.chunked_entropy_from_logits(t["logits"][None], requires_grad=True)[0]}

    def off_policy(t: dict[str, Any], *, fn: str, correction: dict[str, Any], tis_ratio_type: str | None = None,
                   sequence_mask_metric: str | None = None) -> dict[str, Any]:
        cfg = OffPolicyCorrectionConfig(**correction)
        args = (t["old_log_probs"], t["rollout_logprobs"], t["loss_mask"])
        if fn == "tis":
            weight, metrics = opc.compute_tis_ratio(*args, tis_ratio_type, cfg)
            return {"weight": weight.expand_as(t["loss_mask"]), "metrics": metrics}
        if fn == "outlier":
            keep, metrics = opc.compute_outlier_token_mask(*args, cfg)
        elif fn == "token_mask":
            keep, metrics = opc.compute_token_mask(*args, cfg)
        elif fn == "sequence_mask":
            keep, metrics = opc.compute_sequence_mask(*args, sequence_mask_metric, cfg)
        elif fn == "all":
            weight, metrics, mask = opc.compute_off_policy_correction(*args, cfg)
            out = {"loss_mask": mask, "metrics": metrics}
            if weight is not None:
                out["weight"] = weight.expand_as(t["loss_mask"])
            return out
        else:
            raise ValueError(f"unknown off-policy function {fn!r}")
        return {"keep": keep.expand_as(t["loss_mask"]), "metrics": metrics}

    def normalize_advantages(t: dict[str, Any], *, config: dict[str, Any], mini_batch_boundaries: list[list[int]] | None = None,
                             micro_batch_size: int = 1, uids: list[str] | None = None) -> dict[str, Any]:
        cfg = algorithm(config)
        return {"advantages": normalized(t, cfg, {"mini_batch_boundaries": mini_batch_boundaries, "uids": uids,
                                                  "micro_batch_size": micro_batch_size})}

    def reward_kl(t: dict[str, Any], *, kl_coef: float, estimator: str) -> dict[str, Any]:
        require_trainer()
        cfg = algorithm({"kl_loss_coef": kl_coef, "kl_estimator_type": estimator, "use_kl_in_reward": True, "use_kl_loss": False})
        data = found["batch"].TrainingInputBatch({"loss_mask": t["loss_mask"], "rewards": t["rewards"],
                                                  "base_action_log_probs": t["base_action_log_probs"],
                                                  "action_log_probs": t["action_log_probs"]})
        data.metadata = {}
        out = found["trainer"].RayPPOTrainer.apply_reward_kl_penalty(trainer_self(cfg), data)
        return {"rewards": out["rewards"]}

    def kl_controller(t: dict[str, Any], *, kl_coef: float, current_kl: float, n_steps: int, target: float,
                      horizon: float) -> dict[str, Any]:
        controller = ppo.AdaptiveKLController(init_kl_coef=kl_coef, target=target, horizon=horizon)
        controller.update(current=current_kl, n_steps=n_steps)
        return {"value": float(controller.value)}

    ops = {
        "policy_loss": policy_loss,
        "reduce": reduce,
        "advantages": advantages,
        "kl": kl,
        "masked_whiten": masked_whiten,
        "value_loss": value_loss,
        "logprobs_from_logits": logprobs_from_logits,
        "entropy_from_logits": entropy_from_logits,
        "off_policy": off_policy,
        "kl_controller": kl_controller,
    }
    if "trainer" in found:
        ops["normalize_advantages"] = normalize_advantages
        ops["reward_kl"] = reward_kl
    info = {
        "ppo_utils": ppo.__file__,
        "stubs": stubs,
        "trainer": "trainer" in found,
        "trainer_error": found.get("trainer_error"),
        "flash_attn_cross_entropy": bool(getattr(tu, "FLASH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", False)),
        "policy_losses": sorted(ppo.PolicyLossRegistry.list_available()),
        "adv_estimators": sorted(ppo.AdvantageEstimatorRegistry.list_available()),
    }
    import skyrl

    return {"version": skyrl.__version__, "ops": ops, "info": info}
