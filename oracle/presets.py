"""Framework presets for spec v1, as plain data.

A *preset* names the keyword values with which a public trainer computes a spec'd quantity, wherever
its default differs from the canonical definition in ``conformance/spec/v1/api.md``. A preset only uses
keywords that exist in api.md and lists only the keywords whose value differs from the canonical
default; an absent function, or an empty dict, means that the framework's default matches canonical
for everything the v1 keywords can express. Deviations that the v1 keywords cannot express are
listed in ``NOT_EXPRESSIBLE`` (one line each) and never appear in ``PRESETS``.

``PRESETS[preset][function] -> {keyword: value}``; presets are the nine frameworks checked through their
installed code (``trl``, ``verl``, ``openrlhf``, ``skyrl``, ``areal``, ``ms_swift``, ``torchrl``, ``torchtune``,
``tinker_cookbook``: one folder each under ``conformance/frameworks/``) and three read from their source
(``open_instruct``, ``rlhf_book``, ``oat``); ``PRESET_NAMES`` lists them. Use ``preset_kwargs(preset, function)`` to get a copy, e.g.
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
wheels under ``~/.cache/rlspec/frameworks/``), areal 1.0.4 (the release wheel, unpacked). The ``areal``
preset was then verified, and extended to the spec v1 functions AReaL computes, in the installed areal 1.0.4
(``conformance/frameworks/areal/``).

Spec v1.1 policy losses (``sapo_token_loss``, ``gmpo_token_loss``, ``dppo_token_loss``,
``dro_token_loss``; api.md "Spec v1.1: policy losses of 2025-26") were checked in the same installed
code: trl 1.16.0 (``trl/trainer/grpo_trainer.py``, ``trl/experimental/gmpo/``), verl 0.9.1
(``verl/trainer/ppo/core_algos.py``, ``verl/workers/config/actor.py``), areal 1.0.4
(``areal/utils/functional/functional.py``, ``areal/api/cli_args.py``); ms-swift's and SkyRL's SAPO in
ms-swift 4.6.0 and skyrl 0.3.0 (their folders under ``conformance/frameworks/`` cite the lines).

``kl_loss_term`` (spec v1.1 kl.loss: the KL term's value and gradient in a loss) was checked in trl 1.16.0
(``grpo_trainer.py``, ``grpo_config.py``), verl 0.9.1 (``core_algos.py`` kl_penalty, ``workers/config/actor.py``)
and openrlhf 0.11.2 (``models/utils.py`` compute_approx_kl, ``cli/train_ppo_ray.py``); the estimator and
the gradient form are asked per call, each framework's knob for them is in kl.loss.md.

The entropy terms and controllers (``entropy_top_mask``, ``entropy_bonus``, ``kl_controller_update``,
``entropy_coef_update``, ``entropy_coef_applied``; api.md "Spec v1.1: entropy terms and coefficient
controllers") were checked in trl 1.16.0 (``grpo_trainer.py``, ``grpo_config.py``), verl 0.9.1
(``core_algos.py`` AdaptiveKLController, ``workers/utils/losses.py``) and openrlhf 0.11.2
(``trainer/ppo_utils/kl_controller.py``, ``trainer/ray/ppo_actor.py``): every framework default is
canonical or a required keyword's default; ms-swift's, SkyRL's and torchrl's were then checked in their
installed code too (their folders under ``conformance/frameworks/``).

The reward shaping of spec v1.1 (``overlong_penalty``, ``shaped_rewards``; api.md "Spec v1.1: reward
shaping") was checked in trl 1.16.0 (``trl/rewards/other_rewards.py``), verl 0.9.1
(``verl/workers/reward_manager/dapo.py``), openrlhf 0.11.2 (``trainer/ppo_utils/length_penalty.py``,
``experience_maker.py``, ``models/utils.py``, ``cli/train_ppo_ray.py``) and areal 1.0.4 (the release
wheel: ``areal/utils/functional/functional.py``, ``areal/trainer/ppo/actor.py``, ``areal/api/cli_args.py``),
and read from the source of ms-swift (modelscope/ms-swift @ 20ec461, ``swift/rewards/orm.py``) and OAT
(sail-sg/oat @ 08379c6, ``oat/algorithms/ppo.py``); ``oat`` names only ``shaped_rewards``.

The covariance-selected tokens (``clip_cov_mask``, ``kl_cov_token_loss``; api.md "Spec v1.1:
covariance-selected tokens") were checked in verl 0.9.1 (``core_algos.py`` clip_cov / kl_cov,
``workers/config/actor.py``) and skyrl 0.3.0 (the release wheel, ``skyrl/backends/skyrl_train/utils/ppo_utils.py``,
``skyrl/train/config/config.py``); TRL, OpenRLHF and AReaL have neither.

The advantage estimators of spec v1.1 (``reinforce_pp_advantages``, ``reinforce_pp_baseline_advantages``,
``remax_advantages``, ``opo_advantages``, ``grpo_passk_advantages``, ``gdpo_advantages``, ``maxrl_advantages``,
``gpg_advantages``, ``optimal_token_baseline_advantages``; api.md "Spec v1.1: advantage estimators") and
``rloo_advantages``' ``singleton`` were checked in verl 0.9.1 (``verl/trainer/ppo/core_algos.py`` registry,
``ray_trainer.py``), openrlhf 0.11.2
(``trainer/ppo_utils/experience_maker.py``), trl 1.16.0 (``grpo_trainer.py``, GDPO) and skyrl 0.3.0 (the release
wheel, ``skyrl/backends/skyrl_train/utils/ppo_utils.py``), and read from the source of ms-swift
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
    "optimal_token_baseline_advantages",
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
        # "optimal_token_baseline" (:871-987) and "tir_optimal_token_baseline" (:990-1121; align="valid_token"):
        # the baseline's denominator is sum W + epsilon, 1e-8 (:965, :1094); the zero tail counts each row's
        # response tokens (mask.sum(-1), :975) and zeroes baselines[i*, second_max_length:] (:982), the count
        # used as a column of the response tensor (tail_length="count"; with valid-token alignment, :1108, it
        # is the canonical rule). The trainer passes neither handle_zero_tail nor epsilon (ray_trainer.py:
        # 264-276): zero_tail=True (canonical) and epsilon=1e-8 always.
        "optimal_token_baseline_advantages": {"eps": 1e-8, "tail_length": "count"},
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
        # Verified in the installed areal 1.0.4 (conformance/frameworks/areal/, the release wheel; paths in areal/).
        # utils/data.py:1598-1656 KLEstimator(apply_clamp=True) clamps every estimate to [-10, 10] (:1655-1656);
        # the PPO actor builds KLEstimator(config.kl_estimator) (trainer/ppo/actor.py:53), k1 by default.
        "kl_penalty": {"clamp": 10.0},
        # utils/data.py:1378-1496 Normalization: (r - group mean) / (group std + eps), std_unbiased True and eps
        # 1e-5 by default (api/cli_args.py:64-75), as reward_norm / adv_norm with mean_level and std_level "group".
        "grpo_advantages": {"eps": 1e-5},
        # utils/data.py:1430-1434: mean_leave1out with group_size 1 takes a group mean of 0, so A = r.
        "rloo_advantages": {"singleton": "raw"},
        # functional.py:501-520: importance_sampling_level="sequence" (GSPO) clips with the PPO eps_clip, 0.2 by
        # default (api/cli_args.py:1460-1462), and no eps_clip_higher; the gradient flows through the geometric
        # mean (:56-149, the sequence form).
        "gspo_token_loss": {"eps_low": 0.2, "eps_high": 0.2},
        # api/cli_args.py:1659-1661: PPOCriticConfig.eps_clip 0.5; ppo_critic_loss_fn (functional.py:714-778,
        # mse) is 0.5 * max((V - R)^2, (V_clipped - R)^2).
        "value_token_loss": {"clip": 0.5},
        # Canonical, so absent: token_logprobs / token_entropy (utils/functional/vocab_parallel.py:15-29,
        # log_softmax(logits.float() / temperature)); reinforce_advantages (Normalization with mean_level "batch" or
        # None, std_level None); opo_advantages (adv_norm with mean_level "group", std_level None over the loss mask:
        # the length-weighted group mean); gae (actor.py:214-236, discount and gae_lambda 1.0, masked positions
        # skipped); ppo_token_loss / ppo_clipped_mask (functional.py:429-559: eps_clip 0.2 both sides unless
        # eps_clip_higher, c_clip None, no log-ratio clamp); whiten and rlhf_token_rewards (see NOT_EXPRESSIBLE).
        # functional.py:185-426 (apply_rejection_sampling) with the
        # RejectionSamplingConfig defaults level="token", action="mask", metric="ratio", agg="mean",
        # upper=5.0, lower=None (areal/api/cli_args.py:1316-1380). "kl_k1..3" call
        # KLEstimator._compute_approx_kl(proximal, behave) (functional.py:242), i.e. d = proximal -
        # behave (areal/utils/data.py:1620-1656: k1 = d, k2 = d^2/2, k3 = exp(-d) - 1 + d), which is
        # kl_of="old_rollout" with old = proximal and rollout = behaviour.
        "rollout_rejection_mask": {"kl_of": "old_rollout", "hi": 5.0},
        # functional.py:231, :391-400, :420: w = exp(proximal - behave) zeroed where rejected (ratio, token,
        # mask); action="clamp" is mode="truncate" with lo = lower. (level "token" by default; at level
        # "sequence" the weight is the geometric mean whatever agg: NOT_EXPRESSIBLE.)
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
    "tinker_cookbook": {
        # tinker-cookbook 0.6.1 (the release wheel, conformance/frameworks/tinker_cookbook/):
        # tinker_cookbook/rl/data_processing.py:24-43 compute_advantages: rewards_G - rewards_G.mean() per
        # TrajectoryGroup (:38-40), no standard deviation and no setting for one; a one-sample group gives 0
        # (singleton "zero", canonical). The policy losses run on the Tinker service (not read).
        "grpo_advantages": {"scale": "none"},
        # Canonical, so absent: kl_penalty (rl/metrics.py:208-213: the KL penalty folded into the advantages
        # is built from k1 = sampled logp - reference logp, no clamp; see NOT_EXPRESSIBLE).
    },
    # --- the frameworks added in spec v1.1, each checked through its installed code (its folder under
    # conformance/frameworks/ says what is called); OAT only read from its source ---
    "skyrl": {
        # skyrl 0.3.0 (the release wheel, checked through conformance/frameworks/skyrl/; S =
        # skyrl/backends/skyrl_train/utils/ppo_utils.py, SO = .../off_policy_correction_utils.py, TU =
        # .../torch_utils.py, C = skyrl/train/config/config.py, TR = skyrl/train/trainer.py).
        # S:1287-1336 compute_grpo_outcome_advantage: unbiased torch.std + epsilon 1e-6 (canonical); a one-sample
        # group gets mean 0 and std 1 (:1321-1323), A = r / (1 + 1e-6), as verl.
        "grpo_advantages": {"singleton": "raw"},
        # S:88-125 compute_approx_kl: k1, k2 and "abs" unclamped; k3 clamps ref - logp to +-20 and the estimate to
        # +-10 (:110-117), verl's; kl_estimator_type defaults to "k3" (C:602) for the KL loss and the KL reward.
        "kl_penalty": {"estimator": "k3", "log_ratio_clamp": 20.0, "clamp": 10.0},
        # spec v1.1 kl.loss: the same compute_approx_kl in the loss (workers/worker.py:970-980), differentiated as
        # computed (gradient="estimator"); k3's clamps as verl's (the +-20 one never decides once the estimate is
        # clamped at 10).
        "kl_loss_term": {"clamp": 10.0},
        # S:554-586 ppo_policy_loss: ratio = safe_exp_delta(d, clip=20.0) = exp(clamp(d, +-20)) (:566, TU:187-192;
        # computed in float32); eps_clip_low / _high 0.2 / 0.2 (C:633-634); dual clip only with policy_loss_type
        # "dual_clip" (clip_ratio_c 3.0, C:635), off by default ("regular", C:619).
        "ppo_token_loss": {"log_ratio_clamp": 20.0},
        # S:662-728 gspo_policy_loss: log s_i,t = logp - sg(logp) + sg(masked mean of d) (:700-706, the per-token
        # stop-gradient form), clamp(max=10) on it (:708: see NOT_EXPRESSIBLE), the PPO clip with eps_clip_low /
        # _high 0.2 / 0.2.
        "gspo_token_loss": {"form": "token_sg", "eps_low": 0.2, "eps_high": 0.2},
        # S:731-764 compute_policy_loss_cispo: -A * clamp(safe_exp_delta(d, clip=20), 1 - cispo_eps_clip_low,
        # 1 + cispo_eps_clip_high).detach() * logp (:749-751); CISPOConfig defaults 0.0 / 5.0 (C:541-545): w in
        # [1, 6]. The +-20 log clamp cannot move w inside [1, 6].
        "cispo_token_loss": {"eps_low": 0.0, "eps_high": 5.0},
        # S:155-173 ppo_critic_loss: 0.5 * max((V_clipped - R)^2, (V - R)^2) with value_clip 0.2 (C:643), then
        # masked_mean(dim=-1).mean() (seq_mean_token_mean).
        "value_token_loss": {"clip": 0.2},
        # S:589-659 sapo_policy_loss: d clamped to +-20 before exp (:632); tau_pos / tau_neg 1.0 / 1.05 (C:508-510,
        # canonical); tau_pos where A > 0 (:638-642); L = -gate * A (:648).
        "sapo_token_loss": {"log_ratio_clamp": 20.0},
        # S:944-996 compute_policy_loss_kl_cov: verl's KL-Cov with KLCovConfig kl_cov_frac = 0.2 and ppo_kl_coef =
        # 1.0 (C:533-537); compute_policy_loss_clip_cov (:881-941) with ClipCovConfig 2e-4 / 1.0 / 5.0 (C:524-529) and
        # eps_clip_low / _high 0.2 is canonical (absent). No log-ratio clamp in either (:903, :964).
        "kl_cov_token_loss": {"fraction": 0.2, "coef": 1.0},
        # S:1167-1199 compute_reinforce_plus_plus_outcome_advantage ("ported from verl"): running = r_t + gamma *
        # running, then running *= response_mask[t] ("Reset after EOS", :1192-1194): a masked position inside a
        # completion ends the return (gap="reset"), then masked_whiten (unbiased, + 1e-8). That reset is the
        # behaviour verl#6376/#7278 fixed in verl.
        "reinforce_pp_advantages": {"gap": "reset"},
        # S:1339-1371 compute_maxrl_advantage: (r - mean) / (mean + 1e-6) for groups of 2 or more (:1366); a
        # one-sample group gets r - 0 (singleton "raw", :1368). compute_rloo_outcome_advantage (:1203-1252) gives a
        # one-sample group 0 (canonical).
        "maxrl_advantages": {"singleton": "raw"},
        # spec v1.1 (off-policy correction): SO:24-72 compute_tis_ratio: rho = safe_exp_delta(old - rollout,
        # clip=20) per token (:49-51) or of the row's masked sum (:63-64, the product), clamp(max=cap) (:60, :70):
        # TIS; token cap 2.0 (C:571, canonical hi), sequence cap 5.0 (C:573, asked per call). Off by default
        # (tis_ratio_type None, C:568).
        "rollout_is_weights": {"log_ratio_clamp": 20.0},
        # the loss with its off-policy correction (SO:351-385: loss * tis, loss_mask * masks) summed by reduce_loss
        # (S:1088-1092) with advantages the trainer scaled by the uncorrected mask's counts (TR:1469-1476): a
        # rejected token is a zero that still counts in the denominator.
        "corrected_policy_loss": {"rejected": "zero"},
        # PPO against old_log_probs times the token TIS weight of old vs rollout (S:579-582 -> SO:351-385): decoupled
        # PPO with prox = old and behav = rollout, behav_cap = token_tis_ratio_clip_high 2.0 (C:571); both ratios'
        # +-20 log clamps: see NOT_EXPRESSIBLE.
        "decoupled_ppo_token_loss": {"behav_cap": 2.0},
        # Canonical, so absent: rloo_advantages (S:1203-1252, a one-sample group gets 0); whiten (S:146-152:
        # unbiased, rsqrt(var + 1e-8)); clip_cov_mask (above); kl_controller_update (S:45-60, the adaptive
        # controller of the KL reward, opt-in: kl_ctrl.type "fixed", C:497-503); rollout_rejection_mask (SO:75-254:
        # the ratio pi_old/pi_rollout kept inside inclusive bounds per token (token_mask_is_threshold_*), per row on
        # every token (outlier_token_is_threshold_*: level "seq_all"), on the geometric mean (geo_mask_*, 0.99 / 1.01:
        # level "seq_mean") or the product (product_mask_*, 0.5 / 2.0: level "seq_sum"); bounds asked per call).
        # rlhf_token_rewards (TR:1381-1437, use_kl_in_reward: rewards - max(0, kl_loss_coef) * compute_approx_kl, :1408;
        # the score on the response's last token, :1091) reads kl_estimator_type, "k3" by default (C:602): estimator="k3"
        # with kl_penalty's clamps above, asked per call (no preset vector input exists for it).
    },
    "torchrl": {
        # torchrl 0.14.1 (the release wheel, checked through conformance/frameworks/torchrl/):
        # torchrl/objectives/llm/grpo.py:1008-1016 CISPOLoss._compute_policy_objective: the loss
        # -exp(clamp(log w, log(1 - eps_low), log(1 + eps_high))) * A, the clamped ratio on the graph and
        # no log-prob factor; clip_epsilon default 0.2 (GRPOLoss.__init__, :498, symmetric).
        "cispo_token_loss": {"eps_low": 0.2, "eps_high": 0.2, "surrogate": "ratio"},
        # grpo.py:1508-1511 MCAdvantage (per-step, the LLM collector's single-step trajectories) and :1583
        # (trajectory_return): (r - mean) / std.clamp_min(1e-6), torch.std unbiased: eps = 0 wherever the
        # group std is 0 or >= 1e-6 (NOT_EXPRESSIBLE: the clamp in between, the singleton).
        "grpo_advantages": {"eps": 0.0},
        # Canonical, so absent: ppo_token_loss (GRPOLoss/DAPO, grpo.py:769-782: clip_epsilon 0.2, no dual clip,
        # no log-ratio clamp), gae (objectives/value/functional.py:120-180, gamma/lmbda required), kl_penalty and
        # kl_loss_term (k3 only, its own gradient, grpo.py:913-915), aggregate (token_mean / prompt_mean,
        # grpo.py:784-817), token_logprobs / token_entropy (LLMMaskedCategorical, no temperature).
    },
    "ms_swift": {
        # Verified in the installed ms-swift 4.6.0 (conformance/frameworks/ms_swift/, the release wheel; paths in
        # swift/, M = rlhf_trainers/grpo_trainer.py, MR = rl_core/advantage.py).
        # M:1036-1038 (loss_type 'cispo'): torch.clamp(coef_1, max=self.epsilon_high).detach(), an absolute cap,
        # epsilon_high defaulting to epsilon = 0.2 (M:2139, rlhf_trainers/args_mixin.py epsilon 0.2, epsilon_high
        # None; no CISPO-specific default): the weight is min(r, 0.2).
        "cispo_token_loss": {"bound": "absolute", "eps_high": 0.2},
        # rewards/orm.py:216-232 class SoftOverlong (reward function "soft_overlong"): min(-(L - (soft_max_length -
        # soft_cache_length)) / soft_cache_length, 0): no factor (factor=1.0, canonical) and no floor; asserts
        # soft_cache_length < soft_max_length (:220).
        "overlong_penalty": {"beyond": "linear"},
        # MR:63-97: grpo is (r - group mean) / (std + 1e-4), std unbiased (torch.std) of the group ("group") or of
        # the batch's rewards ("batch"), no division for "none"; a group of one gets std 0, so A = 0.
        "grpo_advantages": {"eps": 1e-4},
        # MR:73-75, :96-97: advantage_estimator="reinforce_plus_plus" is a = r - group mean divided by (a.std() + 1e-4)
        # over the batch's sequences (no token whitening, no return-to-go): reinforce_pp_baseline_advantages at
        # level="sequence"; scale_rewards defaults to "batch" for it (arguments/rlhf_args.py:385-393).
        # scale_rewards="group" divides by the group std instead: grpo_advantages(eps=1e-4).
        "reinforce_pp_baseline_advantages": {"level": "sequence", "eps": 1e-4},
        # MR:83-94 (scale_rewards="gdpo"): per reward function nanmean and unbiased nanstd + 1e-8
        # (utils/torch_utils.py:23-45), nan_to_num, weighted sum, then (s - s.mean()) / (s.std() + 1e-8).
        "gdpo_advantages": {"eps": 1e-8},
        # M:973-976: the GRPO KL term is k3 of ref - logp clamped to +-20, the estimate clamped to [-10, 10]
        # (beta != 0 and kl_in_reward off); it enters the loss with its autograd gradient (M:1063-1064).
        "kl_penalty": {"estimator": "k3", "log_ratio_clamp": 20.0, "clamp": 10.0},
        # (the +-20 clamp never shows once the estimate is clamped at 10: |d| > 20 gives k3 > 19 either way, and
        # both clamps stop the gradient; verl's kl_loss_term preset is the same)
        "kl_loss_term": {"clamp": 10.0},
        # M:2362-2363: the rollout log-ratio old - rollout is clamped to +-20 per token (SAFETY_BOUND) before every
        # mode; token_truncate / token_mask / sequence_truncate (the geometric mean, M:2328-2343) are
        # rollout_is_weights(hi=threshold) with mode truncate / mask, level sequence with seq_stat geometric.
        "rollout_is_weights": {"log_ratio_clamp": 20.0},
        # M:1063-1067: per_token_loss = (policy term + beta * k3) * rollout_is_weights: the KL is weighted too.
        # The off-policy sequence mask edits completion_mask (M:1069-1080): rejected tokens leave the count
        # for grpo, bnpo, dr_grpo (canonical "drop"); see NOT_EXPRESSIBLE for dapo / cispo.
        "corrected_policy_loss": {"weight_kl": True},
    },
    "oat": {
        # Canonical, so absent: shaped_rewards (sail-sg/oat @ 08379c6, oat/algorithms/ppo.py PPOActor.step:
        # a completion with finish_reason == "length" gets reward = non_stop_fixed_reward when set
        # (truncated_value, PPOArgs default None), then += non_stop_penalty (truncated_shift, default 0);
        # no reward clip. The learner then multiplies by reward_scale (default 1), after the rule.
    },
    "torchtune": {
        # torchtune 0.6.1 (the release wheel, checked through conformance/frameworks/torchtune/): only
        # torchtune/rlhf and the PPO recipe; the wheel does not ship torchtune/dev (GRPO).
        # rlhf/loss/ppo.py:32-37 PPOLoss(epsilon=0.1, value_clip_range=0.2, value_coeff=0.1): one symmetric
        # clip range, clamp(ratio, 1 - epsilon, 1 + epsilon) (:80), and the value clip clamp(V, old - 0.2,
        # old + 0.2) (:101-105). The shipped config recipes/configs/mistral/7B_full_ppo_low_memory.yaml sets
        # epsilon 0.2 (canonical) and value_clip_range 0.2.
        "ppo_token_loss": {"eps_low": 0.1, "eps_high": 0.1},
        "value_token_loss": {"clip": 0.2},
        # rlhf/rewards.py:139-161 whiten(x, mask, shift_mean=True): `if shift_mean: whitened += mean` (:159-160),
        # the reverse of TRL's keyword it says it was taken from; estimate_advantages calls whiten(advantages,
        # mask=masks) (:216) at that default, so PPO's advantages keep their mean: the spec's shift_mean=False.
        "whiten": {"shift_mean": False},
        # estimate_advantages(values, rewards, gamma, lmbda) has no defaults (:164-170); the shipped PPO config
        # sets gamma 1 (canonical) and lmbda 0.95.
        "gae": {"lam": 0.95},
    },
}

PRESET_NAMES = tuple(PRESETS)

# Presets whose framework code was read for some functions only (documentation: outside its scope a
# function is "not read", not "canonical"). A preset absent here was read for every function.
SCOPE: Dict[str, tuple] = {
    "areal": ("token_logprobs", "token_entropy", "reinforce_advantages", "rloo_advantages", "grpo_advantages",
              "opo_advantages", "rlhf_token_rewards", "gae", "whiten", "kl_penalty", "kl_loss_term", "ppo_token_loss",
              "ppo_clipped_mask", "gspo_token_loss", "value_token_loss", "aggregate", "policy_loss", "kl_controller_update",
              "rollout_is_weights", "rollout_rejection_mask", "decoupled_ppo_token_loss", "proximal_logp_interpolation",
              "off_policy_sequence_mask", "corrected_policy_loss", "sapo_token_loss", "overlong_penalty", "shaped_rewards"),
    "skyrl": ("token_logprobs", "token_entropy", "grpo_advantages", "rloo_advantages", "maxrl_advantages",
              "reinforce_pp_advantages", "gae", "whiten", "kl_penalty", "kl_loss_term", "rlhf_token_rewards",
              "ppo_token_loss", "gspo_token_loss", "cispo_token_loss", "sapo_token_loss", "dppo_token_loss",
              "clip_cov_mask", "kl_cov_token_loss", "value_token_loss", "aggregate", "policy_loss", "rollout_is_weights",
              "rollout_rejection_mask", "decoupled_ppo_token_loss", "corrected_policy_loss", "kl_controller_update"),
    "torchrl": ("token_logprobs", "token_entropy", "grpo_advantages", "gae", "kl_penalty", "kl_loss_term", "ppo_token_loss",
                "cispo_token_loss", "aggregate", "policy_loss", "entropy_bonus"),
    "ms_swift": ("token_logprobs", "token_entropy", "grpo_advantages", "rloo_advantages", "reinforce_pp_baseline_advantages",
                 "gdpo_advantages", "kl_penalty", "kl_loss_term", "ppo_token_loss", "gspo_token_loss", "cispo_token_loss",
                 "sapo_token_loss", "aggregate", "policy_loss", "entropy_top_mask", "off_policy_sequence_mask",
                 "rollout_is_weights", "rollout_rejection_mask", "corrected_policy_loss", "overlong_penalty"),
    "oat": ("shaped_rewards",),
    "tinker_cookbook": ("grpo_advantages", "kl_penalty"),
    "torchtune": ("token_logprobs", "kl_penalty", "rlhf_token_rewards", "gae", "whiten", "ppo_token_loss",
                  "value_token_loss", "aggregate", "ppo_clipped_mask"),
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
    "skyrl": {
        # skyrl 0.3.0 skyrl/train/config/config.py: loss_reduction "token_mean" (:621); kl_loss_coef 0.001 (:608), the
        # KL reward's coefficient when use_kl_in_reward (off by default, :604); the adaptive controller's kl_target 0.1
        # and horizon 10000 (:501-503; kl_ctrl.type "fixed" by default).
        "aggregate": {"mode": "token_mean"},
        "rlhf_token_rewards": {"kl_coef": 0.001},
        "kl_controller_update": {"target": 0.1, "horizon": 10000},
    },
    "ms_swift": {
        # ms-swift 4.6.0 swift/arguments/rlhf_args.py:526-527: GRPO's default loss_type "grpo", whose branch is the
        # mean over the micro-batch's rows of each row's token mean (rlhf_trainers/grpo_trainer.py:1082-1084).
        "aggregate": {"mode": "seq_mean_token_mean"},
    },
    "torchrl": {
        # torchrl 0.14.1 torchrl/objectives/llm/grpo.py GRPOLoss.__init__ (:498-503): entropy_bonus=True,
        # entropy_coeff=0.01, aggregation="token_mean"; loss_entropy = -entropy_coeff * entropy (:735), aggregated
        # like the policy term (:737-745): an entropy bonus on by default.
        "aggregate": {"mode": "token_mean"},
        "entropy_bonus": {"entropy_coef": 0.01, "mode": "token_mean"},
    },
    "torchtune": {
        # torchtune 0.6.1 rlhf/loss/ppo.py:88-113: PPOLoss reduces with rlhf.masked_mean, the token mean.
        "aggregate": {"mode": "token_mean"},
        # recipes/configs/mistral/7B_full_ppo_low_memory.yaml (0.6.1): kl_coeff 0.01, k1 (get_rewards_ppo,
        # rlhf/rewards.py:79-80).
        "rlhf_token_rewards": {"kl_coef": 0.01},
    },
    "areal": {
        # areal 1.0.4 utils/functional/functional.py:483, :542: every loss is a token mean over the micro-batch's
        # original loss mask, and the engine weights micro-batches by their token counts (trainer/ppo/actor.py:363).
        "aggregate": {"mode": "token_mean"},
        # api/cli_args.py PPOActorConfig.kl_ctl 0.1 with kl_estimator "k1" (trainer/ppo/actor.py:50-53, :202).
        "rlhf_token_rewards": {"kl_coef": 0.1},
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
        "optimal_token_baseline_advantages": (
            "tir_optimal_token_baseline leaves rows without response tokens out of their group (core_algos.py:"
            "1072-1076) and gives a group of one row baseline 0 (:1085-1088): with handle_zero_tail=False a group "
            "with a single non-empty row gets A = G, where the spec's baseline is that row's own weighted return "
            "(A = 0); with the zero tail (the trainer's setting) both give A = G.",
            "both estimators mask w only after exp(old_log_probs) (core_algos.py:927-937, :1043-1053) and "
            "form the returns from token_level_rewards * response_mask (:924, :1040): a NaN or inf at a masked "
            "position becomes NaN in W (every later baseline of the group) or in the returns; the spec never "
            "reads masked positions.",
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
        # ms-swift 4.6.0 (installed; paths in swift/, M = rlhf_trainers/grpo_trainer.py, MR = rl_core/advantage.py)
        "reinforce_pp_baseline_advantages": (
            "kl_in_reward defaults to True for reinforce_plus_plus and rloo (arguments/rlhf_args.py:370-376): "
            "beta times the row's sum of old - ref is subtracted from the reward first (M:436-446, MR:60-61): "
            "compose r - beta * sum_t kl_penalty(old_logp, ref_logp, k1), then the estimator.",
        ),
        "gdpo_advantages": (
            "a NaN reward (a function that did not score a row) is left out of that column's nanmean and "
            "nanstd and its z-score set to 0 (MR:88-90 nan_to_num); the spec raises on NaN rewards.",
            "a batch of one sequence gives NaN: the final s.std() of one element is NaN (MR:93), where the "
            "grpo and reinforce_plus_plus paths guard numel() > 1 (MR:75, :80).",
        ),
        "entropy_top_mask": (
            "top_entropy_quantile is torch.nanquantile of the rank's own micro-batch (padding as NaN; "
            "M:958-962): a per-rank threshold, which no pooled_entropy expresses (the parts' masks are not "
            "the batch's); the pool also holds completions the overlong filter removes afterwards (M:964-969).",
        ),
        "rollout_is_weights": (
            "the +-20 clamp acts on each token's log-ratio before the geometric mean (M:2362-2363, :2339), "
            "where log_ratio_clamp clamps the sequence statistic.",
            "sequence_mask keeps each token's own ratio in the rows whose geometric mean is within the "
            "threshold (M:2382-2388): rollout_is_weights(mode='none') * rollout_rejection_mask(level='seq_mean').",
        ),
        "corrected_policy_loss": (
            "the KL term is k3 with ms-swift's clamps (M:975-976), which no kl_estimator keyword expresses.",
            "with loss_type dapo or cispo the normaliser is num_items_in_batch, counted before the off-policy "
            "sequence mask (and the overlong filter) edit completion_mask (M:795-801, :1128): the tokens they "
            "remove stay in the count (rejected='zero' for the policy term, their KL term removed).",
        ),
        "policy_loss": (
            "the KL term is k3 with ms-swift's clamps (M:975-976), which no kl_estimator keyword expresses.",
        ),
        "aggregate": (
            "loss_type bnpo divides by the micro-batch's own token count (M:1085-1086): a batch split over "
            "ranks or gradient-accumulation steps is a mean of local token means, not the batch's token mean.",
        ),
    },
    "areal": {
        "decoupled_ppo_token_loss": (
            "with use_decoupled_loss=True and rejection_sampling=None (the default, "
            "areal/api/cli_args.py:1555-1562) no behaviour weight multiplies the loss "
            "(functional.py:535-539): plain PPO against the proximal policy, not w * PPO.",
            "a lower bound on w (rejection_sampling.lower) has no decoupled keyword.",
        ),
        "rollout_rejection_mask": (
            "a non-finite log-ratio is replaced by 0 (functional.py:233); the spec raises.",
            "RejectionSamplingConfig refuses a ratio upper bound <= 1 and a k2/k3 upper bound <= 0 "
            "(api/cli_args.py:1415-1432), and has no rule that drops a row for one outlier token (seq_all).",
        ),
        "rollout_is_weights": (
            "action='clamp' only with metric='ratio' (api/cli_args.py:1433-1438); at level='sequence' the weight is "
            "the geometric mean whatever agg (functional.py:288-297, :352-355), so agg='sum' tests the product "
            "but weighs with the geometric mean: rollout_is_weights(seq_stat='geometric') times "
            "rollout_rejection_mask(level='seq_sum').",
            "no batch normalisation and no log-ratio clamp.",
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
        "gspo_token_loss": (
            "[B, T] advantages are averaged over each row's valid tokens (functional.py:140-147): every token of a "
            "row is weighted by the row's mean advantage, where gspo_token_loss weights each by its own A_t.",
        ),
        "whiten": (
            "Normalization divides by std + eps with eps = 1e-5 outside the square root (utils/data.py:1496, "
            "api/cli_args.py:70-75), where whiten's eps is inside sqrt(var + eps); it never adds the mean back.",
        ),
        "grpo_advantages": (
            "std_level='batch' with mean_level='group' divides by the std of r - group mean over the batch "
            "(utils/data.py:1455-1465), not by the std of the rewards (scale='batch').",
        ),
        "gae": (
            "a row that fills the batch's padded width counts as 'no EOS' (trainer/ppo/actor.py:200-201) and "
            "bootstraps from the critic's value at the last column (:223); the batch is padded to its longest "
            "sequence, so that is the longest row, truncated or not.",
        ),
        "rlhf_token_rewards": (
            "the KL reward is -kl_ctl * KLEstimator(old, ref) clamped to [-10, 10] (utils/data.py:1655-1656, "
            "trainer/ppo/actor.py:53, :202); without a reference model ref_logp = 0 (actor.py:192-194), so the "
            "'KL' reward is -kl_ctl * logp.",
            "the score sits on the last attention token (seqlens - 1, actor.py:205-212), not on the last trained "
            "token: a row whose last tokens are not trained (loss mask 0) loses its score.",
        ),
        "value_token_loss": (
            "loss_fn_type='huber' (functional.py:705-707, delta 10) has no spec form.",
            "the reduction divides by loss_mask.count_nonzero() without a floor (functional.py:772-774): NaN for a "
            "micro-batch without a trained token, where ppo_actor_loss_fn uses count or 1 (:483).",
        ),
        "overlong_penalty": (
            "overlong_tokens = 0 divides a tensor by 0 (functional.py:797-799): NaN at L = max_new_tokens "
            "and -inf beyond, where the spec raises for beyond='linear' with buffer 0.",
            "the length is loss_mask.sum(-1) (functional.py:790): trained tokens only, where verl, TRL and "
            "OpenRLHF count every token of the completion span (tool observations included).",
        ),
        "shaped_rewards": (
            "mask_no_eos_with_zero reads 'no EOS' as seqlen == the batch's padded width (trainer/ppo/actor.py:"
            "200-201): a truncated completion behind a shorter prompt than the batch's longest sequence "
            "counts as stopped, and a stopped one that fills the width as truncated; pass truncated as "
            "AReaL computes it to reproduce that.",
            "reward_bias and reward_scaling act before the clip, (r + bias) * scaling (actor.py:168); "
            "mask_no_eos_with_zero zeroes the score only, the KL reward of those tokens stays (:204-212).",
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
    "skyrl": {
        # skyrl 0.3.0 (S = skyrl/backends/skyrl_train/utils/ppo_utils.py, SO = .../off_policy_correction_utils.py,
        # TR = skyrl/train/trainer.py); each checked by a row of conformance/frameworks/skyrl/checks.py
        "gspo_token_loss": (
            "the per-token log-weight sg(masked mean of d) + logp - sg(logp) is clamped at 10 from above (S:708): a row "
            "whose mean log-ratio exceeds 10 gets the weight e^10 and no gradient through it.",
        ),
        "dppo_token_loss": (
            "dppo_policy_loss's value is the ratio surrogate -A*r*keep, r = exp(clamp(logp - mu, +-20)) on the graph "
            "(S:833, :866), where dppo_token_loss is -A*sg(min(r, cap))*logp*keep: the same gradient (no cap), another "
            "value; mu is the rollout log-prob when given (S:832); the binary KL adds 1e-8 inside its log (:853-856).",
        ),
        "gae": (
            "compute_gae_advantage_return runs the recursion over every position (S:1274-1278): a masked position "
            "inside a completion is a step with its own reward and value, and the last valid token bootstraps from "
            "the value at the next position (the critic's output at padding, not masked: workers/model_wrapper.py:"
            "499-505); then the advantages are whitened over the response mask (:1282).",
        ),
        "whiten": (
            "masked_whiten (unbiased) raises ValueError for a mask sum of 0 or 1 (S:135-140) where the spec returns 0.",
        ),
        "aggregate": (
            "loss_reduction 'prompt_mean' (S:1152-1158) is the mean over prompt groups of each group's token mean, and "
            "'token_mean_legacy' (:1127-1139) the mean over micro-batches of each micro-batch's token mean: "
            "compositions of aggregate(mode='token_mean') per part.",
        ),
        "policy_loss": (
            "the worker adds kl_loss_coef * masked_mean(compute_approx_kl(...), loss_mask, dim=-1).mean() "
            "(workers/worker.py:970-989): the KL term is aggregated by seq_mean_token_mean whatever loss_reduction, "
            "and averaged over micro-batches by their row counts.",
        ),
        "decoupled_ppo_token_loss": (
            "both ratios go through safe_exp_delta(clip=20): the PPO ratio exp(clamp(logp - old, +-20)) (S:566) and "
            "the TIS weight exp(clamp(old - rollout, +-20)) (SO:49-51); decoupled_ppo_token_loss has no log-ratio "
            "clamp keyword.",
        ),
        "kl_cov_token_loss": (
            "the trainer hands the loss advantages already divided by the loss reduction's counts (TR:1456-1478): "
            "KL-Cov ranks tokens by the covariance of those scaled advantages and adds ppo_kl_coef*|d| unscaled "
            "(S:967-991), so under token_mean the KL term weighs N times its share (N the mini-batch's tokens) and "
            "under sequence_mean the selection changes.",
        ),
        "clip_cov_mask": (
            "the trainer hands the loss advantages already divided by the loss reduction's counts (TR:1456-1478): "
            "Clip-Cov compares the covariance of those scaled advantages with clip_cov_lb / clip_cov_ub (S:911-919), "
            "i.e. under token_mean the true covariance with N * (1, 5).",
        ),
        "rollout_rejection_mask": (
            "compute_off_policy_correction chains its masks (SO:315-345): the token mask is computed on the mask the "
            "outlier mask left, and the TIS weight and the sequence mask on the mask both left, so the sequence "
            "statistic covers the surviving tokens only; the spec ANDs masks computed on the original one.",
        ),
    },
    "torchrl": {
        "grpo_advantages": (
            "MCAdvantage clamps the std at 1e-6 (grpo.py:1511, :1583) instead of adding eps: a group std in "
            "(0, 1e-6) divides by 1e-6. In float32 an all-equal group whose mean rounds 1 ulp off its value "
            "(e.g. [2.9, 2.9, 2.9]) gets (r - mean) / 1e-6 = -0.24 each, and -sqrt((G-1)/G) = -0.82 each once "
            "that rounding exceeds 1e-6 ([100.3, 100.3, 100.3]), not 0.",
            "grpo_size = 1 (per-step mode) gives NaN (the unbiased std of one reward); trajectory_return "
            "refuses grpo_size < 2 (grpo.py:1165-1170).",
        ),
        "policy_loss": (
            "the KL term is kl_to_ref_coeff * mean over all B*T positions of k3, the masked ones holding 0 "
            "(_kl_to_ref, grpo.py:910-915): aggregate(kl_penalty(k3), mask, mode='token_sum') / (B*T), not the "
            "policy term's aggregation; it shrinks with padding.",
        ),
        "ppo_token_loss": (
            "exp(log-ratio) * A with no log-ratio clamp (grpo.py:776): a ratio that overflows with A = 0 gives "
            "NaN (inf * 0), and the min picks it.",
        ),
        "token_logprobs": (
            "LLMMaskedCategorical scores the wrapper's logits as they are: no temperature in the loss path "
            "(also token_entropy).",
        ),
        "gae": (
            "vec_generalized_advantage_estimate and vec_td_lambda_return_estimate (the vectorised paths, "
            "TDLambdaEstimator's default) drop the terms of the (gamma*lmbda)^k series below 1e-7 "
            "(functional.py:183-208) and raise IndexError when gamma*lmbda = 0.",
        ),
    },
    "torchtune": {
        "rlhf_token_rewards": (
            "the PPO recipe passes value_seq_idxs as valid_score_idxs (recipes/ppo_full_finetune_single_device.py:"
            "945-951): the score sits one position after the last valid token (seq_lens + 1, :856-860) unless the "
            "row has one valid token or fills max_generated_tokens - 1 or more, and the value there is kept "
            "(:861-865), so GAE bootstraps from it (0.6.1).",
        ),
        "whiten": (
            "masked_var's Bessel factor is s / (s - 1) with s = mask.sum() + 1e-8 (rlhf/rewards.py:133-135), an "
            "integer sum plus 1e-8 in the default float32, so s = 1.0 for one valid token: 0 * inf = NaN, where the "
            "spec gives 0 (and estimate_advantages NaN advantages).",
        ),
        "value_token_loss": (
            "the recipe's value term averages over ~value_padding_masks, the response tokens plus the position "
            "after the last one (ppo_full_finetune_single_device.py:861-865, :1115).",
        ),
        "aggregate": (
            "ppo_step divides each micro-batch's token mean by gradient_accumulation_steps (:1107-1118): "
            "local token counts per micro-batch.",
        ),
    },
    "tinker_cookbook": {
        "grpo_advantages": (
            "the rewards become a float32 tensor (rl/data_processing.py:38) and the group mean a float32 sum / G: "
            "an all-equal group whose reward a float32 sum does not keep exact (0.3 x 6) gets a residue of one "
            "ulp (2.98e-08) on every member, not 0; remove_constant_reward_groups (:305-332, off by default) "
            "drops all-equal groups (group 0 alone if every group is), which adv.grpo does not do.",
        ),
        "kl_penalty": (
            "the KL penalty is folded into the advantages (rl/metrics.py:165-225): A + c*(token mean of k1 - k1) "
            "(a composition of kl_penalty, aggregate and, with kl_discount_factor > 0, reinforce_pp_advantages("
            "gap='discount') returns); the discounted sum also lands on the mask-0 positions before a trained "
            "token (:219-220), where the spec has 0.",
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
