"""torchtune's presets: the keyword values with which torchtune computes a spec quantity where its default
differs from the canonical definition, each with where it was read. Read in torchtune 0.6.1 (the release
wheel).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "0.6.1"  # the version the presets were read for


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = (
    "token_logprobs", "kl_penalty", "rlhf_token_rewards", "gae", "whiten", "ppo_token_loss",
    "value_token_loss", "aggregate", "ppo_clipped_mask",
)


PRESETS: tuple[Preset, ...] = (
    Preset(
        "ppo_token_loss", {"eps_low": 0.1, "eps_high": 0.1},
        "torchtune 0.6.1 (the release wheel, checked through conformance/frameworks/torchtune/): "
        "only torchtune/rlhf and the PPO recipe; the wheel does not ship torchtune/dev (GRPO). "
        "rlhf/loss/ppo.py:32-37 PPOLoss(epsilon=0.1, value_clip_range=0.2, value_coeff=0.1): one "
        "symmetric clip range, clamp(ratio, 1 - epsilon, 1 + epsilon) (:80), and the value clip "
        "clamp(V, old - 0.2, old + 0.2) (:101-105). The shipped config "
        "recipes/configs/mistral/7B_full_ppo_low_memory.yaml sets epsilon 0.2 (canonical) and "
        "value_clip_range 0.2.",
    ),
    Preset(
        "value_token_loss", {"clip": 0.2},
        "rlhf/loss/ppo.py:32-37 PPOLoss(value_clip_range=0.2): the value clip clamp(V, old - 0.2, old + 0.2) "
        "(:101-105); recipes/configs/mistral/7B_full_ppo_low_memory.yaml sets value_clip_range 0.2.",
    ),
    Preset(
        "whiten", {"shift_mean": False},
        "rlhf/rewards.py:139-161 whiten(x, mask, shift_mean=True): `if shift_mean: whitened += mean` "
        "(:159-160), the reverse of TRL's keyword it says it was taken from; estimate_advantages "
        "calls whiten(advantages, mask=masks) (:216) at that default, so PPO's advantages keep their "
        "mean: the spec's shift_mean=False.",
    ),
    Preset(
        "gae", {"lam": 0.95},
        "estimate_advantages(values, rewards, gamma, lmbda) has no defaults (:164-170); the shipped "
        "PPO config sets gamma 1 (canonical) and lmbda 0.95.",
    ),
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # torchtune 0.6.1 rlhf/loss/ppo.py:88-113: PPOLoss reduces with rlhf.masked_mean, the token mean.
        "aggregate": {"mode": "token_mean"},
        # recipes/configs/mistral/7B_full_ppo_low_memory.yaml (0.6.1): kl_coeff 0.01, k1 (get_rewards_ppo,
        # rlhf/rewards.py:79-80).
        "rlhf_token_rewards": {"kl_coef": 0.01},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
        "rlhf_token_rewards": (
            "the PPO recipe passes value_seq_idxs as valid_score_idxs (recipes/ppo_full_finetune_single_device.py:"
            "945-951): the score sits one position after the last valid token (seq_lens + 1, :856-860) unless the "
            "row has one valid token or fills max_generated_tokens - 1 or more, and the value there is kept "
            "(:861-865), so GAE bootstraps from it (0.6.1): the older TRL PPOTrainer's layout (sequence_lengths_p1), a "
            "convention.",
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
            "local token counts per micro-batch (the usual per-micro-batch convention).",
        ),
    }
