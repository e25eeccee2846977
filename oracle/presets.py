"""Framework presets for spec v1, as plain data.

A *preset* names the keyword values with which a public trainer computes a spec'd quantity, wherever
its default differs from the canonical definition in ``conformance/spec/v1/api.md``. A preset only uses
keywords that exist in api.md and lists only the keywords whose value differs from the canonical
default; an absent function, or an empty dict, means that the framework's default matches canonical
for everything the v1 keywords can express. Deviations that the v1 keywords cannot express are
listed in ``NOT_EXPRESSIBLE`` (one line each) and never appear in ``PRESETS``.

``PRESETS[preset][function] -> {keyword: value}``; presets are ``trl``, ``verl``, ``openrlhf``,
``open_instruct``, ``rlhf_book``, ``areal`` and, for the quantities read from their source without an
adapter yet, ``skyrl``, ``torchrl``, ``ms_swift`` and ``oat`` (``PRESET_NAMES``). Use ``preset_kwargs(preset, function)`` to get a copy, e.g.
``oracle.grpo_advantages(r, 4, **preset_kwargs("trl", "grpo_advantages"))``. ``<name>_grad`` accepts
the same keywords as ``<name>``, so ``preset_kwargs`` also answers for gradient names.

Keywords that api.md declares without a canonical default (``aggregate``'s ``mode``,
``rlhf_token_rewards``'s ``kl_coef``) are chosen per call. The framework defaults for them are recorded
in ``REQUIRED_KEYWORD_DEFAULTS`` for documentation; ``preset_kwargs`` does not return them.

Sources (facts from shared/reference/peer-conventions.md, spot-checked against the repositories):
- TRL: trl 1.16.0 release wheel (paths ``trl/...``); PPO from GitHub huggingface/trl @ f2cd577
  (``trl/experimental/ppo/ppo_trainer.py``), which the 1.16.0 wheel does not ship.
- verl: verl-project/verl @ 1dda039 (0.10.0.dev), identical to release 0.9.1 for the lines cited.
- OpenRLHF: release openrlhf 0.11.2.
- open-instruct: allenai/open-instruct @ e6c3044.
- rlhf-book: natolambert/rlhf-book @ a66b0bf, ``code/policy_gradients/``.

Spec v1.1 functions (``rollout_is_weights``, ``rollout_rejection_mask``, ``decoupled_ppo_token_loss``,
``proximal_logp_interpolation``, ``off_policy_sequence_mask``; api.md "Spec v1.1") were checked in the
installed code: trl 1.16.0 (site-packages ``trl/...``), verl 0.9.1 and openrlhf 0.11.2 (the release
wheels under ``~/.cache/rlspec/frameworks/``), areal 1.0.4 (the release wheel, unpacked); ``areal``
names only spec v1.1 functions.

Spec v1.1 policy losses (``sapo_token_loss``, ``gmpo_token_loss``, ``dppo_token_loss``,
``dro_token_loss``; api.md "Spec v1.1: policy losses of 2025-26") were checked in the same installed
code: trl 1.16.0 (``trl/trainer/grpo_trainer.py``, ``trl/experimental/gmpo/``), verl 0.9.1
(``verl/trainer/ppo/core_algos.py``, ``verl/workers/config/actor.py``), areal 1.0.4
(``areal/utils/functional/functional.py``, ``areal/api/cli_args.py``). SkyRL and ms-swift, which also
implement SAPO, are not installed and not checked.

``kl_loss_term`` (spec v1.1 kl.loss: the KL term's value and gradient in a loss) was checked in trl 1.16.0
(``grpo_trainer.py``, ``grpo_config.py``), verl 0.9.1 (``core_algos.py`` kl_penalty, ``workers/config/actor.py``)
and openrlhf 0.11.2 (``models/utils.py`` compute_approx_kl, ``cli/train_ppo_ray.py``); the estimator and
the gradient form are asked per call, each framework's knob for them is in kl.loss.md.

The entropy terms and controllers (``entropy_top_mask``, ``entropy_bonus``, ``kl_controller_update``,
``entropy_coef_update``, ``entropy_coef_applied``; api.md "Spec v1.1: entropy terms and coefficient
controllers") were checked in trl 1.16.0 (``grpo_trainer.py``, ``grpo_config.py``), verl 0.9.1
(``core_algos.py`` AdaptiveKLController, ``workers/utils/losses.py``) and openrlhf 0.11.2
(``trainer/ppo_utils/kl_controller.py``, ``trainer/ray/ppo_actor.py``): every framework default is
canonical or a required keyword's default; ms-swift and torchrl were read from their source (cited).

The reward shaping of spec v1.1 (``overlong_penalty``, ``shaped_rewards``; api.md "Spec v1.1: reward
shaping") was checked in trl 1.16.0 (``trl/rewards/other_rewards.py``), verl 0.9.1
(``verl/workers/reward_manager/dapo.py``), openrlhf 0.11.2 (``trainer/ppo_utils/length_penalty.py``,
``experience_maker.py``, ``models/utils.py``, ``cli/train_ppo_ray.py``) and areal 1.0.4 (the release
wheel: ``areal/utils/functional/functional.py``, ``areal/trainer/ppo/actor.py``, ``areal/api/cli_args.py``),
and read from the source of ms-swift (modelscope/ms-swift @ 20ec461, ``swift/rewards/orm.py``) and OAT
(sail-sg/oat @ 08379c6, ``oat/algorithms/ppo.py``); ``oat`` names only ``shaped_rewards``.

The covariance-selected tokens (``clip_cov_mask``, ``kl_cov_token_loss``; api.md "Spec v1.1:
covariance-selected tokens") were checked in verl 0.9.1 (``core_algos.py`` clip_cov / kl_cov,
``workers/config/actor.py``) and read from the source of SkyRL (NovaSky-AI/SkyRL @ 03d74ca,
``skyrl/backends/skyrl_train/utils/ppo_utils.py``; its config @ 14f8f9b); TRL, OpenRLHF and AReaL have
neither.

The advantage estimators of spec v1.1 (``reinforce_pp_advantages``, ``reinforce_pp_baseline_advantages``,
``remax_advantages``, ``opo_advantages``, ``grpo_passk_advantages``, ``gdpo_advantages``, ``maxrl_advantages``,
``gpg_advantages``; api.md "Spec v1.1: advantage estimators") and ``rloo_advantages``' ``singleton`` were
checked in verl 0.9.1 (``verl/trainer/ppo/core_algos.py`` registry, ``ray_trainer.py``), openrlhf 0.11.2
(``trainer/ppo_utils/experience_maker.py``) and trl 1.16.0 (``grpo_trainer.py``, GDPO), and read from the
source of SkyRL (NovaSky-AI/SkyRL @ 03d74ca, ``skyrl/backends/skyrl_train/utils/ppo_utils.py``) and ms-swift
(modelscope/ms-swift @ 070fedc, ``swift/rl_core/advantage.py``); a framework without an estimator has no
entry for it (its column reads "canonical" in the README table only by the convention above).

Every value below is a plain Python literal; this module imports nothing beyond ``typing``.
"""

from typing import Dict

__all__ = [
    "PRESET_NAMES",
    "FUNCTIONS",
    "PRESETS",
    "SCOPE",
    "REQUIRED_KEYWORD_DEFAULTS",
    "NOT_EXPRESSIBLE",
    "preset_kwargs",
]

# Every spec v1 function (api.md). `<name>_grad` takes the same keywords as `<name>`.
FUNCTIONS = (
    "token_logprobs",
    "token_entropy",
    "token_logprobs_from_hidden",
    "token_entropy_from_hidden",
    "reinforce_advantages",
    "rloo_advantages",
    "grpo_advantages",
    "rlhf_token_rewards",
    "gae",
    "whiten",
    "kl_penalty",
    "pg_token_loss",
    "ppo_token_loss",
    "gspo_token_loss",
    "cispo_token_loss",
    "value_token_loss",
    "aggregate",
    # spec v1.1 (api.md, "Spec v1.1: off-policy and asynchronous training")
    "rollout_is_weights",
    "rollout_rejection_mask",
    "decoupled_ppo_token_loss",
    "proximal_logp_interpolation",
    "off_policy_sequence_mask",
    "corrected_policy_loss",
    # spec v1.1 (api.md, "Spec v1.1: policy losses of 2025-26")
    "sapo_token_loss",
    "gmpo_token_loss",
    "dppo_token_loss",
    "dro_token_loss",
    "vespo_token_loss",
    # spec v1.1 (api.md, "Spec v1.1: covariance-selected tokens")
    "clip_cov_mask",
    "kl_cov_token_loss",
    # spec v1.1 (api.md, "Spec v1.1: the KL term in a loss")
    "kl_loss_term",
    # spec v1.1 (api.md, "Spec v1.1: entropy terms and coefficient controllers")
    "entropy_top_mask",
    "entropy_bonus",
    "kl_controller_update",
    "entropy_coef_update",
    "entropy_coef_applied",
    # spec v1.1 (api.md, "Spec v1.1: reward shaping")
    "overlong_penalty",
    "shaped_rewards",
    # spec v1.1 (api.md, "Spec v1.1: advantage estimators")
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "remax_advantages",
    "opo_advantages",
    "grpo_passk_advantages",
    "gdpo_advantages",
    "maxrl_advantages",
    "gpg_advantages",
)

