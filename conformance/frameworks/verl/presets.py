"""verl's presets: the keyword values with which verl computes a spec quantity where its default differs from the
canonical definition, each with where it was read. Read in verl 0.9.1 (the release wheel; verl-project/verl @
1dda039 for the lines it shares).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "0.9.1"  # the version the presets were read for


SCOPE: tuple[str, ...] | None = None  # every function was read
# Added by spec v1.2: the mismatch metrics were read (PRESETS), the sampling distribution was not (verl samples
# with its engines).
UNREAD = ("sampling_logprobs", "sampling_log_mass", "support_logprobs")


PRESETS: tuple[Preset, ...] = (
    Preset(
        "grpo_advantages", {"singleton": "raw"},
        "verl/trainer/ppo/core_algos.py:268-331 @ 1dda039: unbiased torch.std + 1e-6 (canonical); a "
        "singleton group gets mean 0 and std 1 (:315-317), i.e. A = r / (1 + 1e-6).",
    ),
    # --- spec v1.1: advantage estimators (verl 0.9.1 release wheel, core_algos.py registry) ---
    Preset(
        "rloo_advantages", {"singleton": "raw"},
        '"rloo" (compute_rloo_outcome_advantage, :587-636): a one-sample group keeps its score (mean '
        '0, :622-623, and the n/(n-1) rescaling skipped, :628-633); "rloo_vectorized" (:833-868) '
        "gives 0 (canonical).",
    ),
    Preset(
        "reinforce_pp_baseline_advantages", {"singleton": "raw"},
        '"reinforce_plus_plus_baseline" (:533-584): id2mean = 0 for a one-sample group (:572-573), '
        'then masked_whiten over the response tokens (unbiased, + 1e-8; canonical level="token").',
    ),
    Preset(
        "opo_advantages", {"singleton": "raw"},
        '"opo" (:639-690): the baseline of a one-sample group is 0 (:678-679).',
    ),
    Preset(
        "gpg_advantages", {"singleton": "raw", "alpha": "nonzero_rewards"},
        '"gpg" (:770-830): alpha = bsz / count_nonzero(scores).clamp(min=1) (:810-811), the non-zero '
        "rewards where the paper's code counts the members of groups with a reward spread; mean 0 for a "
        "one-sample group (:817-818); f_norm = 1 (the trainer never passes it, ray_trainer.py:250-279).",
    ),
    # Canonical, so absent: reinforce_pp_advantages ("reinforce_plus_plus", :693-731: the running
    # return skips masked positions, :720-726, then masked_whiten; gamma = algorithm.gamma);
    # remax_advantages ("remax", :734-767: return-to-go minus reward_baselines, the greedy reward
    # repeated per sample with interleave=True, ray_trainer.py:1534-1538); grpo_passk_advantages
    # ("grpo_passk", :471-530: torch.topk(rewards, 2), unbiased std + 1e-6; fewer than 2 samples
    # raise, as the spec does). gdpo is verl's per-reward grpo (singleton "raw") then masked_whiten over
    # tokens: see NOT_EXPRESSIBLE.
    Preset(
        "optimal_token_baseline_advantages", {"eps": 1e-08, "tail_length": "count"},
        '"optimal_token_baseline" (:871-987) and "tir_optimal_token_baseline" (:990-1121; '
        'align="valid_token"): the baseline\'s denominator is sum W + epsilon, 1e-8 (:965, :1094); the '
        "zero tail counts each row's response tokens (mask.sum(-1), :975) and zeroes baselines[i*, "
        'second_max_length:] (:982), the count used as a column of the response tensor '
        '(tail_length="count"; with valid-token alignment, :1108, it is the canonical rule). The trainer '
        "passes neither handle_zero_tail nor epsilon (ray_trainer.py:264-276): zero_tail=True "
        "(canonical) and epsilon=1e-8 always.",
    ),
    Preset(
        "kl_penalty", {"estimator": "k3", "log_ratio_clamp": 20.0, "clamp": 10.0},
        'verl/trainer/ppo/core_algos.py:2187-2250 @ 1dda039: k3 ("low_var_kl", the default '
        "kl_loss_type of the use_kl_loss path) clamps ref - logp to +-20 and the result to +-10. k1 "
        "and k2 are unclamped there, so this entry is the k3 loss-path default; verl's in-reward "
        'default ("kl" = k1, unclamped) is canonical kl_penalty().',
    ),
    Preset(
        "kl_loss_term", {"clamp": 10.0},
        'spec v1.1 kl.loss: actor.kl_loss_type defaults to "low_var_kl" '
        "(verl/workers/config/actor.py:176; 0.9.1), k3 (canonical) with the clamps above. Its +-20 "
        "log-ratio clamp changes no value and no gradient of any form once k3 is clamped at 10 (|d| "
        ">= 20 gives k3 >= 19: both clamps hold K at 10 and pass no gradient), so the preset is "
        'OpenRLHF\'s. The "+" suffix is gradient="straight_through" (core_algos.py:2200-2213: the '
        'clamps stay on the value, the gradient is the raw d); "abs", k1 and k2 are unclamped '
        "(canonical once the estimator is asked).",
    ),
    Preset(
        "ppo_token_loss", {"dual_clip": 3.0, "log_ratio_clamp": 20.0},
        "verl/trainer/ppo/core_algos.py:1286-1376 @ 1dda039: log-ratio clamped to +-20; dual-clip "
        "always on for A < 0 with clip_ratio_c = 3.0; clip_ratio 0.2/0.2 (canonical).",
    ),
    Preset(
        "gspo_token_loss", {"form": "token_sg", "eps_low": 0.2, "eps_high": 0.2},
        "verl/trainer/ppo/core_algos.py:1546-1619 @ 1dda039: stop-gradient GSPO-token form (:1589), "
        "clip ratios from the actor config (clip_ratio default 0.2/0.2).",
    ),
    Preset(
        "cispo_token_loss", {"eps_low": 0.2, "eps_high": 0.2},
        "verl/trainer/ppo/core_algos.py:2047-2104 @ 1dda039: two-sided clamp(r, 1 - 0.2, 1 + 0.2) in "
        'the relative (1 +- eps) form (bound="relative" is canonical).',
    ),
    Preset(
        "value_token_loss", {"clip": 0.5},
        "verl/trainer/ppo/core_algos.py:2124-2184 @ 1dda039: cliprange_value default 0.5.",
    ),
    # Canonical, so absent: gae (core_algos.py:216-264, AlgoConfig gamma = lam = 1.0, masked
    # positions skipped); whiten (utils/torch_functional.py:329: unbiased, +1e-8);
    # rlhf_token_rewards (ray_trainer.py:78-117: k1, score at the last response token).
    # --- spec v1.1 (verl 0.9.1 release wheel) ---
    Preset(
        "rollout_is_weights", {"log_ratio_clamp": 20.0},
        "verl/trainer/ppo/rollout_corr_helper.py:522-657: log_ratio = old - rollout (:849), clamped "
        "to +-SAFETY_BOUND = 20 (:75, :575 token, :585 sequence sum) before exp; a float threshold "
        '(default 2.0, :526) is TIS, clamp(max=upper) only (:596); "lo_hi" is IcePop, zero outside '
        '[lo, hi] (:599); rollout_is="token" is the function\'s default (:525; '
        'RolloutCorrectionConfig\'s dataclass default is "sequence", trainer/config/algorithm.py:179, '
        "and the YAML default null = off).",
    ),
    Preset(
        "decoupled_ppo_token_loss", {"dual_clip": 3.0, "behav_cap": 2.0},
        "verl decoupled mode = PPO against the recomputed old_log_prob times the IS weight of old vs "
        "rollout: core_algos.py:1284-1376 (dual clip clip_ratio_c = 3.0 always on for A < 0, :1324; "
        "pg_losses * rollout_is_weights, :1365) with the TIS weight min(rho, 2.0) above. The PPO "
        "log-ratio clamp +-20 (:1338) has no decoupled keyword: see NOT_EXPRESSIBLE.",
    ),
    # --- spec v1.2 ---
    Preset(
        "mismatch_metric", {"log_ratio_clamp": 20.0},
        "verl/trainer/ppo/rollout_corr_helper.py:904-1010 compute_offpolicy_metrics (logged as "
        "rollout_corr/<metric> by compute_rollout_correction_and_rejection_mask, :881-889): kl and k3_kl "
        "masked means over the batch's tokens; chi2_token clamps its exponent to +-SAFETY_BOUND = 20 (:75, :997).",
    ),
    Preset(
        "sequence_mismatch_metric", {"log_ratio_clamp": 20.0},
        "verl/trainer/ppo/rollout_corr_helper.py:947-1008: log_ppl_diff, log_ppl_abs_diff, ppl_ratio as per-row "
        "means averaged over the rows; chi2_seq clamps the row's sum of log-ratios to +-SAFETY_BOUND = 20 (:1005).",
    ),
    # Canonical, so absent: corrected_policy_loss (rollout_corr_helper.py:412: the rejection mask
    # multiplies response_mask, so a rejected token leaves the loss and its denominator: "drop"; read for
    # the legacy trainer, whose loss takes response_mask. The v1 trainer copies loss_mask from
    # response_mask at rollout (v1/agent_loop_tq.py:199) before the rejection, so there a rejected token
    # may stay in the token-mean's count: not read to the end, so not claimed either way);
    # rollout_rejection_mask (rollout_corr_helper.py:197-414: k1 = -log_ratio
    # = rollout - old, k2, k3 = exp(log_ratio) - 1 - log_ratio, i.e. kl_of="rollout_old"; bounds have
    # no default, rollout_rs_threshold is required).
    # --- spec v1.1: policy losses of 2025-26 (verl 0.9.1 release wheel) ---
    Preset(
        "sapo_token_loss", {"log_ratio_clamp": 20.0},
        'verl/trainer/ppo/core_algos.py:1622-1704 (loss_mode "sapo"): d = clamp(logp - old, -20, 20) '
        "(:1666) before exp; tau = tau_pos where A > 0 else tau_neg (:1671-1675), ActorConfig 1.0 / "
        "1.05 (verl/workers/config/actor.py:167-168, canonical); L = -gate * A (:1681).",
    ),
    Preset(
        "gmpo_token_loss", {"eps_low": 0.2, "eps_high": 0.2},
        'core_algos.py:1928-2011 (loss_mode "geo_mean"): the log-space clip range is clip_ratio_low '
        "/ clip_ratio_high (:1959-1961, :1978), ActorConfig 0.2 / 0.2 (actor.py:158-160), not the "
        "paper's 0.4; sign-aware min (:1977-1980); no log-ratio clamp (:1973 is commented out).",
    ),
    Preset(
        "dppo_token_loss", {"ratio_cap": 3.0, "log_ratio_clamp": 20.0},
        'core_algos.py:1379-1457 (loss_mode "dppo_tv" -> divergence "tv", canonical) and :1460-1542 '
        '("dppo_kl" -> divergence "kl"): delta_low / delta_high = clip_ratio_low / clip_ratio_high '
        "(:1413-1416, :1494-1497), 0.2 / 0.2 (canonical); d clamped to +-20 (:1420, :1501); the "
        "weight is clamp(ratio, max=clip_ratio_c).detach() (:1427-1429, :1508-1510) with ActorConfig "
        "clip_ratio_c = 3.0 (actor.py:163, the dual-clip constant of vanilla PPO; the 20.0 of "
        "config.get is only a fallback for a config without the key); keep uses A > 0 (:1436, "
        ":1520).",
    ),
    # Canonical, so absent: dro_token_loss (core_algos.py:2014-2044: -(logp * A - 0.5 * beta * d^2),
    # :2033; beta = policy_loss.dro_beta, default null, actor.py:100, ValueError unless > 0,
    # :2028-2030: beta has no default, as in the spec). loss_mode "gpg" (:1707-1740) is no new
    # function: pg_token_loss, -logp * A (:1731).
    # --- spec v1.1: reward shaping (verl 0.9.1 release wheel) ---
    Preset(
        "overlong_penalty", {"beyond": "linear"},
        "verl/workers/reward_manager/dapo.py:121-127 (DAPORewardManager, and its twin in "
        "experimental/reward_loop/reward_manager/dapo.py:108-114): min(-(L - (max_resp_len - len)) / "
        "len * penalty_factor, 0), no floor beyond max_resp_len; L = the response's attention-mask "
        "count (:82). No truncation rule and no reward clip in verl: shaped_rewards is canonical "
        "(absent).",
    ),
    # --- spec v1.1: covariance-selected tokens (verl 0.9.1 release wheel) ---
    # Canonical, so absent (the spec's defaults are verl's): clip_cov_mask (loss_mode "clip_cov",
    # core_algos.py:1743-1845: clip_cov_ratio / clip_cov_lb / clip_cov_ub = 2e-4 / 1.0 / 5.0,
    # verl/workers/config/actor.py:95-97; the PPO clip range clip_ratio_low / clip_ratio_high 0.2 / 0.2;
    # candidates lb < cov < ub (:1819) off the clipped branch (:1810, :1816); max(int(ratio * N), 1)
    # of them cut, :1818) and kl_cov_token_loss (loss_mode "kl_cov", :1848-1925: kl_cov_ratio 2e-4,
    # ppo_kl_coef 0.1, actor.py:98-99; the 1.0 of :1885 is only a fallback for a config without it).
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
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
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
        "sequence_mismatch_metric": (
            "the sequence metrics average every row with .mean() (rollout_corr_helper.py:947-990), a row "
            "without a valid token counted with masked_mean 0 (utils/torch_functional.py:294-308); the spec "
            "leaves such rows out (verl's responses always have a token); masked_mean's + 1e-8 makes float64 "
            "results float32-precise; a batch without a valid token is an AssertionError (:940).",
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
    }
