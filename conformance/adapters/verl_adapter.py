"""The verl adapter: verl's RL math, called through the installed verl, in spec v1 conventions.

verl runs in its own environment (``rlspec frameworks install verl``; verl 0.9.1 requires
``transformers<5.11``, rlspec's TRL needs 5.24) and is driven through a worker process
(``conformance/adapters/subprocess_worker.py``; the verl calls are in ``conformance/frameworks/verl_ops.py``;
what the verl and OpenRLHF adapters share is ``conformance/adapters/subprocess_adapter.py``).
This adapter is therefore a NumPy adapter (``array_api = "numpy"``): values come from verl and each
``<function>_grad`` is verl's autograd gradient for the given upstream.

What is called (verl 0.9.1; paths relative to ``verl/``):

| spec function | verl |
|---|---|
| ``token_logprobs`` | ``utils/torch_functional.py::logprobs_from_logits`` (:73) on ``logits / temperature`` (the actor divides first) |
| ``token_entropy`` | ``utils/torch_functional.py::entropy_from_logits`` (:231) on ``logits / temperature`` |
| ``rloo_advantages`` | ``trainer/ppo/core_algos.py::compute_rloo_outcome_advantage`` (:588, the ``"rloo"`` estimator) |
| ``gae`` | ``core_algos.py::compute_gae_advantage_return`` (:216): ``returns``; advantages = ``returns - values`` (see below) |
| ``whiten`` | ``utils/torch_functional.py::masked_whiten`` (:329) |
| ``kl_penalty`` | ``core_algos.py::kl_penalty`` (:2188) with ``"k1"``, ``"k2"``, ``"k3"`` (= ``"kl"``, ``"mse"``, ``"low_var_kl"``) |
| ``ppo_token_loss`` | ``core_algos.py::compute_policy_loss_vanilla`` (:1286): the per-token matrix it aggregates |
| ``gspo_token_loss`` | ``core_algos.py::compute_policy_loss_gspo`` (:1546): idem |
| ``cispo_token_loss`` | ``core_algos.py::compute_policy_loss_cispo`` (:2048): idem |
| ``value_token_loss`` | ``core_algos.py::compute_value_loss`` (:2125): ½ × the matrix it aggregates (verl applies the ½ after ``agg_loss``, :2171) |
| ``aggregate`` | ``core_algos.py::agg_loss`` (:1140) with the global batch info the engine passes (``workers/utils/losses.py:57-69``) |

Everything else verl computes as a scalar or with a setting the core API cannot ask for is checked by
``conformance/frameworks/verl_checks.py`` (``extra_rows``): GRPO with and without std scaling, the
vectorised estimators, every ``agg_loss`` mode with and without global batch info and split over two
data-parallel ranks, the aggregated policy and value losses (value and gradient), ``kl_penalty``'s
``"abs"`` and straight-through ``"k3+"``, and GAE's whitened advantages.

Conventions this adapter converts (the checks never do):
- verl's losses take response tensors ``[B, R]`` with a ``response_mask``; the spec's ``[B, T]``
  token-aligned arrays are passed as the response, with ``mask`` as ``response_mask`` (the losses are
  position-independent). Masked inputs are sent as 0 and masked outputs are returned as 0
  (``conformance/frameworks/spec_io.py``).
- ``[B]`` advantages are broadcast over the tokens (verl's advantages are ``[B, R]``).
- Group ids: contiguous groups of ``group_size`` rows become verl's ``index`` (``b // group_size``).
  Rewards are outcome rewards: ``token_level_rewards`` is ``[B, 1]`` holding the reward.
- Policy-loss settings go through ``ActorConfig``: ``eps_low``/``eps_high`` -> ``clip_ratio_low``/
  ``clip_ratio_high``; ``dual_clip`` -> ``clip_ratio_c`` (verl applies dual-clip always, default 3.0;
  ``dual_clip=None`` is ``clip_ratio_c=inf``, which turns it off exactly); CISPO's missing lower bound (``eps_low=None``) is
  ``clip_ratio_low=1.0`` (a lower bound of 0, which no ratio crosses), its absolute bound ``E`` is
  ``clip_ratio_high=E-1``; ``value_token_loss(clip=None)`` is ``cliprange_value=inf``.
- ``gae``: verl returns whitened advantages (``masked_whiten`` inside ``compute_gae_advantage_return``,
  :259) and ``returns = advantages + values`` computed before the whitening (:258). The spec's
  (unwhitened) advantages are therefore ``returns - values``; the whitened output is checked as
  ``whiten(gae(...).advantages)`` by the ``verl.compute_gae_advantage_return`` row.
- ``aggregate``: ``num_tokens``/``num_seqs`` become ``batch_num_tokens``/``global_batch_size`` (default:
  the batch's own token count and ``B``, as the engine sets them); ``norm_length`` becomes
  ``loss_scale_factor``.

Importing this module never starts verl; constructing the adapter does, and a missing environment
raises ``AdapterLoadError("... cannot import ...")`` so ``rlspec check`` shows a "not installed" row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.adapters.subprocess_adapter import SubprocessAdapter
from conformance.frameworks import spec_io as io


class VerlAdapter(SubprocessAdapter):
    """Spec v1 adapter for verl (see the module docstring for what each function calls)."""

    name = "verl"
    dtypes = ("float64", "float32")
    checks_module = "conformance.frameworks.verl_checks"

    LOGPROBS_OP = "logprobs_from_logits"
    ENTROPY_OP = "entropy_from_logits"
    POLICY_ARRAYS = ("log_prob", "old_log_prob", "response_mask")
    VALUE_ARRAYS = ("vpreds", "values", "returns", "response_mask")

    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, None, float]:
        # the actor divides the logits by the temperature before logprobs_from_logits
        return rows / np.asarray(temperature, dtype=rows.dtype), None, temperature

    # ------------------------------------------------------------------------------------------
    # advantages
    # ------------------------------------------------------------------------------------------

    def outcome_advantages(self, estimator: str, rewards: Any, group_size: int, **kwargs: Any) -> np.ndarray:
        """verl's outcome estimator ``estimator`` (``"grpo"``, ``"grpo_vectorized"``, ``"rloo"``,
        ``"rloo_vectorized"``, ...) on ``[B]`` rewards in contiguous groups: ``[B]`` advantages."""
        fn = f"{estimator}_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        B = r.shape[0]
        arrays = {"token_level_rewards": r[:, None], "response_mask": np.ones((B, 1), dtype=r.dtype),
                  "index": np.arange(B, dtype=np.int64) // G}
        out = self._worker.call("advantage", arrays, {"name": estimator, **kwargs})["outputs"]
        return np.asarray(out["advantages"])[:, 0].astype(r.dtype)

    def rloo_advantages(self, rewards: Any, group_size: int) -> np.ndarray:
        return self.outcome_advantages("rloo", rewards, group_size)

    def _gae(self, token_rewards: Any, values: Any, mask: Any, gamma: float, lam: float) -> tuple[dict[str, np.ndarray], np.ndarray, Any]:
        """(``compute_gae_advantage_return``'s outputs, the mask, the rewards' dtype)."""
        fn = "gae"
        r = io.float_array(fn, "token_rewards", token_rewards, 2)
        m = io.check_mask(fn, mask, r.shape)
        v = io.float_array(fn, "values", values, 2)
        arrays = {"token_level_rewards": io.clean(r, m), "values": io.clean(v.astype(r.dtype), m),
                  "response_mask": io.as_mask_of(m, r.dtype)}
        out = self._worker.call("advantage", arrays, {"name": "gae", "gamma": float(gamma), "lam": float(lam)})["outputs"]
        return out, m, r.dtype

    def gae(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        out, m, dtype = self._gae(token_rewards, values, mask, gamma, lam)
        returns = np.asarray(out["returns"], dtype=np.float64)
        advantages = returns - io.clean(np.asarray(values, dtype=np.float64), m)
        return io.masked_out(advantages, m, dtype), io.masked_out(returns, m, dtype)

    def gae_whitened(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """``compute_gae_advantage_return`` as verl returns it: (whitened advantages, returns)."""
        out, m, dtype = self._gae(token_rewards, values, mask, gamma, lam)
        return io.masked_out(out["advantages"], m, dtype), io.masked_out(out["returns"], m, dtype)

    def whiten(self, x: Any, mask: Any, *, shift_mean: bool = True) -> np.ndarray:
        fn = "whiten"
        a = io.float_array(fn, "x", x, 2)
        m = io.check_mask(fn, mask, a.shape)
        out = self._worker.call("masked_whiten", {"values": io.clean(a, m), "mask": io.as_mask_of(m, a.dtype)},
                                {"shift_mean": bool(shift_mean)})["outputs"]["out"]
        return io.masked_out(out, m, a.dtype)

    # ------------------------------------------------------------------------------------------
    # kl.estimator
    # ------------------------------------------------------------------------------------------

    KL_NAMES = {"k1": "k1", "k2": "k2", "k3": "k3"}

    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None, *, name: str | None = None) -> np.ndarray:
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator if name is None else None)
        if name is None:
            name = self.KL_NAMES[estimator]
        arrays = {"logprob": io.clean(lp, m), "ref_logprob": io.clean(ref, m)}
        return self._token_op("kl_penalty", arrays, {"kl_penalty": name}, "kl", "logprob", m, lp.dtype, upstream)

    def verl_kl_penalty(self, logp: Any, ref_logp: Any, mask: Any, name: str, upstream: Any = None) -> np.ndarray:
        """``core_algos.kl_penalty`` under verl's own name (``"kl"``, ``"abs"``, ``"mse"``, ``"low_var_kl"``,
        ``"k3+"``, ...): the value, or with ``upstream`` the gradient w.r.t. ``logp``."""
        return self._kl(logp, ref_logp, mask, "", upstream, name=name)

    # ------------------------------------------------------------------------------------------
    # policy and value losses (the per-token matrix verl aggregates)
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _loss_params(name: str, config: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "loss_agg_mode": "token-mean", "config": config}

    @staticmethod
    def _ppo_config(eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        # verl always applies dual-clip (asserting clip_ratio_c > 1); c = inf turns it off exactly:
        # min(-A*inf, L) = L for A < 0, and the branch is unused for A >= 0 (torch.where picks the other)
        return {"clip_ratio": float(eps_low), "clip_ratio_low": float(eps_low), "clip_ratio_high": float(eps_high),
                "clip_ratio_c": float("inf") if dual_clip is None else float(dual_clip)}

    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        return self._loss_params("vanilla", self._ppo_config(eps_low, eps_high, dual_clip))

    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        return self._loss_params("gspo", self._ppo_config(eps_low, eps_high, None))

    @staticmethod
    def _cispo_config(eps_low: float | None, eps_high: float, bound: str) -> dict[str, Any]:
        if bound not in ("relative", "absolute"):
            raise io.fail("cispo_token_loss", "bound", f"expected 'relative' or 'absolute', got {bound!r}")
        high = float(eps_high) if bound == "relative" else float(eps_high) - 1.0
        low = 1.0 if eps_low is None else float(eps_low)
        return {"clip_ratio": low, "clip_ratio_low": low, "clip_ratio_high": high}

    def cispo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float | None = None, eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._loss_params("cispo", self._cispo_config(eps_low, eps_high, bound)), logp, old_logp, advantages, mask)

    def cispo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float | None = None, eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._loss_params("cispo", self._cispo_config(eps_low, eps_high, bound)), logp, old_logp, advantages, mask, upstream)

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        return {"cliprange_value": float("inf") if clip is None else float(clip), "loss_agg_mode": "token-mean"}

    # ------------------------------------------------------------------------------------------
    # agg.*
    # ------------------------------------------------------------------------------------------

    def _aggregate(self, token_loss: Any, mask: Any, mode: str, norm_length: float | None, num_tokens: float | None, num_seqs: float | None, upstream: Any = None) -> Any:
        fn = "aggregate"
        x = io.float_array(fn, "token_loss", token_loss, 2)
        m = io.check_mask(fn, mask, x.shape)
        if mode not in io.AGG_MODES:
            raise io.fail(fn, "mode", f"expected one of {', '.join(io.AGG_MODES)}, got {mode!r}")
        if mode == "seq_mean_token_sum_norm" and norm_length is None:
            raise io.fail(fn, "norm_length", "required for mode 'seq_mean_token_sum_norm'")
        params = {
            "loss_agg_mode": io.AGG_MODES[mode],
            "batch_num_tokens": float(m.sum()) if num_tokens is None else float(num_tokens),
            "global_batch_size": float(m.shape[0]) if num_seqs is None else float(num_seqs),
            "loss_scale_factor": None if norm_length is None else float(norm_length),
        }
        arrays = {"loss_mat": io.clean(x, m), "loss_mask": io.as_mask_of(m, x.dtype)}
        return self._scalar_loss("agg_loss", arrays, params, "loss_mat", m, x.dtype, upstream)

    def aggregate(self, token_loss: Any, mask: Any, *, mode: str, norm_length: float | None = None, num_tokens: float | None = None, num_seqs: float | None = None) -> Any:
        return self._aggregate(token_loss, mask, mode, norm_length, num_tokens, num_seqs)

    def aggregate_grad(self, token_loss: Any, mask: Any, upstream: Any, *, mode: str, norm_length: float | None = None, num_tokens: float | None = None, num_seqs: float | None = None) -> np.ndarray:
        return self._aggregate(token_loss, mask, mode, norm_length, num_tokens, num_seqs, upstream)

    # ------------------------------------------------------------------------------------------
    # agg.partition (conformance/partition.py): the engine's per-micro-batch loss
    # ------------------------------------------------------------------------------------------

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        """``agg_loss`` per micro-batch with the global batch info the engine sets before its
        micro-batch loop (``workers/utils/losses.py:57-69``): ``batch_num_tokens`` = valid tokens of
        the mini-batch all-reduced over DP, ``global_batch_size`` = its sequences, ``dp_size``."""
        fn = "micro_batched_loss"
        xs = [io.float_array(fn, "token_loss_chunks", x, 2) for x in chunks]
        ms = [io.check_mask(fn, m, x.shape) for x, m in zip(xs, masks)]
        if mode not in io.AGG_MODES:
            raise io.fail(fn, "mode", f"expected one of {', '.join(io.AGG_MODES)}, got {mode!r}")
        params = {
            "loss_agg_mode": io.AGG_MODES[mode],
            "dp_size": int(dp_world_size),
            "batch_num_tokens": float(sum(m.sum() for m in ms)),
            "global_batch_size": float(sum(m.shape[0] for m in ms)),
            "loss_scale_factor": None if norm_length is None else float(norm_length),
        }
        return [self._scalar_loss("agg_loss", {"loss_mat": io.clean(x, m), "loss_mask": io.as_mask_of(m, x.dtype)}, params,
                                  "loss_mat", m, x.dtype, upstream)
                for x, m in zip(xs, ms)]


__all__ = ["VerlAdapter"]