PRESETS: Dict[str, Dict[str, Dict[str, object]]] = {
    "trl": {
        # trl/trainer/grpo_trainer.py:2761-2810 (1.16.0): A = (r - mean_g) / (std_g + 1e-4); std is the
        # unbiased, NaN-aware nanstd (trl/trainer/utils.py:1021), so std_ddof stays canonical (1).
        "grpo_advantages": {"eps": 1e-4},
        # trl/trainer/grpo_trainer.py:3098-3106 (1.16.0): the GRPO KL term is k3 only, no clamp.
        "kl_penalty": {"estimator": "k3"},
        # spec v1.1 kl.loss: grpo_trainer.py:3095-3105 (1.16.0): that k3 (canonical) times coef_1 =
        # exp(logp - old_logp) on the graph, with use_bias_correction_kl=True, the default
        # (grpo_config.py:972-982); False is gradient="estimator" (canonical).
        "kl_loss_term": {"gradient": "bias_corrected"},
        # trl/trainer/grpo_trainer.py:3084-3095 (1.16.0): importance_sampling_level="sequence" forms s
        # directly (the paper's form) and reuses epsilon=0.2, epsilon_high=epsilon
        # (trl/trainer/grpo_config.py:945-946), not the GSPO paper's 3e-4/4e-4.
        "gspo_token_loss": {"eps_low": 0.2, "eps_high": 0.2},
        # trl/trainer/grpo_trainer.py:3109-3111 (1.16.0): w = clamp(r, max=epsilon_high).detach(), an
        # absolute bound with no lower bound (eps_low=None is canonical). 5.0 is the value the
        # epsilon_high docs recommend for cispo; the bare config default would be epsilon_high =
        # epsilon = 0.2.
        "cispo_token_loss": {"bound": "absolute", "eps_high": 5.0},
        # trl/experimental/ppo/ppo_trainer.py:763-799 @ f2cd577: gamma 1.0 (canonical), lam 0.95.
        "gae": {"lam": 0.95},
        # trl/experimental/ppo/ppo_trainer.py:826-848 @ f2cd577: cliprange_value 0.2.
        "value_token_loss": {"clip": 0.2},
        # Canonical, so absent: ppo_token_loss (grpo_trainer.py:3083-3120: eps 0.2/0.2, no log-ratio
        # clamp, delta=None); whiten (ppo_trainer.py:237-270, :797 @ f2cd577: unbiased var,
        # rsqrt(var + 1e-8), shift_mean=True); rlhf_token_rewards (ppo_trainer.py:773-776: k1).
        # --- spec v1.1 ---
        # trl/trainer/grpo_config.py:934-961 (1.16.0): vllm_importance_sampling_mode="sequence_mask",
        # clip_max 3.0, clip_min None; trl/trainer/grpo_trainer.py:2660-2707: delta = (old - sampling)
        # * mask, summed per row for sequence_* (the product of ratios), exp, then masked_fill(ratio <
        # min | ratio > max, 0): inclusive bounds. No log-ratio clamp, no batch normalisation. Applied
        # only with use_vllm and vllm_importance_sampling_correction=True (grpo_config.py:925).
        "rollout_is_weights": {"level": "sequence", "mode": "mask", "hi": 3.0},
        # grpo_trainer.py:3140-3150: per_token_loss * off_policy_mask, then * importance_sampling_ratio,
        # then + beta * per_token_kl (not weighted), reduced over the original completion mask: a
        # rejected token's policy term is 0 but it still counts.
        "corrected_policy_loss": {"rejected": "zero"},
        # grpo_trainer.py get_gamma_weights (1.16.0, :2972-3018): each token log-ratio clamped to +-20, the
        # sequence log-ratio clamped to [log 1e-8, 20]; k/lambda defaults 2/3 and 3/2 (grpo_config.py:730-760)
        # are canonical. Its nan_to_num(posinf=0) never fires on the clamped log-ratio.
        "vespo_token_loss": {"log_ratio_clamp": 20.0, "w_min": 1e-8, "w_max": 485165195.4097903},
        # --- spec v1.1: advantage estimators ---
        # grpo_trainer.py:2790-2800 (1.16.0), multi_objective_aggregation="normalize_then_sum" (GDPO;
        # default "sum_then_normalize", grpo_config.py:777): per reward function (nanmean, unbiased nanstd
        # + 1e-4) over the group, weighted by reward_weights, summed, then (s - nanmean) / (nanstd + 1e-4)
        # over the gathered batch. No REINFORCE++, ReMax, OPO, pass@k, MaxRL or GPG in TRL.
        "gdpo_advantages": {"eps": 1e-4},
        # --- spec v1.1: reward shaping ---
        # Canonical, so absent: overlong_penalty (trl/rewards/other_rewards.py:83-138,
        # get_soft_overlong_punishment(max_completion_len, soft_punish_cache): DAPO eq. 13 with the factor
        # fixed at 1 and -1 beyond max_completion_len, boundaries inclusive as canonical; the length is
        # len(completion_ids), EOS included, grpo_trainer.py:1880-1888); shaped_rewards (TRL has no
        # truncation rule on rewards and no reward clip: mask_truncated_completions removes truncated
        # completions from the loss mask instead, grpo_trainer.py:2487-2492).
        # --- spec v1.1: policy losses of 2025-26 ---
        # Canonical, so absent: sapo_token_loss (loss_type="sapo", grpo_trainer.py:3121-3124: tau =
        # sapo_temperature_pos where A > 0 else sapo_temperature_neg, 1.0 / 1.05 by default,
        # grpo_config.py:714-729; coef_1 = exp(logp - old) with no clamp, :3083-3095); gmpo_token_loss
        # (trl/experimental/gmpo/gmpo_trainer.py:82-103: clamp(d, -epsilon_low, epsilon_high), minimum
        # for A > 0, maximum otherwise, exp of the masked mean; GMPOConfig epsilon 0.4,
        # gmpo_config.py:41-47, epsilon_high None -> epsilon, grpo_trainer.py:945-946).
        # loss_type="luspo" (grpo_trainer.py:3112-3120, :3175-3183) is no new function: with
        # importance_sampling_level="sequence" (which it requires, :916-920) it is
        # aggregate(gspo_token_loss(eps_low=0.2, eps_high=0.2), mode="seq_mean_token_sum").
        # Canonical, so absent: off_policy_sequence_mask (grpo_trainer.py:2945-2968, :3068-3081:
        # D = masked mean of sampling_logps - logps, keep A >= 0 or D <= off_policy_mask_threshold;
        # the threshold has no default: None = off, grpo_config.py:963).
    },
    "verl": {
        # verl/trainer/ppo/core_algos.py:268-331 @ 1dda039: unbiased torch.std + 1e-6 (canonical); a
        # singleton group gets mean 0 and std 1 (:315-317), i.e. A = r / (1 + 1e-6).
        "grpo_advantages": {"singleton": "raw"},
        # --- spec v1.1: advantage estimators (verl 0.9.1 release wheel, core_algos.py registry) ---
        # "rloo" (compute_rloo_outcome_advantage, :587-636): a one-sample group keeps its score (mean 0,
        # :622-623, and the n/(n-1) rescaling skipped, :628-633); "rloo_vectorized" (:833-868) gives 0 (canonical).
        "rloo_advantages": {"singleton": "raw"},
        # "reinforce_plus_plus_baseline" (:533-584): id2mean = 0 for a one-sample group (:572-573), then
        # masked_whiten over the response tokens (unbiased, + 1e-8; canonical level="token").
        "reinforce_pp_baseline_advantages": {"singleton": "raw"},
        # "opo" (:639-690): the baseline of a one-sample group is 0 (:678-679).
        "opo_advantages": {"singleton": "raw"},
        # "gpg" (:770-830): alpha = bsz / count_nonzero(scores).clamp(min=1) (:810-811), mean 0 for a
        # one-sample group (:817-818); f_norm = 1 (the trainer never passes it, ray_trainer.py:250-279).
        "gpg_advantages": {"singleton": "raw"},
        # Canonical, so absent: reinforce_pp_advantages ("reinforce_plus_plus", :693-731: the running
        # return skips masked positions, :720-726, then masked_whiten; gamma = algorithm.gamma);
        # remax_advantages ("remax", :734-767: return-to-go minus reward_baselines, the greedy reward
        # repeated per sample with interleave=True, ray_trainer.py:1534-1538); grpo_passk_advantages
        # ("grpo_passk", :471-530: torch.topk(rewards, 2), unbiased std + 1e-6; fewer than 2 samples
        # raise, as the spec does). gdpo is verl's per-reward grpo (singleton "raw") then masked_whiten over
        # tokens: see NOT_EXPRESSIBLE.
        # verl/trainer/ppo/core_algos.py:2187-2250 @ 1dda039: k3 ("low_var_kl", the default
        # kl_loss_type of the use_kl_loss path) clamps ref - logp to +-20 and the result to +-10. k1
        # and k2 are unclamped there, so this entry is the k3 loss-path default; verl's in-reward
        # default ("kl" = k1, unclamped) is canonical kl_penalty().
        "kl_penalty": {"estimator": "k3", "log_ratio_clamp": 20.0, "clamp": 10.0},
        # spec v1.1 kl.loss: actor.kl_loss_type defaults to "low_var_kl" (verl/workers/config/actor.py:176;
        # 0.9.1), k3 (canonical) with the clamps above. Its +-20 log-ratio clamp changes no value and no
        # gradient of any form once k3 is clamped at 10 (|d| >= 20 gives k3 >= 19: both clamps hold K at
        # 10 and pass no gradient), so the preset is OpenRLHF's. The "+" suffix is
        # gradient="straight_through" (core_algos.py:2200-2213: the clamps stay on the value, the gradient
        # is the raw d); "abs", k1 and k2 are unclamped (canonical once the estimator is asked).
        "kl_loss_term": {"clamp": 10.0},
        # verl/trainer/ppo/core_algos.py:1286-1376 @ 1dda039: log-ratio clamped to +-20; dual-clip
        # always on for A < 0 with clip_ratio_c = 3.0; clip_ratio 0.2/0.2 (canonical).
        "ppo_token_loss": {"dual_clip": 3.0, "log_ratio_clamp": 20.0},
        # verl/trainer/ppo/core_algos.py:1546-1619 @ 1dda039: stop-gradient GSPO-token form (:1589),
        # clip ratios from the actor config (clip_ratio default 0.2/0.2).
        "gspo_token_loss": {"form": "token_sg", "eps_low": 0.2, "eps_high": 0.2},
        # verl/trainer/ppo/core_algos.py:2047-2104 @ 1dda039: two-sided clamp(r, 1 - 0.2, 1 + 0.2)
        # in the relative (1 +- eps) form (bound="relative" is canonical).
        "cispo_token_loss": {"eps_low": 0.2, "eps_high": 0.2},
        # verl/trainer/ppo/core_algos.py:2124-2184 @ 1dda039: cliprange_value default 0.5.
        "value_token_loss": {"clip": 0.5},
        # Canonical, so absent: gae (core_algos.py:216-264, AlgoConfig gamma = lam = 1.0, masked
        # positions skipped); whiten (utils/torch_functional.py:329: unbiased, +1e-8);
        # rlhf_token_rewards (ray_trainer.py:78-117: k1, score at the last response token).
        # --- spec v1.1 (verl 0.9.1 release wheel) ---
        # verl/trainer/ppo/rollout_corr_helper.py:522-657: log_ratio = old - rollout (:849), clamped to
        # +-SAFETY_BOUND = 20 (:75, :575 token, :585 sequence sum) before exp; a float threshold (default
        # 2.0, :526) is TIS, clamp(max=upper) only (:596); "lo_hi" is IcePop, zero outside [lo, hi]
        # (:599); rollout_is="token" is the function's default (:525; RolloutCorrectionConfig's dataclass
        # default is "sequence", trainer/config/algorithm.py:179, and the YAML default null = off).
        "rollout_is_weights": {"log_ratio_clamp": 20.0},
        # verl decoupled mode = PPO against the recomputed old_log_prob times the IS weight of old vs
        # rollout: core_algos.py:1284-1376 (dual clip clip_ratio_c = 3.0 always on for A < 0, :1324;
        # pg_losses * rollout_is_weights, :1365) with the TIS weight min(rho, 2.0) above. The PPO
        # log-ratio clamp +-20 (:1338) has no decoupled keyword: see NOT_EXPRESSIBLE.
        "decoupled_ppo_token_loss": {"dual_clip": 3.0, "behav_cap": 2.0},
        # Canonical, so absent: corrected_policy_loss (rollout_corr_helper.py:412: the rejection mask
        # multiplies response_mask, so a rejected token leaves the loss and its denominator: "drop");
        # rollout_rejection_mask (rollout_corr_helper.py:197-414: k1 = -log_ratio
        # = rollout - old, k2, k3 = exp(log_ratio) - 1 - log_ratio, i.e. kl_of="rollout_old"; bounds have
        # no default, rollout_rs_threshold is required).
        # --- spec v1.1: policy losses of 2025-26 (verl 0.9.1 release wheel) ---
        # verl/trainer/ppo/core_algos.py:1622-1704 (loss_mode "sapo"): d = clamp(logp - old, -20, 20)
        # (:1666) before exp; tau = tau_pos where A > 0 else tau_neg (:1671-1675), ActorConfig 1.0 /
        # 1.05 (verl/workers/config/actor.py:167-168, canonical); L = -gate * A (:1681).
        "sapo_token_loss": {"log_ratio_clamp": 20.0},
        # core_algos.py:1928-2011 (loss_mode "geo_mean"): the log-space clip range is clip_ratio_low /
        # clip_ratio_high (:1959-1961, :1978), ActorConfig 0.2 / 0.2 (actor.py:158-160), not the paper's
        # 0.4; sign-aware min (:1977-1980); no log-ratio clamp (:1973 is commented out).
        "gmpo_token_loss": {"eps_low": 0.2, "eps_high": 0.2},
        # core_algos.py:1379-1457 (loss_mode "dppo_tv" -> divergence "tv", canonical) and :1460-1542
        # ("dppo_kl" -> divergence "kl"): delta_low / delta_high = clip_ratio_low / clip_ratio_high
        # (:1413-1416, :1494-1497), 0.2 / 0.2 (canonical); d clamped to +-20 (:1420, :1501); the weight
        # is clamp(ratio, max=clip_ratio_c).detach() (:1427-1429, :1508-1510) with ActorConfig
        # clip_ratio_c = 3.0 (actor.py:163, the dual-clip constant of vanilla PPO; the 20.0 of
        # config.get is only a fallback for a config without the key); keep uses A > 0 (:1436, :1520).
        "dppo_token_loss": {"ratio_cap": 3.0, "log_ratio_clamp": 20.0},
        # Canonical, so absent: dro_token_loss (core_algos.py:2014-2044: -(logp * A - 0.5 * beta * d^2),
        # :2033; beta = policy_loss.dro_beta, default null, actor.py:100, ValueError unless > 0,
        # :2028-2030: beta has no default, as in the spec). loss_mode "gpg" (:1707-1740) is no new
        # function: pg_token_loss, -logp * A (:1731).
        # --- spec v1.1: reward shaping (verl 0.9.1 release wheel) ---
        # verl/workers/reward_manager/dapo.py:121-127 (DAPORewardManager, and its twin in
        # experimental/reward_loop/reward_manager/dapo.py:108-114): min(-(L - (max_resp_len - len)) / len *
        # penalty_factor, 0), no floor beyond max_resp_len; L = the response's attention-mask count (:82).
        # No truncation rule and no reward clip in verl: shaped_rewards is canonical (absent).
        "overlong_penalty": {"beyond": "linear"},
        # --- spec v1.1: covariance-selected tokens (verl 0.9.1 release wheel) ---
        # Canonical, so absent (the spec's defaults are verl's): clip_cov_mask (loss_mode "clip_cov",
        # core_algos.py:1743-1845: clip_cov_ratio / clip_cov_lb / clip_cov_ub = 2e-4 / 1.0 / 5.0,
        # verl/workers/config/actor.py:95-97; the PPO clip range clip_ratio_low / clip_ratio_high 0.2 / 0.2;
        # candidates lb < cov < ub (:1819) off the clipped branch (:1810, :1816); max(int(ratio * N), 1)
        # of them cut, :1818) and kl_cov_token_loss (loss_mode "kl_cov", :1848-1925: kl_cov_ratio 2e-4,
        # ppo_kl_coef 0.1, actor.py:98-99; the 1.0 of :1885 is only a fallback for a config without it).
    },
    "openrlhf": {
        # openrlhf/trainer/ppo_utils/experience_maker.py:268-274 (0.11.2): group_norm is
        # (r - mean) / (r.std(-1) + 1e-9), unbiased.
        "grpo_advantages": {"eps": 1e-9},
        # --- spec v1.1: advantage estimators (openrlhf 0.11.2) ---
        # trainer/ppo_utils/experience_maker.py:282-322, :390-421 (estimator "reinforce"): the rewards of
        # compute_reward (KL reward per token plus the score, a composition with rlhf_token_rewards) are
        # multiplied by the action mask and accumulated over every position, masked ones included
        # (cumulative_return = r_t + gamma * cumulative_return, :414-419: gap="discount"); then whitened
        # over all action tokens with the biased variance (:325-339).
        "reinforce_pp_advantages": {"gap": "discount", "std_ddof": 0},
        # experience_maker.py:271-272 ("reinforce_baseline": r - group mean), gamma forced to 1 (:308-310),
        # the same biased whitening (:325-339). n = 1 is blocked at the CLI.
        "reinforce_pp_baseline_advantages": {"std_ddof": 0},
        # openrlhf/models/utils.py:69-128 (0.11.2): every estimator's output is clamped to [-10, 10].
        # The k3 input clamp (d >= -10) never changes a value or gradient once the output is
        # clamped at 10, so no log_ratio_clamp is needed.
        "kl_penalty": {"clamp": 10.0},
        # spec v1.1 kl.loss: the same compute_approx_kl, every estimate clamped to [-10, 10] whatever the
        # estimator (asked per call; --algo.kl.estimator defaults to "k1", cli/train_ppo_ray.py:449-452);
        # --algo.kl.unbiased_gradient (off by default, :458-465) is gradient="unbiased" with the weight
        # capped at KL_IS_WEIGHT_CLIP = 10 (models/utils.py:66, :115-128; weight_cap=10.0 is canonical).
        "kl_loss_term": {"clamp": 10.0},
        # openrlhf/trainer/ppo_utils/experience_maker.py:325-339 (0.11.2): biased variance over all
        # tokens. OpenRLHF floors the variance (clamp(min=1e-8)) where the spec adds eps; that part
        # is listed in NOT_EXPRESSIBLE.
        "whiten": {"std_ddof": 0},
        # openrlhf/models/loss.py:116-259 (0.11.2): log-ratio clamped to +-20 for "ppo"; dual_clip None
        # by default; clip_eps 0.2/0.2.
        "ppo_token_loss": {"log_ratio_clamp": 20.0},
        # openrlhf/models/loss.py:189-196 (0.11.2): direct sequence ratio (canonical form), PolicyLoss
        # clip eps 0.2/0.2, no clamp.
        "gspo_token_loss": {"eps_low": 0.2, "eps_high": 0.2},
        # openrlhf/models/loss.py:262-298 (0.11.2): V_old + clamp(V - V_old, +-clip); CLI value_clip 0.5.
        "value_token_loss": {"clip": 0.5},
        # Canonical, so absent: gae (experience_maker.py:343-387, CLI gamma = lam = 1);
        # rlhf_token_rewards estimator (k1). No CISPO in OpenRLHF.
        # --- spec v1.1 (openrlhf 0.11.2) ---
        # openrlhf/models/loss.py:126-131 and cli/train_ppo_ray.py:261-289: is_correction_mode "mask",
        # gating "ratio", threshold [0.5, 5.0] (level "off" by default; "token" is the canonical level).
        # loss.py:219-239: rho = exp(old - rollout); keep = (rho >= 0.5) & (rho <= 5.0); coef = where(keep,
        # rho, 0). ("clip" mode: clamp(rho, 0.5, 5.0) = mode="truncate" with the same bounds.)
        "rollout_is_weights": {"mode": "mask", "lo": 0.5, "hi": 5.0},
        # loss.py:223-238: the same gate as a keep mask on the ratio (level "seq": level="seq_mean", the
        # geometric mean of rho).
        "rollout_rejection_mask": {"lo": 0.5, "hi": 5.0},
        # loss.py:235-241: the PPO loss times coef (0 where the gate rejects), reduced over action_mask:
        # rejected tokens still count.
        "corrected_policy_loss": {"rejected": "zero"},
        # --- spec v1.1: reward shaping (openrlhf 0.11.2) ---
        # trainer/ppo_utils/length_penalty.py:16-58 (apply_overlong_penalty): exceed = min(L - (max_new_tokens
        # - buffer), buffer), penalised when exceed > 0: -exceed / buffer * factor, floored at -factor
        # (canonical; --reward.overlong_penalty_factor 1, cli/train_ppo_ray.py:532-535). buffer 0: see
        # NOT_EXPRESSIBLE. --reward.stop_properly_penalty_coef (:536-542, off) is truncated_scale (coef in
        # [0, 1]) or truncated_value (coef < 0), length_penalty.py:83-104; then models/utils.py:141-142
        # clamps the reward to --reward.clip_range, default (-10, 10) (cli/train_ppo_ray.py:474).
        "shaped_rewards": {"clip_low": -10.0, "clip_high": 10.0},
    },
    "open_instruct": {
        # open_instruct/data_loader.py:1472-1484 @ e6c3044: numpy std, biased (ddof=0), "standard" is
        # (r - mean) / (std + 1e-8); the default advantage_normalization_type is "centered"
        # (data_loader.py:421), i.e. r - mean, scale="none". Override scale="group" for "standard".
        "grpo_advantages": {"scale": "none", "std_ddof": 0, "eps": 1e-8},
        # open_instruct/model_utils.py:793-818 and grpo_utils.py:530-538 @ e6c3044: default estimator
        # index 2 = expm1(-d) + d (k3), with d clamped to +-40 first and no output clamp.
        "kl_penalty": {"estimator": "k3", "log_ratio_clamp": 40.0},
        # spec v1.1 kl.loss: the same k3 in the loss, differentiated as computed (gradient="estimator").
        "kl_loss_term": {"log_ratio_clamp": 40.0},
        # open_instruct/grpo_utils.py:504-538 @ e6c3044: clip(r, 1 - 0.2, 1 + 0.272), no clamp on r.
        "ppo_token_loss": {"eps_high": 0.272},
        # open_instruct/grpo_utils.py:518-521 @ e6c3044: clamp(r.detach(), max=1 + clip_higher), one-sided,
        # relative form; clip_higher default 0.272.
        "cispo_token_loss": {"eps_high": 0.272},
        # No GAE/whitening in grpo_fast, no GSPO, no RLOO.
    },
    "rlhf_book": {
        # code/policy_gradients/utils.py:185-187 @ a66b0bf: (r - mean) / (r.std(dim=0) + 1e-8), unbiased.
        "grpo_advantages": {"eps": 1e-8},
        # code/policy_gradients/loss.py:131-167 @ a66b0bf: direct sequence ratio; clip_eps_lo/hi from
        # config.py Config defaults 0.2/0.2 (configs/gspo.yaml also 0.2/0.2).
        "gspo_token_loss": {"eps_low": 0.2, "eps_high": 0.2},
        # code/policy_gradients/loss.py:202-235 @ a66b0bf: clamp(r, 1 - lo, 1 + hi) under no_grad,
        # two-sided; config.py defaults 0.2/0.2 (the shipped configs/cispo.yaml sets clip_eps_hi 0.4).
        "cispo_token_loss": {"eps_low": 0.2, "eps_high": 0.2},
        # code/policy_gradients/loss.py:279-353 @ a66b0bf: 0.5 * max((R - V)^2, (R - clip(V, V_old +-
        # 0.2))^2); clip_eps_val default 0.2 (config.py).
        "value_token_loss": {"clip": 0.2},
        # code/policy_gradients/utils.py:211-238 @ a66b0bf: defaults gamma 0.99, lam 0.95 (config.py).
        "gae": {"gamma": 0.99, "lam": 0.95},
        # Canonical, so absent: ppo_token_loss (loss.py:93-128, 279-353: 0.2/0.2, no clamp);
        # rloo_advantages (utils.py:205-208: K/(K-1)(r - mean) = leave-one-out). kl_penalty's default
        # kl3 (and kl1) are not Schulman's estimators: see NOT_EXPRESSIBLE.
    },
    "areal": {
        # areal/utils/functional/functional.py:185-426 (apply_rejection_sampling) with the
        # RejectionSamplingConfig defaults level="token", action="mask", metric="ratio", agg="mean",
        # upper=5.0, lower=None (areal/api/cli_args.py:1316-1380). "kl_k1..3" call
        # KLEstimator._compute_approx_kl(proximal, behave) (functional.py:242), i.e. d = proximal -
        # behave (areal/utils/data.py:1620-1656: k1 = d, k2 = d^2/2, k3 = exp(-d) - 1 + d), which is
        # kl_of="old_rollout" with old = proximal and rollout = behaviour.
        "rollout_rejection_mask": {"kl_of": "old_rollout", "hi": 5.0},
        # functional.py:231, :391-400, :420: w = exp(proximal - behave) zeroed where rejected (ratio, token,
        # mask); action="clamp" is mode="truncate" with lo = lower.
        "rollout_is_weights": {"mode": "mask", "hi": 5.0},
        # functional.py:429-560 (ppo_actor_loss_fn): PPO against proximal_logprobs, times
        # behave_imp_weight = the masked w above (:539); the denominator counts rejected tokens
        # (:483), as aggregate(mode="token_mean") over the original mask does. Only when
        # rejection_sampling is set: see NOT_EXPRESSIBLE.
        "decoupled_ppo_token_loss": {"behav_cap": 5.0, "behav_mode": "mask"},
        # functional.py:483: the loss denominator counts rejected tokens (their weight is 0).
        "corrected_policy_loss": {"rejected": "zero"},
        # Canonical, so absent: proximal_logp_interpolation (areal/trainer/ppo/actor.py:604-685:
        # alpha = clamp((v - 1 - v_b)/(v - v_b), 0, 1), 0 where v - v_b <= 0; prox_logp_method
        # "loglinear").
        # --- spec v1.1: policy losses of 2025-26 ---
        # Canonical, so absent: sapo_token_loss (areal/utils/functional/functional.py:562-638,
        # use_sapo_loss: r = exp(logp - old) with no clamp (:601), tau_pos where A > 0 (:617);
        # sapo_tau_pos / sapo_tau_neg 1.0 / 1.05, areal/api/cli_args.py:1533-1540).
        # --- spec v1.1: reward shaping (areal 1.0.4 release wheel) ---
        # areal/utils/functional/functional.py:782-804 (reward_overlong_penalty, "modified from VERL"):
        # min(-(L - (max_new_tokens - overlong_tokens)) / overlong_tokens * overlong_penalty_factor, 0), no
        # floor; L = loss_mask.sum(-1) (:790). Both settings have no default (areal/api/cli_args.py:1495-1502).
        "overlong_penalty": {"beyond": "linear"},
        # areal/trainer/ppo/actor.py:167-171: (r + reward_bias) * reward_scaling, clipped to +-reward_clip,
        # default 20.0 (cli_args.py:1488-1490; bias 0 and scaling 1 by default); mask_no_eos_with_zero
        # (off, :1503-1508) is truncated_value=0.0 (actor.py:207-210; applied after the clip, the same
        # result since 0 lies inside +-reward_clip).
        "shaped_rewards": {"clip_low": -20.0, "clip_high": 20.0},
    },
    # --- frameworks without an adapter yet: the quantities read from their source (cited per line) ---
    "skyrl": {
        # NovaSky-AI/SkyRL @ 03d74ca, skyrl/backends/skyrl_train/utils/ppo_utils.py
        # compute_policy_loss_cispo: -A * clamp(exp(clamp(d, +-20)), 1 - cispo_eps_clip_low,
        # 1 + cispo_eps_clip_high).detach() * logp; CISPOConfig defaults 0.0 / 5.0
        # (skyrl/train/config/config.py): w in [1, 6]. The +-20 log clamp cannot move w inside [1, 6].
        "cispo_token_loss": {"eps_low": 0.0, "eps_high": 5.0},
        # NovaSky-AI/SkyRL @ 03d74ca, ppo_utils.py compute_policy_loss_kl_cov: verl's KL-Cov with
        # KLCovConfig kl_cov_frac = 0.2 and ppo_kl_coef = 1.0 (skyrl/train/config/config.py @ 14f8f9b);
        # compute_policy_loss_clip_cov with ClipCovConfig 2e-4 / 1.0 / 5.0 and eps_clip_low / _high 0.2 is
        # canonical (absent).
        "kl_cov_token_loss": {"fraction": 0.2, "coef": 1.0},
        # NovaSky-AI/SkyRL @ 03d74ca, ppo_utils.py compute_reinforce_plus_plus_outcome_advantage ("ported
        # from verl"): running = r_t + gamma * running, then running *= response_mask[t] ("Reset after
        # EOS"): a masked position inside a completion ends the return (gap="reset"), then masked_whiten
        # (unbiased, + 1e-8). That reset is the behaviour verl#6376/#7278 fixed in verl.
        "reinforce_pp_advantages": {"gap": "reset"},
        # ppo_utils.py compute_maxrl_advantage: (r - mean) / (mean + 1e-6) for groups of 2 or more; a
        # one-sample group gets r - 0 (singleton "raw"). compute_rloo_outcome_advantage gives a
        # one-sample group 0 (canonical).
        "maxrl_advantages": {"singleton": "raw"},
    },
    "torchrl": {
        # pytorch/rl, torchrl/objectives/llm/grpo.py CISPOLoss._compute_policy_objective: the loss
        # -exp(clamp(log w, log(1 - eps_low), log(1 + eps_high))) * A, the clamped ratio on the graph and
        # no log-prob factor; clip_epsilon default 0.2 (GRPOLoss.__init__, symmetric).
        "cispo_token_loss": {"eps_low": 0.2, "eps_high": 0.2, "surrogate": "ratio"},
    },
    "ms_swift": {
        # modelscope/ms-swift 4.6.0, swift/rlhf_trainers/grpo_trainer.py (loss_type == 'cispo'):
        # torch.clamp(coef_1, max=self.epsilon_high).detach(), an absolute cap, epsilon_high defaulting
        # to epsilon = 0.2 (GRPOArgumentsMixin): the weight is min(r, 0.2).
        "cispo_token_loss": {"bound": "absolute", "eps_high": 0.2},
        # modelscope/ms-swift @ 20ec461, swift/rewards/orm.py class SoftOverlong (reward function
        # "soft_overlong"): min(-(len(response_token_ids) - (soft_max_length - soft_cache_length)) /
        # soft_cache_length, 0): no factor (factor=1.0, canonical) and no floor; asserts
        # soft_cache_length < soft_max_length.
        "overlong_penalty": {"beyond": "linear"},
        # modelscope/ms-swift @ 070fedc, swift/rl_core/advantage.py compute_advantages:
        # advantage_estimator="reinforce_plus_plus" is a = r - group mean divided by (a.std() + 1e-4) over the
        # batch's sequences (no token whitening, no return-to-go): reinforce_pp_baseline_advantages at
        # level="sequence"; scale_rewards defaults to "batch" for it (swift/arguments/rlhf_args.py
        # _init_grpo @ 0bd9b55). scale_rewards="group" divides by the group std instead: grpo_advantages(eps=1e-4).
        "reinforce_pp_baseline_advantages": {"level": "sequence", "eps": 1e-4},
        # advantage.py (scale_rewards="gdpo"): per reward function nanmean and unbiased nanstd + 1e-8
        # (swift/utils/torch_utils.py nanstd @ 006938be), nan_to_num, weighted sum, then
        # (s - s.mean()) / (s.std() + 1e-8).
        "gdpo_advantages": {"eps": 1e-8},
    },
    "oat": {
        # Canonical, so absent: shaped_rewards (sail-sg/oat @ 08379c6, oat/algorithms/ppo.py PPOActor.step:
        # a completion with finish_reason == "length" gets reward = non_stop_fixed_reward when set
        # (truncated_value, PPOArgs default None), then += non_stop_penalty (truncated_shift, default 0);
        # no reward clip. The learner then multiplies by reward_scale (default 1), after the rule.
    },
}

