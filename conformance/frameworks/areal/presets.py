"""AReaL's presets: the keyword values with which AReaL computes a spec quantity where its default differs from
the canonical definition, each with where it was read. Read in areal 1.0.4 (the release wheel).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "1.0.4"  # the version the presets were read for


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = (
    "token_logprobs", "token_entropy", "reinforce_advantages", "rloo_advantages", "grpo_advantages",
    "opo_advantages", "rlhf_token_rewards", "gae", "whiten", "kl_penalty", "kl_loss_term",
    "ppo_token_loss", "ppo_clipped_mask", "gspo_token_loss", "value_token_loss", "aggregate",
    "policy_loss", "kl_controller_update", "rollout_is_weights", "rollout_rejection_mask",
    "decoupled_ppo_token_loss", "proximal_logp_interpolation", "off_policy_sequence_mask",
    "corrected_policy_loss", "sapo_token_loss", "overlong_penalty", "shaped_rewards",
)


PRESETS: tuple[Preset, ...] = (
    # Verified in the installed areal 1.0.4 (conformance/frameworks/areal/, the release wheel; paths in areal/).
    Preset(
        "kl_penalty", {"clamp": 10.0},
        "utils/data.py:1598-1656 KLEstimator(apply_clamp=True) clamps every estimate to [-10, 10] "
        "(:1655-1656); the PPO actor builds KLEstimator(config.kl_estimator) "
        "(trainer/ppo/actor.py:53), k1 by default.",
    ),
    Preset(
        "grpo_advantages", {"eps": 1e-05},
        "utils/data.py:1378-1496 Normalization: (r - group mean) / (group std + eps), std_unbiased "
        "True and eps 1e-5 by default (api/cli_args.py:64-75), as reward_norm / adv_norm with "
        'mean_level and std_level "group".',
    ),
    Preset(
        "rloo_advantages", {"singleton": "raw"},
        "utils/data.py:1430-1434: mean_leave1out with group_size 1 takes a group mean of 0, so A = "
        "r.",
    ),
    Preset(
        "gspo_token_loss", {"eps_low": 0.2, "eps_high": 0.2},
        'functional.py:501-520: importance_sampling_level="sequence" (GSPO) clips with the PPO '
        "eps_clip, 0.2 by default (api/cli_args.py:1460-1462), and no eps_clip_higher; the gradient "
        "flows through the geometric mean (:56-149, the sequence form).",
    ),
    Preset(
        "value_token_loss", {"clip": 0.5},
        "api/cli_args.py:1659-1661: PPOCriticConfig.eps_clip 0.5; ppo_critic_loss_fn "
        "(functional.py:714-778, mse) is 0.5 * max((V - R)^2, (V_clipped - R)^2).",
    ),
    # Canonical, so absent: token_logprobs / token_entropy (utils/functional/vocab_parallel.py:15-29,
    # log_softmax(logits.float() / temperature)); reinforce_advantages (Normalization with mean_level "batch" or
    # None, std_level None); opo_advantages (adv_norm with mean_level "group", std_level None over the loss mask:
    # the length-weighted group mean); gae (actor.py:214-236, discount and gae_lambda 1.0, masked positions
    # skipped); ppo_token_loss / ppo_clipped_mask (functional.py:429-559: eps_clip 0.2 both sides unless
    # eps_clip_higher, c_clip None, no log-ratio clamp); whiten and rlhf_token_rewards (see NOT_EXPRESSIBLE).
    Preset(
        "rollout_rejection_mask", {"kl_of": "old_rollout", "hi": 5.0},
        "functional.py:185-426 (apply_rejection_sampling) with the RejectionSamplingConfig defaults "
        'level="token", action="mask", metric="ratio", agg="mean", upper=5.0, lower=None '
        '(areal/api/cli_args.py:1316-1380). "kl_k1..3" call KLEstimator._compute_approx_kl(proximal, '
        "behave) (functional.py:242), i.e. d = proximal - behave (areal/utils/data.py:1620-1656: k1 "
        '= d, k2 = d^2/2, k3 = exp(-d) - 1 + d), which is kl_of="old_rollout" with old = proximal '
        "and rollout = behaviour.",
    ),
    Preset(
        "rollout_is_weights", {"mode": "mask", "hi": 5.0},
        "functional.py:231, :391-400, :420: w = exp(proximal - behave) zeroed where rejected (ratio, "
        'token, mask); action="clamp" is mode="truncate" with lo = lower. (level "token" by default; '
        'at level "sequence" the weight is the geometric mean whatever agg: NOT_EXPRESSIBLE.)',
    ),
    Preset(
        "decoupled_ppo_token_loss", {"behav_cap": 5.0, "behav_mode": "mask"},
        "functional.py:429-560 (ppo_actor_loss_fn): PPO against proximal_logprobs, times "
        "behave_imp_weight = the masked w above (:539); the denominator counts rejected tokens "
        '(:483), as aggregate(mode="token_mean") over the original mask does. Only when '
        "rejection_sampling is set: see NOT_EXPRESSIBLE.",
    ),
    Preset(
        "corrected_policy_loss", {"rejected": "zero"},
        "functional.py:483: the loss denominator counts rejected tokens (their weight is 0).",
    ),
    # Canonical, so absent: proximal_logp_interpolation (areal/trainer/ppo/actor.py:604-685:
    # alpha = clamp((v - 1 - v_b)/(v - v_b), 0, 1), 0 where v - v_b <= 0; prox_logp_method
    # "loglinear").
    # --- spec v1.1: policy losses of 2025-26 ---
    # Canonical, so absent: sapo_token_loss (areal/utils/functional/functional.py:562-638,
    # use_sapo_loss: r = exp(logp - old) with no clamp (:601), tau_pos where A > 0 (:617);
    # sapo_tau_pos / sapo_tau_neg 1.0 / 1.05, areal/api/cli_args.py:1533-1540).
    # --- spec v1.1: reward shaping (areal 1.0.4 release wheel) ---
    Preset(
        "overlong_penalty", {"beyond": "linear"},
        'areal/utils/functional/functional.py:782-804 (reward_overlong_penalty, "modified from '
        'VERL"): min(-(L - (max_new_tokens - overlong_tokens)) / overlong_tokens * '
        "overlong_penalty_factor, 0), no floor; L = loss_mask.sum(-1) (:790). Both settings have no "
        "default (areal/api/cli_args.py:1495-1502).",
    ),
    Preset(
        "shaped_rewards", {"clip_low": -20.0, "clip_high": 20.0},
        "areal/trainer/ppo/actor.py:167-171: (r + reward_bias) * reward_scaling, clipped to "
        "+-reward_clip, default 20.0 (cli_args.py:1488-1490; bias 0 and scaling 1 by default); "
        "mask_no_eos_with_zero (off, :1503-1508) is truncated_value=0.0 (actor.py:207-210; applied "
        "after the clip, the same result since 0 lies inside +-reward_clip).",
    ),
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # areal 1.0.4 utils/functional/functional.py:483, :542: every loss is a token mean over the micro-batch's
        # original loss mask, and the engine weights micro-batches by their token counts (trainer/ppo/actor.py:363).
        "aggregate": {"mode": "token_mean"},
        # api/cli_args.py PPOActorConfig.kl_ctl 0.1 with kl_estimator "k1" (trainer/ppo/actor.py:50-53, :202).
        "rlhf_token_rewards": {"kl_coef": 0.1},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
            "token: a row whose last tokens were not trained would lose it; AReaL's workflows never build one "
            "(every trajectory ends with the model's output, workflow/rlvr.py:165-167, multi_turn.py:103-105).",
        ),
        "value_token_loss": (
            "loss_fn_type='huber' (functional.py:705-707, delta 10) has no spec form.",
            "the reduction divides by loss_mask.count_nonzero() without a floor (functional.py:772-774): NaN for an "
            "empty mask, where ppo_actor_loss_fn uses count or 1 (:483); the engines never pass one (a micro-batch "
            "of loss weight 0 is skipped, engine/fsdp_engine.py:2062-2064, megatron_engine.py:2135-2137).",
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
    }
