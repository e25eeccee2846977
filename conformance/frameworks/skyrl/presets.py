"""SkyRL's presets: the keyword values with which SkyRL computes a spec quantity where its default differs from
the canonical definition, each with where it was read. Read in skyrl 0.3.0 (the release wheel).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "0.3.0"  # the version the presets were read for
# Every version read. "a956457" is NovaSky-AI/SkyRL's main branch at a9564572e (2026-08), after #1928
# (fdfcb43, "Use the right CISPO epsilon defaults following ScaleRL") and before any release: no SkyRL release
# after 0.3.0 is on the package index, so only what that change touches was re-read there.
READ: tuple[str, ...] = ("0.3.0", "a956457")


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = (
    "token_logprobs", "token_entropy", "grpo_advantages", "rloo_advantages", "maxrl_advantages",
    "reinforce_pp_advantages", "gae", "whiten", "kl_penalty", "kl_loss_term", "rlhf_token_rewards",
    "ppo_token_loss", "gspo_token_loss", "cispo_token_loss", "sapo_token_loss", "dppo_token_loss",
    "clip_cov_mask", "kl_cov_token_loss", "value_token_loss", "aggregate", "policy_loss",
    "rollout_is_weights", "rollout_rejection_mask", "decoupled_ppo_token_loss", "corrected_policy_loss",
    "kl_controller_update",
)


PRESETS: tuple[Preset, ...] = (
    Preset(
        "grpo_advantages", {"singleton": "raw"},
        "skyrl 0.3.0 (the release wheel, checked through conformance/frameworks/skyrl/; S = "
        "skyrl/backends/skyrl_train/utils/ppo_utils.py, SO = .../off_policy_correction_utils.py, TU "
        "= .../torch_utils.py, C = skyrl/train/config/config.py, TR = skyrl/train/trainer.py). "
        "S:1287-1336 compute_grpo_outcome_advantage: unbiased torch.std + epsilon 1e-6 (canonical); "
        "a one-sample group gets mean 0 and std 1 (:1321-1323), A = r / (1 + 1e-6), as verl.",
    ),
    Preset(
        "kl_penalty", {"estimator": "k3", "log_ratio_clamp": 20.0, "clamp": 10.0},
        'S:88-125 compute_approx_kl: k1, k2 and "abs" unclamped; k3 clamps ref - logp to +-20 and '
        'the estimate to +-10 (:110-117), verl\'s; kl_estimator_type defaults to "k3" (C:602) for the '
        "KL loss and the KL reward.",
    ),
    Preset(
        "kl_loss_term", {"clamp": 10.0},
        "spec v1.1 kl.loss: the same compute_approx_kl in the loss (workers/worker.py:970-980), "
        'differentiated as computed (gradient="estimator"); k3\'s clamps as verl\'s (the +-20 one '
        "never decides once the estimate is clamped at 10).",
    ),
    Preset(
        "ppo_token_loss", {"log_ratio_clamp": 20.0},
        "S:554-586 ppo_policy_loss: ratio = safe_exp_delta(d, clip=20.0) = exp(clamp(d, +-20)) "
        "(:566, TU:187-192; computed in float32); eps_clip_low / _high 0.2 / 0.2 (C:633-634); dual "
        'clip only with policy_loss_type "dual_clip" (clip_ratio_c 3.0, C:635), off by default '
        '("regular", C:619).',
    ),
    Preset(
        "gspo_token_loss", {"form": "token_sg", "eps_low": 0.2, "eps_high": 0.2},
        "S:662-728 gspo_policy_loss: log s_i,t = logp - sg(logp) + sg(masked mean of d) (:700-706, "
        "the per-token stop-gradient form), clamp(max=10) on it (:708: see NOT_EXPRESSIBLE), the PPO "
        "clip with eps_clip_low / _high 0.2 / 0.2.",
    ),
    Preset(
        "cispo_token_loss", {"eps_low": 0.0, "eps_high": 5.0},
        "S:731-764 compute_policy_loss_cispo: -A * clamp(safe_exp_delta(d, clip=20), 1 - "
        "cispo_eps_clip_low, 1 + cispo_eps_clip_high).detach() * logp (:749-751); CISPOConfig "
        "defaults 0.0 / 5.0 (C:541-545): w in [1, 6]. The +-20 log clamp cannot move w inside [1, "
        "6].",
        versions=("0.3.0",),
    ),
    Preset(
        "cispo_token_loss", {"eps_low": 1.0, "eps_high": 4.0},
        "a956457 (main), skyrl/train/config/config.py:749-760: CISPOConfig defaults cispo_eps_clip_low 1.0, "
        "cispo_eps_clip_high 4.0 (#1928, fdfcb43, 'following the ScaleRL recipe'): w in [0, 5]; "
        "compute_policy_loss_cispo (skyrl/backends/skyrl_train/utils/ppo_utils.py:733-800) is otherwise the "
        "0.3.0 formula, with cispo_anchor 'old' (the ratio to the old log-probs) by default.",
        versions=("a956457",),
    ),
    Preset(
        "value_token_loss", {"clip": 0.2},
        "S:155-173 ppo_critic_loss: 0.5 * max((V_clipped - R)^2, (V - R)^2) with value_clip 0.2 "
        "(C:643), then masked_mean(dim=-1).mean() (seq_mean_token_mean).",
    ),
    Preset(
        "sapo_token_loss", {"log_ratio_clamp": 20.0},
        "S:589-659 sapo_policy_loss: d clamped to +-20 before exp (:632); tau_pos / tau_neg 1.0 / "
        "1.05 (C:508-510, canonical); tau_pos where A > 0 (:638-642); L = -gate * A (:648).",
    ),
    Preset(
        "kl_cov_token_loss", {"fraction": 0.2, "coef": 1.0},
        "S:944-996 compute_policy_loss_kl_cov: verl's KL-Cov with KLCovConfig kl_cov_frac = 0.2 and "
        "ppo_kl_coef = 1.0 (C:533-537); compute_policy_loss_clip_cov (:881-941) with ClipCovConfig "
        "2e-4 / 1.0 / 5.0 (C:524-529) and eps_clip_low / _high 0.2 is canonical (absent). No log- "
        "ratio clamp in either (:903, :964).",
    ),
    Preset(
        "reinforce_pp_advantages", {"gap": "reset"},
        'S:1167-1199 compute_reinforce_plus_plus_outcome_advantage ("ported from verl"): running = '
        'r_t + gamma * running, then running *= response_mask[t] ("Reset after EOS", :1192-1194): a '
        'masked position inside a completion ends the return (gap="reset"), then masked_whiten '
        "(unbiased, + 1e-8). That reset is the behaviour verl#6376/#7278 fixed in verl. It is the "
        "function's rule only: SkyRL's trainer calls it with response_mask (TR:1168-1170), which has no gap "
        "inside a response, so real runs never meet the reset; there tool tokens are steps of the return "
        "(findings.toml, reinforce-pp-whitens-over-tool-tokens).",
    ),
    Preset(
        "maxrl_advantages", {"singleton": "raw"},
        "S:1339-1371 compute_maxrl_advantage: (r - mean) / (mean + 1e-6) for groups of 2 or more "
        '(:1366); a one-sample group gets r - 0 (singleton "raw", :1368). '
        "compute_rloo_outcome_advantage (:1203-1252) gives a one-sample group 0 (canonical).",
    ),
    Preset(
        "rollout_is_weights", {"log_ratio_clamp": 20.0},
        "spec v1.1 (off-policy correction): SO:24-72 compute_tis_ratio: rho = safe_exp_delta(old - "
        "rollout, clip=20) per token (:49-51) or of the row's masked sum (:63-64, the product), "
        "clamp(max=cap) (:60, :70): TIS; token cap 2.0 (C:571, canonical hi), sequence cap 5.0 "
        "(C:573, asked per call). Off by default (tis_ratio_type None, C:568).",
    ),
    Preset(
        "corrected_policy_loss", {"rejected": "zero"},
        "the loss with its off-policy correction (SO:351-385: loss * tis, loss_mask * masks) summed "
        "by reduce_loss (S:1088-1092) with advantages the trainer scaled by the uncorrected mask's "
        "counts (TR:1469-1476): a rejected token is a zero that still counts in the denominator.",
    ),
    Preset(
        "decoupled_ppo_token_loss", {"behav_cap": 2.0},
        "PPO against old_log_probs times the token TIS weight of old vs rollout (S:579-582 -> "
        "SO:351-385): decoupled PPO with prox = old and behav = rollout, behav_cap = "
        "token_tis_ratio_clip_high 2.0 (C:571); both ratios' +-20 log clamps: see NOT_EXPRESSIBLE.",
    ),
    # Canonical, so absent: rloo_advantages (S:1203-1252, a one-sample group gets 0); whiten (S:146-152:
    # unbiased, rsqrt(var + 1e-8)); clip_cov_mask (above); kl_controller_update (S:45-60, the adaptive
    # controller of the KL reward, opt-in: kl_ctrl.type "fixed", C:497-503); rollout_rejection_mask (SO:75-254:
    # the ratio pi_old/pi_rollout kept inside inclusive bounds per token (token_mask_is_threshold_*), per row on
    # every token (outlier_token_is_threshold_*: level "seq_all"), on the geometric mean (geo_mask_*, 0.99 / 1.01:
    # level "seq_mean") or the product (product_mask_*, 0.5 / 2.0: level "seq_sum"); bounds asked per call).
    # rlhf_token_rewards (TR:1381-1437, use_kl_in_reward: rewards - max(0, kl_loss_coef) * compute_approx_kl, :1408;
    # the score on the response's last token, :1091) reads kl_estimator_type, "k3" by default (C:602): estimator="k3"
    # with kl_penalty's clamps above, asked per call (no preset vector input exists for it).
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # skyrl 0.3.0 skyrl/train/config/config.py: loss_reduction "token_mean" (:621); kl_loss_coef 0.001 (:608), the
        # KL reward's coefficient when use_kl_in_reward (off by default, :604); the adaptive controller's kl_target 0.1
        # and horizon 10000 (:501-503; kl_ctrl.type "fixed" by default).
        "aggregate": {"mode": "token_mean"},
        "rlhf_token_rewards": {"kl_coef": 0.001},
        "kl_controller_update": {"target": 0.1, "horizon": 10000},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
    }
