"""The SkyRL adapter: SkyRL's RL math (skyrl 0.3.0, its skyrl-train backend), called through the installed
SkyRL, in spec conventions.

SkyRL runs in its own environment (``rlspec frameworks install skyrl``: ``skyrl==0.3.0`` and ``skyrl-gym``
``--no-deps`` with the CPU import set of ``requirements.txt``; the ``skyrl-train`` extra pins flash-attn)
and is driven through a worker process (``conformance/frameworks/subprocess_worker.py``; the SkyRL calls
and the one import shim are in ``conformance/frameworks/skyrl/ops.py``; what the subprocess adapters share
is ``conformance/frameworks/subprocess_adapter.py``). A NumPy adapter: values come from SkyRL and each
``<function>_grad`` is SkyRL's autograd gradient for the given upstream.

What is called (``S`` = ``skyrl/backends/skyrl_train/utils/ppo_utils.py``, ``SO`` =
``.../off_policy_correction_utils.py``, ``TU`` = ``.../torch_utils.py``, ``TR`` = ``skyrl/train/trainer.py``):

| spec function | SkyRL |
|---|---|
| ``token_logprobs`` | ``TU::logprobs_from_logits`` (:115, its pure-torch ``logprobs_from_logits_v2``, :158) on ``logits / temperature`` (``workers/model_wrapper.py:334``) |
| ``token_entropy`` | ``TU::chunked_entropy_from_logits`` (:58) on ``logits / temperature`` (model_wrapper.py:334, :357-386) |
| ``grpo_advantages`` | ``S::compute_advantages_and_returns`` (:1379) with ``"grpo"`` (:1287): ``scale="group"`` / ``"none"`` -> ``grpo_norm_by_std`` True / False; ``eps`` -> ``epsilon`` |
| ``rloo_advantages`` | idem ``"rloo"`` (:1203) |
| ``maxrl_advantages`` | idem ``"maxrl"`` (:1340) |
| ``reinforce_pp_advantages`` | idem ``"reinforce++"`` (:1168) on SkyRL's own layout (``response_layout``, as ``gae``): (advantages, returns) |
| ``gae`` | idem ``"gae"`` (:1256) on SkyRL's own layout (``response_layout``): ``returns``; advantages = ``returns - values`` (SkyRL whitens its advantages, :1281-1282, and forms returns before, :1281) |
| ``whiten`` | ``S::masked_whiten`` (:146) |
| ``kl_penalty`` | ``S::compute_approx_kl`` (:88) with ``loss_mask``, ``kl_estimator_type`` k1/k2/k3 |
| ``kl_loss_term`` | the same, k1/k2/k3/``abs`` with the estimator's own gradient (SkyRL's only form) |
| ``rlhf_token_rewards`` | ``TR::RayPPOTrainer.apply_reward_kl_penalty`` (:1381-1437, ``use_kl_in_reward``) on per-token rewards holding each score at its row's last valid token (how ``TR:1086-1091`` builds them) |
| ``ppo_token_loss`` | ``S::ppo_policy_loss`` (:554, ``regular``; ``dual_clip`` with ``clip_ratio_c``): the matrix it hands ``reduce_loss`` |
| ``gspo_token_loss`` | ``S::gspo_policy_loss`` (:662): idem |
| ``cispo_token_loss`` | ``S::compute_policy_loss_cispo`` (:731): idem |
| ``sapo_token_loss`` | ``S::sapo_policy_loss`` (:589): idem |
| ``clip_cov_mask`` | ``S::compute_policy_loss_clip_cov`` (:881) with its random cut decided by ``draws``: its ``corr`` (``ops.py``) |
| ``kl_cov_token_loss`` | ``S::compute_policy_loss_kl_cov`` (:944): the matrix it hands ``reduce_loss`` |
| ``decoupled_ppo_token_loss`` | ``ppo_policy_loss`` against ``old_log_probs`` = prox with ``rollout_logprobs`` = behav and ``off_policy_correction.tis_ratio_type="token"``: the PPO matrix times ``SO::compute_tis_ratio``'s weight (``SO::apply_off_policy_correction``, :351-385) |
| ``value_token_loss`` | ``S::ppo_critic_loss`` (:155): ½ × the matrix it averages (it applies the ½ after, :175) |
| ``aggregate`` | ``S::apply_loss_reduction_to_advantages_minibatch`` (:1095) on the token loss, then ``S::reduce_loss`` (:1088): the trainer's reduction (it scales the advantages, TR:1469-1476, and the losses sum) |
| ``policy_loss`` | the trainer's and worker's chain: ``TR::RayPPOTrainer._normalize_advantages`` (:1439), ``ppo_policy_loss`` on those advantages, plus ``kl_loss_coef`` × ``masked_mean(compute_approx_kl(...), dim=-1).mean()`` (``workers/worker.py:970-989``) |
| ``rollout_is_weights`` | ``SO::compute_tis_ratio`` (:24-72) |
| ``rollout_rejection_mask`` | ``SO::compute_token_mask`` (:137, ``level="token"``), ``compute_outlier_token_mask`` (:75, ``"seq_all"``), ``compute_sequence_mask`` (:191, ``"seq_mean"`` = ``geometric``, ``"seq_sum"`` = ``product``) |
| ``kl_controller_update`` | ``S::AdaptiveKLController`` (:45-60): a fresh controller, one ``update(current, n_steps)``, its ``value`` |

Not implemented (NotImplementedError, a "not implemented" row or case, the reason in each message): what
SkyRL has no setting for (``grpo_advantages(scale="batch")``, ``std_ddof != 1``; ``aggregate`` modes
``seq_mean_token_sum`` and ``token_sum`` and global counts other than the batch's own; ``cispo``'s torchrl
surrogate; ``rollout_is_weights`` other than TIS (``mode="truncate"``, an upper cap, no lower bound, no batch
normalisation, the geometric mean); ``rollout_rejection_mask`` with a KL statistic or ``seq_max``;
``kl_loss_term`` gradients other than the estimator's; ``policy_loss`` with a KL term under a mode other than
``seq_mean_token_mean``: SkyRL's KL term is always a per-sequence token mean, worker.py:980), SkyRL's
``masked_whiten`` raising for a mask sum of 0 or 1 (:135-140; the spec returns 0), and ``dppo_token_loss``
(``dppo_policy_loss``, :809-878, is the ratio surrogate ``-A·r·keep`` with the ratio on the graph, whose
gradient is the spec's ``-A·r·keep`` but whose value is not ``-A·r·logp·keep``: checked by the framework
rows ``skyrl.policy_loss[dppo,*]``).

Conventions this adapter converts (the checks never do):
- SkyRL's losses take response tensors ``[B, R]`` with a float ``loss_mask``; the spec's ``[B, T]``
  token-aligned arrays are passed as the response, with ``mask`` as ``loss_mask``. Masked inputs are sent as
  0 and masked outputs are returned as 0 (``conformance/frameworks/spec_io.py``).
- ``gae`` and ``reinforce_pp_advantages`` are called on the layout SkyRL's trainer builds (``layout.py``): each
  response right-aligned, its ``response_mask`` 1 over the whole response (the masked tool tokens inside
  included, with the critic's value there and reward 0), the outputs moved back to the spec's columns. The
  trainer hands every estimator that ``response_mask`` (TR:1168-1170), never the loss mask.
- ``[B]`` advantages are broadcast over the tokens. Groups become ``index`` (``str(b // group_size)``, the
  trainer's uids); outcome rewards are ``token_level_rewards`` ``[B, 1]`` (SkyRL's estimators sum the row).
- ``AlgorithmConfig`` fields: ``eps_low``/``eps_high`` -> ``eps_clip_low``/``eps_clip_high``; ``dual_clip``
  -> ``policy_loss_type="dual_clip"`` with ``clip_ratio_c`` (``regular`` when None); CISPO's bounds ->
  ``cispo.cispo_eps_clip_low``/``_high`` (``eps_low=None`` -> 1.0, a lower bound of 0 no ratio crosses;
  ``bound="absolute"`` E -> ``E - 1``); SAPO's ``tau_pos``/``tau_neg`` -> ``sapo.*``; Clip-Cov's
  ``fraction``/``cov_low``/``cov_high`` -> ``clip_cov.clip_ratio``/``clip_cov_lb``/``clip_cov_ub``; KL-Cov's
  ``fraction``/``coef`` -> ``kl_cov.kl_cov_frac``/``ppo_kl_coef``; ``clip`` -> ``value_clip``; aggregation
  modes -> ``loss_reduction`` (``token_mean``, ``sequence_mean``, ``seq_mean_token_sum_norm`` with
  ``max_seq_len = norm_length``).
- Off-policy correction (``OffPolicyCorrectionConfig``): ``rollout_is_weights(level)`` -> ``tis_ratio_type``,
  ``hi`` -> ``token_tis_ratio_clip_high`` / ``sequence_tis_ratio_clip_high``; a rejection ``lo``/``hi`` -> the
  thresholds of the mask asked (``token_mask_is_threshold_*``, ``outlier_token_is_threshold_*``,
  ``geo_mask_*``, ``product_mask_*``). A missing lower bound is 0.0 where SkyRL needs one (every ratio is
  ``safe_exp_delta``'s ``exp(clamp(d, -20, 20)) > 0``, TU:187-192); a missing upper bound, where SkyRL needs
  one, is not implemented (no infinite thresholds). ``log_ratio_clamp``: SkyRL clamps at 20 always
  (``safe_exp_delta(clip=20.0)``), so only None (canonical; preset ``skyrl`` names the clamp) and 20 are run.

Importing this module never starts SkyRL; constructing the adapter does, and a missing environment raises
``AdapterLoadError("... cannot import ...")`` so ``rlspec check`` shows a "not installed" row.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, ClassVar

import numpy as np

from conformance.frameworks import spec_io as io
from conformance.frameworks.skyrl.layout import response_layout
from conformance.frameworks.subprocess_adapter import SubprocessAdapter

SAFE_EXP = "safe_exp_delta computes exp(clamp(d, -20, 20)) in float32, then casts back (torch_utils.py:187-192)"


class SkyRLAdapter(SubprocessAdapter):
    """Spec adapter for SkyRL (see the module docstring for what each function calls)."""

    name = "skyrl"
    dtypes = ("float64", "float32")
    checks_module = "conformance.frameworks.skyrl.checks"
    precision_notes: ClassVar[dict[str, str]] = {
        "ppo_token_loss": SAFE_EXP,
        "cispo_token_loss": SAFE_EXP,
        "decoupled_ppo_token_loss": SAFE_EXP,
        "policy_loss": SAFE_EXP,
        "rollout_is_weights": SAFE_EXP,
        "rollout_rejection_mask": SAFE_EXP,
    }
    unsupported_kwargs: ClassVar[dict[str, dict[str, tuple]]] = {
        "grpo_advantages": {"scale": ("batch",)},
        "aggregate": {"mode": ("seq_mean_token_sum", "token_sum")},
        "cispo_token_loss": {"surrogate": ("ratio",)},
        "kl_loss_term": {"gradient": ("straight_through", "unbiased", "bias_corrected")},
        "rollout_is_weights": {"seq_stat": ("geometric",), "mode": ("none", "mask"), "batch_normalize": (True,)},
        "rollout_rejection_mask": {"statistic": ("k1", "k2", "k3"), "level": ("seq_max",)},
        "decoupled_ppo_token_loss": {"behav_mode": ("mask",), "behav_cap": (None,)},
    }

    LOGPROBS_OP = "logprobs_from_logits"
    ENTROPY_OP = "entropy_from_logits"
    POLICY_ARRAYS = ("log_probs", "old_log_probs", "loss_mask")
    VALUE_ARRAYS = ("values", "old_values", "returns", "loss_mask")
    LOG_RATIO_CLAMP = 20.0  # safe_exp_delta(clip=20.0), torch_utils.py:187-192; sapo clamps at +-20 too (ppo_utils.py:633)
    MODES: ClassVar[dict[str, str]] = {"token_mean": "token_mean", "seq_mean_token_mean": "sequence_mean", "seq_mean_token_sum_norm": "seq_mean_token_sum_norm"}

    def __init__(self) -> None:
        super().__init__()
        info = self._worker.hello.get("info", {})
        self.stubs = tuple(info.get("stubs", ()))
        self.has_trainer = bool(info.get("trainer"))

    def policy_losses(self) -> tuple[str, ...]:
        """Every name in the installed SkyRL's ``PolicyLossRegistry`` (ppo_utils.py:478-514)."""
        return tuple(self._worker.hello.get("info", {}).get("policy_losses", ()))

    def advantage_estimators(self) -> tuple[str, ...]:
        """Every name in the installed SkyRL's ``AdvantageEstimatorRegistry`` (ppo_utils.py:413-442)."""
        return tuple(self._worker.hello.get("info", {}).get("adv_estimators", ()))

    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, None, float]:
        # the model wrapper divides the logits by the temperature before logprobs_from_logits (model_wrapper.py:334)
        return rows / np.asarray(temperature, dtype=rows.dtype), None, temperature

    # ------------------------------------------------------------------------------------------
    # keyword checks (the spec-side ones are spec_io's)
    # ------------------------------------------------------------------------------------------

    def _clamp(self, fn: str, log_ratio_clamp: float | None, where: str) -> None:
        if log_ratio_clamp is not None:
            io.number(fn, "log_ratio_clamp", log_ratio_clamp, strict=True)
        if log_ratio_clamp not in (None, self.LOG_RATIO_CLAMP):
            raise NotImplementedError(f"SkyRL clamps the log-ratio at +-20, {where}, not at {log_ratio_clamp!r}")

    # ------------------------------------------------------------------------------------------
    # advantages (compute_advantages_and_returns, the trainer's entry)
    # ------------------------------------------------------------------------------------------

    def _outcome(self, fn: str, name: str, rewards: Any, group_size: int, **params: Any) -> np.ndarray:
        r, G = io.check_groups(fn, rewards, group_size)
        B = r.shape[0]
        arrays = {"token_level_rewards": r[:, None], "response_mask": np.ones((B, 1), dtype=r.dtype),
                  "index": np.arange(B, dtype=np.int64) // G}
        out = self._worker.call("advantages", arrays, {"name": name, **params})["outputs"]
        return np.asarray(out["advantages"])[:, 0].astype(r.dtype)

    def grpo_advantages(self, rewards: Any, group_size: int, *, scale: str = "group", std_ddof: int = 1,
                        eps: float = 1e-6) -> np.ndarray:
        fn = "grpo_advantages"
        io.choice(fn, "scale", scale)
        if scale == "batch":
            raise NotImplementedError("SkyRL's GRPO divides by the group's std or not at all (grpo_norm_by_std, ppo_utils.py:1328-1331)")
        if std_ddof != 1:
            raise NotImplementedError("SkyRL's GRPO std is torch.std, unbiased (ppo_utils.py:1323)")
        e = io.number(fn, "eps", eps)
        return self._outcome(fn, "grpo", rewards, group_size, grpo_norm_by_std=scale == "group", epsilon=e)

    def rloo_advantages(self, rewards: Any, group_size: int) -> np.ndarray:
        return self._outcome("rloo_advantages", "rloo", rewards, group_size)

    def maxrl_advantages(self, rewards: Any, group_size: int, *, eps: float = 1e-6) -> np.ndarray:
        fn = "maxrl_advantages"
        return self._outcome(fn, "maxrl", rewards, group_size, epsilon=io.number(fn, "eps", eps))

    @staticmethod
    def _whitened_by_skyrl(m: np.ndarray) -> None:
        """``masked_var`` raises ValueError for a mask sum of 0 or 1 (ppo_utils.py:135-140)."""
        n = int(m.sum())
        if n <= 1:
            raise NotImplementedError(f"SkyRL's masked_whiten raises ValueError for a mask sum of {n} "
                                      "(ppo_utils.py:135-140); the spec returns 0")

    def reinforce_pp_advantages(self, token_rewards: Any, mask: Any, *, gamma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """``reinforce++`` (ppo_utils.py:1167-1199) with ``gamma``, on the layout SkyRL's trainer builds
        (``response_layout``, as ``gae``): its ``response_mask`` covers the whole response (TR:1168-1170), so a
        masked tool token inside it is a step with reward 0 and enters the whitening; the reset at a masked
        position (:1194) only ever meets the leading padding. Outputs moved back to the spec's columns."""
        fn = "reinforce_pp_advantages"
        r, m = io.token_arrays(fn, mask, finite=True, token_rewards=token_rewards)
        g = io.unit_interval(fn, "gamma", gamma)
        layout = response_layout(m)
        self._whitened_by_skyrl(layout.response_mask)
        arrays = {"token_level_rewards": layout.place(io.clean(r, m)), "response_mask": layout.response_mask.astype(r.dtype)}
        out = self._worker.call("advantages", arrays, {"name": "reinforce++", "gamma": g})["outputs"]
        return (io.masked_out(layout.back(np.asarray(out["advantages"])), m, r.dtype),
                io.masked_out(layout.back(np.asarray(out["returns"])), m, r.dtype))

    def gae_outputs(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0,
                    lam: float = 1.0) -> tuple[dict[str, np.ndarray], np.ndarray, Any]:
        """``compute_gae_advantage_return`` as SkyRL returns it, on the layout its trainer builds
        (``response_layout``), mapped back to the spec's columns: ``{"advantages": whitened, "returns": ...}``,
        the mask, the rewards' dtype."""
        r, v, m = io.token_arrays("gae", mask, token_rewards=token_rewards, values=values)
        layout = response_layout(m)
        self._whitened_by_skyrl(layout.response_mask)
        arrays = {"token_level_rewards": layout.place(io.clean(r, m)), "values": layout.place(v, inside=True),
                  "response_mask": layout.response_mask.astype(r.dtype)}
        out = self._worker.call("advantages", arrays, {"name": "gae", "gamma": float(gamma), "lambd": float(lam)})["outputs"]
        return {k: layout.back(np.asarray(a)) for k, a in out.items()}, m, r.dtype

    def gae(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        out, m, dtype = self.gae_outputs(token_rewards, values, mask, gamma=gamma, lam=lam)
        returns = np.asarray(out["returns"], dtype=np.float64)
        advantages = returns - io.clean(np.asarray(values, dtype=np.float64), m)
        return io.masked_out(advantages, m, dtype), io.masked_out(returns, m, dtype)

    def whiten(self, x: Any, mask: Any, *, shift_mean: bool = True) -> np.ndarray:
        a, m = io.token_arrays("whiten", mask, x=x)
        self._whitened_by_skyrl(m)
        out = self._worker.call("masked_whiten", {"values": io.clean(a, m), "mask": io.as_mask_of(m, a.dtype)},
                                {"shift_mean": bool(shift_mean)})["outputs"]["out"]
        return io.masked_out(out, m, a.dtype)

    # ------------------------------------------------------------------------------------------
    # kl.estimator, kl.loss, reward.rlhf
    # ------------------------------------------------------------------------------------------

    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None, *, abs_ok: bool = False) -> np.ndarray:
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, None)
        io.choice("kl_loss_term" if abs_ok else "kl_penalty", "estimator", estimator)
        arrays = {"log_probs": io.clean(lp, m), "log_probs_base": io.clean(ref, m), "loss_mask": io.as_mask_of(m, lp.dtype)}
        return self._token_op("kl", arrays, {"estimator": estimator}, "kl", "log_probs", m, lp.dtype, upstream)

    def _kl_loss(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any, estimator: str, gradient: str,
                 upstream: Any = None) -> np.ndarray:
        io.kl_loss_keywords("kl_loss_term", estimator, gradient)
        if gradient != "estimator":
            raise NotImplementedError(f"SkyRL's KL loss is compute_approx_kl differentiated as computed (ppo_utils.py:88-125, "
                                      f"worker.py:970-980); it has no {gradient!r} form")
        if old_logp is not None:
            io.float_array("kl_loss_term", "old_logp", old_logp, 2)
        return self._kl(logp, ref_logp, mask, estimator, upstream, abs_ok=True)

    def kl_loss_term(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any = None, *, estimator: str = "k3",
                     gradient: str = "estimator") -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, old_logp, estimator, gradient)

    def kl_loss_term_grad(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any, upstream: Any, *, estimator: str = "k3",
                          gradient: str = "estimator") -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, old_logp, estimator, gradient, upstream)

    @staticmethod
    def last_token_scores(scores: np.ndarray, m: np.ndarray) -> np.ndarray:
        """``[B]`` scores as SkyRL's per-token rewards: on each row's last valid token (TR:1086-1091)."""
        out = np.zeros(m.shape, dtype=scores.dtype)
        rows = np.flatnonzero(m.any(axis=1))
        last = m.shape[1] - 1 - np.argmax(m[rows, ::-1], axis=1)
        out[rows, last] = scores[rows]
        return out

    def rlhf_token_rewards(self, scores: Any, logp: Any, ref_logp: Any, mask: Any, *, kl_coef: float, estimator: str = "k1") -> np.ndarray:
        fn = "rlhf_token_rewards"
        lp, ref, m = io.token_arrays(fn, mask, logp=logp, ref_logp=ref_logp)
        s = io.row_scores(fn, scores, lp.shape[0])
        io.choice(fn, "estimator", estimator)
        coef = io.number(fn, "kl_coef", kl_coef, low=None)
        if coef < 0:
            raise NotImplementedError("apply_reward_kl_penalty uses max(0, kl_loss_coef) (trainer.py:1411-1416)")
        if not self.has_trainer:
            raise NotImplementedError("skyrl.train.trainer did not import in the worker")
        arrays = {"loss_mask": io.as_mask_of(m, lp.dtype), "rewards": self.last_token_scores(s.astype(lp.dtype), m),
                  "base_action_log_probs": io.clean(ref, m), "action_log_probs": io.clean(lp, m)}
        out = self._worker.call("reward_kl", arrays, {"kl_coef": coef, "estimator": estimator})["outputs"]["rewards"]
        return io.masked_out(out, m, lp.dtype)

    # ------------------------------------------------------------------------------------------
    # policy and value losses (the per-token matrix SkyRL hands reduce_loss)
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _loss_params(name: str, config: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "config": config}

    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        return self._loss_params(*self._ppo_config("ppo_token_loss", eps_low, eps_high, dual_clip))

    @staticmethod
    def _clip_config(fn: str, eps_low: float, eps_high: float) -> dict[str, Any]:
        low, high = io.clip_range(fn, eps_low, eps_high)
        return {"eps_clip_low": low, "eps_clip_high": high}

    def _ppo_config(self, fn: str, eps_low: float, eps_high: float, dual_clip: float | None) -> tuple[str, dict[str, Any]]:
        config = self._clip_config(fn, eps_low, eps_high)
        if dual_clip is None:
            return "regular", config
        return "dual_clip", {**config, "clip_ratio_c": io.number(fn, "dual_clip", dual_clip, low=1.0, strict=True)}

    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        return self._loss_params("gspo", self._clip_config("gspo_token_loss", eps_low, eps_high))

    def _cispo_params(self, eps_low: float | None, eps_high: float, bound: str) -> dict[str, Any]:
        fn = "cispo_token_loss"
        io.choice(fn, "bound", bound)
        high = io.number(fn, "eps_high", eps_high)
        low = 1.0 if eps_low is None else io.number(fn, "eps_low", eps_low)
        # clamp(ratio, 1 - low, 1 + high) (ppo_utils.py:750): an absolute bound E is 1 + (E - 1)
        return self._loss_params("cispo", {"cispo": {"cispo_eps_clip_low": low,
                                                     "cispo_eps_clip_high": high if bound == "relative" else high - 1.0}})

    def cispo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float | None = None,
                         eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._cispo_params(eps_low, eps_high, bound), logp, old_logp, advantages, mask)

    def cispo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                              eps_low: float | None = None, eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._cispo_params(eps_low, eps_high, bound), logp, old_logp, advantages, mask,
                            upstream)

    def _sapo_params(self, tau_pos: float, tau_neg: float, log_ratio_clamp: float | None) -> dict[str, Any]:
        fn = "sapo_token_loss"
        self._clamp(fn, log_ratio_clamp, "ppo_utils.py:633")
        return self._loss_params("sapo", {"sapo": {"tau_pos": io.number(fn, "tau_pos", tau_pos, strict=True),
                                                   "tau_neg": io.number(fn, "tau_neg", tau_neg, strict=True)}})

    def sapo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, tau_pos: float = 1.0,
                        tau_neg: float = 1.05, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("sapo_token_loss", self._sapo_params(tau_pos, tau_neg, log_ratio_clamp), logp, old_logp, advantages, mask)

    def sapo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, tau_pos: float = 1.0,
                             tau_neg: float = 1.05, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("sapo_token_loss", self._sapo_params(tau_pos, tau_neg, log_ratio_clamp), logp, old_logp, advantages,
                            mask, upstream)

    def dppo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, divergence: str = "tv",
                        delta_low: float = 0.2, delta_high: float = 0.2, ratio_cap: float | None = None) -> np.ndarray:
        raise NotImplementedError(
            "SkyRL's dppo_policy_loss (ppo_utils.py:809-878) is the ratio surrogate -A*r*keep with r on the graph (:871), "
            "not -A*sg(min(r, cap))*logp*keep: the same gradient, another value; checked by the rows skyrl.policy_loss[dppo,*]")

    def clip_cov_mask(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, draws: Any, *, fraction: float = 2e-4,
                      cov_low: float = 1.0, cov_high: float = 5.0, eps_low: float = 0.2, eps_high: float = 0.2) -> np.ndarray:
        fn = "clip_cov_mask"
        lp, old, u, m = io.token_arrays(fn, mask, finite=True, logp=logp, old_logp=old_logp, draws=draws)
        f, lo, hi = io.clip_cov_settings(fn, fraction, cov_low, cov_high)
        config = {**self._clip_config(fn, eps_low, eps_high), "clip_cov": {"clip_ratio": f, "clip_cov_lb": lo, "clip_cov_ub": hi}}
        arrays = {"log_probs": io.clean(lp, m), "old_log_probs": io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "loss_mask": io.as_mask_of(m, lp.dtype),
                  "clip_cov_draws": io.clean(u, m)}
        keep = self._worker.call("policy_loss", arrays, self._loss_params("clip_cov", config))["outputs"]["clip_cov_keep"]
        return (np.asarray(keep) > 0.5) & m

    def _kl_cov_params(self, fraction: float, coef: float) -> dict[str, Any]:
        fn = "kl_cov_token_loss"
        return self._loss_params("kl_cov", {"kl_cov": {"kl_cov_frac": io.unit_interval(fn, "fraction", fraction, strict=True),
                                                       "ppo_kl_coef": io.number(fn, "coef", coef)}})

    def kl_cov_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, fraction: float = 2e-4,
                          coef: float = 0.1) -> np.ndarray:
        return self._policy("kl_cov_token_loss", self._kl_cov_params(fraction, coef), logp, old_logp, advantages, mask)

    def kl_cov_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                               fraction: float = 2e-4, coef: float = 0.1) -> np.ndarray:
        return self._policy("kl_cov_token_loss", self._kl_cov_params(fraction, coef), logp, old_logp, advantages, mask, upstream)

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        return {"value_clip": None if clip is None else io.number("value_token_loss", "clip", clip, strict=True)}

    # ------------------------------------------------------------------------------------------
    # spec v1.1 off-policy correction (off_policy_correction_utils.py)
    # ------------------------------------------------------------------------------------------

    def _rollout_inputs(self, fn: str, old_logp: Any, rollout_logp: Any, mask: Any) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        old, rollout, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        arrays = {"old_log_probs": io.clean(old, m), "rollout_logprobs": io.clean(rollout, m), "loss_mask": io.as_mask_of(m, old.dtype)}
        return old, m, arrays

    def rollout_is_weights(self, old_logp: Any, rollout_logp: Any, mask: Any, *, level: str = "token",
                           seq_stat: str = "product", mode: str = "truncate", lo: float | None = None,
                           hi: float | None = 2.0, log_ratio_clamp: float | None = None,
                           batch_normalize: bool = False) -> np.ndarray:
        fn = "rollout_is_weights"
        old, m, arrays = self._rollout_inputs(fn, old_logp, rollout_logp, mask)
        io.is_keywords(fn, level, seq_stat, mode, batch_normalize)
        self._clamp(fn, log_ratio_clamp, "off_policy_correction_utils.py:49, :66")
        if level == "sequence" and seq_stat == "geometric":
            raise NotImplementedError("SkyRL's sequence TIS ratio is the product of ratios (off_policy_correction_utils.py:63-66); "
                                      "the geometric mean is only a rejection statistic (sequence_mask_metric='geometric')")
        if mode != "truncate":
            raise NotImplementedError("SkyRL's IS weight is TIS, clamp(rho, max=cap) (off_policy_correction_utils.py:57, :72); "
                                      "masking is a separate rejection mask")
        if lo is not None:
            raise NotImplementedError("SkyRL's TIS truncates from above only (off_policy_correction_utils.py:57, :72)")
        if hi is None:
            raise NotImplementedError("SkyRL's TIS always has a cap (token_tis_ratio_clip_high / sequence_tis_ratio_clip_high)")
        if batch_normalize:
            raise NotImplementedError("SkyRL does not normalise the TIS weights")
        cap = io.number(fn, "hi", hi, strict=True)
        key = "token_tis_ratio_clip_high" if level == "token" else "sequence_tis_ratio_clip_high"
        out = self._worker.call("off_policy", arrays, {"fn": "tis", "tis_ratio_type": level, "correction": {key: cap}})
        return io.masked_out(out["outputs"]["weight"], m, old.dtype)

    def rejection_settings(self, statistic: str, level: str, lo: float | None, hi: float | None) -> dict[str, Any]:
        """The ``off_policy`` op's params for a ratio rejection mask (NotImplementedError where SkyRL has none)."""
        fn = "rollout_rejection_mask"
        io.rejection_keywords(fn, statistic, level)
        for name, bound in (("lo", lo), ("hi", hi)):
            if bound is not None:
                io.number(fn, name, bound)
        if statistic != "ratio":
            raise NotImplementedError("SkyRL's masks test the ratio pi_old/pi_rollout only (off_policy_correction_utils.py:75-254)")
        if level == "seq_max":
            raise NotImplementedError("SkyRL has no per-row maximum statistic (sequence_mask_metric: 'geometric' or 'product')")
        if level == "seq_all":  # either bound optional (off_policy_correction_utils.py:109-121)
            return {"fn": "outlier", "correction": {"outlier_token_is_threshold_low": lo, "outlier_token_is_threshold_high": hi}}
        if hi is None:
            raise NotImplementedError(f"SkyRL's {'token' if level == 'token' else 'sequence'} mask needs an upper bound "
                                      "(off_policy_correction_utils.py:162-163, :213-231)")
        low = 0.0 if lo is None else float(lo)  # every ratio is exp(clamp(d, -20, 20)) > 0
        if level == "token":
            return {"fn": "token_mask", "correction": {"token_mask_is_threshold_low": low, "token_mask_is_threshold_high": float(hi)}}
        if level == "seq_mean":
            return {"fn": "sequence_mask", "sequence_mask_metric": "geometric",
                    "correction": {"geo_mask_low": low, "geo_mask_high": float(hi)}}
        return {"fn": "sequence_mask", "sequence_mask_metric": "product",
                "correction": {"product_mask_low": low, "product_mask_high": float(hi)}}

    def rollout_rejection_mask(self, old_logp: Any, rollout_logp: Any, mask: Any, *, statistic: str = "ratio",
                               level: str = "token", lo: float | None = None, hi: float | None = None,
                               kl_of: str = "rollout_old") -> np.ndarray:
        fn = "rollout_rejection_mask"
        _, m, arrays = self._rollout_inputs(fn, old_logp, rollout_logp, mask)
        io.choice(fn, "kl_of", kl_of)  # the ratio does not depend on it
        settings = self.rejection_settings(statistic, level, lo, hi)
        keep = self._worker.call("off_policy", arrays, settings)["outputs"]["keep"]
        return (np.asarray(keep) > 0.5) & m

    def _decoupled(self, logp: Any, prox_logp: Any, behav_logp: Any, advantages: Any, mask: Any, eps_low: float,
                   eps_high: float, dual_clip: float | None, behav_cap: float | None, behav_mode: str,
                   upstream: Any = None) -> np.ndarray:
        fn = "decoupled_ppo_token_loss"
        io.choice(fn, "behav_mode", behav_mode)
        lp, prox, behav, m = io.token_arrays(fn, mask, logp=logp, prox_logp=prox_logp, behav_logp=behav_logp)
        if behav_cap is None:
            raise NotImplementedError("SkyRL's token TIS always caps the weight (token_tis_ratio_clip_high, config.py:571)")
        if behav_mode == "mask":
            raise NotImplementedError("SkyRL's TIS weight is truncated, clamp(rho, max=cap) (off_policy_correction_utils.py:57)")
        name, config = self._ppo_config(fn, eps_low, eps_high, dual_clip)
        config["off_policy_correction"] = {"tis_ratio_type": "token",
                                           "token_tis_ratio_clip_high": io.number(fn, "behav_cap", behav_cap, strict=True)}
        arrays = {"log_probs": io.clean(lp, m), "old_log_probs": io.clean(prox, m), "rollout_logprobs": io.clean(behav, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "loss_mask": io.as_mask_of(m, lp.dtype)}
        return self._token_op("policy_loss", arrays, self._loss_params(name, config), "per_token", "log_probs", m, lp.dtype, upstream)

    def decoupled_ppo_token_loss(self, logp: Any, prox_logp: Any, behav_logp: Any, advantages: Any, mask: Any, *,
                                 eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None,
                                 behav_cap: float | None = None, behav_mode: str = "truncate") -> np.ndarray:
        return self._decoupled(logp, prox_logp, behav_logp, advantages, mask, eps_low, eps_high, dual_clip, behav_cap, behav_mode)

    def decoupled_ppo_token_loss_grad(self, logp: Any, prox_logp: Any, behav_logp: Any, advantages: Any, mask: Any,
                                      upstream: Any, *, eps_low: float = 0.2, eps_high: float = 0.2,
                                      dual_clip: float | None = None, behav_cap: float | None = None,
                                      behav_mode: str = "truncate") -> np.ndarray:
        return self._decoupled(logp, prox_logp, behav_logp, advantages, mask, eps_low, eps_high, dual_clip, behav_cap,
                               behav_mode, upstream)

    # ------------------------------------------------------------------------------------------
    # agg.* and loss.policy: the trainer's reduction (the advantages are scaled, the losses summed)
    # ------------------------------------------------------------------------------------------

    def _reduction(self, fn: str, mode: str, norm_length: float | None) -> dict[str, Any]:
        """``loss_reduction`` and ``max_seq_len`` for a spec mode (NotImplementedError where SkyRL has none)."""
        io.agg_mode(fn, mode, norm_length=norm_length, needs_norm=True)
        if mode not in self.MODES:
            raise NotImplementedError(f"SkyRL's loss_reduction has no {mode!r} (token_mean, sequence_mean, "
                                      "seq_mean_token_sum_norm, prompt_mean, token_mean_legacy; ppo_utils.py:1095-1164)")
        out: dict[str, Any] = {"loss_reduction": self.MODES[mode], "max_seq_len": None}
        if mode == "seq_mean_token_sum_norm":
            n = io.number(fn, "norm_length", norm_length, strict=True)
            if n != int(n):
                raise NotImplementedError(f"SkyRL's max_seq_len is an int (config.py:653), not {norm_length!r}")
            out["max_seq_len"] = int(n)
        return out

    @staticmethod
    def _own_counts(m: np.ndarray, num_tokens: float | None, num_seqs: float | None) -> None:
        if (num_tokens is not None and float(num_tokens) != float(m.sum())) or (num_seqs is not None and float(num_seqs) != m.shape[0]):
            raise NotImplementedError("SkyRL scales by the counts of the mini-batch it is given, before splitting it into "
                                      "micro-batches and ranks (trainer.py:1457-1476); it takes no global counts: the "
                                      "agg.partition rows check that split")

    def _aggregate(self, token_loss: Any, mask: Any, mode: str, norm_length: float | None, num_tokens: float | None,
                   num_seqs: float | None, upstream: Any = None) -> Any:
        fn = "aggregate"
        x, m = io.token_arrays(fn, mask, token_loss=token_loss)
        params = self._reduction(fn, mode, norm_length)
        self._own_counts(m, num_tokens, num_seqs)
        arrays = {"token_loss": io.clean(x, m), "loss_mask": io.as_mask_of(m, x.dtype)}
        return self._scalar_loss("reduce", arrays, params, "token_loss", m, x.dtype, upstream)

    def aggregate(self, token_loss: Any, mask: Any, *, mode: str, norm_length: float | None = None, num_tokens: float | None = None,
                  num_seqs: float | None = None) -> Any:
        return self._aggregate(token_loss, mask, mode, norm_length, num_tokens, num_seqs)

    def aggregate_grad(self, token_loss: Any, mask: Any, upstream: Any, *, mode: str, norm_length: float | None = None,
                       num_tokens: float | None = None, num_seqs: float | None = None) -> np.ndarray:
        return self._aggregate(token_loss, mask, mode, norm_length, num_tokens, num_seqs, upstream)

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        """The trainer scales the advantages of the whole mini-batch (every rank's rows) before dispatching
        it (TR:1457-1476, ``_execute_training_step`` :1497-1503); each rank sums its micro-batches' token
        losses (``reduce_loss``) and multiplies by ``dp_size`` (worker.py:983-989), DDP averaging the
        ranks' gradients. So: the scaling on the concatenated chunks, one ``reduce_loss`` per chunk."""
        fn = "micro_batched_loss"
        xs, ms = io.chunk_arrays(fn, chunks, masks)
        params = self._reduction(fn, mode, norm_length)
        width = max([m.shape[1] for m in ms] + [1])
        pad = [((0, 0), (0, width - m.shape[1])) for m in ms]
        dtype = xs[0].dtype
        x_all = np.concatenate([np.pad(io.clean(x, m), p) for x, m, p in zip(xs, ms, pad)]).astype(dtype)
        m_all = np.concatenate([np.pad(m, p) for m, p in zip(ms, pad)])
        bounds = np.cumsum([0] + [m.shape[0] for m in ms])
        params.update(chunks=[[int(s), int(e)] for s, e in pairwise(bounds)], dp_size=int(dp_world_size))
        arrays = {"token_loss": x_all, "loss_mask": io.as_mask_of(m_all, dtype)}
        if upstream is None:
            losses = self._worker.call("reduce", arrays, params)["outputs"]["losses"]
            return [dtype.type(v) for v in np.asarray(losses)]
        up = np.full(len(ms), float(upstream), dtype=dtype)
        g = self._worker.call("reduce", arrays, params, wrt=["token_loss"], upstream={"losses": up})["grads"]["token_loss"]
        return [io.masked_out(g[s:e, : m.shape[1]], m, dtype) for (s, e), m in zip(pairwise(bounds), ms)]

    def _policy_loss(self, logp: Any, old_logp: Any, ref_logp: Any, advantages: Any, mask: Any, eps_low: float,
                     eps_high: float, dual_clip: float | None, kl_coef: float, kl_estimator: str, mode: str,
                     norm_length: float | None, num_tokens: float | None, num_seqs: float | None, upstream: Any = None) -> Any:
        fn = "policy_loss"
        lp, old, ref, m = io.token_arrays(fn, mask, logp=logp, old_logp=old_logp, ref_logp=ref_logp)
        io.choice(fn, "kl_estimator", kl_estimator)
        coef = io.number(fn, "kl_coef", kl_coef)
        name, config = self._ppo_config(fn, eps_low, eps_high, dual_clip)
        reduction = self._reduction(fn, mode, norm_length)
        self._own_counts(m, num_tokens, num_seqs)
        if coef != 0.0 and mode != "seq_mean_token_mean":
            raise NotImplementedError("SkyRL's KL loss term is masked_mean(kl, loss_mask, dim=-1).mean(), a per-sequence token "
                                      f"mean whatever loss_reduction (worker.py:980): no {mode!r} KL term")
        config.update(reduction)
        arrays = {"log_probs": io.clean(lp, m), "old_log_probs": io.clean(old, m), "base_log_probs": io.clean(ref, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "loss_mask": io.as_mask_of(m, lp.dtype)}
        params = {**self._loss_params(name, config), "normalize": {}, "kl": {"coef": coef, "estimator": kl_estimator}}
        return self._scalar_loss("policy_loss", arrays, params, "log_probs", m, lp.dtype, upstream)

    def policy_loss(self, logp: Any, old_logp: Any, ref_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.2,
                    eps_high: float = 0.2, dual_clip: float | None = None, kl_coef: float = 0.0, kl_estimator: str = "k3",
                    mode: str = "token_mean", norm_length: float | None = None, num_tokens: float | None = None,
                    num_seqs: float | None = None) -> Any:
        return self._policy_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, kl_coef, kl_estimator,
                                 mode, norm_length, num_tokens, num_seqs)

    def policy_loss_grad(self, logp: Any, old_logp: Any, ref_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                         eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None, kl_coef: float = 0.0,
                         kl_estimator: str = "k3", mode: str = "token_mean", norm_length: float | None = None,
                         num_tokens: float | None = None, num_seqs: float | None = None) -> np.ndarray:
        return self._policy_loss(logp, old_logp, ref_logp, advantages, mask, eps_low, eps_high, dual_clip, kl_coef, kl_estimator,
                                 mode, norm_length, num_tokens, num_seqs, upstream)


__all__ = ["SkyRLAdapter"]
