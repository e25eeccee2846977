"""AReaL operations for the subprocess worker (``conformance/frameworks/subprocess_worker.py``).

Runs inside the AReaL environment (``rlspec frameworks install areal``); imports only torch, NumPy and
AReaL. Every op calls the installed AReaL and returns what AReaL returns, in AReaL's conventions (the
loss functions take ``[B, T]`` tensors with a boolean ``loss_mask``; ``PPOActor._compute_advantages``
takes a padded batch dict whose ``logprobs`` / ``loss_mask`` are token-aligned and whose ``ref_logp`` /
``values`` are already one position to the left, and returns everything one position to the left). The
conversion to spec conventions is in ``conformance/frameworks/areal/adapter.py``.

What is called (areal 1.0.4; paths relative to the package root ``areal/``):

| op | AReaL |
|---|---|
| ``gather_logprobs`` / ``gather_logprobs_entropy`` | ``utils/functional/vocab_parallel.py::gather_logprobs`` (:401) / ``gather_logprobs_entropy`` (:434), no tensor-parallel group (the single-rank path, :431 / :469) |
| ``kl_estimator`` | ``utils/data.py::KLEstimator`` (:1598-1656), ``apply_clamp`` as asked (the actor's default is True, :1603) |
| ``normalization`` | ``utils/data.py::Normalization`` (:1378-1595) built from an ``api/cli_args.py::NormConfig`` (:43-96) |
| ``policy_loss`` | ``utils/functional/functional.py::ppo_actor_loss_fn`` (:429-559), with ``rejection_sampling`` a ``RejectionSamplingConfig`` (``api/cli_args.py``:1288-1450) when given |
| ``sapo_loss`` | ``functional.py::sapo_loss_fn`` (:562-638) |
| ``value_loss`` | ``functional.py::ppo_critic_loss_fn`` (:714-778) |
| ``rejection_sampling`` | ``functional.py::apply_rejection_sampling`` (:185-426) |
| ``prox_approx`` | ``trainer/ppo/actor.py::compute_prox_logp_approximations`` (:604-684) |
| ``overlong`` | ``functional.py::reward_overlong_penalty`` (:782-804) |
| ``compute_advantages`` | ``trainer/ppo/actor.py::PPOActor._compute_advantages`` (:145-249) of a ``PPOActor(PPOActorConfig(...), engine=None)`` (the method never touches the engine) |
| ``grpo_loss_fn`` | ``trainer/ppo/actor.py::grpo_loss_fn`` (:408-596), the loss the actor hands its engine (:346-364) |

The per-token loss. ``ppo_actor_loss_fn``, ``sapo_loss_fn`` and ``ppo_critic_loss_fn`` reduce inline:
``torch.where(loss_mask, pg_loss, 0).sum() / count`` (functional.py:542, :623, :772-774). The ops record
that ``torch.where`` result, the per-token matrix AReaL sums, by wrapping ``torch.where`` for the
duration of the call and keeping the last call whose third argument is the integer ``0`` (the reduction
is the last such call in each function; the ratio line :509 is an earlier one, the sequence-level
helper's ``0.0`` is a float), the way the verl ops record ``agg_loss``'s argument. Each op then checks
that the recorded matrix sums to AReaL's scalar times the count (the original ``loss_mask``'s, :483; NaN
equals NaN; a batch without a valid token is not checked, see ``per_token``) and refuses to answer
otherwise. Nothing of AReaL is edited or copied.

torch.compile. ``vocab_parallel.py:36-38`` wraps the two log-prob kernels in ``torch.compile``; on this
2-core CPU the inductor compile costs about a minute per shape family, longer than the worker's call
timeout under load. The worker sets ``TORCHDYNAMO_DISABLE=1`` before importing torch unless the
environment already sets it (``TORCHDYNAMO_DISABLE=0`` runs the compiled kernels): the same Python
functions then run eagerly. ``info.dynamo`` in the worker's hello says which.

Import. ``import areal.utils.functional`` runs ``areal/__init__.py``, which imports ``areal.infra``
(controllers, workflow executor, RPC): the environment installs what that import chain needs on CPU
(``requirements.txt``). Nothing is stubbed; ``info.stubs`` is empty.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any


def load() -> dict[str, Any]:
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    import areal
    import areal.trainer.ppo.actor as actor_mod
    import torch
    from areal.api.cli_args import NormConfig, PPOActorConfig, RejectionSamplingConfig
    from areal.utils.data import KLEstimator, Normalization
    from areal.utils.functional import (
        apply_rejection_sampling,
        gather_logprobs,
        gather_logprobs_entropy,
        ppo_actor_loss_fn,
        ppo_critic_loss_fn,
        reward_overlong_penalty,
        sapo_loss_fn,
    )

    @contextlib.contextmanager
    def record_reduction():
        """``seen``: every ``torch.where(cond, tensor, 0)`` result (integer 0) during the call, in order."""
        seen: list[Any] = []
        real = torch.where

        def spy(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            if len(args) == 3 and type(args[2]) is int and args[2] == 0 and isinstance(args[1], torch.Tensor):
                seen.append(out)
            return out

        torch.where = spy
        try:
            yield seen
        finally:
            torch.where = real

    def per_token(seen: list[Any], loss: Any, loss_mask: Any, what: str) -> Any:
        """The last recorded ``torch.where`` (the reduction's matrix), checked against the scalar."""
        if not seen:
            raise RuntimeError(f"{what}: no torch.where(loss_mask, loss, 0) was recorded")
        mat = seen[-1]
        count = int(loss_mask.count_nonzero())
        total = mat.detach().double().sum() / (count or 1)
        # a micro-batch without a valid token: the actor divides by ``count or 1`` (0), the critic by 0 (NaN)
        if count and not torch.allclose(total, loss.detach().double(), rtol=1e-5, atol=1e-6, equal_nan=True):
            raise RuntimeError(f"{what}: the recorded matrix sums to {float(total)!r} x count, not the loss {float(loss)!r}")
        return mat

    def _rs(config: dict[str, Any] | None) -> Any:
        return None if config is None else RejectionSamplingConfig(**config)

    def gather_logprobs_op(t: dict[str, Any], *, temperature: float = 1.0) -> dict[str, Any]:
        return {"logp": gather_logprobs(t["logits"], t["labels"], temperature=temperature)}

    def gather_logprobs_entropy_op(t: dict[str, Any], *, temperature: float = 1.0) -> dict[str, Any]:
        logp, entropy = gather_logprobs_entropy(t["logits"], t["labels"], temperature=temperature)
        return {"logp": logp, "entropy": entropy}

    def kl_estimator(t: dict[str, Any], *, kl_estimator: str, apply_clamp: bool = True) -> dict[str, Any]:
        return {"kl": KLEstimator(kl_estimator, apply_clamp=apply_clamp)(t["log_probs"], t["log_probs_base"])}

    def normalization(t: dict[str, Any], *, config: dict[str, Any], masked: bool = True) -> dict[str, Any]:
        norm = Normalization(NormConfig(**config))
        return {"out": norm(t["x"], t["loss_mask"] if masked else None)}

    def policy_loss(t: dict[str, Any], *, eps_clip: float, eps_clip_higher: float | None = None,
                    c_clip: float | None = None, rejection_sampling: dict[str, Any] | None = None,
                    importance_sampling_level: str = "token") -> dict[str, Any]:
        mask = t["loss_mask"].bool()
        prox = t.get("proximal_logprobs", t["old_logprobs"])
        with record_reduction() as seen:
            loss, stat = ppo_actor_loss_fn(
                logprobs=t["logprobs"], proximal_logprobs=prox, old_logprobs=t["old_logprobs"],
                advantages=t["advantages"], eps_clip=eps_clip, loss_mask=mask, eps_clip_higher=eps_clip_higher,
                c_clip=c_clip, rejection_sampling=_rs(rejection_sampling),
                importance_sampling_level=importance_sampling_level)
        out = {"loss": loss, "per_token": per_token(seen, loss, mask, "ppo_actor_loss_fn"),
               "clip_mask": stat["clip_mask"], "dual_clip_mask": stat["dual_clip_mask"]}
        for key in ("behave_imp_weight", "behave_mask"):
            if key in stat:
                out[key] = stat[key]
        if "filtered_fraction" in stat:
            out["filtered_fraction"] = float(stat["filtered_fraction"])
        return out

    def sapo_loss(t: dict[str, Any], *, tau_pos: float, tau_neg: float,
                  importance_sampling_level: str = "token") -> dict[str, Any]:
        mask = t["loss_mask"].bool()
        with record_reduction() as seen:
            loss, _ = sapo_loss_fn(logprobs=t["logprobs"], old_logprobs=t["old_logprobs"], advantages=t["advantages"],
                                   tau_pos=tau_pos, tau_neg=tau_neg, loss_mask=mask,
                                   importance_sampling_level=importance_sampling_level)
        return {"loss": loss, "per_token": per_token(seen, loss, mask, "sapo_loss_fn")}

    def value_loss(t: dict[str, Any], *, value_eps_clip: float, loss_fn_type: str = "mse") -> dict[str, Any]:
        mask = t["loss_mask"].bool()
        with record_reduction() as seen:
            loss, stat = ppo_critic_loss_fn(value=t["value"], old_value=t["old_value"], target_value=t["target_value"],
                                            value_eps_clip=value_eps_clip, loss_mask=mask, loss_fn_type=loss_fn_type)
        return {"loss": loss, "loss_mat": per_token(seen, loss, mask, "ppo_critic_loss_fn"), "clip_mask": stat["clip_mask"]}

    def rejection_sampling(t: dict[str, Any], *, config: dict[str, Any]) -> dict[str, Any]:
        res = apply_rejection_sampling(t["proximal_logprobs"], t["old_logprobs"], t["loss_mask"], None,
                                       RejectionSamplingConfig(**config))
        return {"loss_mask": res.loss_mask, "behave_imp_weight": res.behave_imp_weight,
                "filtered_fraction": float(res.filtered_fraction)}

    def prox_approx(t: dict[str, Any], *, current_version: int, method: str) -> dict[str, Any]:
        out = actor_mod.compute_prox_logp_approximations(old_logp=t["old_logp"], logprobs=t["logprobs"],
                                                         versions=t["versions"], current_version=current_version,
                                                         method=method)
        return {"prox": out[method]}

    def overlong(t: dict[str, Any], *, overlong_tokens: int, overlong_penalty_factor: float,
                 max_response_length: int) -> dict[str, Any]:
        data = {"rewards": t["rewards"].clone(), "input_ids": t["input_ids"], "loss_mask": t["loss_mask"]}
        data = reward_overlong_penalty(data, overlong_tokens=overlong_tokens,
                                       overlong_penalty_factor=overlong_penalty_factor,
                                       max_response_length=max_response_length)
        return {"rewards": data["rewards"]}

    def _actor_config(config: dict[str, Any]) -> Any:
        cfg = dict(config)
        for key in ("reward_norm", "adv_norm"):
            if cfg.get(key) is not None:
                cfg[key] = NormConfig(**cfg[key])
        if cfg.get("rejection_sampling") is not None:
            cfg["rejection_sampling"] = RejectionSamplingConfig(**cfg["rejection_sampling"])
        return PPOActorConfig(**cfg)

    def compute_advantages(t: dict[str, Any], *, config: dict[str, Any]) -> dict[str, Any]:
        actor = actor_mod.PPOActor(_actor_config(config), None)
        data = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in t.items()}
        out = actor._compute_advantages(data)
        return {k: out[k] for k in ("advantages", "returns", "tot_rewards", "kl_rewards", "loss_mask", "logprobs")}

    def grpo_loss(t: dict[str, Any], *, eps_clip: float, eps_clip_higher: float | None = None, c_clip: float | None = None,
                  rejection_sampling: dict[str, Any] | None = None, m2_threshold: float | None = None,
                  importance_sampling_level: str = "token", current_version: int | None = None,
                  prox_logp_method: str = "recompute", use_sapo_loss: bool = False, sapo_tau_pos: float = 1.0,
                  sapo_tau_neg: float = 1.05, use_decoupled_loss: bool = False) -> dict[str, Any]:
        input_data = {"logprobs": t["old_logp"], "advantages": t["advantages"], "loss_mask": t["loss_mask"],
                      "prox_logp": t.get("prox_logp")}
        if "versions" in t:
            input_data["versions"] = t["versions"]
        loss = actor_mod.grpo_loss_fn(
            t["logprobs"], torch.zeros_like(t["logprobs"]), input_data, eps_clip=eps_clip, eps_clip_higher=eps_clip_higher,
            c_clip=c_clip, rejection_sampling=_rs(rejection_sampling), m2_threshold=m2_threshold,
            importance_sampling_level=importance_sampling_level, current_version=current_version,
            prox_logp_method=prox_logp_method, use_sapo_loss=use_sapo_loss, sapo_tau_pos=sapo_tau_pos,
            sapo_tau_neg=sapo_tau_neg, use_decoupled_loss=use_decoupled_loss)
        return {"loss": loss}

    ops: dict[str, Any] = {
        "gather_logprobs": gather_logprobs_op,
        "gather_logprobs_entropy": gather_logprobs_entropy_op,
        "kl_estimator": kl_estimator,
        "normalization": normalization,
        "policy_loss": policy_loss,
        "sapo_loss": sapo_loss,
        "value_loss": value_loss,
        "rejection_sampling": rejection_sampling,
        "prox_approx": prox_approx,
        "overlong": overlong,
        "compute_advantages": compute_advantages,
        "grpo_loss_fn": grpo_loss,
    }
    info = {"stubs": [], "functional": actor_mod.__file__.replace("trainer/ppo/actor.py", "utils/functional/functional.py"),
            "dynamo": "disabled (TORCHDYNAMO_DISABLE=1)" if os.environ.get("TORCHDYNAMO_DISABLE") == "1" else "enabled"}
    return {"version": _version(areal), "ops": ops, "info": info}


def _version(module: Any) -> str:
    try:
        from importlib.metadata import version

        return version("areal")
    except Exception:  # noqa: BLE001
        return str(getattr(module, "__version__", "?"))
