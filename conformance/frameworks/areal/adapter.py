"""The AReaL adapter: AReaL's RL math, called through the installed AReaL, in spec conventions.

AReaL runs in its own environment (``rlspec frameworks install areal``: ``areal==1.0.4 --no-deps`` with
torch 2.13 CPU and the packages its import chain needs) and is driven through a worker process
(``conformance/frameworks/subprocess_worker.py``; the AReaL calls are in
``conformance/frameworks/areal/ops.py``). A NumPy adapter: values come from AReaL and each
``<function>_grad`` is AReaL's autograd gradient for the given upstream.

What is called (areal 1.0.4; paths relative to ``areal/``):

| spec function | AReaL |
|---|---|
| ``token_logprobs`` | ``utils/functional/vocab_parallel.py::gather_logprobs`` (:401; it divides by ``temperature`` itself) on the rows that predict a valid token |
| ``token_entropy`` | ``vocab_parallel.py::gather_logprobs_entropy`` (:434), its entropy output, same rows and temperature |
| ``kl_penalty`` | ``utils/data.py::KLEstimator`` (:1598-1656) as the actor builds it (``KLEstimator(config.kl_estimator)``, ``trainer/ppo/actor.py:53``: ``apply_clamp=True``, every estimate clamped to [-10, 10]) |
| ``rlhf_token_rewards`` | ``trainer/ppo/actor.py::PPOActor._compute_advantages`` (:145-249): ``tot_rewards``, i.e. ``-kl_ctl * KLEstimator(old, ref)`` plus the reward on the last token (:192-212), with ``reward_clip`` off (see below) |
| ``gae`` | the same method's GAE (:214-236): the token rewards enter through its KL channel (below) |
| ``whiten`` | ``utils/data.py::Normalization`` (:1378-1595) with ``NormConfig(mean_level="batch", std_level="batch")`` on the loss mask, as ``adv_norm`` whitens the advantages (actor.py:238-239) |
| ``grpo_advantages`` | ``Normalization`` with ``mean_level="group"``, ``std_level="group"`` (or None for ``scale="none"``), ``group_size``, no mask, as ``reward_norm`` normalises the rewards (actor.py:172-173) |
| ``rloo_advantages`` | ``Normalization`` with ``mean_level="group"``, ``mean_leave1out=True``, ``std_level=None`` |
| ``reinforce_advantages`` | ``Normalization`` with ``mean_level`` ``"batch"`` (``baseline="batch_mean"``) or None, ``std_level=None`` |
| ``opo_advantages`` | ``Normalization`` with ``mean_level="group"``, ``std_level=None`` on ``[B, T]`` advantages holding each row's reward, with the loss mask, as ``adv_norm`` normalises GRPO-style advantages (actor.py:238-239): the group mean over valid tokens is the length-weighted mean |
| ``ppo_token_loss`` | ``utils/functional/functional.py::ppo_actor_loss_fn`` (:429-559) with ``proximal_logprobs = old_logprobs`` (what the actor passes without the decoupled loss, actor.py:187-191): the per-token matrix it sums (``ops.py`` says how it is read) |
| ``ppo_clipped_mask`` | the same call's ``clip_mask | dual_clip_mask`` (:524, :529) |
| ``gspo_token_loss`` | ``ppo_actor_loss_fn(importance_sampling_level="sequence")`` (:501-506, the geometric-mean ratio with its gradient, ``_compute_sequence_level_ratio_and_advantages`` :56-149) |
| ``value_token_loss`` | ``functional.py::ppo_critic_loss_fn`` (:714-778, ``loss_fn_type="mse"``: its ``_mse_loss`` already has the ½) |
| ``rollout_is_weights`` | ``functional.py::apply_rejection_sampling`` (:185-426) with ``metric="ratio"``: its ``behave_imp_weight`` (old = proximal, rollout = behaviour) |
| ``rollout_rejection_mask`` | the same with ``action="mask"``: its updated ``loss_mask`` |
| ``decoupled_ppo_token_loss`` | ``ppo_actor_loss_fn`` with ``proximal_logprobs`` and a token-level ratio ``RejectionSamplingConfig`` (``behav_cap`` = ``upper``): the per-token matrix ``pg_loss * behave_imp_weight`` it sums (:535-542) |
| ``proximal_logp_interpolation`` | ``trainer/ppo/actor.py::compute_prox_logp_approximations`` (:604-684), method ``loglinear`` / ``linear`` |
| ``sapo_token_loss`` | ``functional.py::sapo_loss_fn`` (:562-638), token level |
| ``overlong_penalty`` | ``functional.py::reward_overlong_penalty`` (:782-804) on rewards of 0 (``L`` = the loss-mask row sum, :790) |
| ``shaped_rewards`` | ``PPOActor._compute_advantages``' reward clip (``reward_clip``, :168-171) and ``mask_no_eos_with_zero`` (:207-210), read back from ``tot_rewards`` |

Conventions this adapter converts (the checks never do):
- The loss functions are position-independent: the spec's ``[B, T]`` arrays are passed as they are with
  ``mask`` as ``loss_mask`` (bool). Masked inputs are sent as 0 and masked outputs returned as 0
  (``conformance/frameworks/spec_io.py``). ``[B]`` advantages are broadcast over the tokens.
- ``PPOActor._compute_advantages`` takes the rollout's token-aligned ``logprobs`` and ``loss_mask`` and
  rolls them one position to the left (actor.py:176, :188), so position ``t`` of everything it
  computes is about token ``t + 1``; the engine's ``ref_logp`` and the critic's ``values`` arrive in that
  frame already (the critic's value at position ``t`` is the state that predicts token ``t + 1``). The
  adapter sends ``ref_logp`` and ``values`` shifted left by one and shifts the outputs right by one.
  The batch is one column wider than the spec's and each row's ``attention_mask`` ends at its last valid
  token, so ``seqlens - 1`` (where AReaL puts the reward, :205-212) is the spec's last valid token and no
  row fills the padded width: AReaL's "no EOS" rule (``seqlens == width``, :201, :223) never fires here.
  That rule, and where the reward lands when the last tokens are not trained, are the framework rows of
  ``checks.py``.
- ``gae``: AReaL's only per-token reward is the KL reward ``-kl_ctl * KLEstimator(old, ref)``. With
  ``kl_estimator="k1"``, ``logprobs = 0`` and ``ref_logp = r / c`` the k1 estimate is ``-r / c`` and the
  reward is ``c * r / c = r`` (c a power of two with ``|r / c| <= 10``, so the estimator's clamp never binds
  and both divisions are exact), with a sequence reward of 0.
- ``rlhf_token_rewards`` and ``gae`` set ``reward_clip = inf`` (AReaL's default 20 clips the sequence reward:
  the ``areal`` preset of ``shaped_rewards``).
- Rollout correction: AReaL's log-ratio is ``proximal - behave`` (functional.py:231), the spec's
  ``old_logp - rollout_logp``: ``old_logp`` is sent as ``proximal_logprobs``, ``rollout_logp`` as
  ``old_logprobs``. Its KL metrics ``kl_k1..3`` are ``KLEstimator(proximal, behave)``: d = old - rollout,
  the spec's ``kl_of="old_rollout"``. Sequence level aggregates the ratio in log space (``agg`` sum /
  mean / max = the product, the geometric mean, the max ratio), the spec's ``seq_sum`` / ``seq_mean`` /
  ``seq_max``, and the sequence weight is always the geometric mean (:288-297, :352-355).
- A missing upper bound is ``upper = inf`` (``upper`` has no None; every finite metric passes it); a
  ratio lower bound of 0 is ``lower = None`` (a ratio is never below 0).

Not expressible (``NotImplementedError``, a "not implemented" case, with the reason):
- ``whiten(shift_mean=False)``: ``Normalization`` always centres; ``grpo_advantages(scale="batch")``:
  ``std_level="batch"`` is the std of ``r - group mean`` over the batch (:1455-1465), not of the rewards.
- ``gspo_token_loss`` with ``[B, T]`` advantages that vary within a row: AReaL's GSPO averages each row's
  token advantages (functional.py:140-147); the spec weights each token by its own ``A_t`` (the row mean
  is the framework row ``areal.ppo_actor_loss_fn[sequence,A=row mean]``).
- ``rollout_is_weights``: ``level="sequence"`` with ``seq_stat="product"`` (the weight is the geometric
  mean whatever ``agg``), ``batch_normalize=True``, ``log_ratio_clamp``; a ratio ``hi <= 1`` (refused by
  ``RejectionSamplingConfig``, cli_args.py:1415-1426).
- ``rollout_rejection_mask``: ``level="seq_all"``, ``kl_of="rollout_old"``, ratio ``hi <= 1``, k2/k3
  ``hi <= 0`` (cli_args.py:1415-1432).
- ``decoupled_ppo_token_loss(behav_cap=None)`` (``rejection_sampling=None`` multiplies no weight at all,
  functional.py:534-539) and ``behav_cap <= 1``.
- ``shaped_rewards``: ``truncated_scale``, ``truncated_shift`` and a replacement value other than 0 (the
  only rule is ``mask_no_eos_with_zero``), an asymmetric clip (``reward_clip`` is ``+-``).
- ``opo_advantages`` with a row without a valid token (AReaL has no advantage for it).
- ``sapo_token_loss(log_ratio_clamp=...)``: no clamp. ``corrected_policy_loss``, ``aggregate``,
  ``micro_batched_loss``, ``kl_controller_update``: no such function (the loss functions reduce inline
  to a token mean over the micro-batch: the framework rows).

Float32 only: the log-prob kernels, ``KLEstimator`` and ``apply_rejection_sampling`` cast to float32
(``.float()``), ``ppo_critic_loss_fn`` asserts float32 inputs (:740-742) and ``_compute_advantages``
accumulates GAE in float32 (:219-221).

Importing this module never starts AReaL; constructing the adapter does, and a missing environment
raises ``AdapterLoadError("... cannot import ...")`` so ``rlspec check`` shows a "not installed" row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from conformance.frameworks import spec_io as io
from conformance.frameworks.subprocess_adapter import SubprocessAdapter

KL_CLAMP = 10.0  # utils/data.py:1655-1656: KLEstimator(apply_clamp=True) clamps every estimate to [-10, 10]


class ArealAdapter(SubprocessAdapter):
    """Spec adapter for AReaL (see the module docstring for what each function calls)."""

    name = "areal"
    dtypes = ("float32",)
    checks_module = "conformance.frameworks.areal.checks"

    # keyword values AReaL has no setting for (module docstring); value-dependent ones raise in the methods
    unsupported_kwargs = {
        "whiten": {"shift_mean": (False,)},
        "grpo_advantages": {"scale": ("batch",)},
        "rollout_is_weights": {"batch_normalize": (True,)},
        "rollout_rejection_mask": {"level": ("seq_all",), "kl_of": ("rollout_old",)},
    }
    precision_notes = {
        "whiten": "Normalization divides by std + eps (eps 1e-5, utils/data.py:1496), the spec by sqrt(var + eps)",
        "grpo_advantages": "Normalization divides by std + eps with eps = 1e-5 (NormConfig, api/cli_args.py:70-75)",
    }

    LOGPROBS_OP = "gather_logprobs"
    ENTROPY_OP = "gather_logprobs_entropy"
    POLICY_ARRAYS = ("logprobs", "old_logprobs", "loss_mask")
    VALUE_ARRAYS = ("value", "old_value", "target_value", "loss_mask")

    # functions AReaL does not have (the base class would otherwise offer them)
    kl_controller_update = None
    micro_batched_loss = None
    micro_batched_loss_grad = None

    def __init__(self) -> None:
        super().__init__()
        info = self._worker.hello.get("info", {})
        self.stubs = tuple(info.get("stubs", ()))
        self.dynamo = str(info.get("dynamo", ""))

    # ------------------------------------------------------------------------------------------
    # logprob.token / logprob.entropy
    # ------------------------------------------------------------------------------------------

    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, dict[str, Any], float]:
        # gather_logprobs divides by the temperature itself (its gradient carries the 1/temperature)
        return rows, {"temperature": float(temperature)}, 1.0

    def _entropy_request(self, rows: np.ndarray, temperature: float) -> tuple[dict[str, np.ndarray], dict[str, Any], float]:
        """``gather_logprobs_entropy``'s entropy of ``softmax(logits / temperature)`` (it divides itself)."""
        return {"logits": rows, "labels": np.zeros(rows.shape[0], dtype=np.int64)}, {"temperature": float(temperature)}, 1.0

    # ------------------------------------------------------------------------------------------
    # kl.estimator
    # ------------------------------------------------------------------------------------------

    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None) -> np.ndarray:
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator)
        arrays = {"log_probs": io.clean(lp, m), "log_probs_base": io.clean(ref, m)}
        return self._token_op("kl_estimator", arrays, {"kl_estimator": estimator, "apply_clamp": True}, "kl",
                              "log_probs", m, lp.dtype, upstream)

    # ------------------------------------------------------------------------------------------
    # PPOActor._compute_advantages: reward.rlhf, adv.gae, reward.shaping
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _to_areal_frame(x: np.ndarray) -> np.ndarray:
        """A token-aligned ``[B, T]`` array as the engine's outputs hold it, one column wider: position ``t``
        about token ``t + 1`` (``out[:, t] = x[:, t + 1]``), zeros after."""
        B, T = x.shape
        out = np.zeros((B, T + 1), dtype=x.dtype)
        out[:, : T - 1] = x[:, 1:]
        return out

    @staticmethod
    def _from_areal_frame(y: Any, T: int) -> np.ndarray:
        """AReaL's shifted ``[B, T + 1]`` output back to token-aligned ``[B, T]`` (``out[:, t] = y[:, t - 1]``)."""
        y = np.asarray(y, dtype=np.float64)
        out = np.zeros((y.shape[0], T), dtype=np.float64)
        out[:, 1:] = y[:, : T - 1]
        return out

    @staticmethod
    def padded_batch(m: np.ndarray) -> dict[str, np.ndarray]:
        """``input_ids`` / ``attention_mask`` / ``loss_mask`` of width ``T + 1`` for the spec mask ``m``: each
        row's attention ends at its last valid token (token 0 for a row without one)."""
        B, T = m.shape
        attn = np.zeros((B, T + 1), dtype=np.int64)
        for b in range(B):
            valid = np.flatnonzero(m[b])
            attn[b, : (int(valid[-1]) if valid.size else 0) + 1] = 1
        loss_mask = np.zeros((B, T + 1), dtype=np.int64)
        loss_mask[:, :T] = m
        return {"input_ids": np.zeros((B, T + 1), dtype=np.int64), "attention_mask": attn, "loss_mask": loss_mask}

    def compute_advantages(self, arrays: dict[str, np.ndarray], config: dict[str, Any]) -> dict[str, np.ndarray]:
        """``PPOActor(PPOActorConfig(**config))._compute_advantages`` on a padded batch (AReaL's frame)."""
        return self._worker.call("compute_advantages", arrays, {"config": config})["outputs"]

    def rlhf_token_rewards(self, scores: Any, logp: Any, ref_logp: Any, mask: Any, *, kl_coef: float,
                           estimator: str = "k1") -> np.ndarray:
        fn = "rlhf_token_rewards"
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator)
        s = io.row_scores(fn, scores, m.shape[0])
        io.check_finite(fn, "logp", lp, m)
        io.check_finite(fn, "ref_logp", ref, m)
        kl_coef = io.number(fn, "kl_coef", kl_coef, low=None)
        arrays = self.padded_batch(m)
        arrays.update(rewards=s.astype(np.float32), logprobs=np.pad(io.clean(lp, m), ((0, 0), (0, 1))).astype(np.float32),
                      ref_logp=self._to_areal_frame(io.clean(ref, m)).astype(np.float32))
        out = self.compute_advantages(arrays, {"kl_ctl": kl_coef, "kl_estimator": estimator, "reward_clip": math.inf})
        return io.masked_out(self._from_areal_frame(out["tot_rewards"], m.shape[1]), m, lp.dtype)

    def gae(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        fn = "gae"
        r, v, m = io.token_arrays(fn, mask, finite=True, token_rewards=token_rewards, values=values)
        gamma, lam = io.number(fn, "gamma", gamma, low=None), io.number(fn, "lam", lam, low=None)
        r32 = io.clean(r, m).astype(np.float32)
        big = float(np.abs(r32).max(initial=0.0))
        c = 1.0 if big <= KL_CLAMP else float(2.0 ** math.ceil(math.log2(big / KL_CLAMP)))  # |r / c| <= 10, exact
        arrays = self.padded_batch(m)
        arrays.update(rewards=np.zeros(m.shape[0], dtype=np.float32), logprobs=np.zeros(arrays["loss_mask"].shape, dtype=np.float32),
                      ref_logp=self._to_areal_frame(r32 / np.float32(c)), values=self._to_areal_frame(io.clean(v, m).astype(np.float32)))
        config = {"kl_ctl": c, "kl_estimator": "k1", "discount": gamma, "gae_lambda": lam, "reward_clip": math.inf}
        out = self.compute_advantages(arrays, config)
        T = m.shape[1]
        return (io.masked_out(self._from_areal_frame(out["advantages"], T), m, r.dtype),
                io.masked_out(self._from_areal_frame(out["returns"], T), m, r.dtype))

    def shaped_rewards(self, rewards: Any, truncated: Any, *, truncated_scale: float = 1.0, truncated_value: float | None = None,
                       truncated_shift: float = 0.0, clip_low: float | None = None, clip_high: float | None = None) -> np.ndarray:
        """``reward_clip`` (``clip(r, -reward_clip, reward_clip)``, actor.py:168-171) and ``mask_no_eos_with_zero``
        (the reward of a row without EOS replaced by 0, :207-210), as ``_compute_advantages`` applies them:
        each row is a one-token completion of width 3, a truncated one filling the width (AReaL's no-EOS rule,
        :201), and the shaped reward is its row of ``tot_rewards`` (``kl_ctl = 0``)."""
        r, t = io.shaping_inputs("shaped_rewards", rewards, truncated, truncated_scale, truncated_value, clip_low, clip_high)
        if truncated_scale != 1.0 or truncated_shift != 0.0:
            raise NotImplementedError("AReaL's only truncation rule is mask_no_eos_with_zero (trainer/ppo/actor.py:207-210): "
                                      "no scale, no shift")
        if truncated_value not in (None, 0.0):
            raise NotImplementedError("mask_no_eos_with_zero replaces a truncated reward by 0 only (actor.py:207-210)")
        if (clip_low is None) != (clip_high is None) or (clip_low is not None and clip_low != -clip_high):
            raise NotImplementedError("reward_clip clips to [-reward_clip, reward_clip] (actor.py:169-171): no asymmetric "
                                      "or one-sided clip")
        B = r.shape[0]
        trunc = t != 0
        attn = np.array([[1, 1, 1] if x else [1, 1, 0] for x in trunc], dtype=np.int64).reshape(B, 3)
        loss_mask = np.array([[0, 1, 1] if x else [0, 1, 0] for x in trunc], dtype=np.int64).reshape(B, 3)
        arrays = {"input_ids": np.zeros((B, 3), dtype=np.int64), "attention_mask": attn, "loss_mask": loss_mask,
                  "rewards": r.astype(np.float32), "logprobs": np.zeros((B, 3), dtype=np.float32)}
        config = {"kl_ctl": 0.0, "reward_clip": math.inf if clip_high is None else float(clip_high),
                  "mask_no_eos_with_zero": truncated_value is not None}
        out = self.compute_advantages(arrays, config)
        return np.asarray(out["tot_rewards"], dtype=np.float64).sum(axis=1).astype(r.dtype)

    # ------------------------------------------------------------------------------------------
    # adv.whiten, adv.grpo, adv.rloo, adv.reinforce: Normalization
    # ------------------------------------------------------------------------------------------

    def normalization(self, x: np.ndarray, config: dict[str, Any], loss_mask: np.ndarray | None = None) -> np.ndarray:
        """``Normalization(NormConfig(**config))(x, loss_mask)`` (float32 in, AReaL's float32 out)."""
        arrays = {"x": x.astype(np.float32)}
        if loss_mask is not None:
            arrays["loss_mask"] = loss_mask.astype(np.float32)
        out = self._worker.call("normalization", arrays, {"config": config, "masked": loss_mask is not None})
        return np.asarray(out["outputs"]["out"])

    def whiten(self, x: Any, mask: Any, *, shift_mean: bool = True) -> np.ndarray:
        fn = "whiten"
        a, m = io.token_arrays(fn, mask, finite=True, x=x)
        if not io.boolean(fn, "shift_mean", shift_mean):
            raise NotImplementedError("Normalization always centres (utils/data.py:1448-1452): no reward whitening "
                                      "that adds the mean back")
        out = self.normalization(io.clean(a, m), {"mean_level": "batch", "std_level": "batch"}, m)
        return io.masked_out(out, m, a.dtype)

    def grpo_advantages(self, rewards: Any, group_size: int, *, scale: str = "group") -> np.ndarray:
        fn = "grpo_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        io.choice(fn, "scale", scale)
        if scale == "batch":
            raise NotImplementedError("std_level='batch' with mean_level='group' divides by the std of r - group mean "
                                      "over the batch (utils/data.py:1455-1465, :1537-1549), not by the std of the rewards")
        config = {"mean_level": "group", "std_level": "group" if scale == "group" else None, "group_size": G}
        return self.normalization(r, config).astype(r.dtype)

    def rloo_advantages(self, rewards: Any, group_size: int) -> np.ndarray:
        fn = "rloo_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        config = {"mean_level": "group", "mean_leave1out": True, "std_level": None, "group_size": G}
        return self.normalization(r, config).astype(r.dtype)

    def reinforce_advantages(self, rewards: Any, *, baseline: str = "none") -> np.ndarray:
        fn = "reinforce_advantages"
        r = io.float_array(fn, "rewards", rewards, 1)
        io.check_finite(fn, "rewards", r)
        io.choice(fn, "baseline", baseline)
        if r.shape[0] == 0:
            return np.zeros(0, dtype=r.dtype)
        config = {"mean_level": "batch" if baseline == "batch_mean" else None, "std_level": None}
        return self.normalization(r, config).astype(r.dtype)

    def opo_advantages(self, rewards: Any, group_size: int, mask: Any) -> np.ndarray:
        """``adv_norm`` with ``mean_level="group"``, ``std_level=None`` (actor.py:238-239) on the advantages of a
        critic-free, KL-free batch (every valid token of row i holds r_i): the group mean over the group's
        valid tokens is the length-weighted mean of its rewards, OPO's baseline. Read at each row's valid
        tokens; a row without one has no advantage in AReaL (not implemented)."""
        fn = "opo_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        mm = np.asarray(mask)
        m = io.check_mask(fn, mm, (r.shape[0], mm.shape[1] if mm.ndim == 2 else 0))
        if not m.any(axis=1).all():
            raise NotImplementedError("a row without a valid token carries no advantage in AReaL (the normalised "
                                      "advantages are multiplied by the loss mask, utils/data.py:1451-1452)")
        x = np.where(m, r[:, None], 0.0)
        out = self.normalization(x, {"mean_level": "group", "std_level": None, "group_size": G}, m)
        first = m.argmax(axis=1)
        return np.asarray(out, dtype=np.float64)[np.arange(r.shape[0]), first].astype(r.dtype)

    # ------------------------------------------------------------------------------------------
    # policy and value losses: the per-token matrix ppo_actor_loss_fn / sapo_loss_fn / ppo_critic_loss_fn sum
    # ------------------------------------------------------------------------------------------

    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        return {"eps_clip": float(eps_low), "eps_clip_higher": float(eps_high),
                "c_clip": None if dual_clip is None else float(dual_clip)}

    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        return {**self._ppo_params(eps_low, eps_high, None), "importance_sampling_level": "sequence"}

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        return {"value_eps_clip": math.inf if clip is None else float(clip)}

    @staticmethod
    def _row_constant(fn: str, advantages: Any, mask: Any) -> None:
        """AReaL's GSPO averages each row's token advantages (functional.py:140-147)."""
        a = np.asarray(advantages)
        m = np.asarray(mask).astype(bool)
        if a.ndim == 2 and a.shape == m.shape:
            for b in range(a.shape[0]):
                row = a[b][m[b]]
                if row.size and not (row == row[0]).all():
                    raise NotImplementedError("AReaL's GSPO takes each row's mean token advantage (functional.py:140-147); "
                                              "the spec weights each token by its own A_t (equal for [B] advantages)")

    def gspo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 3e-4,
                        eps_high: float = 4e-4) -> np.ndarray:
        self._row_constant("gspo_token_loss", advantages, mask)
        return super().gspo_token_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high)

    def gspo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                             eps_low: float = 3e-4, eps_high: float = 4e-4) -> np.ndarray:
        self._row_constant("gspo_token_loss", advantages, mask)
        return super().gspo_token_loss_grad(logp, old_logp, advantages, mask, upstream, eps_low=eps_low, eps_high=eps_high)

    def ppo_clipped_mask(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.2,
                         eps_high: float = 0.2, dual_clip: float | None = None) -> np.ndarray:
        """``clip_mask | dual_clip_mask`` of ``ppo_actor_loss_fn`` (functional.py:524, :529, :543-544)."""
        fn = "ppo_clipped_mask"
        lp, old, m = io.token_arrays(fn, mask, logp=logp, old_logp=old_logp)
        arrays = {"logprobs": io.clean(lp, m), "old_logprobs": io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "loss_mask": m}
        out = self._worker.call("policy_loss", arrays, self._ppo_params(eps_low, eps_high, dual_clip))["outputs"]
        return (np.asarray(out["clip_mask"], dtype=bool) | np.asarray(out["dual_clip_mask"], dtype=bool)) & m

    def _value(self, values: Any, old_values: Any, returns: Any, mask: Any, clip: float | None, upstream: Any = None) -> np.ndarray:
        """``ppo_critic_loss_fn``'s matrix (its ``_mse_loss`` is ``0.5 * (x - y)**2``, functional.py:710-711)."""
        v, old, ret, m = self._value_inputs(values, old_values, returns, mask)
        arrays = {"value": io.clean(v, m).astype(np.float32), "old_value": io.clean(old, m).astype(np.float32),
                  "target_value": io.clean(ret, m).astype(np.float32), "loss_mask": m}
        return self._token_op("value_loss", arrays, self._value_params(clip), "loss_mat", "value", m, v.dtype, upstream)

    def _sapo(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, tau_pos: float, tau_neg: float,
              upstream: Any = None) -> np.ndarray:
        fn = "sapo_token_loss"
        lp, old, m = io.token_arrays(fn, mask, logp=logp, old_logp=old_logp)
        arrays = {"logprobs": io.clean(lp, m), "old_logprobs": io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "loss_mask": m}
        params = {"tau_pos": io.number(fn, "tau_pos", tau_pos, low=None), "tau_neg": io.number(fn, "tau_neg", tau_neg, low=None)}
        return self._token_op("sapo_loss", arrays, params, "per_token", "logprobs", m, lp.dtype, upstream)

    def sapo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, tau_pos: float = 1.0,
                        tau_neg: float = 1.05) -> np.ndarray:
        return self._sapo(logp, old_logp, advantages, mask, tau_pos, tau_neg)

    def sapo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                             tau_pos: float = 1.0, tau_neg: float = 1.05) -> np.ndarray:
        return self._sapo(logp, old_logp, advantages, mask, tau_pos, tau_neg, upstream)

    # ------------------------------------------------------------------------------------------
    # spec v1.1 off-policy: apply_rejection_sampling, the decoupled loss, the proximal approximation
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _ratio_config(fn: str, lo: Any, hi: Any) -> tuple[float | None, float]:
        """(``lower``, ``upper``) of a ratio ``RejectionSamplingConfig`` for the spec's ratio bounds."""
        lo, hi = io.bounds(fn, lo, hi, ratio=True)
        if hi is not None and hi <= 1.0:
            raise NotImplementedError(f"RejectionSamplingConfig refuses a ratio upper bound <= 1.0 (api/cli_args.py:1415-1426), "
                                      f"got {hi!r}")
        return lo, (math.inf if hi is None else hi)

    def rejection_sampling(self, old: np.ndarray, rollout: np.ndarray, m: np.ndarray, config: dict[str, Any]) -> dict[str, np.ndarray]:
        """``apply_rejection_sampling(proximal = old, old = rollout, loss_mask = m, config)`` (float32)."""
        arrays = {"proximal_logprobs": io.clean(old, m).astype(np.float32), "old_logprobs": io.clean(rollout, m).astype(np.float32),
                  "loss_mask": m.astype(np.float32)}
        return self._worker.call("rejection_sampling", arrays, {"config": config})["outputs"]

    def rollout_is_weights(self, old_logp: Any, rollout_logp: Any, mask: Any, *, level: str = "token", seq_stat: str = "product",
                           mode: str = "truncate", lo: float | None = None, hi: float | None = 2.0,
                           log_ratio_clamp: float | None = None, batch_normalize: bool = False) -> np.ndarray:
        fn = "rollout_is_weights"
        old, rollout, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        io.is_keywords(fn, level, seq_stat, mode, batch_normalize)
        lower, upper = self._ratio_config(fn, lo, hi)
        if batch_normalize:
            raise NotImplementedError("apply_rejection_sampling never normalises the weight (functional.py:185-426)")
        if log_ratio_clamp is not None:
            raise NotImplementedError("apply_rejection_sampling does not clamp the log-ratio (functional.py:231-233)")
        if level == "sequence" and seq_stat == "product":
            raise NotImplementedError("the sequence-level weight is the geometric mean of the ratios whatever agg "
                                      "(functional.py:288-297, :352-355): no product weight")
        if mode == "none":
            lower, upper = None, math.inf
        config: dict[str, Any] = {"level": level, "metric": "ratio", "action": "clamp" if mode == "truncate" else "mask",
                                  "agg": "mean", "upper": upper, "lower": lower}
        out = self.rejection_sampling(old, rollout, m, config)
        return io.masked_out(out["behave_imp_weight"], m, old.dtype)

    AGG = {"seq_sum": "sum", "seq_mean": "mean", "seq_max": "max"}

    def rollout_rejection_mask(self, old_logp: Any, rollout_logp: Any, mask: Any, *, statistic: str = "ratio",
                               level: str = "token", lo: float | None = None, hi: float | None = None,
                               kl_of: str = "rollout_old") -> np.ndarray:
        fn = "rollout_rejection_mask"
        old, rollout, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        io.rejection_keywords(fn, statistic, level)
        io.choice(fn, "kl_of", kl_of)
        if statistic == "ratio":
            lower, upper = self._ratio_config(fn, lo, hi)
        else:
            lower, hi_ = io.bounds(fn, lo, hi, ratio=False)
            if kl_of != "old_rollout":
                raise NotImplementedError("kl_k1..3 are KLEstimator(proximal, behave), d = proximal - behave "
                                          "(functional.py:239-247): kl_of='old_rollout' only")
            if statistic in ("k2", "k3") and hi_ is not None and hi_ <= 0:
                raise NotImplementedError(f"RejectionSamplingConfig refuses a {statistic} upper bound <= 0 "
                                          f"(api/cli_args.py:1428-1432), got {hi_!r}")
            upper = math.inf if hi_ is None else hi_
        if level == "seq_all":
            raise NotImplementedError("apply_rejection_sampling aggregates a row by sum, mean or max "
                                      "(functional.py:299-325, :358-370): no every-token rule")
        config = {"level": "token" if level == "token" else "sequence", "metric": "ratio" if statistic == "ratio" else f"kl_{statistic}",
                  "action": "mask", "agg": self.AGG.get(level, "mean"), "upper": upper, "lower": lower}
        out = self.rejection_sampling(old, rollout, m, config)
        return (np.asarray(out["loss_mask"]) > 0.5) & m

    def _decoupled(self, logp: Any, prox_logp: Any, behav_logp: Any, advantages: Any, mask: Any, eps_low: float,
                   eps_high: float, dual_clip: float | None, behav_cap: float | None, behav_mode: str,
                   upstream: Any = None) -> np.ndarray:
        fn = "decoupled_ppo_token_loss"
        io.choice(fn, "behav_mode", behav_mode)
        lp, prox, behav, m = io.token_arrays(fn, mask, logp=logp, prox_logp=prox_logp, behav_logp=behav_logp)
        cap = None if behav_cap is None else io.number(fn, "behav_cap", behav_cap, low=None)
        if cap is None:
            raise NotImplementedError("with rejection_sampling=None ppo_actor_loss_fn multiplies no behaviour weight "
                                      "(functional.py:534-539): AReaL's weight always has a cap")
        if cap <= 1.0:
            raise NotImplementedError(f"RejectionSamplingConfig refuses a ratio upper bound <= 1.0 (api/cli_args.py:1415-1426), "
                                      f"got {cap!r}")
        arrays = {"logprobs": io.clean(lp, m), "proximal_logprobs": io.clean(prox, m), "old_logprobs": io.clean(behav, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "loss_mask": m}
        rs = {"level": "token", "metric": "ratio", "action": "mask" if behav_mode == "mask" else "clamp", "upper": cap}
        params = {**self._ppo_params(eps_low, eps_high, dual_clip), "rejection_sampling": rs}
        return self._token_op("policy_loss", arrays, params, "per_token", "logprobs", m, lp.dtype, upstream)

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

    def proximal_logp_interpolation(self, logp: Any, behav_logp: Any, behav_version: Any, mask: Any, *, version: int,
                                    method: str = "loglinear") -> np.ndarray:
        """``compute_prox_logp_approximations(old_logp = behav_logp, logprobs = logp, versions, current_version =
        version, method)``; masked positions carry version -1 (AReaL's prompt tokens, actor.py:639-652)."""
        fn = "proximal_logp_interpolation"
        lp, behav, m = io.token_arrays(fn, mask, finite=True, logp=logp, behav_logp=behav_logp)
        io.choice(fn, "method", method)
        if isinstance(version, (bool, np.bool_)) or not isinstance(version, (int, np.integer)) or version < 0:
            raise io.fail(fn, "version", f"expected an integer >= 0, got {version!r}", TypeError if not isinstance(version, (int, np.integer)) else ValueError)
        v = np.asarray(behav_version)
        if v.dtype.kind not in "iu":
            raise io.fail(fn, "behav_version", f"expected an integer array [B] or [B, T], got dtype {v.dtype}", TypeError)
        if v.ndim == 1 and v.shape == (m.shape[0],):
            v = np.repeat(v[:, None], m.shape[1], axis=1)
        elif v.shape != m.shape:
            raise io.fail(fn, "behav_version", f"expected [B] = [{m.shape[0]}] or [B, T] = {list(m.shape)}, got shape {v.shape}")
        if (m & ((v < 0) | (v > version))).any():
            raise io.fail(fn, "behav_version", f"expected 0 <= behav_version <= version = {version} at valid tokens")
        arrays = {"old_logp": io.clean(behav, m), "logprobs": io.clean(lp, m), "versions": np.where(m, v, -1).astype(np.int64)}
        out = self._worker.call("prox_approx", arrays, {"current_version": int(version), "method": method})["outputs"]["prox"]
        return io.masked_out(out, m, lp.dtype)

    # ------------------------------------------------------------------------------------------
    # spec v1.1 reward.overlong: reward_overlong_penalty
    # ------------------------------------------------------------------------------------------

    def overlong_penalty(self, lengths: Any, *, max_length: int, buffer: int, factor: float = 1.0) -> np.ndarray:
        """``reward_overlong_penalty`` (functional.py:782-804) on rewards of 0: ``overlong_tokens = buffer``,
        ``overlong_penalty_factor = factor``, ``max_response_length = max_length``; each row's length is the
        sum of its loss mask (:790), so row b's loss mask holds ``lengths[b]`` ones. ``buffer = 0`` is passed
        on: AReaL divides by it (:797-799)."""
        fn = "overlong_penalty"
        L = io.lengths_array(fn, lengths)
        io.overlong_limits(fn, max_length, buffer)
        factor = io.number(fn, "factor", factor)
        B, width = L.shape[0], max(int(L.max(initial=0)), 1)
        loss_mask = (np.arange(width)[None, :] < L[:, None]).astype(np.int64)
        arrays = {"rewards": np.zeros(B, dtype=np.float32), "input_ids": np.zeros((B, 1), dtype=np.int64), "loss_mask": loss_mask}
        out = self._worker.call("overlong", arrays, {"overlong_tokens": int(buffer), "overlong_penalty_factor": factor,
                                                     "max_response_length": int(max_length)})
        return np.asarray(out["outputs"]["rewards"], dtype=np.float64)

    # ------------------------------------------------------------------------------------------
    # what AReaL has no function for
    # ------------------------------------------------------------------------------------------

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        raise NotImplementedError("AReaL's engines weight each micro-batch's token-mean loss by its loss_mask count "
                                  "(trainer/ppo/actor.py:363) inside train_batch, which needs a TrainEngine")


__all__ = ["KL_CLAMP", "ArealAdapter"]
