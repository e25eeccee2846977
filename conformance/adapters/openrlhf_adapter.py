"""The OpenRLHF adapter: OpenRLHF's RL math, called through the installed OpenRLHF, in spec v1 conventions.

OpenRLHF runs in its own environment (``rlspec frameworks install openrlhf``: ``openrlhf==0.11.2 --no-deps``
with torch and its pinned ``transformers==5.15.0``; its requirements pin ``flash-attn`` and ``deepspeed``,
which do not install on CPU) and is driven through a worker process
(``conformance/adapters/subprocess_worker.py``; the OpenRLHF calls and the import stubs are in
``conformance/frameworks/openrlhf_ops.py``; what the verl and OpenRLHF adapters share is
``conformance/adapters/subprocess_adapter.py``). A NumPy adapter: values come from OpenRLHF and each
``<function>_grad`` is OpenRLHF's autograd gradient for the given upstream.

What is called (openrlhf 0.11.2; paths relative to ``openrlhf/``):

| spec function | OpenRLHF |
|---|---|
| ``token_logprobs`` | ``models/utils.py::log_probs_from_logits`` (:172; it divides by ``temperature`` itself) |
| ``token_entropy`` | ``models/utils.py::compute_entropy`` (:216) on ``logits / temperature`` (see below) |
| ``kl_penalty`` | ``models/utils.py::compute_approx_kl`` (:69-128), ``kl_estimator`` k1/k2/k3 |
| ``rlhf_token_rewards`` | ``compute_approx_kl`` then ``models/utils.py::compute_reward`` (:131-158), as the experience maker chains them |
| ``gae`` | ``trainer/ppo_utils/experience_maker.py::RemoteExperienceMaker.get_advantages_and_returns`` (:343-387) |
| ``ppo_token_loss`` | ``models/loss.py::PolicyLoss(policy_loss_type="ppo")`` (:116-259): the per-token matrix it aggregates |
| ``gspo_token_loss`` | ``PolicyLoss(policy_loss_type="gspo")``: idem |
| ``value_token_loss`` | ``models/loss.py::ValueLoss`` (:262-298): ½ × the matrix it aggregates (the ½ is applied after ``aggregate_loss``, :298) |

Checked as framework rows by ``conformance/frameworks/openrlhf_checks.py``: ``aggregate_loss`` in both
modes (local, global, two data-parallel ranks), the aggregated ``PolicyLoss`` (ppo, dual-clip, gspo) and
``ValueLoss`` (value and gradient), ``compute_approx_kl(unbiased_gradient=True)``, and the advantage
estimators of ``compute_advantages_and_returns`` (``group_norm``, ``dr_grpo``, ``rloo``,
``reinforce_baseline``, ``flash_reinforce``, ``gae`` with its batch whitening).

Conventions this adapter converts (the checks never do):
- OpenRLHF's tensors are response-only ``[B, A]`` with an ``action_mask``; the spec's ``[B, T]``
  token-aligned arrays are passed as the response with ``mask`` as ``action_mask``. Masked inputs are
  sent as 0 and masked outputs are returned as 0 (``conformance/frameworks/spec_io.py``).
- ``log_probs_from_logits`` scores ``logits[:, t]`` against ``labels[:, t]``; the adapter passes only the
  rows that predict a valid token (``logits[:, :-1][mask[:, 1:]]`` against ``input_ids[:, 1:][mask[:, 1:]]``),
  as a copy (OpenRLHF divides the logits in place, which the actor's model output allows).
- ``token_entropy``: ``compute_entropy`` is the entropy of its argument; the spec's temperature is
  applied before it. (OpenRLHF's ``Actor.forward`` computes the entropy before dividing by the rollout
  temperature, ``models/actor.py:275`` vs ``:285``; that path needs a model and is not driven here.)
- ``compute_entropy`` is ``@torch.compile``-decorated; the undecorated function is called (an inductor
  compile per shape on CPU would take seconds each).
- ``[B]`` advantages are broadcast over the tokens.

Float32 only: ``compute_approx_kl`` casts its inputs to float32 (``log_probs.float()`` in ``models/utils.py::compute_approx_kl``), and OpenRLHF
trains in bfloat16/float32; float64 cases would be held to float64 tolerances.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.adapters.subprocess_adapter import SubprocessAdapter
from conformance.frameworks import spec_io as io


class OpenRLHFAdapter(SubprocessAdapter):
    """Spec v1 adapter for OpenRLHF (see the module docstring for what each function calls)."""

    name = "openrlhf"
    dtypes = ("float32",)
    checks_module = "conformance.frameworks.openrlhf_checks"

    LOGPROBS_OP = "log_probs_from_logits"
    ENTROPY_OP = "compute_entropy"
    POLICY_ARRAYS = ("log_probs", "old_log_probs", "action_mask")
    VALUE_ARRAYS = ("values", "old_values", "returns", "action_mask")

    def __init__(self) -> None:
        super().__init__()
        self.stubs = tuple(self._worker.hello.get("info", {}).get("stubs", ()))
        self.has_experience_maker = "advantages" in self._worker.hello.get("ops", ())

    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, dict[str, Any], float]:
        # log_probs_from_logits divides by the temperature itself (its gradient carries the 1/temperature)
        return rows, {"temperature": float(temperature)}, 1.0

    # ------------------------------------------------------------------------------------------
    # agg.partition (conformance/partition.py): the trainer's per-micro-batch loss
    # ------------------------------------------------------------------------------------------

    LEVELS = {"token_mean": True, "seq_mean_token_mean": False}  # token_level_loss

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        """``aggregate_loss`` per micro-batch with the step's normalisers as the trainer makes them
        (``utils/loss_utils.py:54-105``: summed over the accumulation steps and all-reduced over DP,
        here ``get_loss_batch_info`` on every chunk's mask at once) and ``dp_size``. Neither mode has a
        length normaliser: ``norm_length`` is not used."""
        fn = "micro_batched_loss"
        if mode not in self.LEVELS:
            raise NotImplementedError(f"OpenRLHF aggregates by token (token_mean) or by sample (seq_mean_token_mean) only, "
                                      f"not {mode!r}")
        xs = [io.float_array(fn, "token_loss_chunks", x, 2) for x in chunks]
        ms = [io.check_mask(fn, m, x.shape) for x, m in zip(xs, masks)]
        width = max(m.shape[1] for m in ms)
        every = np.concatenate([np.pad(m, ((0, 0), (0, width - m.shape[1]))) for m in ms]).astype(np.float32)
        info = self._worker.call("loss_batch_info", {"loss_mask": every})["outputs"]
        params = {"token_level_loss": self.LEVELS[mode], "dp_size": int(dp_world_size),
                  "batch_num_tokens": float(info["batch_num_tokens"]), "global_batch_size": float(info["global_batch_size"])}
        return [self._scalar_loss("aggregate_loss", {"loss": io.clean(x, m).astype(np.float32), "loss_mask": m.astype(np.float32)},
                                  params, "loss", m, x.dtype, upstream, value_type=np.float32)
                for x, m in zip(xs, ms)]

    # ------------------------------------------------------------------------------------------
    # kl.estimator / reward.rlhf
    # ------------------------------------------------------------------------------------------

    def approx_kl(self, logp: Any, ref_logp: Any, mask: Any, *, estimator: str = "k1", old_logp: Any = None,
                  unbiased_gradient: bool = False, upstream: Any = None) -> np.ndarray:
        """``compute_approx_kl`` in spec layout: the value, or with ``upstream`` the gradient w.r.t. ``logp``."""
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator)
        arrays = {"log_probs": io.clean(lp, m), "log_probs_base": io.clean(ref, m)}
        if old_logp is not None:
            arrays["log_probs_old"] = io.clean(np.asarray(old_logp, dtype=lp.dtype), m)
        params = {"kl_estimator": estimator, "unbiased_gradient": bool(unbiased_gradient)}
        return self._token_op("compute_approx_kl", arrays, params, "kl", "log_probs", m, lp.dtype, upstream)

    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None) -> np.ndarray:
        return self.approx_kl(logp, ref_logp, mask, estimator=estimator, upstream=upstream)

    def rlhf_token_rewards(self, scores: Any, logp: Any, ref_logp: Any, mask: Any, *, kl_coef: float, estimator: str = "k1") -> np.ndarray:
        fn = "rlhf_token_rewards"
        s = io.float_array(fn, "scores", scores, 1)
        lp = io.float_array(fn, "logp", logp, 2)
        m = io.check_mask(fn, mask, lp.shape)
        kl = self.approx_kl(lp, ref_logp, m, estimator=estimator)
        out = self._worker.call("compute_reward", {"r": s.astype(lp.dtype), "kl": kl, "action_mask": m},
                                {"kl_coef": float(kl_coef)})["outputs"]["reward"]
        return io.masked_out(out, m, lp.dtype)

    # ------------------------------------------------------------------------------------------
    # adv.gae and the experience maker's estimators
    # ------------------------------------------------------------------------------------------

    def gae(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        fn = "gae"
        if not self.has_experience_maker:
            raise NotImplementedError("openrlhf's experience_maker did not import in the worker")
        r = io.float_array(fn, "token_rewards", token_rewards, 2)
        v = io.float_array(fn, "values", values, 2).astype(r.dtype)
        m = io.check_mask(fn, mask, r.shape)
        out = self._worker.call("gae", {"values": io.clean(v, m), "rewards": io.clean(r, m), "action_mask": m},
                                {"gamma": float(gamma), "lambd": float(lam)})["outputs"]
        return io.masked_out(out["advantages"], m, r.dtype), io.masked_out(out["returns"], m, r.dtype)

    def experience_advantages(self, estimator: str, rewards: Any, group_size: int, *, mask: Any = None, values: Any = None,
                              kl: Any = None, **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """``RemoteExperienceMaker.compute_advantages_and_returns`` with ``args.algo.advantage.estimator =
        estimator`` and ``n_samples_per_prompt = group_size``, on one ``Experience`` holding the ``[B]``
        rewards (and, for ``"gae"``, per-token ``values``). Returns OpenRLHF's per-token (advantages,
        returns), ``[B, A]`` (``A = 1`` when no ``mask`` is given)."""
        if not self.has_experience_maker:
            raise NotImplementedError("openrlhf's experience_maker did not import in the worker")
        r, G = io.check_groups(f"{estimator}_advantages", rewards, group_size)
        m = np.ones((r.shape[0], 1), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        arrays: dict[str, Any] = {"rewards": r, "action_mask": m}
        if values is not None:
            arrays["values"] = np.asarray(values, dtype=r.dtype)
        if kl is not None:
            arrays["kl"] = np.asarray(kl, dtype=r.dtype)
        out = self._worker.call("advantages", arrays, {"estimator": estimator, "n_samples_per_prompt": G, **params})["outputs"]
        return np.asarray(out["advantages"]), np.asarray(out["returns"])

    def outcome_advantages(self, estimator: str, rewards: Any, group_size: int) -> np.ndarray:
        """``[B]`` advantages of an outcome estimator (one action per sequence)."""
        adv, _ = self.experience_advantages(estimator, rewards, group_size)
        return adv[:, 0].astype(np.asarray(rewards).dtype)

    # ------------------------------------------------------------------------------------------
    # policy and value losses (the per-token matrix OpenRLHF aggregates)
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _init(kind: str, eps_low: float, eps_high: float, dual_clip: float | None = None) -> dict[str, Any]:
        return {"clip_eps_low": float(eps_low), "clip_eps_high": float(eps_high),
                "dual_clip": None if dual_clip is None else float(dual_clip), "policy_loss_type": kind}

    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        return {"init": self._init("ppo", eps_low, eps_high, dual_clip)}

    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        return {"init": self._init("gspo", eps_low, eps_high)}

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        return {"clip_eps": None if clip is None else float(clip)}


__all__ = ["OpenRLHFAdapter"]
