"""The OpenRLHF adapter: OpenRLHF's RL math, called through the installed OpenRLHF, in spec v1 conventions.

OpenRLHF runs in its own environment (``rlspec frameworks install openrlhf``: ``openrlhf==0.11.2 --no-deps``
with torch and its pinned ``transformers==5.15.0``; its requirements pin ``flash-attn`` and ``deepspeed``,
which do not install on CPU) and is driven through a worker process
(``conformance/frameworks/subprocess_worker.py``; the OpenRLHF calls and the import stubs are in
``conformance/frameworks/openrlhf/ops.py``; what the verl and OpenRLHF adapters share is
``conformance/frameworks/subprocess_adapter.py``). A NumPy adapter: values come from OpenRLHF and each
``<function>_grad`` is OpenRLHF's autograd gradient for the given upstream.

What is called (openrlhf 0.11.2; paths relative to ``openrlhf/``):

| spec function | OpenRLHF |
|---|---|
| ``token_logprobs`` | ``models/utils.py::log_probs_from_logits`` (:172; it divides by ``temperature`` itself) |
| ``token_entropy`` | ``models/utils.py::compute_entropy`` (:216) on ``logits / temperature`` (see below) |
| ``kl_penalty`` | ``models/utils.py::compute_approx_kl`` (:69-128), ``kl_estimator`` k1/k2/k3 |
| ``kl_loss_term`` | ``compute_approx_kl`` with ``kl_estimator`` k1/k2/k3: ``gradient="estimator"`` is ``unbiased_gradient=False``; ``"unbiased"`` is ``unbiased_gradient=True`` with ``log_probs_old = old_logp`` (w = min(pi/pi_old, 10), detached, :115-128); ``"straight_through"`` is ``unbiased_gradient=True`` with ``log_probs_old=None`` (w = 1, :121-122). No ``"abs"`` estimator and no ``"bias_corrected"`` form (declared in ``unsupported_kwargs``) |
| ``rlhf_token_rewards`` | ``compute_approx_kl`` then ``models/utils.py::compute_reward`` (:131-158), as the experience maker chains them |
| ``reinforce_pp_advantages`` | ``RemoteExperienceMaker.compute_advantages_and_returns`` with estimator ``"reinforce"`` (:238-341): the token rewards enter as ``compute_reward``'s KL reward (``kl_coef = 1``, ``kl = -token_rewards``, a score of 0), then ``get_cumulative_returns`` (:390-421) and the batch whitening (:325-339); a batch without actions is "not implemented" (NaN) |
| ``reinforce_pp_baseline_advantages`` | the same with estimator ``"reinforce_baseline"`` (:271-272, gamma forced to 1) |
| ``gae`` | ``trainer/ppo_utils/experience_maker.py::RemoteExperienceMaker.get_advantages_and_returns`` (:343-387) |
| ``ppo_token_loss`` | ``models/loss.py::PolicyLoss(policy_loss_type="ppo")`` (:116-259): the per-token matrix it aggregates |
| ``gspo_token_loss`` | ``PolicyLoss(policy_loss_type="gspo")``: idem |
| ``value_token_loss`` | ``models/loss.py::ValueLoss`` (:262-298): ½ × the matrix it aggregates (the ½ is applied after ``aggregate_loss``, :298) |
| ``rollout_is_weights`` | ``PolicyLoss(is_correction_level="token", is_correction_gating="ratio")`` (:128-131, :216-241): the coefficient ``coef`` it multiplies the PPO loss by, read by a probe (below) |
| ``rollout_rejection_mask`` | the same gate in ``is_correction_mode="mask"``, level ``"token"`` or ``"seq"``: its keep decision (``coef != 0``, checked against the ``is_filter_ratio`` it returns, :238-246) |
| ``overlong_penalty`` | ``trainer/ppo_utils/experience_maker.py::RemoteExperienceMaker.compute_advantages_and_returns`` (estimator ``"reinforce"``, one action per sample: its returns are the shaped rewards) on rewards of 0: ``length_penalty.py::apply_overlong_penalty`` (:16-58) |
| ``shaped_rewards`` | the same path: ``apply_stop_properly_penalty`` (:61-106, ``stop_properly_penalty_coef`` in [0, 1] scales, < 0 replaces) then ``models/utils.py::compute_reward``'s clip to ``reward.clip_range`` (:141-142) |
| ``kl_controller_update`` | ``trainer/ppo_utils/kl_controller.py::AdaptiveKLController`` (:4-19): a fresh controller ``(kl_coef, target, horizon)``, one ``update(current_kl, n_steps)``, its ``value`` (``SubprocessAdapter.kl_controller_update``) |

Checked as framework rows by ``conformance/frameworks/openrlhf/checks.py``: ``aggregate_loss`` in both
modes (local, global, two data-parallel ranks), the aggregated ``PolicyLoss`` (ppo, dual-clip, gspo) and
``ValueLoss`` (value and gradient), ``compute_approx_kl(unbiased_gradient=True)``, and the advantage
estimators of ``compute_advantages_and_returns`` (``group_norm``, ``dr_grpo``, ``rloo``,
``reinforce_baseline``, ``flash_reinforce``, ``gae`` with its batch whitening), and the rollout-engine
importance correction inside ``PolicyLoss``: the coefficient and the keep decision of each setting (the
core functions with that setting's keywords fixed), the ``"seq"`` coefficient (a composition of spec
pieces), and the corrected loss (``"token"`` with ``"mask"`` and ``"clip"``, ``"seq"`` with ``"mask"``)
against ``w · ppo_token_loss`` aggregated as OpenRLHF aggregates, value and gradient.

The rollout importance correction (spec v1.1 ``offpolicy.is_weights`` / ``offpolicy.rejection``).
OpenRLHF has no function for the weight: ``PolicyLoss.forward`` computes
``coef`` from ``old_log_probs - rollout_log_probs`` (detached, :219-239) and multiplies the per-token PPO
loss by it (:241) before ``aggregate_loss``. The adapter reads ``coef`` exactly with a probe: ``PolicyLoss``
with ``log_probs = old_log_probs = old_logp`` (PPO ratio ``exp(0) = 1``, :185-188), advantages ``-1``
(so both surrogates are ``-1`` and the per-token PPO loss is ``-min(-1, -1) = 1``, :200-205) and
``rollout_log_probs = rollout_logp``; the per-token matrix handed to ``aggregate_loss`` is then
``coef · 1 = coef`` (no rounding). Keyword mapping (``is_correction_threshold = (low, high)``):

| spec | OpenRLHF |
|---|---|
| ``level="token"``, ``mode="truncate"`` (TIS) | ``is_correction_mode="clip"``: ``coef = clamp(rho, low, high)`` (:234-236) |
| ``level="token"``, ``mode="mask"`` (IcePop) | ``is_correction_mode="mask"``: ``coef = rho`` where ``low <= rho <= high``, else 0 (:237-239) |
| ``mode="none"`` | ``"mask"`` with ``(0.0, inf)`` (every ``rho`` kept) |
| ``lo=None`` / ``hi=None`` | ``low = 0.0`` (what the CLI sets for a single threshold, ``cli/train_ppo_ray.py:639-642``; ``rho >= 0`` always) / ``high = inf`` |
| ``rollout_rejection_mask(statistic="ratio", level="token")`` | ``"mask"`` gate, level ``"token"``: keep = ``coef != 0`` |
| ``rollout_rejection_mask(statistic="ratio", level="seq_mean")`` | ``"mask"`` gate, level ``"seq"``: ``exp(masked_mean(old - rollout))`` in ``[low, high]`` (:223-224) |

Not expressible, declared in ``unsupported_kwargs`` (reported "not implemented (...)" per case) and raised
as ``NotImplementedError``: ``rollout_is_weights(level="sequence")`` (OpenRLHF's ``"seq"`` level gates the
row on the geometric mean but keeps each surviving token's own ``rho``, :237-239, never one weight per
row; that composition is the framework row ``openrlhf.PolicyLoss.is_coef[seq,mask]``), ``batch_normalize=True``
(no normalisation of ``coef``), ``rollout_rejection_mask`` with ``statistic`` k1/k2/k3 (the gates are the
ratio and the sampled-token ``binary_kl`` / ``tv``, :225-232, not k1-k3) or ``level`` ``seq_sum`` /
``seq_max`` / ``seq_all`` (only the per-row mean, :223). A zero ``coef`` is a rejection unless ``rho``
itself underflowed to 0 (``old - rollout`` below about -104 in float32) and ``low = 0`` kept it: when the count of
zeros disagrees with the ``is_filter_ratio`` that ``PolicyLoss`` returns (:242-246), each zero unit is
asked alone (one token, or one row), where ``is_filter_ratio`` is that unit's own decision.

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

from conformance.frameworks.subprocess_adapter import SubprocessAdapter
from conformance.frameworks import spec_io as io


class OpenRLHFAdapter(SubprocessAdapter):
    """Spec v1 adapter for OpenRLHF (see the module docstring for what each function calls)."""

    name = "openrlhf"
    dtypes = ("float32",)
    checks_module = "conformance.frameworks.openrlhf.checks"

    # spec v1.1 keyword values that PolicyLoss's is_correction options cannot express (module docstring)
    unsupported_kwargs = {
        "rollout_is_weights": {"level": ("sequence",), "batch_normalize": (True,)},
        "rollout_rejection_mask": {"statistic": ("k1", "k2", "k3"), "level": ("seq_sum", "seq_max", "seq_all")},
        # spec v1.1 kl.loss: compute_approx_kl has k1/k2/k3 only (models/utils.py:95-111) and no estimate-times-ratio form
        "kl_loss_term": {"estimator": ("abs",), "gradient": ("bias_corrected",)},
    }

    # Input features OpenRLHF's trainer never produces (docs/checking.md, "Input domains")
    domain = {
        "reinforce_pp_baseline_advantages": {
            "group of one": "the CLI refuses n_samples_per_prompt = 1 for reinforce_baseline (and rloo, group_norm, "
                            "dr_grpo): cli/train_ppo_ray.py:656-659 (openrlhf 0.11.2)"},
    }

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
    # agg.partition (conformance/runner/partition.py): the trainer's per-micro-batch loss
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
        xs, ms = io.chunk_arrays(fn, chunks, masks)
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

    def _kl_loss(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any, estimator: str, gradient: str,
                 upstream: Any = None) -> np.ndarray:
        """spec v1.1 ``kl_loss_term`` through ``compute_approx_kl`` (the table above)."""
        fn = "kl_loss_term"
        io.kl_loss_keywords(fn, estimator, gradient)
        if estimator == "abs" or gradient == "bias_corrected":
            raise NotImplementedError("compute_approx_kl has k1/k2/k3 and no estimate-times-ratio form (models/utils.py:69-128)")
        if gradient == "unbiased" and old_logp is None:
            raise io.fail(fn, "old_logp", "required for gradient='unbiased', got None")
        old = old_logp if gradient == "unbiased" else None  # log_probs_old=None: w = 1, straight-through (:121-122)
        return self.approx_kl(logp, ref_logp, mask, estimator=estimator, old_logp=old,
                              unbiased_gradient=gradient != "estimator", upstream=upstream)

    def kl_loss_term(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any = None, *, estimator: str = "k3",
                     gradient: str = "estimator") -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, old_logp, estimator, gradient)

    def kl_loss_term_grad(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any, upstream: Any, *, estimator: str = "k3",
                          gradient: str = "estimator") -> np.ndarray:
        return self._kl_loss(logp, ref_logp, mask, old_logp, estimator, gradient, upstream)

    def rlhf_token_rewards(self, scores: Any, logp: Any, ref_logp: Any, mask: Any, *, kl_coef: float, estimator: str = "k1") -> np.ndarray:
        fn = "rlhf_token_rewards"
        s = io.float_array(fn, "scores", scores, 1)
        lp, m = io.token_arrays(fn, mask, logp=logp)
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
        r, v, m = io.token_arrays(fn, mask, token_rewards=token_rewards, values=values)
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

    # spec v1.1 advantage estimators: compute_advantages_and_returns' "reinforce" and "reinforce_baseline"

    @staticmethod
    def _actions_or_refuse(m: np.ndarray) -> None:
        """The batch whitening divides by the action count (experience_maker.py:328-329): NaN without one."""
        if not m.any():
            raise NotImplementedError("OpenRLHF's advantage whitening divides by the number of action tokens "
                                      "(experience_maker.py:328-329): NaN for a batch without any; the spec returns 0")

    def reinforce_pp_advantages(self, token_rewards: Any, mask: Any, *, gamma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Estimator ``"reinforce"`` with per-token rewards: compute_reward's rewards are the score on the last
        action (0 here) plus ``-kl_coef * kl`` (models/utils.py:144-157), so with ``kl_coef = 1`` and
        ``kl = -token_rewards`` they are the token rewards themselves; then ``get_cumulative_returns(gamma)``
        and the batch whitening (experience_maker.py:296-339)."""
        fn = "reinforce_pp_advantages"
        r, m = io.token_arrays(fn, mask, finite=True, token_rewards=token_rewards)
        gamma = io.unit_interval(fn, "gamma", gamma)
        self._actions_or_refuse(m)
        adv, ret = self.experience_advantages("reinforce", np.zeros(r.shape[0], dtype=r.dtype), 1, mask=m,
                                              kl=-io.clean(r, m), kl_coef=1.0, gamma=float(gamma))
        return io.masked_out(adv, m, r.dtype), io.masked_out(ret, m, r.dtype)

    def reinforce_pp_baseline_advantages(self, rewards: Any, group_size: int, mask: Any) -> np.ndarray:
        """Estimator ``"reinforce_baseline"`` (experience_maker.py:271-272): ``r - group mean`` on the last
        action, cumulative returns with gamma forced to 1, then the batch whitening."""
        fn = "reinforce_pp_baseline_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        m = io.check_mask(fn, mask, (r.shape[0], np.shape(mask)[-1]))
        self._actions_or_refuse(m)
        adv, _ = self.experience_advantages("reinforce_baseline", r, G, mask=m)
        return io.masked_out(adv, m, r.dtype)

    # ------------------------------------------------------------------------------------------
    # spec v1.1 reward.overlong / reward.shaping: apply_length_penalties and compute_reward's clip, run
    # through compute_advantages_and_returns (estimator "reinforce": the returns are the shaped rewards)
    # ------------------------------------------------------------------------------------------

    def _reward_shaping(self, rewards: np.ndarray, lengths: np.ndarray, truncated: np.ndarray, **params: Any) -> np.ndarray:
        if not self.has_experience_maker:
            raise NotImplementedError("openrlhf's experience_maker did not import in the worker")
        arrays = {"rewards": rewards.astype(np.float32), "lengths": lengths.astype(np.int64), "truncated": truncated.astype(bool)}
        return np.asarray(self._worker.call("reward_shaping", arrays, params)["outputs"]["shaped"])

    def overlong_penalty(self, lengths: Any, *, max_length: int, buffer: int, factor: float = 1.0) -> np.ndarray:
        """``apply_overlong_penalty`` (``length_penalty.py:16-58``) on rewards of 0 (float32, the reward dtype):
        ``rollout.max_new_tokens = max_length``, ``reward.overlong_buffer_len = buffer`` (a float on the CLI),
        ``reward.overlong_penalty_factor = factor``, no reward clip."""
        fn = "overlong_penalty"
        L = io.lengths_array(fn, lengths)
        if max_length < 1 or not 0 <= buffer <= max_length or not factor >= 0:
            raise io.fail(fn, "buffer", f"expected 0 <= buffer <= max_length >= 1 and factor >= 0, got {buffer!r}, "
                                        f"{max_length!r}, {factor!r}")
        B = L.shape[0]
        return self._reward_shaping(np.zeros(B), L, np.zeros(B, dtype=bool), max_new_tokens=int(max_length),
                                    overlong_buffer_len=float(buffer), overlong_penalty_factor=float(factor))

    def shaped_rewards(self, rewards: Any, truncated: Any, *, truncated_scale: float = 1.0, truncated_value: float | None = None,
                       truncated_shift: float = 0.0, clip_low: float | None = None, clip_high: float | None = None) -> np.ndarray:
        """``--reward.stop_properly_penalty_coef`` (``length_penalty.py:61-106``: a coefficient in [0, 1] scales a
        truncated sample's reward, a negative one replaces it) and ``--reward.clip_range`` (both ends,
        ``models/utils.py:141-142``), in the trainer's order. Not expressible: ``truncated_shift``, a positive
        replacement value, a scale outside [0, 1], a one-sided clip."""
        r, t = io.shaping_inputs("shaped_rewards", rewards, truncated, truncated_scale, truncated_value, clip_low, clip_high)
        if truncated_shift != 0.0:
            raise NotImplementedError("stop_properly_penalty_coef scales or replaces, it adds nothing (length_penalty.py:97-103)")
        if truncated_value is not None:
            if truncated_value > 0:
                raise NotImplementedError("a coefficient >= 0 scales (length_penalty.py:101-103): no positive replacement value")
            coef: float | None = float(truncated_value)  # < 0 replaces; 0 scales to exactly 0, the same
        elif truncated_scale == 1.0:
            coef = None  # off (a coefficient 1 would change nothing either)
        elif 0.0 <= truncated_scale <= 1.0:
            coef = float(truncated_scale)
        else:
            raise NotImplementedError("stop_properly_penalty_coef scales by a value in [0, 1] only (length_penalty.py:83-86)")
        if (clip_low is None) != (clip_high is None):
            raise NotImplementedError("reward.clip_range takes both ends (cli/train_ppo_ray.py:474): no one-sided clip")
        clip = None if clip_low is None else [float(clip_low), float(clip_high)]
        out = self._reward_shaping(r, np.zeros(r.shape[0], dtype=np.int64), t != 0, stop_properly_penalty_coef=coef,
                                   reward_clip_range=clip)
        return out.astype(r.dtype)

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

    # ------------------------------------------------------------------------------------------
    # offpolicy.is_weights / offpolicy.rejection: PolicyLoss's rollout importance correction
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def correction_init(level: str, mode: str, threshold: tuple[float, float], gating: str = "ratio") -> dict[str, Any]:
        """``PolicyLoss`` keywords of the PPO loss with the rollout correction on (``models/loss.py:121-131``)."""
        return {"policy_loss_type": "ppo", "is_correction_level": level, "is_correction_mode": mode,
                "is_correction_gating": gating, "is_correction_threshold": [float(threshold[0]), float(threshold[1])]}

    def _probe(self, old: np.ndarray, roll: np.ndarray, m: np.ndarray, init: dict[str, Any]) -> tuple[np.ndarray, float]:
        """``PolicyLoss(**init)`` on the probe (module docstring): ``(coef [B, T] as OpenRLHF computes it,
        its is_filter_ratio)``. Masked positions are sent as 0 (their ``coef`` is not read)."""
        arrays = {"log_probs": io.clean(old, m), "old_log_probs": io.clean(old, m),
                  "advantages": io.clean(np.full(old.shape, -1.0, dtype=old.dtype), m),
                  "rollout_log_probs": io.clean(roll, m), "action_mask": io.as_mask_of(m, old.dtype)}
        out = self._worker.call("policy_loss", arrays, {"init": init})["outputs"]
        return np.asarray(out["per_token"]), float(out["is_filter_ratio"])

    def is_correction_coef(self, old_logp: Any, rollout_logp: Any, mask: Any, *, level: str, mode: str,
                           threshold: tuple[float, float], fn: str = "rollout_is_weights") -> np.ndarray:
        """OpenRLHF's per-token correction coefficient for ``PolicyLoss(is_correction_level=level,
        is_correction_mode=mode, is_correction_threshold=threshold)`` (gating ``"ratio"``), 0 where masked,
        in ``old_logp``'s dtype."""
        old, roll, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        if not m.any():  # nothing to weigh (B = 0, or every row empty): the spec's all-0
            return np.zeros(old.shape, dtype=old.dtype)
        coef, _ = self._probe(old, roll, m, self.correction_init(level, mode, threshold))
        return io.masked_out(coef, m, old.dtype)

    def is_correction_keep(self, old_logp: Any, rollout_logp: Any, mask: Any, *, level: str,
                           threshold: tuple[float, float], fn: str = "rollout_rejection_mask") -> np.ndarray:
        """The keep decision of OpenRLHF's ``"mask"`` gate (ratio gating) at ``level`` ``"token"`` or ``"seq"``,
        ``[B, T]`` bool, False where masked. ``coef`` is ``rho`` where kept and 0 where rejected
        (``loss.py:238-239``); a kept unit whose ``rho`` underflowed to 0 is found through
        ``is_filter_ratio`` (the fraction of rejected tokens, or of rejected rows over all ``B``, :243-246)."""
        old, roll, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        if not m.any():
            return np.zeros(old.shape, dtype=bool)
        init = self.correction_init(level, "mask", threshold)
        coef, filtered = self._probe(old, roll, m, init)
        nonzero = (coef != 0) & m
        if level == "seq":
            units = nonzero.any(axis=1)  # a kept row keeps every token; empty rows are rejected (NaN mean)
            n_units = m.shape[0]
            ambiguous = [(b,) for b in range(m.shape[0]) if m[b].any() and not units[b]]
        else:
            units = nonzero
            n_units = int(m.sum())
            ambiguous = [tuple(int(i) for i in ix) for ix in np.argwhere(m & ~nonzero)]
        if ambiguous and round(filtered * n_units) != n_units - int(units.sum()):
            for ix in ambiguous:  # ask each zero unit alone: its is_filter_ratio is 0 (kept) or 1 (rejected)
                if level == "seq":
                    b = ix[0]
                    _, alone = self._probe(old[b:b + 1], roll[b:b + 1], m[b:b + 1], init)
                else:
                    one = np.zeros_like(m)
                    one[ix] = True
                    _, alone = self._probe(old, roll, one, init)
                units[ix] = alone == 0.0
        keep = np.broadcast_to(units[:, None], m.shape) if level == "seq" else units
        return keep & m

    @staticmethod
    def _bounds(fn: str, lo: Any, hi: Any) -> tuple[float, float]:
        """``is_correction_threshold`` for the spec's ratio bounds: ``None`` is ``0.0`` (below) or ``inf``."""
        low, high = io.bounds(fn, lo, hi, ratio=True)
        return (0.0 if low is None else low), (float("inf") if high is None else high)

    def rollout_is_weights(self, old_logp: Any, rollout_logp: Any, mask: Any, *, level: str = "token", seq_stat: str = "product",
                           mode: str = "truncate", lo: float | None = None, hi: float | None = 2.0,
                           batch_normalize: bool = False) -> np.ndarray:
        fn = "rollout_is_weights"
        io.is_keywords(fn, level, seq_stat, mode, batch_normalize)
        low, high = self._bounds(fn, lo, hi)
        if level == "sequence":
            raise NotImplementedError("OpenRLHF's is_correction_level='seq' gates each row on the geometric mean but keeps "
                                      "every surviving token's own rho, models/loss.py:223-239: never one weight per row")
        if batch_normalize:
            raise NotImplementedError("PolicyLoss never normalises the correction coefficient, models/loss.py:234-241")
        if mode == "none":
            gate, low, high = "mask", 0.0, float("inf")
        else:
            gate = "clip" if mode == "truncate" else "mask"
        return self.is_correction_coef(old_logp, rollout_logp, mask, level="token", mode=gate, threshold=(low, high), fn=fn)

    def rollout_rejection_mask(self, old_logp: Any, rollout_logp: Any, mask: Any, *, statistic: str = "ratio",
                               level: str = "token", lo: float | None = None, hi: float | None = None) -> np.ndarray:
        fn = "rollout_rejection_mask"
        io.rejection_keywords(fn, statistic, level)
        if statistic != "ratio":
            raise NotImplementedError(f"statistic={statistic!r}: PolicyLoss gates on the ratio or on the sampled token's "
                                      "binary_kl / tv, models/loss.py:222-232, not on k1/k2/k3")
        if level not in ("token", "seq_mean"):
            raise NotImplementedError(f"level={level!r}: is_correction_level='seq' gates on the per-row mean only, "
                                      "models/loss.py:223")
        low, high = self._bounds(fn, lo, hi)
        return self.is_correction_keep(old_logp, rollout_logp, mask, level="token" if level == "token" else "seq",
                                       threshold=(low, high), fn=fn)


__all__ = ["OpenRLHFAdapter"]
