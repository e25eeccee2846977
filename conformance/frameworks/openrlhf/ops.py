"""OpenRLHF operations for the subprocess worker (``conformance/frameworks/subprocess_worker.py``).

Runs inside the OpenRLHF environment (``rlspec frameworks install openrlhf``); imports only torch,
NumPy and OpenRLHF. Every op calls the installed OpenRLHF in its own conventions (``action_mask``,
response tensors ``[B, A]``); the conversion to spec conventions is in
``conformance/frameworks/openrlhf/adapter.py``.

What is called (openrlhf 0.11.2; paths relative to ``openrlhf/``):

| op | OpenRLHF |
|---|---|
| ``policy_loss`` | ``models/loss.py::PolicyLoss`` (:116-259), ``policy_loss_type`` ``"ppo"`` / ``"gspo"``, with the ``is_correction_*`` options (:128-131) and ``rollout_log_probs``; outputs the loss, the per-token matrix it aggregates and its metrics (``is_filter_ratio``, ``vllm_kl``: :242-247) |
| ``value_loss`` | ``models/loss.py::ValueLoss`` (:262-298) |
| ``aggregate_loss`` | ``models/loss.py::aggregate_loss`` (:11-39) |
| ``compute_approx_kl`` | ``models/utils.py::compute_approx_kl`` (:69-128) |
| ``compute_reward`` | ``models/utils.py::compute_reward`` (:131-158) |
| ``log_probs_from_logits`` | ``models/utils.py::log_probs_from_logits`` (:172) |
| ``compute_entropy`` | ``models/utils.py::compute_entropy`` (:216), the function under its ``@torch.compile`` wrapper |
| ``masked_mean`` | ``models/utils.py::masked_mean`` |
| ``loss_batch_info`` | ``utils/loss_utils.py::get_loss_batch_info`` (the normalisers the trainer passes to the losses) |
| ``gae`` | ``trainer/ppo_utils/experience_maker.py::RemoteExperienceMaker.get_advantages_and_returns`` (:343-387) |
| ``advantages`` | ``RemoteExperienceMaker.compute_advantages_and_returns`` (:238-341) on ``Experience`` objects, with a ``FixedKLController`` and the ``args`` it reads |
| ``reward_shaping`` | the same with estimator ``"reinforce"`` and one action per sample: ``trainer/ppo_utils/length_penalty.py::apply_length_penalties`` (DAPO overlong penalty :16-58, stop-properly penalty :61-106) then ``compute_reward``'s clip to ``reward.clip_range`` (``models/utils.py:141-142``); the returns are the shaped rewards |
| ``kl_controller`` | ``trainer/ppo_utils/kl_controller.py::AdaptiveKLController`` (:4-19): built with ``init_kl_coef``, ``target``, ``horizon``, one ``update(current, n_steps)``, its ``value`` |

Importing on CPU. ``pip install openrlhf`` cannot work on CPU (its requirements pin ``flash-attn==2.8.3``, a
CUDA build, and ``deepspeed``), so the environment has ``openrlhf --no-deps``, torch and transformers.
The package ``__init__`` files import the actor (``models/actor.py`` -> ``ring_attn_utils`` -> ``flash_attn``)
and the DeepSpeed strategy, so when the plain import fails this module, inside the worker only:
registers the subpackages ``openrlhf.models``, ``openrlhf.utils``, ``openrlhf.trainer`` and
``openrlhf.trainer.ray`` as bare packages whose ``__path__`` is the installed folder (their modules load
from the installed files; only the ``__init__`` files are skipped); puts an empty ``deepspeed`` module in
``sys.modules`` (``models/utils.py`` imports it at the top and uses it only in ``set_z3_leaf_modules``);
and, for ``experience_maker``, an empty ``ray`` module and an ``openrlhf.trainer.ray.launcher`` module
holding a placeholder ``RayActorGroup`` class (used there only as a type annotation). Nothing installed
is edited; ``info.stubs`` in the worker's hello lists what was stubbed. ``flash_attn`` is not stubbed:
``log_probs_from_logits`` catches its ImportError and takes the pure-torch path.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _import() -> tuple[dict[str, Any], list[str]]:
    stubs: list[str] = []
    try:  # a complete installation (GPU machines): the ordinary import
        import openrlhf.models.loss as loss
        import openrlhf.models.utils as mutils
    except ImportError:
        for key in [k for k in sys.modules if k == "openrlhf" or k.startswith("openrlhf.")]:
            del sys.modules[key]  # a half-imported package from the failed attempt
        root = Path(importlib.util.find_spec("openrlhf").submodule_search_locations[0])
        import openrlhf  # noqa: F401  (its __init__ imports nothing)

        for pkg in ("openrlhf.models", "openrlhf.utils", "openrlhf.trainer", "openrlhf.trainer.ray"):
            module = types.ModuleType(pkg)
            module.__path__ = [str(root.joinpath(*pkg.split(".")[1:]))]
            sys.modules[pkg] = module
            setattr(sys.modules[pkg.rsplit(".", 1)[0]], pkg.rsplit(".", 1)[1], module)
            stubs.append(f"{pkg} (bare package: __init__ skipped)")
        if _missing("deepspeed"):
            sys.modules["deepspeed"] = types.ModuleType("deepspeed")
            stubs.append("deepspeed (empty module)")
        loss = importlib.import_module("openrlhf.models.loss")
        mutils = importlib.import_module("openrlhf.models.utils")
    found = {"loss": loss, "utils": mutils}
    try:
        found["experience_maker"] = _import_experience_maker(stubs)
    except ImportError as exc:
        found["experience_maker_error"] = f"{type(exc).__name__}: {exc}"
    return found, stubs


def _import_experience_maker(stubs: list[str]) -> Any:
    if _missing("ray"):
        sys.modules["ray"] = types.ModuleType("ray")
        stubs.append("ray (empty module)")
    if "openrlhf.trainer.ray.launcher" not in sys.modules and isinstance(sys.modules.get("openrlhf.trainer.ray"), types.ModuleType) \
            and not hasattr(sys.modules["openrlhf.trainer.ray"], "__file__"):
        launcher = types.ModuleType("openrlhf.trainer.ray.launcher")

        class RayActorGroup:  # placeholder: experience_maker uses the name only in annotations
            pass

        launcher.RayActorGroup = RayActorGroup
        sys.modules["openrlhf.trainer.ray.launcher"] = launcher
        stubs.append("openrlhf.trainer.ray.launcher (placeholder RayActorGroup)")
    em = importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker")
    importlib.import_module("openrlhf.trainer.ppo_utils.kl_controller")
    importlib.import_module("openrlhf.trainer.ppo_utils.experience")
    return em


def load() -> dict[str, Any]:
    import torch

    found, stubs = _import()
    loss, mutils = found["loss"], found["utils"]
    version = _version()

    def policy_loss(t: dict[str, Any], *, init: dict[str, Any], dp_size: int = 1, batch_num_tokens: Any = None,
                    global_batch_size: Any = None) -> dict[str, Any]:
        fn = loss.PolicyLoss(**init)
        seen: dict[str, Any] = {}
        real = loss.aggregate_loss

        def spy(l: Any, *args: Any, **kwargs: Any) -> Any:
            seen["loss_mat"] = l
            return real(l, *args, **kwargs)

        loss.aggregate_loss = spy  # records the per-token matrix PolicyLoss aggregates (module global)
        try:
            out, clip_ratio, ppo_kl, vllm_kl, is_filter_ratio = fn(
                t["log_probs"], t["old_log_probs"], t["advantages"], action_mask=t["action_mask"],
                rollout_log_probs=t.get("rollout_log_probs"), dp_size=dp_size, batch_num_tokens=batch_num_tokens,
                global_batch_size=global_batch_size)
        finally:
            loss.aggregate_loss = real
        # vllm_kl / is_filter_ratio are None unless is_correction_level != "off" (loss.py:215, :242-247)
        return {"loss": out, "per_token": seen["loss_mat"], "clip_ratio": float(clip_ratio), "ppo_kl": float(ppo_kl),
                "token_level_loss": bool(fn.token_level_loss),
                "vllm_kl": None if vllm_kl is None else float(vllm_kl),
                "is_filter_ratio": None if is_filter_ratio is None else float(is_filter_ratio)}

    def value_loss(t: dict[str, Any], *, clip_eps: Any = None, token_level_loss: bool = True, dp_size: int = 1,
                   batch_num_tokens: Any = None, global_batch_size: Any = None) -> dict[str, Any]:
        fn = loss.ValueLoss(clip_eps=clip_eps, token_level_loss=token_level_loss)
        seen: dict[str, Any] = {}
        real = loss.aggregate_loss

        def spy(l: Any, *args: Any, **kwargs: Any) -> Any:
            seen["loss_mat"] = l
            return real(l, *args, **kwargs)

        loss.aggregate_loss = spy
        try:
            out = fn(t["values"], t["old_values"], t["returns"], action_mask=t["action_mask"], dp_size=dp_size,
                     batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size)
        finally:
            loss.aggregate_loss = real
        return {"loss": out, "loss_mat": seen["loss_mat"]}

    def aggregate_loss(t: dict[str, Any], *, token_level_loss: bool = True, dp_size: int = 1, batch_num_tokens: Any = None,
                       global_batch_size: Any = None) -> dict[str, Any]:
        return {"loss": loss.aggregate_loss(t["loss"], t["loss_mask"], token_level_loss=token_level_loss, dp_size=dp_size,
                                            batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size)}

    def compute_approx_kl(t: dict[str, Any], *, kl_estimator: str = "k1", unbiased_gradient: bool = False) -> dict[str, Any]:
        return {"kl": mutils.compute_approx_kl(t["log_probs"], t["log_probs_base"], log_probs_old=t.get("log_probs_old"),
                                               kl_estimator=kl_estimator, unbiased_gradient=unbiased_gradient)}

    def compute_reward(t: dict[str, Any], *, kl_coef: float, reward_clip_range: Any = None) -> dict[str, Any]:
        clip = tuple(reward_clip_range) if reward_clip_range is not None else None
        return {"reward": mutils.compute_reward(t["r"], kl_coef, t["kl"], action_mask=t["action_mask"], reward_clip_range=clip)}

    def log_probs_from_logits(t: dict[str, Any], *, temperature: float = 1.0) -> dict[str, Any]:
        # the logits the actor passes are a model output (not a leaf); the function divides them in place
        return {"logp": mutils.log_probs_from_logits(t["logits"].clone(), t["labels"], temperature=temperature)}

    entropy_fn = mutils.compute_entropy
    entropy_fn = getattr(entropy_fn, "_torchdynamo_orig_callable", None) or getattr(entropy_fn, "__wrapped__", None) or entropy_fn

    def compute_entropy(t: dict[str, Any]) -> dict[str, Any]:
        return {"entropy": entropy_fn(t["logits"])}

    def loss_batch_info(t: dict[str, Any]) -> dict[str, Any]:
        import openrlhf.utils.loss_utils as loss_utils  # torch only

        info = loss_utils.get_loss_batch_info(None, t["loss_mask"])  # no process group: dp_size 1
        return {k: (float(v) if isinstance(v, torch.Tensor) else v) for k, v in info.items()}

    def masked_mean(t: dict[str, Any], *, dim: Any = None) -> dict[str, Any]:
        return {"mean": mutils.masked_mean(t["tensor"], t["mask"], dim=dim)}

    ops: dict[str, Any] = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "aggregate_loss": aggregate_loss,
        "compute_approx_kl": compute_approx_kl,
        "compute_reward": compute_reward,
        "log_probs_from_logits": log_probs_from_logits,
        "compute_entropy": compute_entropy,
        "masked_mean": masked_mean,
        "loss_batch_info": loss_batch_info,
    }
    em = found.get("experience_maker")
    if em is not None:
        from openrlhf.trainer.ppo_utils.experience import Experience
        from openrlhf.trainer.ppo_utils.kl_controller import AdaptiveKLController, FixedKLController

        maker_cls = em.RemoteExperienceMaker

        def gae(t: dict[str, Any], *, gamma: float, lambd: float) -> dict[str, Any]:
            adv, ret = maker_cls.get_advantages_and_returns(None, t["values"], t["rewards"], t["action_mask"], gamma, lambd)
            return {"advantages": adv, "returns": ret}

        def advantages(t: dict[str, Any], *, estimator: str, n_samples_per_prompt: int, kl_coef: float = 0.0,
                       gamma: float = 1.0, lambd: float = 1.0, no_std_norm: bool = False, reward_clip_range: Any = None) -> dict[str, Any]:
            ns = types.SimpleNamespace
            args = ns(algo=ns(advantage=ns(estimator=estimator, gamma=gamma, lambd=lambd, no_std_norm=no_std_norm)),
                      rollout=ns(n_samples_per_prompt=n_samples_per_prompt, max_new_tokens=None),
                      reward=ns(clip_range=None if reward_clip_range is None else tuple(reward_clip_range),
                                overlong_buffer_len=None, stop_properly_penalty_coef=None),
                      data=ns(max_len=None))
            maker = maker_cls(None, None, None, None, FixedKLController(kl_coef), ns(args=args), None)
            B = t["rewards"].shape[0]
            exp = Experience(action_mask=t["action_mask"], values=t.get("values"), kl=t.get("kl", torch.zeros_like(t["action_mask"], dtype=t["rewards"].dtype)),
                             rewards=t["rewards"].clone(), index=list(range(B)), info={})
            (out,) = maker.compute_advantages_and_returns([exp])
            return {"advantages": out.advantages, "returns": out.returns}

        def reward_shaping(t: dict[str, Any], *, max_new_tokens: int | None = None, overlong_buffer_len: float | None = None,
                           overlong_penalty_factor: float = 1.0, stop_properly_penalty_coef: float | None = None,
                           reward_clip_range: Any = None) -> dict[str, Any]:
            # compute_advantages_and_returns with estimator "reinforce" (no baseline, gamma 1) on one Experience
            # of one action per sample: the returns are the shaped rewards, i.e. apply_length_penalties
            # (experience_maker.py:246: DAPO overlong, then stop-properly) and compute_reward's clip (:284-290)
            ns = types.SimpleNamespace
            args = ns(algo=ns(advantage=ns(estimator="reinforce", gamma=1.0, lambd=1.0, no_std_norm=False)),
                      rollout=ns(n_samples_per_prompt=1, max_new_tokens=max_new_tokens),
                      reward=ns(clip_range=None if reward_clip_range is None else tuple(reward_clip_range),
                                overlong_buffer_len=overlong_buffer_len, overlong_penalty_factor=overlong_penalty_factor,
                                stop_properly_penalty_coef=stop_properly_penalty_coef),
                      data=ns(max_len=None))
            maker = maker_cls(None, None, None, None, FixedKLController(0.0), ns(args=args), None)
            rewards = t["rewards"].clone()
            B = rewards.shape[0]
            exp = Experience(action_mask=torch.ones(B, 1, dtype=torch.bool), kl=torch.zeros(B, 1, dtype=rewards.dtype),
                             rewards=rewards, response_length=t["lengths"], truncated=t["truncated"], index=list(range(B)),
                             info={})
            (out,) = maker.compute_advantages_and_returns([exp])
            return {"shaped": out.returns[:, 0]}

        def kl_controller(t: dict[str, Any], *, kl_coef: float, current_kl: float, n_steps: int, target: float,
                          horizon: float) -> dict[str, Any]:
            controller = AdaptiveKLController(kl_coef, target, horizon)
            controller.update(current_kl, n_steps)
            return {"value": float(controller.value)}

        ops["gae"] = gae
        ops["advantages"] = advantages
        ops["reward_shaping"] = reward_shaping
        ops["kl_controller"] = kl_controller
    info = {"stubs": stubs, "loss_module": loss.__file__,
            "experience_maker": "imported" if em is not None else found.get("experience_maker_error", "")}
    return {"version": version, "ops": ops, "info": info}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("openrlhf")
    except Exception:  # noqa: BLE001
        import openrlhf

        return str(getattr(openrlhf, "__version__", "?"))
