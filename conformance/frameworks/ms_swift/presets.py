"""ms-swift's presets: the keyword values with which ms-swift computes a spec quantity where its default differs
from the canonical definition, each with where it was read. Read in ms-swift 4.6.0 (the release wheel;
modelscope/ms-swift @ 20ec461 and @ 070fedc for reward and advantage code).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "4.6.0"  # the version the presets were read for


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = (
    "token_logprobs", "token_entropy", "grpo_advantages", "rloo_advantages",
    "reinforce_pp_baseline_advantages", "gdpo_advantages", "kl_penalty", "kl_loss_term",
    "ppo_token_loss", "gspo_token_loss", "cispo_token_loss", "sapo_token_loss", "aggregate",
    "policy_loss", "entropy_top_mask", "off_policy_sequence_mask", "rollout_is_weights",
    "rollout_rejection_mask", "corrected_policy_loss", "overlong_penalty",
)


PRESETS: tuple[Preset, ...] = (
    # Verified in the installed ms-swift 4.6.0 (conformance/frameworks/ms_swift/, the release wheel; paths in
    # swift/, M = rlhf_trainers/grpo_trainer.py, MR = rl_core/advantage.py).
    Preset(
        "cispo_token_loss", {"bound": "absolute", "eps_high": 0.2},
        "M:1036-1038 (loss_type 'cispo'): torch.clamp(coef_1, max=self.epsilon_high).detach(), an "
        "absolute cap, epsilon_high defaulting to epsilon = 0.2 (M:2139, rlhf_trainers/args_mixin.py "
        "epsilon 0.2, epsilon_high None; no CISPO-specific default): the weight is min(r, 0.2).",
    ),
    Preset(
        "overlong_penalty", {"beyond": "linear"},
        'rewards/orm.py:216-232 class SoftOverlong (reward function "soft_overlong"): min(-(L - '
        "(soft_max_length - soft_cache_length)) / soft_cache_length, 0): no factor (factor=1.0, "
        "canonical) and no floor; asserts soft_cache_length < soft_max_length (:220).",
    ),
    Preset(
        "grpo_advantages", {"eps": 0.0001},
        "MR:63-97: grpo is (r - group mean) / (std + 1e-4), std unbiased (torch.std) of the group "
        '("group") or of the batch\'s rewards ("batch"), no division for "none"; a group of one gets '
        "std 0, so A = 0.",
    ),
    Preset(
        "reinforce_pp_baseline_advantages", {"level": "sequence", "eps": 0.0001},
        'MR:73-75, :96-97: advantage_estimator="reinforce_plus_plus" is a = r - group mean divided '
        "by (a.std() + 1e-4) over the batch's sequences (no token whitening, no return-to-go): "
        'reinforce_pp_baseline_advantages at level="sequence"; scale_rewards defaults to "batch" for '
        'it (arguments/rlhf_args.py:385-393). scale_rewards="group" divides by the group std '
        "instead: grpo_advantages(eps=1e-4).",
    ),
    Preset(
        "gdpo_advantages", {"eps": 1e-08},
        'MR:83-94 (scale_rewards="gdpo"): per reward function nanmean and unbiased nanstd + 1e-8 '
        "(utils/torch_utils.py:23-45), nan_to_num, weighted sum, then (s - s.mean()) / (s.std() + "
        "1e-8).",
    ),
    Preset(
        "kl_penalty", {"estimator": "k3", "log_ratio_clamp": 20.0, "clamp": 10.0},
        "M:973-976: the GRPO KL term is k3 of ref - logp clamped to +-20, the estimate clamped to "
        "[-10, 10] (beta != 0 and kl_in_reward off); it enters the loss with its autograd gradient "
        "(M:1063-1064).",
    ),
    Preset(
        "kl_loss_term", {"clamp": 10.0},
        "(the +-20 clamp never shows once the estimate is clamped at 10: |d| > 20 gives k3 > 19 "
        "either way, and both clamps stop the gradient; verl's kl_loss_term preset is the same)",
    ),
    Preset(
        "rollout_is_weights", {"log_ratio_clamp": 20.0},
        "M:2362-2363: the rollout log-ratio old - rollout is clamped to +-20 per token "
        "(SAFETY_BOUND) before every mode; token_truncate / token_mask / sequence_truncate (the "
        "geometric mean, M:2328-2343) are rollout_is_weights(hi=threshold) with mode truncate / "
        "mask, level sequence with seq_stat geometric.",
    ),
    Preset(
        "corrected_policy_loss", {"weight_kl": True},
        "M:1063-1067: per_token_loss = (policy term + beta * k3) * rollout_is_weights: the KL is "
        "weighted too. The off-policy sequence mask edits completion_mask (M:1069-1080): rejected "
        'tokens leave the count for grpo, bnpo, dr_grpo (canonical "drop"); see NOT_EXPRESSIBLE for '
        "dapo / cispo.",
    ),
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # ms-swift 4.6.0 swift/arguments/rlhf_args.py:526-527: GRPO's default loss_type "grpo", whose branch is the
        # mean over the micro-batch's rows of each row's token mean (rlhf_trainers/grpo_trainer.py:1082-1084).
        "aggregate": {"mode": "seq_mean_token_mean"},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
    }