PRESET_NAMES = tuple(PRESETS)

# Presets whose framework code was read for some functions only (documentation: outside its scope a
# function is "not read", not "canonical"). A preset absent here was read for every function.
SCOPE: Dict[str, tuple] = {
    "areal": ("rollout_is_weights", "rollout_rejection_mask", "decoupled_ppo_token_loss",
              "proximal_logp_interpolation", "off_policy_sequence_mask", "corrected_policy_loss",
              "sapo_token_loss", "overlong_penalty", "shaped_rewards"),
    "skyrl": ("cispo_token_loss", "reinforce_pp_advantages", "maxrl_advantages", "rloo_advantages", "clip_cov_mask",
              "kl_cov_token_loss"),
    "torchrl": ("cispo_token_loss", "entropy_bonus"),
    "ms_swift": ("cispo_token_loss", "entropy_top_mask", "overlong_penalty", "reinforce_pp_baseline_advantages",
                 "gdpo_advantages", "rloo_advantages"),
    "oat": ("shaped_rewards",),
}

# Framework defaults for keywords that api.md declares without a canonical default. Documentation
# only: `preset_kwargs` never returns these (the caller picks them per call).
REQUIRED_KEYWORD_DEFAULTS: Dict[str, Dict[str, Dict[str, object]]] = {
    "trl": {
        # trl/trainer/grpo_trainer.py:3153-3184 (1.16.0): default loss_type "dapo" = global token mean
        # (num_tokens = num_items_in_batch, :2498).
        "aggregate": {"mode": "token_mean"},
        # trl/experimental/ppo/ppo_trainer.py:773-776 @ f2cd577: PPO kl_coef 0.05 (k1 in the reward).
        "rlhf_token_rewards": {"kl_coef": 0.05},
        # spec v1.1 loss.entropy: grpo_config.py:876-885, grpo_trainer.py:3192-3211 (1.16.0): entropy_coef
        # 0.0 (off); the bonus is a token mean whatever loss_type.
        "entropy_bonus": {"entropy_coef": 0.0, "mode": "token_mean"},
    },
    "verl": {
        # verl/trainer/ppo/core_algos.py:1140-1207 @ 1dda039: loss_agg_mode default "token-mean".
        "aggregate": {"mode": "token_mean"},
        # verl/trainer/ppo/ray_trainer.py:78-117 @ 1dda039: fixed KL coef 0.001 (use_kl_in_reward off).
        "rlhf_token_rewards": {"kl_coef": 0.001},
        # spec v1.1 loss.entropy: workers/config/actor.py:166 (0.9.1) entropy_coeff 0; the bonus is
        # aggregated with the actor's loss_agg_mode (default token-mean), workers/utils/losses.py:122-128.
        "entropy_bonus": {"entropy_coef": 0.0, "mode": "token_mean"},
        # spec v1.1 ctrl.kl: trainer/config/algorithm.py:37-39 (0.9.1) target_kl 0.1, horizon 10000
        # (kl_ctrl.type "fixed" by default: the adaptive controller is opt-in).
        "kl_controller_update": {"target": 0.1, "horizon": 10000},
    },
    "openrlhf": {
        # openrlhf/models/loss.py:11-39 (0.11.2): token_level_loss=True for every loss except gspo.
        "aggregate": {"mode": "token_mean"},
        # openrlhf/models/utils.py:131-158 (0.11.2): init_coef 0.01, k1 in the reward.
        "rlhf_token_rewards": {"kl_coef": 0.01},
        # spec v1.1 loss.entropy: trainer/ray/ppo_actor.py:345-353 (0.11.2): aggregate_loss's token mean;
        # --actor.entropy_coef defaults to None (off), cli/train_ppo_ray.py:468-473.
        "entropy_bonus": {"mode": "token_mean"},
        # spec v1.1 ctrl.kl: cli/train_ppo_ray.py:436-438 (0.11.2) --algo.kl.horizon 10000; --algo.kl.target
        # None selects the FixedKLController (trainer/ppo_trainer.py:171-176).
        "kl_controller_update": {"horizon": 10000},
    },
    "open_instruct": {
        # open_instruct/grpo_utils.py:651-689, rl_utils.py:426-448 @ e6c3044: loss_denominator="token".
        "aggregate": {"mode": "token_mean"},
    },
    "rlhf_book": {
        # code/policy_gradients/loss.py:93-235 @ a66b0bf: masked_mean(..., dim=-1).mean(0) in every loss
        # class except DAPO.
        "aggregate": {"mode": "seq_mean_token_mean"},
    },
    "torchrl": {
        # pytorch/rl @ 00988440, torchrl/objectives/llm/grpo.py GRPOLoss.__init__: entropy_bonus=True,
        # entropy_coeff=0.01, aggregation="token_mean"; loss_entropy = -entropy_coeff * entropy, aggregated
        # like the policy term (GRPOLoss.forward): an entropy bonus on by default.
        "entropy_bonus": {"entropy_coef": 0.01, "mode": "token_mean"},
    },
}

