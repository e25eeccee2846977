"""TRL's presets: the keyword values with which TRL computes a spec quantity where its default differs from the
canonical definition, each with where it was read. Read in trl 1.16.0 (the release wheel) and, for PPO,
huggingface/trl @ f2cd577.

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "1.16.0"  # the version the presets were read for


SCOPE: tuple[str, ...] | None = None  # every function was read
# Added by spec v1.2 after the read: not read yet (neither canonical nor a preset).
UNREAD = ("sampling_logprobs", "sampling_log_mass", "support_logprobs", "mismatch_metric", "sequence_mismatch_metric")


PRESETS: tuple[Preset, ...] = (
    Preset(
        "grpo_advantages", {"eps": 0.0001},
        "trl/trainer/grpo_trainer.py:2761-2810 (1.16.0): A = (r - mean_g) / (std_g + 1e-4); std is "
        "the unbiased, NaN-aware nanstd (trl/trainer/utils.py:1021), so std_ddof stays canonical "
        "(1).",
    ),
    Preset(
        "kl_penalty", {"estimator": "k3"},
        "trl/trainer/grpo_trainer.py:3098-3106 (1.16.0): the GRPO KL term is k3 only, no clamp.",
    ),
    Preset(
        "kl_loss_term", {"gradient": "bias_corrected"},
        "spec v1.1 kl.loss: grpo_trainer.py:3095-3105 (1.16.0): that k3 (canonical) times coef_1 = "
        "exp(logp - old_logp) on the graph, with use_bias_correction_kl=True, the default "
        '(grpo_config.py:972-982); False is gradient="estimator" (canonical).',
    ),
    Preset(
        "gspo_token_loss", {"eps_low": 0.2, "eps_high": 0.2},
        'trl/trainer/grpo_trainer.py:3084-3095 (1.16.0): importance_sampling_level="sequence" forms '
        "s directly (the paper's form) and reuses epsilon=0.2, epsilon_high=epsilon "
        "(trl/trainer/grpo_config.py:945-946), not the GSPO paper's 3e-4/4e-4.",
    ),
    Preset(
        "cispo_token_loss", {"bound": "absolute", "eps_high": 5.0},
        "trl/trainer/grpo_trainer.py:3109-3111 (1.16.0): w = clamp(r, max=epsilon_high).detach(), an "
        "absolute bound with no lower bound (eps_low=None is canonical). 5.0 is the value the "
        "epsilon_high docs recommend for cispo; the bare config default would be epsilon_high = "
        "epsilon = 0.2.",
    ),
    Preset(
        "gae", {"lam": 0.95},
        "trl/experimental/ppo/ppo_trainer.py:763-799 @ f2cd577: gamma 1.0 (canonical), lam 0.95.",
    ),
    Preset(
        "value_token_loss", {"clip": 0.2},
        "trl/experimental/ppo/ppo_trainer.py:826-848 @ f2cd577: cliprange_value 0.2.",
    ),
    # Canonical, so absent: ppo_token_loss (grpo_trainer.py:3083-3120: eps 0.2/0.2, no log-ratio
    # clamp, delta=None); whiten (ppo_trainer.py:237-270, :797 @ f2cd577: unbiased var,
    # rsqrt(var + 1e-8), shift_mean=True); rlhf_token_rewards (ppo_trainer.py:773-776: k1).
    # --- spec v1.1 ---
    Preset(
        "rollout_is_weights", {"level": "sequence", "mode": "mask", "hi": 3.0},
        'trl/trainer/grpo_config.py:934-961 (1.16.0): vllm_importance_sampling_mode="sequence_mask", '
        "clip_max 3.0, clip_min None; trl/trainer/grpo_trainer.py:2660-2707: delta = (old - "
        "sampling) * mask, summed per row for sequence_* (the product of ratios), exp, then "
        "masked_fill(ratio < min | ratio > max, 0): inclusive bounds. No log-ratio clamp, no batch "
        "normalisation. Applied only with use_vllm and vllm_importance_sampling_correction=True "
        "(grpo_config.py:925).",
    ),
    Preset(
        "corrected_policy_loss", {"rejected": "zero"},
        "grpo_trainer.py:3140-3150: per_token_loss * off_policy_mask, then * "
        "importance_sampling_ratio, then + beta * per_token_kl (not weighted), reduced over the "
        "original completion mask: a rejected token's policy term is 0 but it still counts.",
    ),
    Preset(
        "vespo_token_loss", {"log_ratio_clamp": 20.0, "w_min": 1e-08, "w_max": 485165195.4097903},
        "grpo_trainer.py get_gamma_weights (1.16.0, :2972-3018): each token log-ratio clamped to "
        "+-20, the sequence log-ratio clamped to [log 1e-8, 20]; k/lambda defaults 2/3 and 3/2 "
        "(grpo_config.py:730-760) are canonical. Its nan_to_num(posinf=0) never fires on the clamped "
        "log-ratio.",
    ),
    # --- spec v1.1: advantage estimators ---
    Preset(
        "gdpo_advantages", {"eps": 0.0001},
        'grpo_trainer.py:2790-2800 (1.16.0), multi_objective_aggregation="normalize_then_sum" (GDPO; '
        'default "sum_then_normalize", grpo_config.py:777): per reward function (nanmean, unbiased '
        "nanstd + 1e-4) over the group, weighted by reward_weights, summed, then (s - nanmean) / "
        "(nanstd + 1e-4) over the gathered batch. No REINFORCE++, ReMax, OPO, pass@k, MaxRL or GPG "
        "in TRL.",
    ),
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
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # trl/trainer/grpo_trainer.py:3153-3184 (1.16.0): default loss_type "dapo" = global token mean
        # (num_tokens = num_items_in_batch, :2498).
        "aggregate": {"mode": "token_mean"},
        # trl/experimental/ppo/ppo_trainer.py:773-776 @ f2cd577: PPO kl_coef 0.05 (k1 in the reward).
        "rlhf_token_rewards": {"kl_coef": 0.05},
        # spec v1.1 loss.entropy: grpo_config.py:876-885, grpo_trainer.py:3192-3211 (1.16.0): entropy_coef
        # 0.0 (off); the bonus is a token mean whatever loss_type.
        "entropy_bonus": {"entropy_coef": 0.0, "mode": "token_mean"},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
    }
