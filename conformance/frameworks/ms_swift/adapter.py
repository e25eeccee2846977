"""The ms-swift adapter: ms-swift's RL math, called through the installed ms-swift, in spec conventions.

ms-swift runs in its own environment (``rlspec frameworks install ms_swift``; ms-swift 4.6.0 requires
``trl<1.0``, rlspec is tested with TRL 1.16) and is driven through a worker process
(``conformance/frameworks/subprocess_worker.py``; the ms-swift calls are in
``conformance/frameworks/ms_swift/ops.py``, which says how its trainer methods run on a stand-in
trainer). This adapter is a NumPy adapter (``array_api = "numpy"``): values come from ms-swift and each
``<function>_grad`` is ms-swift's autograd gradient for the given upstream.

What is called (ms-swift 4.6.0; paths relative to ``swift/``; ``M`` = ``rlhf_trainers/grpo_trainer.py``):

| spec function | ms-swift |
|---|---|
| ``token_logprobs`` | ``M::GRPOTrainer._get_logps_via_local_forward`` (:1564-1609): the logits divided in place by ``temperature`` (:1581), then trl 0.29.1's ``selective_log_softmax`` |
| ``token_entropy`` | the same method with ``compute_entropy=True``: trl's ``entropy_from_logits`` of the divided logits |
| ``grpo_advantages`` | ``rl_core/advantage.py::compute_advantages`` (:20-99), ``advantage_estimator="grpo"``, ``scale_rewards`` = ``scale`` (``(r − μ_g)/(σ + 1e-4)``, :78-97: preset ``ms_swift``, ``eps=1e-4``) |
| ``rloo_advantages`` | ``compute_advantages(advantage_estimator="rloo", scale_rewards="none")`` (:67-68; ``"none"`` is its default, ``arguments/rlhf_args.py:388-389``) |
| ``reinforce_pp_baseline_advantages`` | ``compute_advantages(advantage_estimator="reinforce_plus_plus", scale_rewards="batch")`` (:73-75, its default, ``rlhf_args.py:390-391``): ``(r − μ_g)/(std_batch(r − μ_g) + 1e-4)`` per sequence, broadcast over the row's tokens by ``expand_advantage_to_per_token`` (:263-291): preset ``ms_swift`` (``level="sequence", eps=1e-4``) |
| ``gdpo_advantages`` | ``compute_advantages(scale_rewards="gdpo")`` (:83-94), ``reward_weights`` as the trainer's ``reward_weights``: preset ``ms_swift`` (``eps=1e-8``) |
| ``kl_penalty`` | ``M::_compute_loss_and_metrics``'s ``per_token_kl`` (:973-976, ``beta != 0``, ``kl_in_reward`` off): k3 of ``ref − logp`` clamped to ±20, the estimate clamped to [−10, 10]: ``estimator="k3"`` only, preset ``ms_swift`` (``log_ratio_clamp=20.0, clamp=10.0``) |
| ``kl_loss_term`` | the same ``per_token_kl`` with its autograd gradient: ``estimator="k3"``, ``gradient="estimator"`` only |
| ``ppo_token_loss`` | ``_compute_loss_and_metrics``'s ``per_token_loss`` with ``loss_type="bnpo"`` (:1051-1058; ``grpo``, ``bnpo``, ``dr_grpo``, ``dapo`` share it): ``epsilon`` = ``eps_low``, ``epsilon_high`` = ``eps_high``; ``dual_clip=c`` is ms-swift's ``delta`` (the INTELLECT-2 cap on the unclipped ratio, :1053-1054), equal to the dual clip for ``c ≥ 1 + eps_high`` |
| ``gspo_token_loss`` | the same with ``importance_sampling_level="sequence"`` (:1011-1015): the sequence ratio with its gradient (``form="sequence"``) |
| ``cispo_token_loss`` | ``per_token_loss`` with ``loss_type="cispo"`` (:1036-1038): ``−sg(min(r, epsilon_high))·A·logp``: ``bound="absolute"`` is ``epsilon_high = eps_high``, ``bound="relative"`` is ``epsilon_high = 1 + eps_high``; no lower bound |
| ``sapo_token_loss`` | ``per_token_loss`` with ``loss_type="sapo"`` (:1039-1045), ``tau_pos``/``tau_neg``; no log-ratio clamp |
| ``entropy_top_mask`` | ``_compute_loss_and_metrics``'s ``entropy_mask`` (:944-962) with ``top_entropy_quantile = rho``: ``torch.nanquantile`` of the call's own tokens (padding as NaN), so ``pooled_entropy`` is not implemented (the per-rank quantile: ``NOT_EXPRESSIBLE``) |
| ``off_policy_sequence_mask`` | ``_compute_loss_and_metrics`` with ``off_policy_sequence_mask_delta = threshold`` (:1069-1080): its ``off_policy_seq_mask`` ([B], from ``_compute_off_policy_sequence_mask``, :2395-2435, on the row-mean advantage) on the valid tokens |
| ``rollout_is_weights`` | ``M::_get_rollout_is_correction`` (:1761-1773) -> ``_apply_rollout_importance_sampling`` (:2345-2393): ``token_truncate``, ``token_mask``, ``sequence_truncate`` (the geometric mean); the log-ratio clamped at ±20 per token (:2362-2363): preset ``ms_swift`` (``log_ratio_clamp=20.0``) |
| ``rollout_rejection_mask`` | the same: the tokens ``token_mask`` keeps (``statistic="ratio", level="token"``) and the rows ``sequence_mask`` keeps (``level="seq_mean"``, the geometric mean), upper bound only: a kept token's weight is ``exp(clamp(δ, ±20)) > 0``, a rejected one's exactly 0 |
| ``overlong_penalty`` | ``rewards/orm.py::SoftOverlong`` (:216-232) with ``soft_max_length = max_length``, ``soft_cache_length = buffer``: no factor (``factor=1`` only) and no floor (preset ``ms_swift``, ``beyond="linear"``); ``buffer = 0`` and ``buffer = max_length`` fail its assertion or divide by 0 (:220, :231): not implemented |

Not implemented (ms-swift has no such function): ``value_token_loss`` (no critic in its GRPO trainer),
``kl_controller_update`` (a fixed ``beta``), ``micro_batched_loss`` (ms-swift aggregates inside the loss
method: its partitions are the ``ms_swift.loss[...,parts=...]`` rows of ``checks.py``), and every
estimator and loss it does not have (GAE, whitening, ReMax, OPO, pass@k, MaxRL, GPG, GMPO, DPPO, DRO,
VESPO, Clip-Cov, KL-Cov).

Everything that is a composition (the aggregated loss of every ``loss_type``, the KL term in the loss and
in the reward, the rollout correction with the KL weighted, the off-policy mask editing the denominator,
the top-entropy mask per rank, RLOO and REINFORCE++ under other ``scale_rewards``, the end-to-end path
from logits) is ``conformance/frameworks/ms_swift/checks.py`` (``extra_rows``).

Conventions this adapter converts: the spec's ``[B, T]`` token-aligned arrays are passed as ms-swift's
completion tensors with ``mask`` as the bool ``completion_mask`` (its losses are position-independent);
masked inputs are sent as 0 and masked outputs returned as 0 (``spec_io.py``); ``[B]`` advantages are
broadcast to ``[B, T]`` (ms-swift's batch holds them per token, ``rl_core/data.py:331``); rewards go in
as ``rewards_per_func`` ``[B, 1]`` with weight 1 (``[B, K]`` for GDPO).

Importing this module never starts ms-swift; constructing the adapter does, and a missing environment
raises ``AdapterLoadError("... cannot import ...")`` so ``rlspec check`` shows a "not installed" row.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from conformance.frameworks import spec_io as io
from conformance.frameworks.subprocess_adapter import SubprocessAdapter


class MsSwiftAdapter(SubprocessAdapter):
    """Spec adapter for ms-swift (see the module docstring for what each function calls)."""

    name = "ms_swift"
    dtypes = ("float64", "float32")
    checks_module = "conformance.frameworks.ms_swift.checks"
    precision_notes: ClassVar[dict[str, str]] = {
        # grpo_trainer.py:960: torch.nanquantile(entropies.flatten().float(), ...): the threshold in float32
        "entropy_top_mask": "the quantile is taken of the entropies cast to float32 (grpo_trainer.py:960)",
    }

    LOGPROBS_OP = "logprobs"
    ENTROPY_OP = "logprobs"
    POLICY_ARRAYS = ("per_token_logps", "old_per_token_logps", "completion_mask")
    VALUE_ARRAYS = ("", "", "", "")  # no value loss

    SAFETY_BOUND = 20.0  # grpo_trainer.py:2362: the rollout log-ratio clamp

    # ms-swift has no critic, no adaptive KL controller and no aggregation function of its own
    value_token_loss = None
    value_token_loss_grad = None
    kl_controller_update = None
    micro_batched_loss = None
    micro_batched_loss_grad = None

    # ------------------------------------------------------------------------------------------
    # the raw ops (framework conventions), for the framework rows
    # ------------------------------------------------------------------------------------------

    def loss(self, arrays: dict[str, Any], settings: dict[str, Any], *, wrt: str | None = None, upstream: Any = None,
             num_processes: int = 1, grad_accum: int = 1) -> dict[str, Any]:
        """``GRPOTrainer._compute_loss_and_metrics`` on the stand-in trainer (``ops.py``) with the
        ``GRPOConfig`` ``settings``: ``{"outputs": {"loss", "per_token_loss", ...}, "grads": {...}}``;
        with ``wrt`` (an input name) the gradient of ``Σ outputs · upstream`` (``upstream``: output -> array)."""
        params = {"settings": settings, "num_processes": num_processes, "grad_accum": grad_accum}
        if wrt is None:
            return self._worker.call("loss", arrays, params)
        return self._worker.call("loss", arrays, params, wrt=[wrt], upstream=upstream)

    # ------------------------------------------------------------------------------------------
    # logprob.token / logprob.entropy: _get_logps_via_local_forward (the trainer divides by temperature)
    # ------------------------------------------------------------------------------------------

    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, dict[str, Any], float]:
        return rows, {"temperature": float(temperature)}, 1.0

    def _entropy_request(self, rows: np.ndarray, temperature: float) -> tuple[dict[str, np.ndarray], dict[str, Any], float]:
        arrays = {"logits": rows, "labels": np.zeros(rows.shape[0], dtype=np.int64)}
        return arrays, {"temperature": float(temperature), "compute_entropy": True}, 1.0

    # ------------------------------------------------------------------------------------------
    # advantages: rl_core/advantage.py::compute_advantages
    # ------------------------------------------------------------------------------------------

    def advantages(self, rewards_per_func: np.ndarray, group_size: int, *, estimator: str, scale: str,
                   reward_weights: Any = None, mask: np.ndarray | None = None, kl_values: np.ndarray | None = None,
                   beta: float = 0.0) -> dict[str, np.ndarray]:
        """``compute_advantages`` on ``rewards_per_func`` ``[B, K]`` (ms-swift's names; ``mask`` given: also
        the per-token broadcast ``per_token``; ``kl_values``: the KL in the reward with ``beta``)."""
        K = rewards_per_func.shape[1]
        weights = np.ones(K, dtype=np.float32) if reward_weights is None else np.asarray(reward_weights, dtype=np.float32)
        arrays: dict[str, Any] = {"rewards_per_func": rewards_per_func, "reward_weights": weights}
        params: dict[str, Any] = {"num_generations": int(group_size), "advantage_estimator": estimator,
                                  "scale_rewards": scale}
        if mask is not None:
            arrays["completion_mask"] = mask
            params["per_token"] = True
        if kl_values is not None:
            arrays["kl_values"] = kl_values
            params.update(kl_in_reward=True, beta=float(beta))
        return self._worker.call("advantages", arrays, params)["outputs"]

    def grpo_advantages(self, rewards: Any, group_size: int, *, scale: str = "group") -> np.ndarray:
        fn = "grpo_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        io.choice(fn, "scale", scale)
        return np.asarray(self.advantages(r[:, None], G, estimator="grpo", scale=scale)["advantages"], dtype=r.dtype)

    def rloo_advantages(self, rewards: Any, group_size: int) -> np.ndarray:
        r, G = io.check_groups("rloo_advantages", rewards, group_size)
        return np.asarray(self.advantages(r[:, None], G, estimator="rloo", scale="none")["advantages"], dtype=r.dtype)

    def reinforce_pp_baseline_advantages(self, rewards: Any, group_size: int, mask: Any) -> np.ndarray:
        fn = "reinforce_pp_baseline_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        m = np.asarray(mask)
        if m.ndim != 2 or m.shape[0] != r.shape[0]:
            raise io.fail(fn, "mask", f"expected [B, T] with B = {r.shape[0]}, got shape {m.shape}")
        m = io.check_mask(fn, m, m.shape)
        out = self.advantages(r[:, None], G, estimator="reinforce_plus_plus", scale="batch", mask=m)
        return io.masked_out(out["per_token"], m, r.dtype)

    def gdpo_advantages(self, rewards: Any, group_size: int, *, reward_weights: list[float] | None = None) -> np.ndarray:
        fn = "gdpo_advantages"
        r = io.float_array(fn, "rewards", rewards, 2)
        if r.shape[1] < 1:
            raise io.fail(fn, "rewards", f"expected [B, K >= 1], got shape {r.shape}")
        io.check_finite(fn, "rewards", r)
        _, G = io.check_groups(fn, r[:, 0], group_size)
        if reward_weights is not None and (not isinstance(reward_weights, (list, tuple)) or len(reward_weights) != r.shape[1]):
            raise io.fail(fn, "reward_weights", f"expected {r.shape[1]} numbers, got {reward_weights!r}")
        out = self.advantages(r, G, estimator="grpo", scale="gdpo", reward_weights=reward_weights)
        return np.asarray(out["advantages"], dtype=r.dtype)

    # ------------------------------------------------------------------------------------------
    # per-token quantities of _compute_loss_and_metrics (its locals at return, ops.py)
    # ------------------------------------------------------------------------------------------

    def _policy(self, fn: str, params: dict[str, Any], logp: Any, old_logp: Any, advantages: Any, mask: Any,
                upstream: Any = None) -> np.ndarray:
        """``per_token_loss`` of the loss method with the ``GRPOConfig`` settings ``params`` (the spec's
        per-token loss: no entropy mask, ``beta = 0``, no rollout correction), or its gradient w.r.t. ``logp``."""
        lp, old, m = io.token_arrays(fn, mask, logp=logp, old_logp=old_logp)
        arrays = {"per_token_logps": io.clean(lp, m), "old_per_token_logps": io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "completion_mask": m}
        return self._per_token(arrays, params, "per_token_loss", m, lp.dtype, upstream)

    def _per_token(self, arrays: dict[str, Any], settings: dict[str, Any], output: str, m: np.ndarray, dtype: Any,
                   upstream: Any) -> np.ndarray:
        """The loss method's ``output`` (0 where masked), or with ``upstream`` its gradient w.r.t. the log-probs."""
        params = {"settings": settings, "num_processes": 1, "grad_accum": 1}  # what ``loss`` sends
        return self._token_op("loss", arrays, params, output, "per_token_logps", m, dtype, upstream)

    @staticmethod
    def _clip_settings(fn: str, eps_low: float, eps_high: float) -> dict[str, Any]:
        low, high = io.clip_range(fn, eps_low, eps_high)
        return {"epsilon": low, "epsilon_high": high}

    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        fn = "ppo_token_loss"
        settings = {"loss_type": "bnpo", **self._clip_settings(fn, eps_low, eps_high)}
        if dual_clip is not None:
            c = io.number(fn, "dual_clip", dual_clip, low=1.0, strict=True)
            if c < 1.0 + settings["epsilon_high"]:
                raise NotImplementedError(f"ms-swift's delta caps the unclipped ratio for every sign (grpo_trainer.py:1053-1054): "
                                          f"it is the dual clip only for delta >= 1 + epsilon_high, not {c!r}")
            settings["delta"] = c
        return settings

    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        return {"loss_type": "bnpo", "importance_sampling_level": "sequence",
                **self._clip_settings("gspo_token_loss", eps_low, eps_high)}

    def _cispo_params(self, eps_low: float | None, eps_high: float, bound: str) -> dict[str, Any]:
        fn = "cispo_token_loss"
        io.choice(fn, "bound", bound)
        high = io.number(fn, "eps_high", eps_high)
        if eps_low is not None:
            raise NotImplementedError("ms-swift's CISPO weight has no lower bound: torch.clamp(coef_1, max=epsilon_high) "
                                      "(grpo_trainer.py:1037)")
        return {"loss_type": "cispo", "epsilon_high": high if bound == "absolute" else 1.0 + high}

    def cispo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float | None = None,
                         eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._cispo_params(eps_low, eps_high, bound), logp, old_logp, advantages, mask)

    def cispo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                              eps_low: float | None = None, eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._cispo_params(eps_low, eps_high, bound), logp, old_logp, advantages, mask,
                            upstream)

    def _sapo_params(self, tau_pos: float, tau_neg: float, log_ratio_clamp: float | None) -> dict[str, Any]:
        fn = "sapo_token_loss"
        settings = {"loss_type": "sapo", "tau_pos": io.number(fn, "tau_pos", tau_pos, strict=True),
                    "tau_neg": io.number(fn, "tau_neg", tau_neg, strict=True)}
        if log_ratio_clamp is not None:
            io.number(fn, "log_ratio_clamp", log_ratio_clamp, strict=True)
            raise NotImplementedError("ms-swift's SAPO gate takes coef_1 = exp(logp - old) unclamped (grpo_trainer.py:1026, :1040-1041)")
        return settings

    def sapo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, tau_pos: float = 1.0,
                        tau_neg: float = 1.05, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("sapo_token_loss", self._sapo_params(tau_pos, tau_neg, log_ratio_clamp), logp, old_logp, advantages, mask)

    def sapo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, tau_pos: float = 1.0,
                             tau_neg: float = 1.05, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("sapo_token_loss", self._sapo_params(tau_pos, tau_neg, log_ratio_clamp), logp, old_logp, advantages, mask,
                            upstream)

    # ------------------------------------------------------------------------------------------
    # kl.estimator / kl.loss: per_token_kl (k3 with ms-swift's clamps)
    # ------------------------------------------------------------------------------------------

    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None) -> np.ndarray:
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator)
        if estimator != "k3":
            raise NotImplementedError("ms-swift's GRPO KL is k3 only (grpo_trainer.py:973-976)")
        arrays = {"per_token_logps": io.clean(lp, m), "old_per_token_logps": io.clean(lp, m),
                  "ref_per_token_logps": io.clean(ref, m), "advantages": np.zeros(lp.shape, dtype=lp.dtype),
                  "completion_mask": m}
        return self._per_token(arrays, {"loss_type": "bnpo", "beta": 1.0}, "per_token_kl", m, lp.dtype, upstream)

    def _kl_loss(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, gradient: str, upstream: Any = None) -> np.ndarray:
        io.kl_loss_keywords("kl_loss_term", estimator, gradient)
        if estimator != "k3" or gradient != "estimator":
            raise NotImplementedError("ms-swift's KL term is beta * k3 with its own autograd gradient (grpo_trainer.py:973-976, :1063-1064)")
        return self._kl(logp, ref_logp, mask, "k3", upstream)

    def kl_loss_term(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any = None, *, estimator: str = "k3",
                     gradient: str = "estimator") -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, estimator, gradient)

    def kl_loss_term_grad(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any, upstream: Any, *, estimator: str = "k3",
                          gradient: str = "estimator") -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, estimator, gradient, upstream)

    # ------------------------------------------------------------------------------------------
    # masks: the top-entropy mask, the off-policy sequence mask
    # ------------------------------------------------------------------------------------------

    def entropy_top_mask(self, entropy: Any, mask: Any, *, rho: float = 1.0, pooled_entropy: Any = None) -> np.ndarray:
        fn = "entropy_top_mask"
        H, m = io.token_arrays(fn, mask, finite=True, entropy=entropy)
        q = io.unit_interval(fn, "rho", rho)
        if pooled_entropy is not None:
            raise NotImplementedError("ms-swift takes the quantile of the rank's own micro-batch (grpo_trainer.py:958-962): "
                                      "no pooled statistic")
        zeros = np.zeros(H.shape, dtype=H.dtype)
        arrays = {"per_token_logps": zeros, "old_per_token_logps": zeros, "advantages": zeros, "completion_mask": m,
                  "entropies": io.clean(H, m)}
        out = self.loss(arrays, {"loss_type": "grpo", "top_entropy_quantile": q})["outputs"]
        if "entropy_mask" not in out:  # top_entropy_quantile = 1.0: no mask is applied (:959)
            return m.copy()
        return np.asarray(out["entropy_mask"], dtype=bool) & m

    def off_policy_sequence_mask(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, threshold: float) -> np.ndarray:
        fn = "off_policy_sequence_mask"
        lp, old, m = io.token_arrays(fn, mask, logp=logp, old_logp=old_logp)
        delta = io.number(fn, "threshold", threshold, low=None)
        A = io.per_token(advantages, m, fn, lp.dtype)
        for b in range(A.shape[0]):
            if m[b].any() and np.ptp(A[b][m[b]]) != 0:
                raise NotImplementedError("ms-swift tests the row-mean advantage (grpo_trainer.py:1075); a per-token advantage "
                                          "(OPD-RL's teacher signal) refuses the off-policy mask (:1030-1033)")
        arrays = {"per_token_logps": io.clean(lp, m), "old_per_token_logps": io.clean(old, m), "advantages": A,
                  "completion_mask": m}
        out = self.loss(arrays, {"loss_type": "grpo", "off_policy_sequence_mask_delta": delta})["outputs"]
        return np.asarray(out["off_policy_seq_mask"], dtype=bool)[:, None] & m

    # ------------------------------------------------------------------------------------------
    # the rollout importance correction: _apply_rollout_importance_sampling
    # ------------------------------------------------------------------------------------------

    def rollout_weights(self, old_logp: np.ndarray, rollout_logp: np.ndarray, m: np.ndarray, mode: str,
                        threshold: float) -> np.ndarray:
        """ms-swift's IS weights for ``rollout_importance_sampling_mode = mode`` (0 where masked)."""
        arrays = {"old_per_token_logps": io.clean(old_logp, m), "rollout_per_token_logps": io.clean(rollout_logp, m),
                  "completion_mask": m}
        out = self._worker.call("rollout_is", arrays, {"mode": mode, "threshold": float(threshold)})["outputs"]["weights"]
        return io.masked_out(out, m, old_logp.dtype)

    def rollout_is_weights(self, old_logp: Any, rollout_logp: Any, mask: Any, *, level: str = "token",
                           seq_stat: str = "product", mode: str = "truncate", lo: float | None = None,
                           hi: float | None = 2.0, log_ratio_clamp: float | None = None,
                           batch_normalize: bool = False) -> np.ndarray:
        fn = "rollout_is_weights"
        old, roll, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        io.choice(fn, "level", level)
        io.choice(fn, "seq_stat", seq_stat)
        io.choice(fn, "mode", mode)
        if log_ratio_clamp not in (None, self.SAFETY_BOUND):
            raise NotImplementedError(f"ms-swift clamps the log-ratio at SAFETY_BOUND = 20 (grpo_trainer.py:2362), not at {log_ratio_clamp!r}")
        if batch_normalize:
            raise NotImplementedError("ms-swift has no batch normalisation of the IS weights (grpo_trainer.py:2345-2393)")
        if mode == "none" or hi is None:
            raise NotImplementedError("ms-swift's weights are truncated or masked at rollout_importance_sampling_threshold "
                                      "(grpo_trainer.py:2365-2390)")
        if lo is not None:
            raise NotImplementedError("ms-swift's threshold is an upper bound only (grpo_trainer.py:2365-2390)")
        if level == "sequence" and seq_stat == "product":
            raise NotImplementedError("ms-swift's sequence ratio is the geometric mean (_compute_sequence_level_ratios, "
                                      "grpo_trainer.py:2328-2343)")
        if level == "sequence" and mode == "mask":
            raise NotImplementedError("sequence_mask keeps each token's own ratio in the rows it keeps (grpo_trainer.py:2382-2388): "
                                      "not one weight per row (the ms_swift.rollout_is[sequence_mask] row)")
        name = {("token", "truncate"): "token_truncate", ("token", "mask"): "token_mask",
                ("sequence", "truncate"): "sequence_truncate"}[(level, mode)]
        return self.rollout_weights(old, roll, m, name, io.number(fn, "hi", hi, strict=True))

    def rollout_rejection_mask(self, old_logp: Any, rollout_logp: Any, mask: Any, *, statistic: str = "ratio",
                               level: str = "token", lo: float | None = None, hi: float | None = None,
                               kl_of: str = "rollout_old") -> np.ndarray:
        fn = "rollout_rejection_mask"
        old, roll, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        io.rejection_keywords(fn, statistic, level)
        if statistic != "ratio" or level not in ("token", "seq_mean"):
            raise NotImplementedError("ms-swift rejects on the ratio only: token_mask per token, sequence_mask on the geometric "
                                      "mean (grpo_trainer.py:2371-2388)")
        if lo is not None or hi is None:
            raise NotImplementedError("ms-swift's threshold is an upper bound only (grpo_trainer.py:2371-2388)")
        mode = "token_mask" if level == "token" else "sequence_mask"
        return self.rollout_weights(old, roll, m, mode, io.number(fn, "hi", hi, strict=True)) > 0

    # ------------------------------------------------------------------------------------------
    # reward.overlong: rewards/orm.py::SoftOverlong
    # ------------------------------------------------------------------------------------------

    def overlong_penalty(self, lengths: Any, *, max_length: int, buffer: int, factor: float = 1.0) -> np.ndarray:
        fn = "overlong_penalty"
        L = io.lengths_array(fn, lengths)
        io.overlong_limits(fn, max_length, buffer)
        if io.number(fn, "factor", factor) != 1.0:
            raise NotImplementedError("SoftOverlong has no penalty factor (rewards/orm.py:231)")
        if buffer == 0 or buffer == max_length:
            raise NotImplementedError("SoftOverlong asserts soft_cache_length < soft_max_length and divides by "
                                      "soft_cache_length (rewards/orm.py:220, :231)")
        out = self._worker.call("soft_overlong", {"lengths": L.astype(np.int64)},
                                {"soft_max_length": int(max_length), "soft_cache_length": int(buffer)})
        return np.asarray(out["outputs"]["reward"], dtype=np.float64)

    # ------------------------------------------------------------------------------------------
    # the abstract hooks of SubprocessAdapter whose public functions ms-swift does not have (None above)
    # ------------------------------------------------------------------------------------------

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        raise NotImplementedError("ms-swift's GRPO trainer has no value loss")

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        raise NotImplementedError("ms-swift aggregates inside GRPOTrainer._compute_loss_and_metrics (checks.py rows)")


__all__ = ["MsSwiftAdapter"]