# Default behaviours that no v1 keyword expresses (one line each). Documentation only.
NOT_EXPRESSIBLE: Dict[str, Dict[str, tuple]] = {
    "trl": {
        "gdpo_advantages": (
            "a completion every reward function scored None is NaN, left out of the nanmean/nanstd and "
            "given A = 0 (grpo_trainer.py:2759, :2797, :2810); the spec raises on NaN rewards.",
        ),
        "token_logprobs": (
            "PPO divides logits by (temperature + 1e-7) and fills masked positions with 1.0 "
            "(experimental/ppo/ppo_trainer.py:711-714, :69, :765 @ f2cd577).",
        ),
        "kl_loss_term": (
            "use_bias_correction_kl with importance_sampling_level='sequence' multiplies k3 by GSPO's "
            "sequence ratio s_b = exp(masked mean of logp - old_logp), one per row (grpo_trainer.py:"
            "3086-3088, :3104-3105); kl_loss_term's ratio is the token's (checked as the composition "
            "k3 * s_b: the trl.grpo_loss[*,sequence,beta=0.04] rows).",
        ),
        "rloo_advantages": (
            "RLOOTrainer subtracts beta * sum_t k1 from the reward first and divides by the "
            "scorable count (rloo_trainer.py:1664-1699); compose rlhf_token_rewards(...).sum(-1) "
            "then rloo_advantages.",
        ),
        "ppo_token_loss": (
            "RLOOTrainer clips a sequence-level ratio exp(sum_t logp - sum_t old) "
            "(rloo_trainer.py:1794-1863); not a per-token loss.",
        ),
        "rlhf_token_rewards": (
            "PPO adds the score at seq_len + 1, one slot past the last non-pad token "
            "(experimental/ppo/ppo_trainer.py:778-779 @ f2cd577).",
        ),
        "gae": (
            "PPO runs the recursion over the full width with a value mask one longer than the "
            "policy mask (experimental/ppo/ppo_trainer.py:764-770 @ f2cd577).",
        ),
        "aggregate": (
            "loss_type='bnpo' is a mean of local micro-batch token means divided by GA "
            "(grpo_trainer.py:3153-3184); not one aggregate over the whole batch.",
        ),
        "rollout_is_weights": (
            "a NaN sampling log-prob (vLLM could not score the token) gives delta = 0, rho = 1 "
            "(grpo_trainer.py:2665); the spec raises on NaN at a valid token.",
        ),
        "off_policy_sequence_mask": (
            "a NaN sampling log-prob counts as 0 in the row's sum but the token still counts in n_b "
            "(grpo_trainer.py:2961-2964); the spec raises on NaN at a valid token. OPSM reads "
            "sampling_per_token_logps (the vLLM log-probs) when present, else old_per_token_logps "
            "(:3073): pass those as old_logp.",
        ),
        "sapo_token_loss": (
            "importance_sampling_level='sequence' gates the GSPO sequence ratio exp(masked mean of d) "
            "(grpo_trainer.py:3084-3095, :3121-3124): one call of sapo_token_loss cannot, but the "
            "composition sapo_token_loss at the row means of logp and old_logp expresses it (checked: "
            "trl.grpo_loss[sapo,sequence,*] rows).",
            "loss_type='sapo' is reduced like 'grpo', a mean of row token-means per micro-batch divided "
            "by GA (:3153-3157); aggregation is a separate call.",
        ),
        "gmpo_token_loss": (
            "GMPOTrainer takes a [B] advantage only (advantages.unsqueeze(1), "
            "experimental/gmpo/gmpo_trainer.py:90); top_entropy_quantile < 1 drops low-entropy tokens "
            "from the geometric mean (:69-72, :98).",
            "the KL term is a sequence mean added per sequence and the loss is a per-micro-batch mean "
            "over sequences divided by GA (gmpo_trainer.py:109-122).",
        ),
        "decoupled_ppo_token_loss": (
            "PPO against old_per_token_logps times the vLLM IS weight (grpo_trainer.py:3146-3147) is "
            "decoupled_ppo_token_loss(behav_cap=3.0) only for token_truncate (behav_mode='mask' for "
            "token_mask); the default sequence_mask weight is one per row, and clip_min has no "
            "decoupled keyword.",
        ),
        "entropy_top_mask": (
            "get_high_entropy_mask takes torch.quantile of the gathered entropies (grpo_trainer.py:1413), "
            "which refuses more than 2**24 elements: a batch with more valid tokens over all ranks raises "
            "RuntimeError.",
            "the quantile is taken of float32 copies (.float(), :1397): float64 entropies meet a rounded "
            "threshold, and a tie at it (rho = 0 or 1) can be lost.",
        ),
        "entropy_bonus": (
            "the bonus is each micro-batch's own token mean divided by the accumulation steps "
            "(grpo_trainer.py:3199-3201): not the step's token mean when micro-batches or ranks hold "
            "different token counts (no global num_tokens).",
        ),
        "entropy_coef_update": (
            "a step without valid tokens measures entropy sum / clamp(count, 1) = 0 "
            "(grpo_trainer.py:3229-3230), below any positive target: the coefficient rises.",
        ),
    },
    "verl": {
        "gdpo_advantages": (
            "the batch step is masked_whiten over the response tokens (core_algos.py:466: unbiased, "
            "rsqrt(var + 1e-8), every token one sample): the composition whiten(gdpo_advantages("
            "batch_normalize=False, singleton='raw') on every valid token, mask) (checked: verl.gdpo rows).",
        ),
        "reinforce_pp_advantages": (
            "masked_whiten raises on a mask sum of 0 or 1 (utils/torch_functional.py:311-326); the spec "
            "returns 0 (also reinforce_pp_baseline_advantages).",
            "with rewards at masked positions, reward * mask turns a NaN or inf there into NaN "
            "(core_algos.py:721, :725-726); the spec never reads them.",
        ),
        "opo_advantages": (
            "a group whose rows have no response token divides 0 by 0: NaN advantages (core_algos.py:683); "
            "the spec gives 0.",
        ),
        "remax_advantages": (
            "the advantage is the return-to-go minus the baseline at each token (core_algos.py:764-765): "
            "with a per-token (KL) reward it varies along the row; the spec's is the sequence reward.",
        ),
        "gspo_token_loss": (
            "log s is clamped at max 10 before exp (core_algos.py:1546-1619); gspo_token_loss has "
            "no log-ratio clamp keyword.",
            "main hard-codes seq-mean-token-mean for GSPO (:1605) while 0.9.1 uses loss_agg_mode "
            "(token-mean); aggregation is a separate call.",
        ),
        "whiten": (
            "masked_whiten raises on a mask sum of 0 or 1 (utils/torch_functional.py:329); the "
            "spec returns 0.",
        ),
        "rollout_rejection_mask": (
            "every statistic is computed from log_ratio clamped to +-20 (rollout_corr_helper.py:262); "
            "rollout_rejection_mask has no clamp keyword (differs only where some |delta| > 20).",
            "k1 options compare k1 = rollout - old with [log lo, log hi] (:263, :316), i.e. they bound "
            "pi_rollout/pi_old: rollout_rs='token_k1' with 'lo_hi' equals rollout_rejection_mask("
            "statistic='k1', lo=log(lo), hi=log(hi)) = (statistic='ratio', lo=1/hi, hi=1/lo), not "
            "IcePop's ratio bounds [lo, hi] unless lo*hi = 1 (a single value sets lo = 1/hi, :164).",
            "masked_mean divides by n_b + 1e-8 (utils/torch_functional.py:308) for seq_mean_*: a "
            "relative 1e-8/n_b below every tolerance.",
        ),
        "rollout_is_weights": (
            "batch_normalize divides by masked_mean, whose count carries + 1e-8 "
            "(utils/torch_functional.py:308): float64 results are only float32-precise.",
            "a batch with no valid token raises ValueError (rollout_corr_helper.py:837-838); the spec "
            "returns zeros (also for rollout_rejection_mask).",
        ),
        "sapo_token_loss": (
            "the loss is always reduced seq-mean-token-mean whatever loss_agg_mode "
            "(core_algos.py:1688-1690), with n_b + 1e-8 per row and empty rows left out of the local "
            "count (:1195-1202); aggregation is a separate call.",
        ),
        "gmpo_token_loss": (
            "rho and the row advantage divide by n_b + 1e-8 (core_algos.py:1984, :1987): a relative "
            "1e-8/n_b below every tolerance.",
            "the loss is torch.mean over the micro-batch's rows whatever loss_agg_mode (:2000): "
            "aggregate(mode='seq_mean_token_mean') per micro-batch (empty rows count, with loss 0).",
            "rollout IS weights enter as their per-row geometric mean with 1e-10 inside the log "
            "(:1993-1998), not per token.",
        ),
        "clip_cov_mask": (
            "the tokens cut are drawn by torch.randperm over the candidates (core_algos.py:1823): "
            "not reproducible; the spec takes the draw as its draws input.",
            "the covariance is centred with masked_mean, whose count carries + 1e-8 "
            "(utils/torch_functional.py:308): a relative 1e-8/N below every tolerance.",
            "computed per micro-batch (the batch the loss function is handed): N, n and the means are "
            "the micro-batch's; the spec's quantity is of the batch passed in.",
        ),
        "kl_cov_token_loss": (
            "torch.topk's order among equal covariances is unspecified (core_algos.py:1907); the spec "
            "selects the earlier token in row-major order.",
            "computed per micro-batch (the batch the loss function is handed): N, n and the means are "
            "the micro-batch's; the spec's quantity is of the batch passed in.",
        ),
        "dppo_token_loss": (
            "the binary KL's second log is log((1 - p_old + 1e-8) / (1 - p + 1e-8)) (core_algos.py:"
            "1515-1517): D differs where p or p_old lies within ~1e-8 of 1 (finite, not +inf, at p = 1).",
        ),
        "decoupled_ppo_token_loss": (
            "the PPO log-ratio log_prob - old_log_prob is clamped to +-20 (core_algos.py:1338); "
            "decoupled_ppo_token_loss has no log_ratio_clamp keyword.",
            "rollout_is='sequence' weights (the product over the row) are not a per-token cap.",
        ),
    },
    "openrlhf": {
        "reinforce_pp_advantages": (
            "estimator 'reinforce' adds the KL reward first: a composition, reinforce_pp_advantages("
            "rlhf_token_rewards(scores, logp, ref_logp, mask, kl_coef), mask, gamma) (checked: the "
            "openrlhf.advantages[reinforce,*] rows).",
            "the whitening floors the variance, var.clamp(min=1e-8).rsqrt() (experience_maker.py:333), "
            "where the spec adds eps (also reinforce_pp_baseline_advantages): a relative 1e-8/(2 var).",
        ),
        "token_entropy": (
            "entropy is computed on logits before the temperature division (models/actor.py:275 vs "
            ":285); call token_entropy(temperature=1.0) explicitly.",
        ),
        "rlhf_token_rewards": (
            "the KL inside the reward is clamped to [-10, 10] and the score is clipped to "
            "reward.clip_range (-10, 10) (models/utils.py:69-158); rlhf_token_rewards has no clamp "
            "keyword.",
        ),
        "whiten": (
            "rstd = clamp(var, min=1e-8).rsqrt() floors the variance instead of adding eps "
            "(experience_maker.py:325-339).",
        ),
        "gspo_token_loss": (
            "with is_correction_level != 'off' the ratio uses rollout log-probs instead of "
            "old_logp (models/loss.py:189-196); pass them as old_logp.",
        ),
        "rollout_is_weights": (
            "is_correction_level='seq' keeps each surviving token's own rho (models/loss.py:239): "
            "rollout_is_weights(mode='none') * rollout_rejection_mask(level='seq_mean', lo=0.5, "
            "hi=5.0), not one sequence-level weight.",
            "gating 'binary_kl' and 'tv' (loss.py:225-232) are divergences of the sampled-token "
            "Bernoulli, not k1/k2/k3.",
        ),
        "decoupled_ppo_token_loss": (
            "PPO x coef with coef = rho * [0.5 <= rho <= 5] (or clamp(rho, 0.5, 5)) has a lower bound "
            "that behav_cap cannot express, and the PPO log-ratio is clamped to +-20 "
            "(models/loss.py:187, :235-241).",
        ),
        "overlong_penalty": (
            "buffer 0 never penalises: exceed = min(L - max_new_tokens, 0) is never > 0 "
            "(trainer/ppo_utils/length_penalty.py:51-53), where DAPO eq. 13 with L_cache = 0 gives -factor "
            "beyond max_new_tokens.",
            "the length is Experience.response_length = last - first action token + 1 "
            "(samples_generator.py:272-273): a span that counts the tool observations inside a multi-turn "
            "completion (OpenRLHF#1252, closed unmerged); max_new_tokens falls back to data.max_len "
            "(prompt + completion) when rollout.max_new_tokens is unset (length_penalty.py:127).",
        ),
        "shaped_rewards": (
            "reward.clip_range clamps after the advantage estimator's baseline (experience_maker.py:256-290, "
            "then compute_reward, models/utils.py:141-142): with rloo, reinforce_baseline, group_norm or "
            "dr_grpo it clips the advantage, i.e. shaped_rewards(clip off) -> the estimator -> the clip.",
            "stop_properly_penalty_coef is one number: [0, 1] scales (truncated_scale), < 0 replaces "
            "(truncated_value) (length_penalty.py:83-104); a positive replacement value, a scale outside "
            "[0, 1] and truncated_shift have no setting.",
        ),
    },
    "open_instruct": {
        "grpo_advantages": (
            "filter_zero_std_samples=True drops zero-std groups before the loss "
            "(data_loader.py:419, :815), which changes the loss normaliser.",
        ),
        "token_logprobs": (
            "masked positions hold INVALID_LOGPROB = 1.0, NaN becomes 1.0 (utils.py:83, "
            "grpo_utils.py:340).",
        ),
        "ppo_token_loss": (
            "the per-token loss is multiplied by train/infer rho correction weights "
            "(grpo_utils.py:504-538).",
        ),
    },
    "rlhf_book": {
        "kl_penalty": (
            "kl1 = -(logp - ref) and kl3 = expm1(d) - d, the mirror images of Schulman's k1 and k3 "
            "(loss.py:23-75); only kl2 matches (k2).",
        ),
        "kl_loss_term": (
            "the same kl1 / kl3 in the loss (loss.py:23-75): only kl2 is kl_loss_term(estimator='k2').",
        ),
        "rlhf_token_rewards": (
            "PPO/RLOO subtract beta * masked mean over tokens of the KL from the score "
            "(utils.py:165-182), not a per-token reward.",
        ),
        "grpo_advantages": (
            "a singleton group gives std of one element = NaN, so A = NaN (utils.py:185-187); the "
            "spec gives 0.",
        ),
        "rloo_advantages": ("K = 1 divides by zero (utils.py:205-208); the spec gives 0.",),
        "token_logprobs": (
            "action_mask[ids == pad_token_id] = False drops EOS when pad == eos "
            "(rollout.py:137-140); the spec mask comes from positions.",
        ),
        "gae": (
            "the recursion does not skip masked positions inside a row (utils.py:211-238); "
            "equal to canonical for contiguous completions.",
        ),
        "aggregate": (
            "loss='dapo' divides a local token sum by the local token count, then by batch_acc "
            "(loss.py:342-353, train.py:124).",
        ),
    },
    "ms_swift": {
        "reinforce_pp_baseline_advantages": (
            "kl_in_reward defaults to True for reinforce_plus_plus (swift/arguments/rlhf_args.py @ 0bd9b55): "
            "beta times the sequence KL is subtracted from the reward first (advantage.py compute_advantages): "
            "compose r - beta * kl_seq, then reinforce_pp_baseline_advantages.",
        ),
        "gdpo_advantages": (
            "a NaN reward (a function that did not score a row) is left out of that column's nanmean and "
            "nanstd and its z-score set to 0 (advantage.py nan_to_num); the spec raises on NaN rewards.",
        ),
        "entropy_top_mask": (
            "top_entropy_quantile is torch.nanquantile of the rank's own micro-batch (padding as NaN; "
            "swift/rlhf_trainers/grpo_trainer.py _compute_loss_and_metrics @ 006938be): a per-rank "
            "threshold, which no pooled_entropy expresses (the parts' masks are not the batch's).",
        ),
    },
    "areal": {
        "decoupled_ppo_token_loss": (
            "with use_decoupled_loss=True and rejection_sampling=None (the default, "
            "areal/api/cli_args.py:1549-1561) no behaviour weight multiplies the loss "
            "(functional.py:535-539): plain PPO against the proximal policy, not w * PPO.",
            "a lower bound on w (rejection_sampling.lower) has no decoupled keyword.",
        ),
        "rollout_rejection_mask": (
            "a non-finite log-ratio is replaced by 0 (functional.py:233); the spec raises.",
        ),
        "rollout_is_weights": (
            "level='sequence' with a KL metric and action='clamp' clamps each token's rho to the KL "
            "bounds [lower, upper] in rejected rows (functional.py:380-390); at token level "
            "action='clamp' clamps rho to [lower, upper] whatever the metric (:391-400).",
        ),
        "proximal_logp_interpolation": (
            "'linear' adds 1e-10 inside the log (actor.py:676), and is computed for metrics only "
            "(prox_logp_method is 'recompute', 'loglinear' or 'metrics').",
        ),
        "sapo_token_loss": (
            "importance_sampling_level='sequence' (cli_args.py:1563-1569) gates the geometric-mean "
            "sequence ratio with the row-mean advantage (functional.py:596-599, :56-149); "
            "sapo_token_loss gates the token ratio only.",
            "the loss is a local token mean, divided by the micro-batch's valid-token count "
            "(functional.py:623); aggregation is a separate call.",
        ),
        "overlong_penalty": (
            "overlong_tokens = 0 divides a tensor by 0 (functional.py:797-799): NaN at L = max_new_tokens "
            "and -inf beyond, where the spec raises for beyond='linear' with buffer 0.",
            "the length is loss_mask.sum(-1) (functional.py:790): trained tokens only, where verl, TRL and "
            "OpenRLHF count every token of the completion span (tool observations included).",
        ),
        "shaped_rewards": (
            "mask_no_eos_with_zero reads 'no EOS' as seqlen == the batch's padded width (trainer/ppo/actor.py:"
            "199-201): a truncated completion behind a shorter prompt than the batch's longest sequence "
            "counts as stopped, and a stopped one that fills the width as truncated; pass truncated as "
            "AReaL computes it to reproduce that.",
            "reward_bias and reward_scaling act before the clip, (r + bias) * scaling (actor.py:168); "
            "mask_no_eos_with_zero zeroes the score only, the KL reward of those tokens stays (:204-210).",
        ),
    },
    "oat": {
        "shaped_rewards": (
            "the learner multiplies the shaped reward by reward_scale (oat/algorithms/ppo.py "
            "PPOLearner.learning_step) after the rule: scale the output.",
            "ignore_no_eos=True drops truncated completions from the loss (loss_mask = not no_eos, "
            "PPOActor.step): a loss-mask rule, not a reward.",
        ),
    },
}

def preset_kwargs(preset: str, function: str) -> dict:
    """Return a copy of the keyword values that ``preset`` uses for ``function``.

    ``function`` is an api.md function name or its ``_grad`` variant. Returns ``{}`` when the
    framework's default matches canonical (or the deviation is not expressible in v1). Raises
    ``ValueError`` for an unknown preset or function name.
    """
    if preset not in PRESETS:
        raise ValueError(
            f"preset_kwargs: preset: expected one of {', '.join(PRESET_NAMES)}, got {preset!r}"
        )
    base = function[: -len("_grad")] if function.endswith("_grad") else function
    if base not in FUNCTIONS:
        raise ValueError(
            f"preset_kwargs: function: expected a spec v1 function name (or its _grad), got {function!r}"
        )
    return dict(PRESETS[preset].get(base, {}))
