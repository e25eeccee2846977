"""The torchrl adapter: torchrl's RL-for-LLM math, called through the installed torchrl, in spec v1 conventions.

torchrl runs in its own environment (``rlspec frameworks install torchrl``: torchrl 0.14.1 ``--no-deps`` over
torch 2.13.0 CPU, tensordict 0.14.3 and torchrl's other small requirements) and is driven through a worker
process (``conformance/frameworks/subprocess_worker.py``; the torchrl calls are in
``conformance/frameworks/torchrl/ops.py``). A NumPy adapter: values come from torchrl and each
``<function>_grad`` is torchrl's autograd gradient for the given upstream.

What is called (torchrl 0.14.1; paths relative to ``torchrl/``):

| spec function | torchrl |
|---|---|
| ``token_logprobs`` | ``LLMMaskedCategorical.log_prob`` (``modules/distributions/discrete.py``:831) of the distribution an ``LLMWrapperBase`` actor builds (``_get_rlhf_dist``, ``modules/llm/policies/common.py``:1513, :1332) |
| ``token_entropy`` | the same distribution's ``entropy`` (discrete.py:894) |
| ``grpo_advantages`` | ``objectives/llm/grpo.py::MCAdvantage`` (:1019) with ``grpo_size = group_size``, each row a one-step trajectory: ``(r - mean) / std.clamp_min(1e-6)`` (:1508-1511) |
| ``gae`` | ``objectives/value/functional.py::generalized_advantage_estimate`` (:120) on each row's valid positions (below) |
| ``kl_penalty`` | ``GRPOLoss._kl_to_ref`` (grpo.py:868-916) on each valid token alone: ``k3`` only |
| ``kl_loss_term`` | the same: ``estimator="k3"``, ``gradient="estimator"`` (the KL term of ``GRPOLoss.forward``, :747-755) |
| ``ppo_token_loss`` | ``GRPOLoss(clip_epsilon=(eps_low, eps_high), aggregation="none", entropy_bonus=False)``'s ``forward`` (:664): its per-token ``loss_objective`` (``_compute_policy_objective``, :769) |
| ``cispo_token_loss`` | ``CISPOLoss`` (:995) the same way (``_compute_policy_objective``, :1008): the clipped ratio on the graph, whatever ``surrogate`` asks (below; a clipped token loses its gradient, a bug against CISPO's stop-gradient weight: finding ``cispo-clipped-ratio-on-graph``) |
| ``aggregate`` | ``GRPOLoss._aggregate_loss_value`` (:784): ``token_mean`` (``aggregation="token_mean"``), ``seq_mean_token_mean`` (``"prompt_mean"``) |
| ``policy_loss`` | ``GRPOLoss(clip_epsilon, aggregation, entropy_bonus=False, kl_to_ref_coeff=kl_coef)``'s ``forward``: ``loss_objective + loss_kl_to_ref`` |
| ``entropy_bonus`` | ``GRPOLoss(entropy_coeff=entropy_coef, aggregation)``'s ``forward``: ``loss_entropy`` (:735, aggregated at :737-745) |

The loss ``forward`` runs with an actor: the spec functions whose input is ``logp`` use the actor of
``ops.py`` whose ``get_dist`` returns a distribution holding the given log-probs (and entropies), the
fallback path of ``GRPOLoss._get_cur_log_prob`` (:636-640); ``token_logprobs`` / ``token_entropy`` use a
``LLMWrapperBase`` subclass around the given logits, from which torchrl builds its
``LLMMaskedCategorical`` (see ``ops.py``). The framework rows (``checks.py``) drive the whole ``forward``
with a tiny random-weight model behind that wrapper, torchrl's default ``masking_strategy="sft"``.

Conventions this adapter converts (the checks never do):
- The spec's mask is the actor's ``("masks", "all_assistant_mask")`` (``masking_strategy="rlhf"``) or the
  distribution's ``mask``; masked inputs are sent as 0 and masked outputs are returned as 0
  (``conformance/frameworks/spec_io.py``). ``[B]`` advantages are broadcast to torchrl's ``[B, T, 1]``.
- ``gae``: torchrl's value functions take trajectories ``[B, T, 1]`` with ``done`` / ``terminated``, no mask.
  Each row's valid positions are packed to the left in order (the masked ones skipped, as the spec
  bootstraps from the next valid token), ``next_state_value`` is the next packed value, and the last valid
  step is ``done`` and ``terminated`` (the value after it is 0); the results go back to their positions.
- ``grpo_advantages``: the LLM collector's layout, one single-step trajectory per completion; groups are
  ``group_size`` consecutive rows (group id ``b // group_size``).

Keyword values torchrl has no setting for raise ``NotImplementedError`` (a "not implemented" case):
``temperature != 1`` (the wrapper's logits are scored as they are), ``grpo_advantages`` ``scale`` other than
``"group"`` and ``std_ddof=0`` (``torch.std``, unbiased), ``kl_penalty`` k1/k2 and the clamps, ``kl_loss_term``
forms other than k3 with its own gradient, ``dual_clip``, ``log_ratio_clamp``, CISPO's ``bound="absolute"``
and ``eps_low=None`` or ``>= 1`` (no lower bound: ``objectives/utils.py:1082-1107`` requires ``0 <= eps_low < 1``), the
aggregation modes other than the two and global counts (``num_tokens``, ``num_seqs``, ``norm_length``).
What torchrl computes one way only is returned for every case, and the row's fingerprint names it:
CISPO's surrogate is always the clipped ratio (``surrogate="ratio"``, preset ``torchrl``: what torchrl computes,
itself a bug, see ``findings.toml``);
``grpo_advantages``' std is clamped at 1e-6 (``clamp_min``, no ``eps`` setting: preset ``torchrl``
``eps=0.0``), and a one-sample group gives NaN (the unbiased std of one reward; no ``singleton`` setting),
which the row reports: the per-step mode accepts ``grpo_size=1`` (only ``trajectory_return`` refuses it,
grpo.py:1165-1170), so a group of one is inside torchrl's domain and no ``domain`` is declared.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.frameworks import spec_io as io
from conformance.frameworks.subprocess_adapter import SubprocessAdapter

NO_GLOBAL_COUNTS = "GRPOLoss aggregates each call's own batch (grpo.py:784-817): no global token or sequence count"


class TorchRLAdapter(SubprocessAdapter):
    """Spec v1 adapter for torchrl (see the module docstring for what each function calls)."""

    name = "torchrl"
    dtypes = ("float64", "float32")
    checks_module = "conformance.frameworks.torchrl.checks"

    AGGREGATIONS = {"token_mean": "token_mean", "seq_mean_token_mean": "prompt_mean"}
    unsupported_kwargs = {
        "grpo_advantages": {"scale": ("batch", "none"), "std_ddof": (0,)},
        "kl_penalty": {"estimator": ("k1", "k2")},
        "kl_loss_term": {"estimator": ("k1", "k2", "abs"), "gradient": ("straight_through", "unbiased", "bias_corrected")},
        "cispo_token_loss": {"eps_low": (None,), "bound": ("absolute",)},
        "aggregate": {"mode": ("seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")},
        "policy_loss": {"kl_estimator": ("k1", "k2"), "mode": ("seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")},
        "entropy_bonus": {"mode": ("seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")},
    }
    precision_notes = {
        "gae": "generalized_advantage_estimate multiplies a Python float gamma by an int tensor (functional.py:170, "
               ":172): gamma and gamma*lambda enter as float32 whatever the inputs' dtype",
        "ppo_token_loss": "GRPOLoss holds clip_epsilon in float32 buffers (grpo.py:536-537): the clip bounds "
                          "log(1 -+ eps) are float32 with float64 log-probs",
        "cispo_token_loss": "CISPOLoss holds clip_epsilon in float32 buffers (grpo.py:536-537)",
        "policy_loss": "GRPOLoss holds clip_epsilon in float32 buffers (grpo.py:536-537)",
    }

    # torchrl has no GSPO or value loss in its LLM objectives, no KL controller, and no global counts for
    # a split step (SubprocessAdapter's shared functions for those are withdrawn)
    gspo_token_loss = gspo_token_loss_grad = None
    value_token_loss = value_token_loss_grad = None
    micro_batched_loss = micro_batched_loss_grad = None
    kl_controller_update = None

    LOGPROBS_OP = ENTROPY_OP = "log_probs"

    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, dict[str, Any], float]:
        raise NotImplementedError("torchrl scores whole [B, T, V] batches through its actor (TorchRLAdapter._distribution)")

    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        raise NotImplementedError("torchrl's LLM objectives have no GSPO loss (objectives/llm/grpo.py)")

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        raise NotImplementedError("torchrl's LLM objectives have no value loss (objectives/llm/grpo.py)")

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        raise NotImplementedError(NO_GLOBAL_COUNTS)

    # ------------------------------------------------------------------------------------------
    # logprob.token / logprob.entropy: the LLMMaskedCategorical of an LLMWrapperBase actor
    # ------------------------------------------------------------------------------------------

    def _distribution(self, fn: str, output: str, logits: Any, input_ids: Any, mask: Any, temperature: float,
                      upstream: Any = None) -> np.ndarray:
        z = io.float_array(fn, "logits", logits, 3)
        m = io.check_mask(fn, mask, z.shape[:2])
        if not temperature > 0:
            raise io.fail(fn, "temperature", f"expected > 0, got {temperature!r}")
        if temperature != 1.0:
            raise NotImplementedError("torchrl's LLM distribution scores the wrapper's logits as they are "
                                      "(LLMMaskedCategorical, GRPOLoss): no temperature")
        ids = np.asarray(input_ids)
        if ids.dtype.kind not in "iu" or ids.shape != m.shape:
            raise io.fail(fn, "input_ids", f"expected an integer array [B, T] = {list(m.shape)}, got {ids.dtype} {ids.shape}",
                          TypeError if ids.dtype.kind not in "iu" else ValueError)
        predicts = np.zeros(m.shape, dtype=bool)  # rows of z that predict a valid token
        predicts[:, :-1] = m[:, 1:]
        arrays = {"logits": np.where(predicts[..., None], z, 0).astype(z.dtype), "tokens": np.where(m, ids, 0).astype(np.int64),
                  "mask": m}
        if upstream is None:
            return io.masked_out(self._worker.call("log_probs", arrays)["outputs"][output], m, z.dtype)
        up = io.clean(np.asarray(upstream, dtype=z.dtype), m)
        g = self._worker.call("log_probs", arrays, wrt=["logits"], upstream={output: up})["grads"]["logits"]
        return np.where(predicts[..., None], np.asarray(g, dtype=np.float64), 0.0).astype(z.dtype)

    def token_logprobs(self, logits: Any, input_ids: Any, mask: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._distribution("token_logprobs", "logp", logits, input_ids, mask, temperature)

    def token_logprobs_grad(self, logits: Any, input_ids: Any, mask: Any, upstream: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._distribution("token_logprobs", "logp", logits, input_ids, mask, temperature, upstream)

    def token_entropy(self, logits: Any, mask: Any, *, temperature: float = 1.0) -> np.ndarray:
        z = np.asarray(logits)
        return self._distribution("token_entropy", "entropy", logits, np.zeros(z.shape[:2], dtype=np.int64), mask, temperature)

    def token_entropy_grad(self, logits: Any, mask: Any, upstream: Any, *, temperature: float = 1.0) -> np.ndarray:
        z = np.asarray(logits)
        return self._distribution("token_entropy", "entropy", logits, np.zeros(z.shape[:2], dtype=np.int64), mask, temperature,
                                  upstream)

    # ------------------------------------------------------------------------------------------
    # adv.grpo: MCAdvantage; adv.gae: generalized_advantage_estimate
    # ------------------------------------------------------------------------------------------

    def grpo_advantages(self, rewards: Any, group_size: Any, *, scale: str = "group", std_ddof: int = 1, eps: float = 1e-6,
                        singleton: str = "zero") -> np.ndarray:
        """``MCAdvantage(grpo_size=group_size)``; ``eps`` and ``singleton`` have no setting (module docstring)."""
        fn = "grpo_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        io.choice(fn, "scale", scale)
        if scale != "group" or std_ddof != 1:
            raise NotImplementedError("MCAdvantage divides by the group's unbiased std (grpo.py:1508-1511): "
                                      "no batch or unscaled form, no ddof")
        return self.mc_advantages(r, G)

    def mc_advantages(self, rewards: np.ndarray, group_size: int, *, trajectory_return: str | None = None) -> np.ndarray:
        """``MCAdvantage(grpo_size=group_size, trajectory_return=...)`` on one single-step trajectory per row."""
        params = {"grpo_size": int(group_size), "trajectory_return": trajectory_return}
        out = self._worker.call("mc_advantage", {"rewards": rewards}, params)["outputs"]["advantages"]
        return np.asarray(out, dtype=rewards.dtype)

    @staticmethod
    def trajectories(token_rewards: np.ndarray, values: np.ndarray, m: np.ndarray) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """The spec's rows as torchrl trajectories ``[B, L, 1]`` (module docstring) and each row's valid positions."""
        B = m.shape[0]
        where = [np.flatnonzero(m[b]) for b in range(B)]
        L = max([len(w) for w in where] + [1])
        reward, value, nxt = (np.zeros((B, L, 1), dtype=values.dtype) for _ in range(3))
        done = np.ones((B, L, 1), dtype=bool)
        for b, w in enumerate(where):
            n = len(w)
            reward[b, :n, 0], value[b, :n, 0] = token_rewards[b, w], values[b, w]
            if n > 1:
                nxt[b, :n - 1, 0] = values[b, w[1:]]
                done[b, :n - 1, 0] = False
        return {"reward": reward, "state_value": value, "next_state_value": nxt, "done": done, "terminated": done.copy()}, where

    def value_function(self, name: str, token_rewards: Any, values: Any, mask: Any, gamma: float, lam: float,
                       op: str = "value_function", **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """torchrl's value function or estimator ``name`` on the spec's rows: (advantage, value target) ``[B, T]``."""
        fn = "gae"
        v, r, m = io.token_arrays(fn, mask, values=values, token_rewards=token_rewards)
        io.unit_interval(fn, "gamma", gamma)
        io.unit_interval(fn, "lam", lam)
        io.check_finite(fn, "token_rewards", r, m)
        io.check_finite(fn, "values", v, m)
        arrays, where = self.trajectories(r, v, m)
        out = self._worker.call(op, arrays, {"name": name, "gamma": float(gamma), "lmbda": float(lam), **params})["outputs"]
        adv, ret = np.zeros(v.shape), np.zeros(v.shape)
        for b, w in enumerate(where):
            adv[b, w] = np.asarray(out["advantage"])[b, :len(w), 0]
            ret[b, w] = np.asarray(out["value_target"])[b, :len(w), 0]
        return adv.astype(v.dtype), ret.astype(v.dtype)

    def gae(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        return self.value_function("generalized_advantage_estimate", token_rewards, values, mask, gamma, lam)

    # ------------------------------------------------------------------------------------------
    # the loss forward on given log-probs (ops.py's log-prob actor)
    # ------------------------------------------------------------------------------------------

    def _forward(self, fn: str, loss: str, init: dict[str, Any], outputs: tuple[str, ...], logp: Any, mask: Any, *,
                 old_logp: Any = None, advantages: Any = None, ref_logp: Any = None, entropy: Any = None,
                 wrt: str = "log_probs", upstream: Any = None) -> tuple[dict[str, Any], np.ndarray, Any]:
        """``loss(actor, **init)(batch)`` on the given log-probs: its ``outputs`` (or with ``upstream``, for the
        sum of those outputs weighted by it, the gradient w.r.t. ``wrt``), the mask and the dtype."""
        lp = io.float_array(fn, "logp" if wrt == "log_probs" else "entropy", logp, 2)
        m = io.check_mask(fn, mask, lp.shape)
        arrays = {"log_probs": io.clean(lp, m), "mask": m}
        for key, name, value in (("old_log_probs", "old_logp", old_logp), ("ref_log_probs", "ref_logp", ref_logp),
                                 ("entropy", "entropy", entropy)):
            if value is not None:
                a = io.float_array(fn, name, value, 2).astype(lp.dtype)
                if a.shape != lp.shape:
                    raise io.fail(fn, name, f"expected [B, T] = {list(lp.shape)}, got shape {a.shape}")
                io.check_finite(fn, name, a, m)
                arrays[key] = io.clean(a, m)
        io.check_finite(fn, "logp", lp, m)
        arrays.setdefault("old_log_probs", np.zeros(lp.shape, dtype=lp.dtype))
        arrays["advantage"] = (io.per_token(advantages, m, fn, lp.dtype) if advantages is not None
                               else np.zeros(lp.shape, dtype=lp.dtype))
        if advantages is not None:
            io.check_finite(fn, "advantages", arrays["advantage"], m)
        params = {"loss": loss, "init": init}
        if upstream is None:
            return self._worker.call("grpo_loss", arrays, params)["outputs"], m, lp.dtype
        ups = {k: upstream for k in outputs}
        return self._worker.call("grpo_loss", arrays, params, wrt=[wrt], upstream=ups)["grads"], m, lp.dtype

    @staticmethod
    def _clip(fn: str, eps_low: Any, eps_high: Any) -> list[float]:
        for name, value in (("eps_low", eps_low), ("eps_high", eps_high)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise io.fail(fn, name, f"expected a number >= 0, got {value!r}")
        if eps_low >= 1:  # a lower bound 1 - eps_low <= 0: valid in the spec, refused by torchrl
            raise NotImplementedError(f"torchrl requires clip_epsilon low < 1 (objectives/utils.py:1103-1106), "
                                      f"got eps_low={eps_low!r}")
        return [float(eps_low), float(eps_high)]

    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        if dual_clip is not None:
            raise NotImplementedError("GRPOLoss has no dual clip (grpo.py:769-782)")
        return {"clip_epsilon": self._clip("ppo_token_loss", eps_low, eps_high), "aggregation": "none", "entropy_bonus": False}

    def _token_loss(self, fn: str, loss: str, init: dict[str, Any], logp: Any, old_logp: Any, advantages: Any, mask: Any,
                    upstream: Any) -> np.ndarray:
        if upstream is None:
            out, m, dtype = self._forward(fn, loss, init, ("loss_objective",), logp, mask, old_logp=old_logp, advantages=advantages)
            return io.masked_out(out["loss_objective"], m, dtype)
        m = io.check_mask(fn, mask, np.shape(logp))
        up = io.clean(np.asarray(upstream, dtype=np.float64), m)
        grads, m, dtype = self._forward(fn, loss, init, ("loss_objective",), logp, mask, old_logp=old_logp,
                                        advantages=advantages, upstream=up.astype(np.asarray(logp).dtype))
        return io.masked_out(grads["log_probs"], m, dtype)

    def ppo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.2, eps_high: float = 0.2,
                       dual_clip: float | None = None, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._ppo(logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, log_ratio_clamp)

    def ppo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float = 0.2,
                            eps_high: float = 0.2, dual_clip: float | None = None, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._ppo(logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, log_ratio_clamp, upstream)

    def _ppo(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, eps_low: float, eps_high: float, dual_clip: Any,
             log_ratio_clamp: Any, upstream: Any = None) -> np.ndarray:
        if log_ratio_clamp is not None:
            raise NotImplementedError("GRPOLoss does not clamp the log-ratio (grpo.py:918-983)")
        return self._token_loss("ppo_token_loss", "GRPOLoss", self._ppo_params(eps_low, eps_high, dual_clip), logp, old_logp,
                                advantages, mask, upstream)

    def _cispo(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, eps_low: Any, eps_high: float, bound: str,
               surrogate: str, upstream: Any = None) -> np.ndarray:
        fn = "cispo_token_loss"
        io.choice(fn, "bound", bound)
        io.choice(fn, "surrogate", surrogate)
        if bound == "absolute" or eps_low is None:
            raise NotImplementedError("CISPOLoss clips r to [1 - eps_low, 1 + eps_high] (grpo.py:551-557, :1008-1016): both bounds "
                                      "relative and a lower bound always (objectives/utils.py:1082-1107)")
        init = {"clip_epsilon": self._clip(fn, eps_low, eps_high), "aggregation": "none", "entropy_bonus": False}
        return self._token_loss(fn, "CISPOLoss", init, logp, old_logp, advantages, mask, upstream)

    def cispo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float | None = None,
                         eps_high: float = 0.28, bound: str = "relative", surrogate: str = "logp") -> np.ndarray:
        return self._cispo(logp, old_logp, advantages, mask, eps_low, eps_high, bound, surrogate)

    def cispo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                              eps_low: float | None = None, eps_high: float = 0.28, bound: str = "relative",
                              surrogate: str = "logp") -> np.ndarray:
        return self._cispo(logp, old_logp, advantages, mask, eps_low, eps_high, bound, surrogate, upstream)

    # ------------------------------------------------------------------------------------------
    # kl.estimator / kl.loss: GRPOLoss._kl_to_ref, one token at a time
    # ------------------------------------------------------------------------------------------

    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None) -> np.ndarray:
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator)
        if estimator != "k3":
            raise NotImplementedError("GRPOLoss's KL terms are k3 only (grpo.py:914-915)")
        io.check_finite("kl_penalty", "logp", lp, m)
        io.check_finite("kl_penalty", "ref_logp", ref, m)
        arrays = {"log_probs": io.clean(lp, m), "ref_log_probs": io.clean(ref, m), "mask": m}
        return self._token_op("kl_to_ref", arrays, {"per_token": True}, "kl", "log_probs", m, lp.dtype, upstream)

    @staticmethod
    def _no_clamps(log_ratio_clamp: Any, clamp: Any) -> None:
        if log_ratio_clamp is not None or clamp is not None:
            raise NotImplementedError("GRPOLoss._kl_to_ref clamps neither the log-ratio nor the estimate (grpo.py:913-915)")

    def kl_penalty(self, logp: Any, ref_logp: Any, mask: Any, *, estimator: str = "k1", log_ratio_clamp: float | None = None,
                   clamp: float | None = None) -> np.ndarray:
        self._no_clamps(log_ratio_clamp, clamp)
        return self._kl(logp, ref_logp, mask, estimator)

    def kl_penalty_grad(self, logp: Any, ref_logp: Any, mask: Any, upstream: Any, *, estimator: str = "k1",
                        log_ratio_clamp: float | None = None, clamp: float | None = None) -> np.ndarray:
        self._no_clamps(log_ratio_clamp, clamp)
        return self._kl(logp, ref_logp, mask, estimator, upstream)

    def _kl_loss(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, gradient: str, log_ratio_clamp: Any, clamp: Any,
                 upstream: Any = None) -> np.ndarray:
        io.kl_loss_keywords("kl_loss_term", estimator, gradient)
        if estimator != "k3" or gradient != "estimator":
            raise NotImplementedError("GRPOLoss's KL term is k3 differentiated as it is (grpo.py:913-915)")
        self._no_clamps(log_ratio_clamp, clamp)
        return self._kl(logp, ref_logp, mask, estimator, upstream)

    def kl_loss_term(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any = None, *, estimator: str = "k3",
                     gradient: str = "estimator", log_ratio_clamp: float | None = None, clamp: float | None = None,
                     weight_cap: float | None = 10.0) -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, estimator, gradient, log_ratio_clamp, clamp)

    def kl_loss_term_grad(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any, upstream: Any, *, estimator: str = "k3",
                          gradient: str = "estimator", log_ratio_clamp: float | None = None, clamp: float | None = None,
                          weight_cap: float | None = 10.0) -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, estimator, gradient, log_ratio_clamp, clamp, upstream)

    # ------------------------------------------------------------------------------------------
    # agg / loss.policy / loss.entropy: GRPOLoss's aggregation and its forward's loss terms
    # ------------------------------------------------------------------------------------------

    def _aggregation(self, fn: str, mode: str, norm_length: Any, num_tokens: Any, num_seqs: Any) -> str:
        io.agg_mode(fn, mode)
        if mode not in self.AGGREGATIONS:
            raise NotImplementedError(f"GRPOLoss aggregates by token_mean or prompt_mean only (grpo.py:784-817), not {mode!r}")
        if norm_length is not None or num_tokens is not None or num_seqs is not None:
            raise NotImplementedError(NO_GLOBAL_COUNTS)
        return self.AGGREGATIONS[mode]

    def _aggregate(self, token_loss: Any, mask: Any, mode: str, norm_length: Any, num_tokens: Any, num_seqs: Any,
                   upstream: Any = None) -> Any:
        fn = "aggregate"
        x, m = io.token_arrays(fn, mask, finite=True, token_loss=token_loss)
        params = {"aggregation": self._aggregation(fn, mode, norm_length, num_tokens, num_seqs)}
        arrays = {"value": io.clean(x, m), "mask": m}
        if upstream is None:
            return x.dtype.type(np.reshape(self._worker.call("aggregate", arrays, params)["outputs"]["loss"], ()))
        g = self._worker.call("aggregate", arrays, params, wrt=["value"], upstream={"loss": float(upstream)})["grads"]["value"]
        return io.masked_out(g, m, x.dtype)

    def aggregate(self, token_loss: Any, mask: Any, *, mode: str, norm_length: float | None = None, num_tokens: float | None = None,
                  num_seqs: float | None = None) -> Any:
        return self._aggregate(token_loss, mask, mode, norm_length, num_tokens, num_seqs)

    def aggregate_grad(self, token_loss: Any, mask: Any, upstream: Any, *, mode: str, norm_length: float | None = None,
                       num_tokens: float | None = None, num_seqs: float | None = None) -> np.ndarray:
        return self._aggregate(token_loss, mask, mode, norm_length, num_tokens, num_seqs, upstream)

    def _policy_loss(self, logp: Any, old_logp: Any, ref_logp: Any, advantages: Any, mask: Any, kw: dict[str, Any],
                     upstream: Any = None) -> Any:
        fn = "policy_loss"
        io.choice(fn, "kl_estimator", kw["kl_estimator"])
        kl_coef = io.number(fn, "kl_coef", kw["kl_coef"], low=None)
        aggregation = self._aggregation(fn, kw["mode"], kw["norm_length"], kw["num_tokens"], kw["num_seqs"])
        if kw["dual_clip"] is not None:
            raise NotImplementedError("GRPOLoss has no dual clip (grpo.py:769-782)")
        if kl_coef < 0 or (kl_coef > 0 and kw["kl_estimator"] != "k3"):
            raise NotImplementedError("GRPOLoss adds a k3 KL term with a positive kl_to_ref_coeff only (grpo.py:747-755)")
        init = {"clip_epsilon": self._clip(fn, kw["eps_low"], kw["eps_high"]), "aggregation": aggregation,
                "entropy_bonus": False, "kl_to_ref_coeff": float(kl_coef) if kl_coef > 0 else None}
        outputs = ("loss_objective", "loss_kl_to_ref") if kl_coef > 0 else ("loss_objective",)
        if upstream is None:
            out, _, dtype = self._forward(fn, "GRPOLoss", init, outputs, logp, mask, old_logp=old_logp, advantages=advantages,
                                          ref_logp=ref_logp)
            return dtype.type(sum(float(np.reshape(out[k], ())) for k in outputs))
        grads, m, dtype = self._forward(fn, "GRPOLoss", init, outputs, logp, mask, old_logp=old_logp, advantages=advantages,
                                        ref_logp=ref_logp, upstream=float(upstream))
        return io.masked_out(grads["log_probs"], m, dtype)

    def policy_loss(self, logp: Any, old_logp: Any, ref_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.2,
                    eps_high: float = 0.2, dual_clip: float | None = None, kl_coef: float = 0.0, kl_estimator: str = "k3",
                    mode: str = "token_mean", norm_length: float | None = None, num_tokens: float | None = None,
                    num_seqs: float | None = None) -> Any:
        kw = {"eps_low": eps_low, "eps_high": eps_high, "dual_clip": dual_clip, "kl_coef": kl_coef, "kl_estimator": kl_estimator,
              "mode": mode, "norm_length": norm_length, "num_tokens": num_tokens, "num_seqs": num_seqs}
        return self._policy_loss(logp, old_logp, ref_logp, advantages, mask, kw)

    def policy_loss_grad(self, logp: Any, old_logp: Any, ref_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                         eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None, kl_coef: float = 0.0,
                         kl_estimator: str = "k3", mode: str = "token_mean", norm_length: float | None = None,
                         num_tokens: float | None = None, num_seqs: float | None = None) -> np.ndarray:
        kw = {"eps_low": eps_low, "eps_high": eps_high, "dual_clip": dual_clip, "kl_coef": kl_coef, "kl_estimator": kl_estimator,
              "mode": mode, "norm_length": norm_length, "num_tokens": num_tokens, "num_seqs": num_seqs}
        return self._policy_loss(logp, old_logp, ref_logp, advantages, mask, kw, upstream)

    def _entropy_bonus(self, entropy: Any, mask: Any, entropy_coef: Any, mode: str, norm_length: Any, num_tokens: Any,
                       num_seqs: Any, upstream: Any = None) -> Any:
        """``loss_entropy`` of a ``GRPOLoss`` forward whose actor's distribution has the given entropies (the
        log-probs are 0 = the old ones and the advantages 0: the policy term is 0 and is not read)."""
        fn = "entropy_bonus"
        entropy_coef = io.number(fn, "entropy_coef", entropy_coef, low=None)
        init = {"aggregation": self._aggregation(fn, mode, norm_length, num_tokens, num_seqs),
                "entropy_coeff": entropy_coef}
        H = io.float_array(fn, "entropy", entropy, 2)
        zeros = np.zeros(H.shape, dtype=H.dtype)
        if upstream is None:
            out, _, dtype = self._forward(fn, "GRPOLoss", init, ("loss_entropy",), zeros, mask, entropy=H)
            return dtype.type(np.reshape(out["loss_entropy"], ()))
        grads, m, dtype = self._forward(fn, "GRPOLoss", init, ("loss_entropy",), zeros, mask, entropy=H, wrt="entropy",
                                        upstream=float(upstream))
        return io.masked_out(grads["entropy"], m, dtype)

    def entropy_bonus(self, entropy: Any, mask: Any, *, entropy_coef: float, mode: str, norm_length: float | None = None,
                      num_tokens: float | None = None, num_seqs: float | None = None) -> Any:
        return self._entropy_bonus(entropy, mask, entropy_coef, mode, norm_length, num_tokens, num_seqs)

    def entropy_bonus_grad(self, entropy: Any, mask: Any, upstream: Any, *, entropy_coef: float, mode: str,
                           norm_length: float | None = None, num_tokens: float | None = None, num_seqs: float | None = None) -> np.ndarray:
        return self._entropy_bonus(entropy, mask, entropy_coef, mode, norm_length, num_tokens, num_seqs, upstream)


__all__ = ["TorchRLAdapter"]
