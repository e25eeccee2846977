"""The verl adapter: verl's RL math, called through the installed verl, in spec v1 conventions.

verl runs in its own environment (``rlspec frameworks install verl``; verl 0.9.1 requires
``transformers<5.11``, rlspec's TRL needs 5.24) and is driven through a worker process
(``conformance/frameworks/subprocess_worker.py``; the verl calls are in ``conformance/frameworks/verl/ops.py``;
what the verl and OpenRLHF adapters share is ``conformance/frameworks/subprocess_adapter.py``).
This adapter is therefore a NumPy adapter (``array_api = "numpy"``): values come from verl and each
``<function>_grad`` is verl's autograd gradient for the given upstream.

What is called (verl 0.9.1; paths relative to ``verl/``):

| spec function | verl |
|---|---|
| ``token_logprobs`` | ``utils/torch_functional.py::logprobs_from_logits`` (:73) on ``logits / temperature`` (the actor divides first) |
| ``token_entropy`` | ``utils/torch_functional.py::entropy_from_logits`` (:231) on ``logits / temperature`` |
| ``rloo_advantages`` | ``trainer/ppo/core_algos.py::compute_rloo_outcome_advantage`` (:588, the ``"rloo"`` estimator) |
| ``reinforce_pp_advantages`` | ``core_algos.py::compute_reinforce_plus_plus_outcome_advantage`` (:694, ``"reinforce_plus_plus"``) with ``AlgoConfig(gamma)``: (advantages, returns); a batch with at most one valid token is "not implemented" (``masked_whiten`` raises) |
| ``reinforce_pp_baseline_advantages`` | ``core_algos.py::compute_reinforce_plus_plus_baseline_outcome_advantage`` (:536): the score on each row's last valid token (verl sums the row), ``index`` from the groups; the same ``masked_whiten`` limit |
| ``remax_advantages`` | ``core_algos.py::compute_remax_outcome_advantage`` (:735) with ``reward_baselines`` = the greedy rewards repeated over each prompt's samples (``repeat(n, interleave=True)``, ``trainer/ppo/ray_trainer.py:1534-1538``) |
| ``opo_advantages`` | ``core_algos.py::compute_opo_outcome_advantage`` (:640) on the token layout, read at each row's first valid token; a row without valid tokens is "not implemented" (verl shows no advantage for it) |
| ``grpo_passk_advantages`` | ``core_algos.py::compute_grpo_passk_outcome_advantage`` (:472) with ``AlgoConfig(norm_adv_by_std_in_grpo = scale == "group")`` |
| ``gpg_advantages`` | ``core_algos.py::compute_gpg_outcome_advantage`` (:771) |
| ``optimal_token_baseline_advantages`` | ``core_algos.py::compute_optimal_token_baseline_advantage`` (:872, ``"optimal_token_baseline"``) for ``align="position"``, ``compute_multi_turn_optimal_token_baseline_advantage`` (:991, ``"tir_optimal_token_baseline"``) for ``"valid_token"``, with ``old_log_probs``, ``sum_pi_squared`` and ``rollout_is_weights`` as the trainer passes them (``ray_trainer.py:264-276``) and ``handle_zero_tail`` = ``zero_tail``; each group laid out from its first valid column (see below) |
| ``gae`` | ``core_algos.py::compute_gae_advantage_return`` (:216): ``returns``; advantages = ``returns - values`` (see below); a batch with at most one valid token is "not implemented" (``masked_whiten`` raises) |
| ``whiten`` | ``utils/torch_functional.py::masked_whiten`` (:329); the same limit |
| ``kl_penalty`` | ``core_algos.py::kl_penalty`` (:2188) with ``"k1"``, ``"k2"``, ``"k3"`` (= ``"kl"``, ``"mse"``, ``"low_var_kl"``) |
| ``kl_loss_term`` | ``core_algos.py::kl_penalty`` (:2188) with ``"k1"``, ``"k2"``, ``"k3"``, ``"abs"`` (``gradient="estimator"``) or the same name with verl's ``"+"`` suffix (``gradient="straight_through"``, :2200-2213); verl has no ``"unbiased"`` or ``"bias_corrected"`` form (``NotImplementedError``) |
| ``ppo_token_loss`` | ``core_algos.py::compute_policy_loss_vanilla`` (:1286): the per-token matrix it aggregates |
| ``gspo_token_loss`` | ``core_algos.py::compute_policy_loss_gspo`` (:1546): idem |
| ``cispo_token_loss`` | ``core_algos.py::compute_policy_loss_cispo`` (:2048): idem |
| ``value_token_loss`` | ``core_algos.py::compute_value_loss`` (:2125): ½ × the matrix it aggregates (verl applies the ½ after ``agg_loss``, :2171) |
| ``aggregate`` | ``core_algos.py::agg_loss`` (:1140) with the global batch info the engine passes (``workers/utils/losses.py:57-69``) |
| ``rollout_is_weights`` | ``trainer/ppo/rollout_corr_helper.py::compute_rollout_correction_and_rejection_mask`` (:786) with ``rollout_is`` set: ``compute_rollout_correction_weights`` (:522) on ``log_ratio = old - rollout`` (:849) |
| ``rollout_rejection_mask`` | idem with ``rollout_rs`` set: ``compute_rollout_rejection_mask`` (:197); the modified ``response_mask`` is the keep mask |
| ``mismatch_metric``, ``sequence_mismatch_metric`` | ``trainer/ppo/rollout_corr_helper.py::compute_offpolicy_metrics`` (:904-1010), the metric of that name (``rollout_corr/<metric>``); its χ² exponents are clamped at ±20 always (``log_ratio_clamp`` None or 20 run, the ``verl`` preset names the clamp); ``token_mult_prob_error``, ``logprob_abs_diff`` and ``agg="seq_mean_token_mean"`` are no verl metric, a batch without a valid token an AssertionError (:940) and a sequence metric on a batch with an empty row is not offered (verl's ``.mean()`` counts the row; its responses always hold a token): not implemented |
| ``sapo_token_loss`` | ``core_algos.py::compute_policy_loss_sapo`` (:1622, ``loss_mode="sapo"``): the per-token matrix it aggregates (its reduction is hard-coded, :1688-1690; the matrix is read before it) |
| ``gmpo_token_loss`` | ``core_algos.py::compute_policy_loss_geo_mean`` (:1928, ``"geo_mean"``) on each row alone: the row's loss ``L_b`` (its scalar is ``torch.mean`` over the rows, :2000), carried by every valid token of the row |
| ``dppo_token_loss`` | ``core_algos.py::compute_policy_loss_dppo_tv`` (:1379, ``divergence="tv"``) / ``_dppo_kl`` (:1460, ``"kl"``): the per-token matrix they aggregate |
| ``dro_token_loss`` | ``core_algos.py::compute_policy_loss_dro`` (:2014): the per-token matrix it aggregates |
| ``clip_cov_mask`` | ``core_algos.py::compute_policy_loss_clip_cov`` (:1743, ``"clip_cov"``) with its random cut decided by ``draws``: verl's ``corr`` after the call (see below) |
| ``kl_cov_token_loss`` | ``core_algos.py::compute_policy_loss_kl_cov`` (:1848, ``"kl_cov"``): the per-token matrix it aggregates |
| ``decoupled_ppo_token_loss`` | decoupled mode: ``compute_rollout_correction_and_add_to_batch`` (:1013) with ``rollout_is="token"`` on (old = prox, rollout = behav), then ``compute_policy_loss_vanilla`` (:1286) against ``old_log_prob`` = prox with those ``rollout_is_weights`` (``pg_losses * rollout_is_weights``, :1365): the matrix it aggregates |
| ``kl_controller_update`` | ``core_algos.py::AdaptiveKLController`` (:153-174): a fresh controller ``(init_kl_coef, target_kl, horizon)``, one ``update(current_kl, n_steps)``, its ``value`` (``SubprocessAdapter.kl_controller_update``) |
| ``overlong_penalty`` | ``workers/reward_manager/dapo.py::DAPORewardManager`` (:121-127) on responses of the given lengths with a score of 0: the reward is the penalty (no floor beyond ``max_resp_len``: preset verl; float32, an int64 length tensor divided by an int); ``buffer = 0`` is refused by verl (:52-56): not implemented |

Everything else verl computes as a scalar or with a setting the core API cannot ask for is checked by
``conformance/frameworks/verl/checks.py`` (``extra_rows``): GRPO with and without std scaling, the
vectorised estimators, every ``agg_loss`` mode with and without global batch info and split over two
data-parallel ranks, the aggregated policy and value losses (value and gradient), ``kl_penalty``'s
``"abs"`` and straight-through ``"+"`` names as ``kl_loss_term`` (spec v1.1 kl.loss) rows, GAE's whitened
advantages, the k1 rejection bounds read as
verl documents them, and the decoupled (sequence-level IS) and bypass-mode (``ppo_clip`` with
rejection, ``reinforce`` with IS) policy losses.

The v1.1 policy losses of 2025-26 (settings as verl reads them; what they cannot ask for raises
``NotImplementedError``, a "not implemented" case):
- ``sapo_token_loss``: ``tau_pos``/``tau_neg`` -> ``ActorConfig.tau_pos``/``tau_neg`` (actor.py:167-168).
- ``gmpo_token_loss``: ``eps_low``/``eps_high`` -> ``clip_ratio_low``/``clip_ratio_high`` (the log-space
  clip range, core_algos.py:1959-1961, :1978). The ``policy_loss`` op runs ``geo_mean`` once per row
  (``per_row``): with one row, ``torch.mean`` is that row's ``-Ā_b·ρ_b``, and the gradient of
  ``Σ_t u[b,t]·L_b`` is verl's autograd gradient of the row's loss times the row's upstream sum, which
  is the spec's gradient. ``ρ_b`` and ``Ā_b`` divide by ``n_b + 1e-8`` (:1984, :1987): a float64
  precision note, never a semantic difference.
- ``dppo_token_loss``: ``divergence`` -> ``loss_mode`` ``"dppo_tv"`` / ``"dppo_kl"``; ``delta_low``/
  ``delta_high`` -> ``clip_ratio_low``/``clip_ratio_high`` (:1413-1416, :1494-1497); ``ratio_cap`` ->
  ``clip_ratio_c`` (``clamp(ratio, max=clip_ratio_c)``, :1427-1428, :1508-1509). Not expressible:
  ``ratio_cap=None`` (verl always truncates the weight; ActorConfig's ``clip_ratio_c`` is 3.0).
- ``dro_token_loss``: ``beta`` -> ``PolicyLossConfig.dro_beta`` (actor.py:100; the op builds
  ``ActorConfig.policy_loss`` from a ``policy_loss`` dict).
- ``log_ratio_clamp`` (SAPO, DPPO): verl clamps the log-ratio at ±20 always (:1666, :1420, :1501), so
  only None (the canonical value the runner holds the row to: the ``verl`` preset names the clamp) and
  20 are run.
- verl's ``gpg`` is ``pg_token_loss`` aggregated (no new function); it and the aggregated forms of the
  four losses above (with ``sapo``'s and ``geo_mean``'s fixed reductions) are the
  ``verl.policy_loss[<loss_mode>,<agg mode>]`` rows of ``checks.py``, as are ``clip_cov``
  (``aggregate(ppo_token_loss(dual_clip=None) · clip_cov_mask)``) and ``kl_cov``.

The covariance-selected tokens of spec v1.1:
- ``clip_cov_mask``: ``fraction``, ``cov_low``, ``cov_high`` -> ``PolicyLossConfig.clip_cov_ratio``,
  ``clip_cov_lb``, ``clip_cov_ub`` (actor.py:95-97); ``eps_low``/``eps_high`` -> ``clip_ratio_low``/
  ``clip_ratio_high``. verl draws the tokens it cuts with ``torch.randperm`` (core_algos.py:1823); the
  ``policy_loss`` op, given ``draws`` as ``clip_cov_draws``, makes that permutation the order of the
  draws over verl's own candidate list and returns verl's ``corr`` (:1808, :1828): the keep mask
  (``conformance/frameworks/verl/ops.py`` says how). Its covariance is centred with ``masked_mean``,
  whose count carries ``+ 1e-8`` (:1812-1814): a relative 1e-8/N, never a decision off the registry's
  conditioning margin.
- ``kl_cov_token_loss``: ``fraction``, ``coef`` -> ``PolicyLossConfig.kl_cov_ratio``, ``ppo_kl_coef``
  (actor.py:98-99). verl's ``torch.topk`` orders equal covariances arbitrarily (:1907); the registry's
  conditioning keeps ties at the cut out of the checked cases.

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
- ``optimal_token_baseline_advantages``: verl's completions start at column 0 of the response tensor, and
  its zero tail cuts at ``second_max_length``, a token count used as a column (core_algos.py:982). So the
  rows of each group are shifted left together until the group's first valid column is column 0 (the
  columns before it are masked in every row of the group; the spec's position alignment is unchanged), and
  the outputs are shifted back; ``returns`` is read at valid positions only (verl's reverse cumsum is
  non-zero at masked positions inside a row). The trainer passes neither ``handle_zero_tail`` nor
  ``epsilon`` (always ``True`` and ``1e-8``); ``eps`` and ``tail_length`` are left to the preset. Not
  expressible: ``align="valid_token"`` with ``zero_tail=False`` on a group with a single non-empty row
  (verl's TIR form drops empty rows from the group and gives a group of one baseline 0, :1072-1088).
- ``gae``: verl returns whitened advantages (``masked_whiten`` inside ``compute_gae_advantage_return``,
  :259) and ``returns = advantages + values`` computed before the whitening (:258). The spec's
  (unwhitened) advantages are therefore ``returns - values``; the whitened output is checked as
  ``whiten(gae(...).advantages)`` by the ``verl.compute_gae_advantage_return`` row.
- ``aggregate``: ``num_tokens``/``num_seqs`` become ``batch_num_tokens``/``global_batch_size`` (default:
  the batch's own token count and ``B``, as the engine sets them); ``norm_length`` becomes
  ``loss_scale_factor``.
- Rollout correction (spec v1.1): ``RolloutCorrectionConfig`` settings only as verl documents them
  (``trainer/config/algorithm.py:86-125``), never a value outside the documented forms (no infinite
  threshold, no near-zero lower bound standing in for "none"). What they cannot ask for raises
  ``NotImplementedError`` (the runner reports those cases "not implemented" and checks the rest); so does a
  batch without a valid token, which verl refuses with a ValueError (``rollout_corr_helper.py:837-838``, a deliberate refusal, as
  ``masked_whiten``'s):
  - ``rollout_is_weights``: ``level`` -> ``rollout_is`` (``"sequence"`` is verl's product of ratios,
    :578-586; ``seq_stat="geometric"`` has no IS setting); ``mode="truncate"`` with ``hi`` and no ``lo``
    -> the float threshold ``hi`` (TIS, ``clamp(max=hi)``, :596); ``mode="mask"`` with both bounds ->
    the string ``"lo_hi"`` (IcePop, :599-604); ``batch_normalize`` -> ``rollout_is_batch_normalize``.
    Not expressible: ``mode="none"`` (verl always truncates or masks), a truncation lower bound, a
    missing ``hi``, a mask without both bounds (IcePop's lower bound must be > 0, :123-125).
    ``log_ratio_clamp``: verl always clamps at ``SAFETY_BOUND`` = 20 (:75, :575, :585), so only None
    (the canonical value the runner holds the row to: the ``verl`` preset names the clamp) and 20.
  - ``rollout_rejection_mask``: ``(statistic, level)`` -> the ``rollout_rs`` option
    ``<level>_<statistic>`` (``token_k1`` ... ``seq_max_k3``, :77-89). k2/k3 take an upper bound only
    (the threshold string ``repr(hi)``). k1 takes a ``"lo_hi"`` pair that verl documents as *ratio*
    bounds and compares as ``log lo <= -log_ratio <= log hi`` (:263, :300-301, :316); the spec's k1 bounds
    (``kl_of="rollout_old"``: k1 = rollout - old = ``-log_ratio``) are bounds on that statistic, so the
    faithful translation is ``lo_verl = exp(lo)``, ``hi_verl = exp(hi)``: verl then tests exactly
    ``lo <= k1 <= hi``. (Whether a ``"lo_hi"`` pair means bounds on pi_old/pi_rollout, as verl's docs
    read, or on its inverse, as verl computes, is the ``verl.compute_rollout_rejection_mask[*_k1,...]``
    rows of ``checks.py``.) Not expressible: ``statistic="ratio"`` (no ratio option:
    the IS ``"lo_hi"`` mask is ``rollout_is_weights``), ``level="seq_all"``, ``seq_max_k1``, a k1
    bound missing (verl needs both, :295-299), a k2/k3 lower bound or a missing upper bound,
    ``kl_of="old_rollout"``.
  - ``decoupled_ppo_token_loss``: verl's decoupled mode with token-level TIS: ``behav_cap`` -> the
    float ``rollout_is_threshold``, the PPO clip settings as for ``ppo_token_loss``. Not expressible:
    ``behav_cap=None`` (verl's weight always has a threshold, and ``rollout_is=None`` applies no
    weight at all, :854), ``behav_mode="mask"`` (IcePop needs a lower bound > 0).

Importing this module never starts verl; constructing the adapter does, and a missing environment
raises ``AdapterLoadError("... cannot import ...")`` so ``rlspec check`` shows a "not installed" row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from conformance.frameworks.subprocess_adapter import SubprocessAdapter
from conformance.frameworks import spec_io as io

LOSS_AGG_MODES = {  # spec aggregation mode -> verl's loss_agg_mode (core_algos.py agg_loss)
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum": "seq-mean-token-sum",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
    "token_sum": "token-sum",
}


class VerlAdapter(SubprocessAdapter):
    """Spec v1 adapter for verl (see the module docstring for what each function calls)."""

    name = "verl"
    dtypes = ("float64", "float32")
    checks_module = "conformance.frameworks.verl.checks"
    precision_notes = {
        # utils/torch_functional.py:308: masked_mean divides by (n + 1e-8); rollout_corr_helper.py:628-655
        # takes the batch mean with it (token level, and each row's weight at sequence level)
        "rollout_is_weights": "batch_normalize divides by masked_mean, whose count has + 1e-8 (relative 1e-8/n)",
        # rollout_corr_helper.py:947-1008: every metric is a masked_mean, whose count has + 1e-8
        "mismatch_metric": "compute_offpolicy_metrics' masked_mean divides by n + 1e-8 (utils/torch_functional.py:308)",
        "sequence_mismatch_metric": "the per-row masked_mean divides by n_b + 1e-8 (utils/torch_functional.py:308)",
        # core_algos.py:1984, :1987: exp(sum(s * m) / (n_b + 1e-8)) and sum(A * m) / (n_b + 1e-8)
        "gmpo_token_loss": "geo_mean divides the row sums by n_b + 1e-8 (core_algos.py:1984, :1987): relative ~1e-8/n_b",
        # spec v1.1 estimators: masked_whiten's mean and variance are masked_mean, (n + 1e-8) in the count
        # (utils/torch_functional.py:308, :313-315); gpg's alpha = bsz / count_nonzero(...) is a float32
        # tensor whatever the rewards' dtype (core_algos.py:810-811)
        "reinforce_pp_advantages": "masked_whiten's masked_mean divides by n + 1e-8 (utils/torch_functional.py:308)",
        "reinforce_pp_baseline_advantages": "masked_whiten's masked_mean divides by n + 1e-8 (utils/torch_functional.py:308)",
        "gpg_advantages": "alpha = bsz / count_nonzero(scores) is a float32 tensor (core_algos.py:810-811)",
        # workers/reward_manager/dapo.py:124-126: -exceed_len / len * factor with exceed_len an int64 tensor
        "overlong_penalty": "the penalty is an int64 length tensor divided by an int, a float32 tensor (dapo.py:124-126)",
        # utils/torch_functional.py:308, :342-343: the mean's count has + 1e-8, and the residue mu * 1e-8 / n is
        # divided by sqrt(var + 1e-8): up to |mu| * 1e-4 / n on (nearly) equal values
        "whiten": "masked_mean divides by n + 1e-8 (utils/torch_functional.py:308); masked_whiten divides that "
                  "residue by sqrt(var + 1e-8) (:343): up to |mean| * 1e-4 / n on (nearly) equal values",
        # core_algos.py:1196: seq-mean-token-mean's per-row mean is sum / (n_b + 1e-8)
        "aggregate": "seq-mean-token-mean divides each row by n_b + 1e-8 (core_algos.py:1196): relative 1e-8/n_b",
    }

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

    # ------------------------------------------------------------------------------------------
    # spec v1.1 advantage estimators (core_algos.py's registry, as ray_trainer.compute_advantage calls them)
    # ------------------------------------------------------------------------------------------

    def advantage_estimators(self) -> tuple[str, ...]:
        """Every name registered in the installed verl's ``ADV_ESTIMATOR_REGISTRY`` (``register_adv_est``)."""
        return tuple(self._worker.hello.get("info", {}).get("adv_estimators", ()))

    @staticmethod
    def _whitened_by_verl(m: np.ndarray) -> None:
        """verl's ``masked_whiten`` raises for a mask sum of 0 or 1 (utils/torch_functional.py:311-326)."""
        n = int(m.sum())
        if n <= 1:
            raise NotImplementedError(f"verl's masked_whiten raises ValueError for a mask sum of {n} "
                                      "(utils/torch_functional.py:311-326); the spec returns 0")

    @staticmethod
    def _scores_at_last_token(r: np.ndarray, m: np.ndarray) -> np.ndarray:
        """``[B]`` scores as verl's token_level_rewards: on each row's last valid token (column 0 for an
        empty row; verl's estimators read ``token_level_rewards.sum(-1)``)."""
        out = np.zeros(m.shape, dtype=r.dtype)
        last = np.where(m.any(axis=1), m.shape[1] - 1 - np.argmax(m[:, ::-1], axis=1), 0)
        out[np.arange(m.shape[0]), last] = r
        return out

    def _grouped_call(self, fn: str, name: str, rewards: Any, group_size: int, mask: Any = None,
                      algo: dict[str, Any] | None = None, **arrays: Any) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """verl's estimator ``name`` on [B] rewards in contiguous groups: on the scores' [B, 1] layout, or
        with ``mask`` on the token layout (the score on each row's last valid token)."""
        r, G = io.check_groups(fn, rewards, group_size)
        m = np.ones((r.shape[0], 1), dtype=bool) if mask is None else io.check_mask(fn, mask, (r.shape[0], np.shape(mask)[-1]))
        request = {"token_level_rewards": r[:, None] if mask is None else self._scores_at_last_token(r, m),
                   "response_mask": io.as_mask_of(m, r.dtype), "index": np.arange(r.shape[0], dtype=np.int64) // G, **arrays}
        params: dict[str, Any] = {"name": name}
        if algo is not None:
            params["algo"] = algo
        return self._worker.call("advantage", request, params)["outputs"], r, m

    def reinforce_pp_advantages(self, token_rewards: Any, mask: Any, *, gamma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """``reinforce_plus_plus`` (core_algos.py:693-731) with ``AlgoConfig(gamma=gamma)``."""
        fn = "reinforce_pp_advantages"
        r, m = io.token_arrays(fn, mask, finite=True, token_rewards=token_rewards)
        g = io.unit_interval(fn, "gamma", gamma)
        self._whitened_by_verl(m)
        arrays = {"token_level_rewards": io.clean(r, m), "response_mask": io.as_mask_of(m, r.dtype)}
        out = self._worker.call("advantage", arrays, {"name": "reinforce_plus_plus", "algo": {"gamma": g}})["outputs"]
        return io.masked_out(out["advantages"], m, r.dtype), io.masked_out(out["returns"], m, r.dtype)

    def reinforce_pp_baseline_advantages(self, rewards: Any, group_size: int, mask: Any) -> np.ndarray:
        """``reinforce_plus_plus_baseline`` (core_algos.py:533-584) on the token layout."""
        fn = "reinforce_pp_baseline_advantages"
        self._whitened_by_verl(np.asarray(mask, dtype=bool))
        out, r, m = self._grouped_call(fn, "reinforce_plus_plus_baseline", rewards, group_size, mask)
        return io.masked_out(out["advantages"], m, r.dtype)

    def remax_advantages(self, rewards: Any, greedy_rewards: Any, group_size: int) -> np.ndarray:
        """``remax`` (core_algos.py:734-767) with ``reward_baselines`` = each prompt's greedy reward repeated
        over its samples (``batch.repeat(n, interleave=True)``, ray_trainer.py:1534-1538)."""
        fn = "remax_advantages"
        r, G = io.check_groups(fn, rewards, group_size)
        b = io.float_array(fn, "greedy_rewards", greedy_rewards, 1)
        if b.shape[0] * G != r.shape[0]:
            raise io.fail(fn, "greedy_rewards", f"expected shape ({r.shape[0] // G},), got {b.shape}")
        out, _, _ = self._grouped_call(fn, "remax", r, G, reward_baselines=np.repeat(b.astype(r.dtype), G))
        return np.asarray(out["advantages"])[:, 0].astype(r.dtype)

    def opo_advantages(self, rewards: Any, group_size: int, mask: Any) -> np.ndarray:
        """``opo`` (core_algos.py:639-690) on the token layout; a row's advantage is read at its first valid
        token."""
        fn = "opo_advantages"
        m = np.asarray(mask, dtype=bool)
        if m.ndim == 2 and not m.any(axis=1).all():
            raise NotImplementedError("verl's OPO advantage is scores.unsqueeze(-1) * response_mask (core_algos.py:688): "
                                      "a row without response tokens shows none (and a group of such rows is 0/0 = NaN, :683)")
        out, r, m = self._grouped_call(fn, "opo", rewards, group_size, mask)
        first = np.argmax(m, axis=1)
        return np.asarray(out["advantages"])[np.arange(m.shape[0]), first].astype(r.dtype)

    def grpo_passk_advantages(self, rewards: Any, group_size: int, *, scale: str = "group") -> np.ndarray:
        """``grpo_passk`` (core_algos.py:471-530); ``scale`` -> ``AlgoConfig.norm_adv_by_std_in_grpo``."""
        fn = "grpo_passk_advantages"
        io.choice(fn, "scale", scale)
        out, r, _ = self._grouped_call(fn, "grpo_passk", rewards, group_size, algo={"norm_adv_by_std_in_grpo": scale == "group"})
        return np.asarray(out["advantages"])[:, 0].astype(r.dtype)

    def gpg_advantages(self, rewards: Any, group_size: int) -> np.ndarray:
        """``gpg`` (core_algos.py:770-830)."""
        out, r, _ = self._grouped_call("gpg_advantages", "gpg", rewards, group_size)
        return np.asarray(out["advantages"])[:, 0].astype(r.dtype)

    def optimal_token_baseline_advantages(self, token_rewards: Any, mask: Any, group_size: int, old_logp: Any,
                                          sum_pi_squared: Any, is_weights: Any = None, *, align: str = "position",
                                          zero_tail: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``optimal_token_baseline`` (core_algos.py:871-987) or ``tir_optimal_token_baseline`` (:990-1121) with
        ``handle_zero_tail=zero_tail``, each group laid out from its first valid column (module docstring)."""
        fn = "optimal_token_baseline_advantages"
        r = io.float_array(fn, "token_rewards", token_rewards, 2)
        m = io.check_mask(fn, mask, r.shape)
        if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1 or r.shape[0] % group_size:
            raise io.fail(fn, "group_size", f"expected an integer >= 1 dividing B = {r.shape[0]}, got {group_size!r}")
        G = int(group_size)
        inputs = {"token_level_rewards": ("token_rewards", r), "old_log_probs": ("old_logp", old_logp),
                  "sum_pi_squared": ("sum_pi_squared", sum_pi_squared)}
        if is_weights is not None:
            inputs["rollout_is_weights"] = ("is_weights", is_weights)
        io.choice(fn, "align", align)
        io.boolean(fn, "zero_tail", zero_tail)
        B, T = m.shape
        non_empty = m.any(axis=1).reshape(-1, G).sum(axis=1)
        if align == "valid_token" and not zero_tail and G > 1 and (non_empty == 1).any():
            raise NotImplementedError("verl's tir_optimal_token_baseline leaves rows without response tokens out of "
                                      "their group and gives a group of one baseline 0 (core_algos.py:1072-1088): with "
                                      "handle_zero_tail=False a group with a single non-empty row gets A = G")
        first = np.where(m.any(axis=1), np.argmax(m, axis=1), T).reshape(-1, G).min(axis=1)
        shift = np.repeat(first, G)  # each group's first valid column becomes verl's column 0
        width = max(int((T - shift).max()) if B else 0, 1)
        arrays: dict[str, np.ndarray] = {}
        for key, (name, value) in inputs.items():
            x = io.float_array(fn, name, value, 2)
            if x.shape != m.shape:
                raise io.fail(fn, name, f"expected shape {m.shape} (the mask's), got {x.shape}")
            io.check_finite(fn, name, x, m)
            arrays[key] = self._response_layout(io.clean(x, m).astype(r.dtype), shift, width)
        arrays["response_mask"] = self._response_layout(io.as_mask_of(m, r.dtype), shift, width)
        arrays["index"] = np.arange(B, dtype=np.int64) // G
        name = "optimal_token_baseline" if align == "position" else "tir_optimal_token_baseline"
        out = self._worker.call("advantage", arrays, {"name": name, "handle_zero_tail": bool(zero_tail)})["outputs"]
        back = {k: np.zeros(m.shape, dtype=np.float64) for k in ("advantages", "returns")}
        for k, spec_layout in back.items():
            verl_layout = np.asarray(out[k], dtype=np.float64)
            for b in range(B):
                spec_layout[b, shift[b]:] = verl_layout[b, :T - shift[b]]
        return io.masked_out(back["advantages"], m, r.dtype), io.masked_out(back["returns"], m, r.dtype)

    @staticmethod
    def _response_layout(x: np.ndarray, shift: np.ndarray, width: int) -> np.ndarray:
        """[B, width]: row b of ``x`` from column ``shift[b]`` on, zero-padded on the right."""
        out = np.zeros((x.shape[0], width), dtype=x.dtype)
        for b in range(x.shape[0]):
            out[b, :x.shape[1] - shift[b]] = x[b, shift[b]:]
        return out

    def gdpo_token_advantages(self, rewards: np.ndarray, group_size: int, mask: np.ndarray,
                              reward_weights: list[float] | None = None) -> np.ndarray:
        """``gdpo`` (core_algos.py:361-468) on [B, K] scores: the keys ``gdpo_reward_keys`` of an
        ``AlgoConfig``, the scores as ``non_tensor_batch`` (verl places each at the row's last response
        token, :423-433), ``response_mask`` = ``mask``; verl's [B, T] advantages (masked_whiten over tokens)."""
        K = rewards.shape[1]
        algo: dict[str, Any] = {"gdpo_reward_keys": [f"reward_{k}" for k in range(K)]}
        if reward_weights is not None:
            algo["gdpo_reward_weights"] = [float(w) for w in reward_weights]
        arrays = {"token_level_rewards": np.zeros(mask.shape, dtype=rewards.dtype), "response_mask": mask.astype(rewards.dtype),
                  "index": np.arange(mask.shape[0], dtype=np.int64) // group_size, "gdpo_scores": rewards}
        out = self._worker.call("advantage", arrays, {"name": "gdpo", "algo": algo})["outputs"]
        return io.masked_out(out["advantages"], mask, rewards.dtype)

    def _gae(self, token_rewards: Any, values: Any, mask: Any, gamma: float, lam: float) -> tuple[dict[str, np.ndarray], np.ndarray, Any]:
        """(``compute_gae_advantage_return``'s outputs, the mask, the rewards' dtype)."""
        r, v, m = io.token_arrays("gae", mask, token_rewards=token_rewards, values=values)
        self._whitened_by_verl(m)  # compute_gae_advantage_return whitens with masked_whiten (core_algos.py)
        arrays = {"token_level_rewards": io.clean(r, m), "values": io.clean(v, m),
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
        a, m = io.token_arrays("whiten", mask, x=x)
        self._whitened_by_verl(m)
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

    # spec v1.1 kl.loss: verl's kl_loss_type names, "+" = straight-through (core_algos.py:2200-2213)
    KL_LOSS_NAMES = {"k1": "k1", "k2": "k2", "k3": "k3", "abs": "abs"}
    KL_LOSS_SUFFIX = {"estimator": "", "straight_through": "+"}

    def _kl_loss_name(self, estimator: str, gradient: str) -> str:
        io.kl_loss_keywords("kl_loss_term", estimator, gradient)
        if gradient not in self.KL_LOSS_SUFFIX:
            raise NotImplementedError(f"verl's kl_penalty has no {gradient!r} form: no importance ratio enters it "
                                      "(core_algos.py:2188-2213)")
        return self.KL_LOSS_NAMES[estimator] + self.KL_LOSS_SUFFIX[gradient]

    def kl_loss_term(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any = None, *, estimator: str = "k3",
                     gradient: str = "estimator") -> np.ndarray:
        return self.verl_kl_penalty(logp, ref_logp, mask, self._kl_loss_name(estimator, gradient))

    def kl_loss_term_grad(self, logp: Any, ref_logp: Any, mask: Any, old_logp: Any, upstream: Any, *, estimator: str = "k3",
                          gradient: str = "estimator") -> np.ndarray:
        return self.verl_kl_penalty(logp, ref_logp, mask, self._kl_loss_name(estimator, gradient), upstream)

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
        io.choice("cispo_token_loss", "bound", bound)
        high = float(eps_high) if bound == "relative" else float(eps_high) - 1.0
        low = 1.0 if eps_low is None else float(eps_low)
        return {"clip_ratio": low, "clip_ratio_low": low, "clip_ratio_high": high}

    def cispo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float | None = None, eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._loss_params("cispo", self._cispo_config(eps_low, eps_high, bound)), logp, old_logp, advantages, mask)

    def cispo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float | None = None, eps_high: float = 0.28, bound: str = "relative") -> np.ndarray:
        return self._policy("cispo_token_loss", self._loss_params("cispo", self._cispo_config(eps_low, eps_high, bound)), logp, old_logp, advantages, mask, upstream)

    # ------------------------------------------------------------------------------------------
    # spec v1.1: policy losses of 2025-26 (core_algos.py's registered sapo, geo_mean, dppo_tv/_kl, dro)
    # ------------------------------------------------------------------------------------------

    LOG_RATIO_CLAMP = 20.0  # core_algos.py:1666 (sapo), :1420 (dppo_tv), :1501 (dppo_kl): clamp(d, -20, 20)

    def _clamp_setting(self, fn: str, log_ratio_clamp: float | None, where: str) -> None:
        """verl clamps this loss's log-ratio at +-20 always (``where``): only None (the canonical value the
        runner holds the row to, the ``verl`` preset names the clamp) and 20 are run."""
        if log_ratio_clamp is not None:
            io.number(fn, "log_ratio_clamp", log_ratio_clamp, strict=True)
        if log_ratio_clamp not in (None, self.LOG_RATIO_CLAMP):
            raise NotImplementedError(f"verl clamps the log-ratio at +-20, {where}, not at {log_ratio_clamp!r}")

    def _sapo_params(self, tau_pos: float, tau_neg: float, log_ratio_clamp: float | None) -> dict[str, Any]:
        fn = "sapo_token_loss"
        config = {"tau_pos": io.number(fn, "tau_pos", tau_pos, strict=True), "tau_neg": io.number(fn, "tau_neg", tau_neg, strict=True)}
        self._clamp_setting(fn, log_ratio_clamp, "core_algos.py:1666")
        # the loss_agg_mode is ignored (seq-mean-token-mean hard-coded, :1688-1690); the per-token matrix is read
        return self._loss_params("sapo", config)

    def sapo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, tau_pos: float = 1.0,
                        tau_neg: float = 1.05, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("sapo_token_loss", self._sapo_params(tau_pos, tau_neg, log_ratio_clamp), logp, old_logp, advantages, mask)

    def sapo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, tau_pos: float = 1.0,
                             tau_neg: float = 1.05, log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("sapo_token_loss", self._sapo_params(tau_pos, tau_neg, log_ratio_clamp), logp, old_logp, advantages, mask,
                            upstream)

    def _gmpo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        low, high = io.clip_range("gmpo_token_loss", eps_low, eps_high)
        # geo_mean's scalar is torch.mean over the rows (core_algos.py:2000): per_row runs it on each row alone
        return {**self._loss_params("geo_mean", {"clip_ratio": low, "clip_ratio_low": low, "clip_ratio_high": high}),
                "per_row": True}

    def gmpo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.4,
                        eps_high: float = 0.4) -> np.ndarray:
        return self._policy("gmpo_token_loss", self._gmpo_params(eps_low, eps_high), logp, old_logp, advantages, mask)

    def gmpo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float = 0.4,
                             eps_high: float = 0.4) -> np.ndarray:
        return self._policy("gmpo_token_loss", self._gmpo_params(eps_low, eps_high), logp, old_logp, advantages, mask, upstream)

    def _dppo_params(self, divergence: str, delta_low: float, delta_high: float, ratio_cap: float | None,
                     log_ratio_clamp: float | None) -> dict[str, Any]:
        fn = "dppo_token_loss"
        io.choice(fn, "divergence", divergence)
        low, high = io.clip_range(fn, delta_low, delta_high, ("delta_low", "delta_high"))
        if ratio_cap is not None:
            io.number(fn, "ratio_cap", ratio_cap, strict=True)
        where = "core_algos.py:1420" if divergence == "tv" else "core_algos.py:1501"
        self._clamp_setting(fn, log_ratio_clamp, where)
        if ratio_cap is None:
            raise NotImplementedError("verl always truncates DPPO's weight: clamp(ratio, max=clip_ratio_c) "
                                      f"(core_algos.py:{'1427-1428' if divergence == 'tv' else '1508-1509'}), "
                                      "ActorConfig.clip_ratio_c = 3.0 (workers/config/actor.py:163)")
        config = {"clip_ratio": low, "clip_ratio_low": low, "clip_ratio_high": high, "clip_ratio_c": float(ratio_cap)}
        return self._loss_params(f"dppo_{divergence}", config)

    def dppo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, divergence: str = "tv",
                        delta_low: float = 0.2, delta_high: float = 0.2, ratio_cap: float | None = None,
                        log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("dppo_token_loss", self._dppo_params(divergence, delta_low, delta_high, ratio_cap, log_ratio_clamp),
                            logp, old_logp, advantages, mask)

    def dppo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, divergence: str = "tv",
                             delta_low: float = 0.2, delta_high: float = 0.2, ratio_cap: float | None = None,
                             log_ratio_clamp: float | None = None) -> np.ndarray:
        return self._policy("dppo_token_loss", self._dppo_params(divergence, delta_low, delta_high, ratio_cap, log_ratio_clamp),
                            logp, old_logp, advantages, mask, upstream)

    def _dro_params(self, beta: float) -> dict[str, Any]:
        if beta is None:
            raise io.fail("dro_token_loss", "beta", "expected a finite number > 0, got None")
        b = io.number("dro_token_loss", "beta", beta, strict=True)
        return {**self._loss_params("dro", {}), "policy_loss": {"dro_beta": b}}  # PolicyLossConfig.dro_beta, actor.py:100

    def dro_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, beta: float) -> np.ndarray:
        return self._policy("dro_token_loss", self._dro_params(beta), logp, old_logp, advantages, mask)

    def dro_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, beta: float) -> np.ndarray:
        return self._policy("dro_token_loss", self._dro_params(beta), logp, old_logp, advantages, mask, upstream)

    # ------------------------------------------------------------------------------------------
    # spec v1.1: covariance-selected tokens (core_algos.py's registered clip_cov, kl_cov)
    # ------------------------------------------------------------------------------------------

    def clip_cov_mask(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, draws: Any, *, fraction: float = 2e-4,
                      cov_low: float = 1.0, cov_high: float = 5.0, eps_low: float = 0.2, eps_high: float = 0.2) -> np.ndarray:
        fn = "clip_cov_mask"
        lp, old, u, m = io.token_arrays(fn, mask, finite=True, logp=logp, old_logp=old_logp, draws=draws)
        f, cov_lo, cov_hi = io.clip_cov_settings(fn, fraction, cov_low, cov_high)
        low, high = io.clip_range(fn, eps_low, eps_high)
        params = {**self._loss_params("clip_cov", {"clip_ratio": low, "clip_ratio_low": low, "clip_ratio_high": high}),
                  "policy_loss": {"clip_cov_ratio": f, "clip_cov_lb": cov_lo, "clip_cov_ub": cov_hi}}
        arrays = {"log_prob": io.clean(lp, m), "old_log_prob": io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "response_mask": io.as_mask_of(m, lp.dtype),
                  "clip_cov_draws": io.clean(u, m)}
        keep = self._worker.call("policy_loss", arrays, params)["outputs"]["clip_cov_keep"]
        return (np.asarray(keep) > 0.5) & m

    def _kl_cov_params(self, fraction: float, coef: float) -> dict[str, Any]:
        fn = "kl_cov_token_loss"
        return {**self._loss_params("kl_cov", {}),
                "policy_loss": {"kl_cov_ratio": io.unit_interval(fn, "fraction", fraction, strict=True),
                                "ppo_kl_coef": io.number(fn, "coef", coef)}}

    def kl_cov_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, fraction: float = 2e-4,
                          coef: float = 0.1) -> np.ndarray:
        return self._policy("kl_cov_token_loss", self._kl_cov_params(fraction, coef), logp, old_logp, advantages, mask)

    def kl_cov_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *,
                               fraction: float = 2e-4, coef: float = 0.1) -> np.ndarray:
        return self._policy("kl_cov_token_loss", self._kl_cov_params(fraction, coef), logp, old_logp, advantages, mask,
                            upstream)

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        return {"cliprange_value": float("inf") if clip is None else float(clip), "loss_agg_mode": "token-mean"}

    # ------------------------------------------------------------------------------------------
    # spec v1.1: rollout correction (rollout_corr_helper.py), see the module docstring
    # ------------------------------------------------------------------------------------------

    SAFETY_BOUND = 20.0  # rollout_corr_helper.py:75: every log-ratio is clamped to +-20 before exp

    def _rollout_inputs(self, fn: str, old_logp: Any, rollout_logp: Any, mask: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Validated (old, rollout, mask) and the ``rollout_correction`` op's arrays (masked inputs sent as 0)."""
        old, rollout, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        self._corrected_by_verl(m)
        arrays = {"old_log_prob": io.clean(old, m), "rollout_log_prob": io.clean(rollout, m),
                  "response_mask": io.as_mask_of(m, old.dtype)}
        return old, rollout, m, arrays

    @staticmethod
    def _corrected_by_verl(m: np.ndarray) -> None:
        """verl's rollout correction raises ValueError for a response_mask without a valid token
        (rollout_corr_helper.py:837-838), a deliberate refusal: not offered (as masked_whiten's)."""
        if not m.any():
            raise NotImplementedError("verl's compute_rollout_correction_and_rejection_mask raises ValueError for a "
                                      "response_mask without a valid token (rollout_corr_helper.py:837-838); the "
                                      "spec returns zeros")

    def _is_settings(self, level: str, seq_stat: str, mode: str, lo: float | None, hi: float | None,
                     log_ratio_clamp: float | None, batch_normalize: bool) -> dict[str, Any]:
        """The ``RolloutCorrectionConfig`` IS fields for the spec's keywords (NotImplementedError where
        verl has no setting)."""
        io.is_keywords("rollout_is_weights", level, seq_stat, mode, batch_normalize)
        if log_ratio_clamp not in (None, self.SAFETY_BOUND):
            raise NotImplementedError(f"verl clamps the log-ratio at SAFETY_BOUND = 20, rollout_corr_helper.py:75, "
                                      f"not at {log_ratio_clamp!r}")
        if level == "sequence" and seq_stat == "geometric":
            raise NotImplementedError("rollout_is='sequence' is the product of ratios, rollout_corr_helper.py:578-586; "
                                      "verl has no geometric-mean IS weight")
        if mode == "none":
            raise NotImplementedError("verl's IS weight is always truncated by a float threshold or masked by a "
                                      "'lower_upper' one, rollout_corr_helper.py:593-604")
        if mode == "truncate":
            if lo is not None:
                raise NotImplementedError("TIS truncates from above only, rollout_corr_helper.py:596")
            if hi is None:
                raise NotImplementedError("TIS needs a positive float threshold, rollout_corr_helper.py:121-122; None turns IS off, :854")
            threshold: Any = float(hi)
        else:
            if lo is None or hi is None:
                raise NotImplementedError("IcePop's 'lower_upper' threshold needs both bounds, the lower one > 0, "
                                          "rollout_corr_helper.py:105-110, :123-125")
            threshold = f"{float(lo)!r}_{float(hi)!r}"
        return {"rollout_is": level, "rollout_is_threshold": threshold, "rollout_is_batch_normalize": bool(batch_normalize)}

    def rollout_is_weights(self, old_logp: Any, rollout_logp: Any, mask: Any, *, level: str = "token",
                           seq_stat: str = "product", mode: str = "truncate", lo: float | None = None,
                           hi: float | None = 2.0, log_ratio_clamp: float | None = None,
                           batch_normalize: bool = False) -> np.ndarray:
        old, _, m, arrays = self._rollout_inputs("rollout_is_weights", old_logp, rollout_logp, mask)
        settings = self._is_settings(level, seq_stat, mode, lo, hi, log_ratio_clamp, batch_normalize)
        out = self._worker.call("rollout_correction", arrays, settings)["outputs"]["rollout_is_weights"]
        return io.masked_out(out, m, old.dtype)

    def _offpolicy_metric(self, fn: str, old_logp: Any, rollout_logp: Any, mask: Any, metric: str,
                          log_ratio_clamp: float | None, every_row: bool) -> float:
        """``compute_offpolicy_metrics`` (rollout_corr_helper.py:904-1010): the metric of that name."""
        old, rollout, m = io.rollout_inputs(fn, old_logp, rollout_logp, mask)
        if log_ratio_clamp is not None:
            io.number(fn, "log_ratio_clamp", log_ratio_clamp, strict=True)
        if log_ratio_clamp not in (None, self.SAFETY_BOUND):
            raise NotImplementedError(f"verl clamps the χ² exponents at SAFETY_BOUND = 20, rollout_corr_helper.py:75, "
                                      f"not at {log_ratio_clamp!r}")
        if not m.any():
            raise NotImplementedError("compute_offpolicy_metrics asserts a valid token (rollout_corr_helper.py:940); "
                                      "the spec gives 0")
        if every_row and not m.any(axis=1).all():
            raise NotImplementedError("verl averages the sequence metrics over every row with .mean() "
                                      "(rollout_corr_helper.py:947-1008), a row without a valid token counted; "
                                      "verl's responses always hold a token, so not offered")
        arrays = {"old_log_prob": io.clean(old, m), "rollout_log_prob": io.clean(rollout, m),
                  "response_mask": io.as_mask_of(m, old.dtype)}
        return float(self._worker.call("offpolicy_metrics", arrays, {})["outputs"][metric])

    def mismatch_metric(self, old_logp: Any, rollout_logp: Any, mask: Any, *, metric: str = "kl",
                        agg: str = "token_mean", log_ratio_clamp: float | None = None) -> float:
        """``compute_offpolicy_metrics``' token metrics: kl, k3_kl, chi2_token (masked means over the batch)."""
        fn = "mismatch_metric"
        io.choice(fn, "metric", metric)
        io.choice(fn, "agg", agg)
        if metric not in ("kl", "k3_kl", "chi2_token"):
            raise NotImplementedError(f"compute_offpolicy_metrics has no {metric!r} (rollout_corr_helper.py:904-1010)")
        if agg != "token_mean":
            raise NotImplementedError("verl's token metrics are masked means over the batch's tokens "
                                      "(rollout_corr_helper.py:960, :966, :999)")
        return self._offpolicy_metric(fn, old_logp, rollout_logp, mask, metric, log_ratio_clamp, every_row=False)

    def sequence_mismatch_metric(self, old_logp: Any, rollout_logp: Any, mask: Any, *, metric: str = "log_ppl_diff",
                                 log_ratio_clamp: float | None = None) -> float:
        """``compute_offpolicy_metrics``' sequence metrics: log_ppl_diff, log_ppl_abs_diff, ppl_ratio, chi2_seq."""
        fn = "sequence_mismatch_metric"
        io.choice(fn, "metric", metric)
        return self._offpolicy_metric(fn, old_logp, rollout_logp, mask, metric, log_ratio_clamp, every_row=True)

    RS_LEVELS = ("token", "seq_sum", "seq_mean", "seq_max")

    def _rs_settings(self, statistic: str, level: str, lo: float | None, hi: float | None, kl_of: str) -> dict[str, Any]:
        """``rollout_rs`` and ``rollout_rs_threshold`` for the spec's keywords (NotImplementedError where
        verl has no option)."""
        fn = "rollout_rejection_mask"
        io.rejection_keywords(fn, statistic, level)
        io.choice(fn, "kl_of", kl_of)
        if statistic == "ratio":
            raise NotImplementedError("rollout_rs has no ratio option, only k1/k2/k3, rollout_corr_helper.py:77-89; "
                                      "verl's ratio mask is the IS 'lower_upper' threshold of rollout_is_weights")
        if level == "seq_all":
            raise NotImplementedError("rollout_rs has no every-token outlier sequence option, rollout_corr_helper.py:77-89")
        option = f"{level}_{statistic}"
        if option == "seq_max_k1":
            raise NotImplementedError("rollout_rs has no seq_max_k1, rollout_corr_helper.py:77-89")
        if kl_of != "rollout_old":
            raise NotImplementedError("verl's k1/k2/k3 are of d = rollout - old: k1 = -log_ratio, rollout_corr_helper.py:263-265")
        if statistic == "k1":
            if lo is None or hi is None:
                raise NotImplementedError("k1 options need both bounds of a 'lower_upper' threshold, rollout_corr_helper.py:295-299")
            # faithful translation of the spec's bounds on k1 = rollout - old = -log_ratio: verl compares
            # -log_ratio with [log lower, log upper] (:300-301, :316), so lower = exp(lo), upper = exp(hi)
            threshold = f"{math.exp(float(lo))!r}_{math.exp(float(hi))!r}"
        else:
            if lo is not None:
                raise NotImplementedError(f"{statistic} options take an upper bound only, rollout_corr_helper.py:178-192")
            if hi is None:
                raise NotImplementedError("rollout_rs_threshold is required, rollout_corr_helper.py:135-136")
            threshold = repr(float(hi))
        return {"rollout_rs": option, "rollout_rs_threshold": threshold}

    def rollout_rejection_mask(self, old_logp: Any, rollout_logp: Any, mask: Any, *, statistic: str = "ratio",
                               level: str = "token", lo: float | None = None, hi: float | None = None,
                               kl_of: str = "rollout_old") -> np.ndarray:
        _, _, m, arrays = self._rollout_inputs("rollout_rejection_mask", old_logp, rollout_logp, mask)
        settings = self._rs_settings(statistic, level, lo, hi, kl_of)
        return self.rejection_mask(arrays, m, settings)

    def rejection_mask(self, arrays: dict[str, np.ndarray], m: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
        """The ``rollout_correction`` op's modified ``response_mask`` as a bool keep mask (False where ``m`` is)."""
        out = self._worker.call("rollout_correction", arrays, settings)["outputs"]["response_mask"]
        return (np.asarray(out) > 0.5) & m

    def _decoupled(self, logp: Any, prox_logp: Any, behav_logp: Any, advantages: Any, mask: Any, eps_low: float,
                   eps_high: float, dual_clip: float | None, behav_cap: float | None, behav_mode: str,
                   upstream: Any = None) -> np.ndarray:
        fn = "decoupled_ppo_token_loss"
        io.choice(fn, "behav_mode", behav_mode)
        lp, prox, behav, m = io.token_arrays(fn, mask, logp=logp, prox_logp=prox_logp, behav_logp=behav_logp)
        self._corrected_by_verl(m)  # the decoupled driver step runs the same check
        if behav_cap is None:
            raise NotImplementedError("verl's decoupled IS weight always has a threshold; rollout_is=None applies no weight, "
                                      "rollout_corr_helper.py:854")
        if behav_mode == "mask":
            raise NotImplementedError("a weight masked above a cap only: IcePop's 'lower_upper' needs a lower bound > 0, "
                                      "rollout_corr_helper.py:123-125")
        arrays = {"log_prob": io.clean(lp, m), "old_log_prob": io.clean(prox, m), "rollout_log_prob": io.clean(behav, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "response_mask": io.as_mask_of(m, lp.dtype)}
        params = {**self._ppo_params(eps_low, eps_high, dual_clip),
                  "rollout_correction": {"rollout_is": "token", "rollout_is_threshold": float(behav_cap), "rollout_rs": None,
                                         "bypass_mode": False}}
        return self._token_op("policy_loss", arrays, params, "per_token", "log_prob", m, lp.dtype, upstream)

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
    # spec v1.1 reward.overlong: DAPORewardManager's overlong penalty (workers/reward_manager/dapo.py)
    # ------------------------------------------------------------------------------------------

    def overlong_penalty(self, lengths: Any, *, max_length: int, buffer: int, factor: float = 1.0) -> np.ndarray:
        """The reward ``DAPORewardManager`` gives a response of ``lengths[b]`` tokens when the score is 0: its
        overlong penalty (``dapo.py:119-127``: ``max_resp_len = max_length``, ``overlong_buffer.len = buffer``,
        ``penalty_factor = factor``). verl refuses ``buffer = 0`` (``dapo.py:52-56``): not implemented."""
        fn = "overlong_penalty"
        L = io.lengths_array(fn, lengths)
        io.overlong_limits(fn, max_length, buffer)
        factor = io.number(fn, "factor", factor)
        if buffer == 0:
            raise NotImplementedError("DAPORewardManager asserts overlong_buffer.len > 0 (workers/reward_manager/dapo.py:52-56)")
        out = self._worker.call("dapo_overlong", {"lengths": L.astype(np.int64)},
                                {"max_resp_len": int(max_length), "buffer_len": int(buffer), "penalty_factor": factor})
        return np.asarray(out["outputs"]["penalty"], dtype=np.float64)

    # ------------------------------------------------------------------------------------------
    # agg.*
    # ------------------------------------------------------------------------------------------

    def _aggregate(self, token_loss: Any, mask: Any, mode: str, norm_length: float | None, num_tokens: float | None, num_seqs: float | None, upstream: Any = None) -> Any:
        fn = "aggregate"
        x, m = io.token_arrays(fn, mask, token_loss=token_loss)
        io.agg_mode(fn, mode, norm_length=norm_length, needs_norm=True)
        params = {
            "loss_agg_mode": LOSS_AGG_MODES[mode],
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
    # agg.partition (conformance/runner/partition.py): the engine's per-micro-batch loss
    # ------------------------------------------------------------------------------------------

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        """``agg_loss`` per micro-batch with the global batch info the engine sets before its
        micro-batch loop (``workers/utils/losses.py:57-69``): ``batch_num_tokens`` = valid tokens of
        the mini-batch all-reduced over DP, ``global_batch_size`` = its sequences, ``dp_size``."""
        fn = "micro_batched_loss"
        xs, ms = io.chunk_arrays(fn, chunks, masks)
        io.agg_mode(fn, mode)
        params = {
            "loss_agg_mode": LOSS_AGG_MODES[mode],
            "dp_size": int(dp_world_size),
            "batch_num_tokens": float(sum(m.sum() for m in ms)),
            "global_batch_size": float(sum(m.shape[0] for m in ms)),
            "loss_scale_factor": None if norm_length is None else float(norm_length),
        }
        return [self._scalar_loss("agg_loss", {"loss_mat": io.clean(x, m), "loss_mask": io.as_mask_of(m, x.dtype)}, params,
                                  "loss_mat", m, x.dtype, upstream)
                for x, m in zip(xs, ms)]


__all__ = ["VerlAdapter"]
