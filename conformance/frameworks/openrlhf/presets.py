"""OpenRLHF's presets: the keyword values with which OpenRLHF computes a spec quantity where its default differs
from the canonical definition, each with where it was read. Read in openrlhf 0.11.2 (the release wheel).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "0.11.2"  # the version the presets were read for


SCOPE: tuple[str, ...] | None = None  # every function was read
# Added by spec v1.2 after the read: not read yet (neither canonical nor a preset).
UNREAD = ("sampling_logprobs", "sampling_log_mass", "support_logprobs", "mismatch_metric", "sequence_mismatch_metric")


PRESETS: tuple[Preset, ...] = (
    Preset(
        "grpo_advantages", {"eps": 1e-09},
        "openrlhf/trainer/ppo_utils/experience_maker.py:268-274 (0.11.2): group_norm is (r - mean) / "
        "(r.std(-1) + 1e-9), unbiased.",
    ),
    # --- spec v1.1: advantage estimators (openrlhf 0.11.2) ---
    Preset(
        "reinforce_pp_advantages", {"gap": "discount", "std_ddof": 0},
        'trainer/ppo_utils/experience_maker.py:282-322, :390-421 (estimator "reinforce"): the '
        "rewards of compute_reward (KL reward per token plus the score, a composition with "
        "rlhf_token_rewards) are multiplied by the action mask and accumulated over every position, "
        "masked ones included (cumulative_return = r_t + gamma * cumulative_return, :414-419: "
        'gap="discount"); then whitened over all action tokens with the biased variance (:325-339).',
    ),
    Preset(
        "reinforce_pp_baseline_advantages", {"std_ddof": 0},
        'experience_maker.py:271-272 ("reinforce_baseline": r - group mean), gamma forced to 1 '
        "(:308-310), the same biased whitening (:325-339). n = 1 is blocked at the CLI.",
    ),
    Preset(
        "kl_penalty", {"clamp": 10.0},
        "openrlhf/models/utils.py:69-128 (0.11.2): every estimator's output is clamped to [-10, 10]. "
        "The k3 input clamp (d >= -10) never changes a value or gradient once the output is clamped "
        "at 10, so no log_ratio_clamp is needed.",
    ),
    Preset(
        "kl_loss_term", {"clamp": 10.0},
        "spec v1.1 kl.loss: the same compute_approx_kl, every estimate clamped to [-10, 10] whatever "
        'the estimator (asked per call; --algo.kl.estimator defaults to "k1", '
        "cli/train_ppo_ray.py:449-452); --algo.kl.unbiased_gradient (off by default, :458-465) is "
        'gradient="unbiased" with the weight capped at KL_IS_WEIGHT_CLIP = 10 (models/utils.py:66, '
        ":115-128; weight_cap=10.0 is canonical).",
    ),
    Preset(
        "whiten", {"std_ddof": 0},
        "openrlhf/trainer/ppo_utils/experience_maker.py:325-339 (0.11.2): biased variance over all "
        "tokens. OpenRLHF floors the variance (clamp(min=1e-8)) where the spec adds eps; that part "
        "is listed in NOT_EXPRESSIBLE.",
    ),
    Preset(
        "ppo_token_loss", {"log_ratio_clamp": 20.0},
        'openrlhf/models/loss.py:116-259 (0.11.2): log-ratio clamped to +-20 for "ppo"; dual_clip '
        "None by default; clip_eps 0.2/0.2.",
    ),
    Preset(
        "gspo_token_loss", {"eps_low": 0.2, "eps_high": 0.2},
        "openrlhf/models/loss.py:189-196 (0.11.2): direct sequence ratio (canonical form), "
        "PolicyLoss clip eps 0.2/0.2, no clamp.",
    ),
    Preset(
        "value_token_loss", {"clip": 0.5},
        "openrlhf/models/loss.py:262-298 (0.11.2): V_old + clamp(V - V_old, +-clip); CLI value_clip "
        "0.5.",
    ),
    # Canonical, so absent: gae (experience_maker.py:343-387, CLI gamma = lam = 1);
    # rlhf_token_rewards estimator (k1). No CISPO in OpenRLHF.
    # --- spec v1.1 (openrlhf 0.11.2) ---
    Preset(
        "rollout_is_weights", {"mode": "mask", "lo": 0.5, "hi": 5.0},
        "openrlhf/models/loss.py:126-131 and cli/train_ppo_ray.py:261-289: is_correction_mode "
        '"mask", gating "ratio", threshold [0.5, 5.0] (level "off" by default; "token" is the '
        "canonical level). loss.py:219-239: rho = exp(old - rollout); keep = (rho >= 0.5) & (rho <= "
        '5.0); coef = where(keep, rho, 0). ("clip" mode: clamp(rho, 0.5, 5.0) = mode="truncate" with '
        "the same bounds.)",
    ),
    Preset(
        "rollout_rejection_mask", {"lo": 0.5, "hi": 5.0},
        'loss.py:223-238: the same gate as a keep mask on the ratio (level "seq": level="seq_mean", '
        "the geometric mean of rho).",
    ),
    Preset(
        "corrected_policy_loss", {"rejected": "zero"},
        "loss.py:235-241: the PPO loss times coef (0 where the gate rejects), reduced over "
        "action_mask: rejected tokens still count.",
    ),
    # --- spec v1.1: reward shaping (openrlhf 0.11.2) ---
    Preset(
        "shaped_rewards", {"clip_low": -10.0, "clip_high": 10.0},
        "trainer/ppo_utils/length_penalty.py:16-58 (apply_overlong_penalty): exceed = min(L - "
        "(max_new_tokens - buffer), buffer), penalised when exceed > 0: -exceed / buffer * factor, "
        "floored at -factor (canonical; --reward.overlong_penalty_factor 1, "
        "cli/train_ppo_ray.py:532-535). buffer 0: see NOT_EXPRESSIBLE. "
        "--reward.stop_properly_penalty_coef (:536-542, off) is truncated_scale (coef in [0, 1]) or "
        "truncated_value (coef < 0), length_penalty.py:83-104; then models/utils.py:141-142 clamps "
        "the reward to --reward.clip_range, default (-10, 10) (cli/train_ppo_ray.py:474).",
    ),
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
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
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
    }
