"""The OpenRLHF adapter: OpenRLHF's RL math, called through the installed OpenRLHF, in spec v1 conventions.

OpenRLHF runs in its own environment (``rlspec frameworks install openrlhf``: ``openrlhf==0.11.2 --no-deps``
with torch and its pinned ``transformers==5.15.0``; its requirements pin ``flash-attn`` and ``deepspeed``,
which do not install on CPU) and is driven through a worker process
(``conformance/adapters/subprocess_worker.py``; the OpenRLHF calls and the import stubs are in
``conformance/frameworks/openrlhf_ops.py``). A NumPy adapter: values come from OpenRLHF and each
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

from conformance.adapters.loading import AdapterLoadError
from conformance.adapters.subprocess_worker import FrameworkUnavailable, get_worker
from conformance.frameworks import spec_io as io

INSTALL_HINT = "run `rlspec frameworks install openrlhf`"


class OpenRLHFAdapter:
    """Spec v1 adapter for OpenRLHF (see the module docstring for what each function calls)."""

    name = "openrlhf"
    spec_version = "v1"
    array_api = "numpy"
    dtypes = ("float32",)
    supports_grad = True
    accepts_variants = False

    def __init__(self) -> None:
        try:
            self._worker = get_worker("openrlhf")
        except FrameworkUnavailable as exc:  # the "not installed" row of `rlspec check`
            hint = "" if "rlspec frameworks install" in str(exc) else f" ({INSTALL_HINT})"
            raise AdapterLoadError(f"adapter 'openrlhf': cannot import 'openrlhf': {exc}{hint}") from exc
        self.version = self._worker.version
        self.framework_available = True
        self.environment = self._worker.origin
        self.stubs = tuple(self._worker.hello.get("info", {}).get("stubs", ()))
        self.has_experience_maker = "advantages" in self._worker.hello.get("ops", ())

    def call(self, op: str, arrays: dict[str, Any], params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """One raw OpenRLHF call (OpenRLHF conventions), for the framework checks."""
        return self._worker.call(op, arrays, params, **kw)

    def extra_rows(self, seed: int) -> list[Any]:
        from conformance.frameworks.openrlhf_checks import extra_rows

        return extra_rows(self, seed)

    # ------------------------------------------------------------------------------------------
    # agg.partition (conformance/partition.py): the trainer's per-micro-batch loss
    # ------------------------------------------------------------------------------------------

    LEVELS = {"token_mean": True, "seq_mean_token_mean": False}  # token_level_loss

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, dp_world_size: int, upstream: Any = None) -> list[Any]:
        """``aggregate_loss`` per micro-batch with the step's normalisers as the trainer makes them
        (``utils/loss_utils.py:54-105``: summed over the accumulation steps and all-reduced over DP,
        here ``get_loss_batch_info`` on every chunk's mask at once) and ``dp_size``."""
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
        out = []
        for x, m in zip(xs, ms):
            arrays = {"loss": io.clean(x, m).astype(np.float32), "loss_mask": m.astype(np.float32)}
            if upstream is None:
                out.append(np.float32(self._worker.call("aggregate_loss", arrays, params)["outputs"]["loss"]))
            else:
                g = self._worker.call("aggregate_loss", arrays, params, wrt=["loss"], upstream={"loss": float(upstream)})
                out.append(io.masked_out(g["grads"]["loss"], m, x.dtype))
        return out

    def micro_batched_loss(self, token_loss_chunks: Any, mask_chunks: Any, *, mode: str, norm_length: float | None = None,
                           dp_world_size: int = 1) -> list[Any]:
        return self._micro_batched(token_loss_chunks, mask_chunks, mode, dp_world_size)

    def micro_batched_loss_grad(self, token_loss_chunks: Any, mask_chunks: Any, upstream: Any, *, mode: str,
                                norm_length: float | None = None, dp_world_size: int = 1) -> list[Any]:
        return self._micro_batched(token_loss_chunks, mask_chunks, mode, dp_world_size, upstream)

    # ------------------------------------------------------------------------------------------
    # logprob.token / logprob.entropy
    # ------------------------------------------------------------------------------------------

    def _rows(self, fn: str, logits: Any, mask: Any, temperature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        logits = io.float_array(fn, "logits", logits, 3)
        mask = io.check_mask(fn, mask, logits.shape[:2])
        if not temperature > 0:
            raise io.fail(fn, "temperature", f"expected > 0, got {temperature!r}")
        rows, valid = io.compact_rows(logits, mask)
        return logits, rows, valid

    def _logprobs(self, logits: Any, input_ids: Any, mask: Any, temperature: float, upstream: Any = None) -> np.ndarray:
        fn = "token_logprobs"
        logits, rows, valid = self._rows(fn, logits, mask, temperature)
        ids = np.asarray(input_ids)
        if ids.dtype.kind not in "iu":
            raise io.fail(fn, "input_ids", f"expected an integer array, got {ids.dtype}", TypeError)
        B, T, _ = logits.shape
        if rows.shape[0] == 0:
            return np.zeros((B, T) if upstream is None else logits.shape, dtype=logits.dtype)
        arrays = {"logits": rows, "labels": ids[:, 1:][valid].astype(np.int64)}
        params = {"temperature": float(temperature)}
        if upstream is None:
            out = self._worker.call("log_probs_from_logits", arrays, params)["outputs"]["logp"]
            return io.scatter_rows(out, valid, B, T, logits.dtype)
        up = np.asarray(upstream, dtype=logits.dtype)[:, 1:][valid]
        g = self._worker.call("log_probs_from_logits", arrays, params, wrt=["logits"], upstream={"logp": up})["grads"]["logits"]
        return io.scatter_row_grads(g, valid, logits.shape, logits.dtype)

    def token_logprobs(self, logits: Any, input_ids: Any, mask: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._logprobs(logits, input_ids, mask, temperature)

    def token_logprobs_grad(self, logits: Any, input_ids: Any, mask: Any, upstream: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._logprobs(logits, input_ids, mask, temperature, upstream)

    def _entropy(self, logits: Any, mask: Any, temperature: float, upstream: Any = None) -> np.ndarray:
        fn = "token_entropy"
        logits, rows, valid = self._rows(fn, logits, mask, temperature)
        B, T, _ = logits.shape
        if rows.shape[0] == 0:
            return np.zeros((B, T) if upstream is None else logits.shape, dtype=logits.dtype)
        scaled = rows / np.asarray(temperature, dtype=logits.dtype)
        if upstream is None:
            out = self._worker.call("compute_entropy", {"logits": scaled})["outputs"]["entropy"]
            return io.scatter_rows(out, valid, B, T, logits.dtype)
        up = np.asarray(upstream, dtype=logits.dtype)[:, 1:][valid]
        g = self._worker.call("compute_entropy", {"logits": scaled}, wrt=["logits"], upstream={"entropy": up})["grads"]["logits"]
        return io.scatter_row_grads(g / temperature, valid, logits.shape, logits.dtype)

    def token_entropy(self, logits: Any, mask: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._entropy(logits, mask, temperature)

    def token_entropy_grad(self, logits: Any, mask: Any, upstream: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._entropy(logits, mask, temperature, upstream)

    # ------------------------------------------------------------------------------------------
    # kl.estimator / reward.rlhf
    # ------------------------------------------------------------------------------------------

    def approx_kl(self, logp: Any, ref_logp: Any, mask: Any, *, estimator: str = "k1", old_logp: Any = None,
                  unbiased_gradient: bool = False, upstream: Any = None) -> np.ndarray:
        """``compute_approx_kl`` in spec layout: the value, or with ``upstream`` the gradient w.r.t. ``logp``."""
        fn = "kl_penalty"
        lp = io.float_array(fn, "logp", logp, 2)
        ref = io.float_array(fn, "ref_logp", ref_logp, 2).astype(lp.dtype)
        m = io.check_mask(fn, mask, lp.shape)
        if estimator not in ("k1", "k2", "k3"):
            raise io.fail(fn, "estimator", f"expected 'k1', 'k2' or 'k3', got {estimator!r}")
        arrays = {"log_probs": io.clean(lp, m), "log_probs_base": io.clean(ref, m)}
        if old_logp is not None:
            arrays["log_probs_old"] = io.clean(np.asarray(old_logp, dtype=lp.dtype), m)
        params = {"kl_estimator": estimator, "unbiased_gradient": bool(unbiased_gradient)}
        if upstream is None:
            return io.masked_out(self._worker.call("compute_approx_kl", arrays, params)["outputs"]["kl"], m, lp.dtype)
        up = io.clean(np.asarray(upstream, dtype=lp.dtype), m)
        g = self._worker.call("compute_approx_kl", arrays, params, wrt=["log_probs"], upstream={"kl": up})["grads"]["log_probs"]
        return io.masked_out(g, m, lp.dtype)

    def kl_penalty(self, logp: Any, ref_logp: Any, mask: Any, *, estimator: str = "k1") -> np.ndarray:
        return self.approx_kl(logp, ref_logp, mask, estimator=estimator)

    def kl_penalty_grad(self, logp: Any, ref_logp: Any, mask: Any, upstream: Any, *, estimator: str = "k1") -> np.ndarray:
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

    def _policy(self, fn: str, init: dict[str, Any], logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any = None) -> np.ndarray:
        lp = io.float_array(fn, "logp", logp, 2)
        old = io.float_array(fn, "old_logp", old_logp, 2).astype(lp.dtype)
        m = io.check_mask(fn, mask, lp.shape)
        arrays = {"log_probs": io.clean(lp, m), "old_log_probs": io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "action_mask": io.as_mask_of(m, lp.dtype)}
        params = {"init": init}
        if upstream is None:
            return io.masked_out(self._worker.call("policy_loss", arrays, params)["outputs"]["per_token"], m, lp.dtype)
        up = io.clean(np.asarray(upstream, dtype=lp.dtype), m)
        g = self._worker.call("policy_loss", arrays, params, wrt=["log_probs"], upstream={"per_token": up})["grads"]["log_probs"]
        return io.masked_out(g, m, lp.dtype)

    @staticmethod
    def _init(kind: str, eps_low: float, eps_high: float, dual_clip: float | None = None) -> dict[str, Any]:
        return {"clip_eps_low": float(eps_low), "clip_eps_high": float(eps_high),
                "dual_clip": None if dual_clip is None else float(dual_clip), "policy_loss_type": kind}

    def ppo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None) -> np.ndarray:
        return self._policy("ppo_token_loss", self._init("ppo", eps_low, eps_high, dual_clip), logp, old_logp, advantages, mask)

    def ppo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None) -> np.ndarray:
        return self._policy("ppo_token_loss", self._init("ppo", eps_low, eps_high, dual_clip), logp, old_logp, advantages, mask, upstream)

    def gspo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 3e-4, eps_high: float = 4e-4) -> np.ndarray:
        return self._policy("gspo_token_loss", self._init("gspo", eps_low, eps_high), logp, old_logp, advantages, mask)

    def gspo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float = 3e-4, eps_high: float = 4e-4) -> np.ndarray:
        return self._policy("gspo_token_loss", self._init("gspo", eps_low, eps_high), logp, old_logp, advantages, mask, upstream)

    def _value(self, values: Any, old_values: Any, returns: Any, mask: Any, clip: float | None, upstream: Any = None) -> np.ndarray:
        fn = "value_token_loss"
        v = io.float_array(fn, "values", values, 2)
        m = io.check_mask(fn, mask, v.shape)
        old = io.float_array(fn, "old_values", old_values, 2).astype(v.dtype)
        ret = io.float_array(fn, "returns", returns, 2).astype(v.dtype)
        arrays = {"values": io.clean(v, m), "old_values": io.clean(old, m), "returns": io.clean(ret, m),
                  "action_mask": io.as_mask_of(m, v.dtype)}
        params = {"clip_eps": None if clip is None else float(clip)}
        if upstream is None:
            out = self._worker.call("value_loss", arrays, params)["outputs"]["loss_mat"]
            return io.masked_out(0.5 * np.asarray(out, dtype=np.float64), m, v.dtype)
        up = io.clean(np.asarray(upstream, dtype=v.dtype), m) * v.dtype.type(0.5)
        g = self._worker.call("value_loss", arrays, params, wrt=["values"], upstream={"loss_mat": up})["grads"]["values"]
        return io.masked_out(g, m, v.dtype)

    def value_token_loss(self, values: Any, old_values: Any, returns: Any, mask: Any, *, clip: float | None = None) -> np.ndarray:
        return self._value(values, old_values, returns, mask, clip)

    def value_token_loss_grad(self, values: Any, old_values: Any, returns: Any, mask: Any, upstream: Any, *, clip: float | None = None) -> np.ndarray:
        return self._value(values, old_values, returns, mask, clip, upstream)


__all__ = ["OpenRLHFAdapter"]
