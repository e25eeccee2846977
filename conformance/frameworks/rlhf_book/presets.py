"""rlhf-book's presets: the keyword values with which rlhf-book computes a spec quantity where its default
differs from the canonical definition, each with where it was read. Read in natolambert/rlhf-book @ a66b0bf,
code/policy_gradients/ (read from its source; no adapter).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "a66b0bf"  # the version the presets were read for


SCOPE: tuple[str, ...] | None = None  # every function was read
# Added by spec v1.2 after the read: not read yet (neither canonical nor a preset).
UNREAD = ("sampling_logprobs", "sampling_log_mass", "support_logprobs", "mismatch_metric", "sequence_mismatch_metric")


PRESETS: tuple[Preset, ...] = (
    Preset(
        "grpo_advantages", {"eps": 1e-08},
        "code/policy_gradients/utils.py:185-187 @ a66b0bf: (r - mean) / (r.std(dim=0) + 1e-8), "
        "unbiased.",
    ),
    Preset(
        "gspo_token_loss", {"eps_low": 0.2, "eps_high": 0.2},
        "code/policy_gradients/loss.py:131-167 @ a66b0bf: direct sequence ratio; clip_eps_lo/hi from "
        "config.py Config defaults 0.2/0.2 (configs/gspo.yaml also 0.2/0.2).",
    ),
    Preset(
        "cispo_token_loss", {"eps_low": 0.2, "eps_high": 0.2},
        "code/policy_gradients/loss.py:202-235 @ a66b0bf: clamp(r, 1 - lo, 1 + hi) under no_grad, "
        "two-sided; config.py defaults 0.2/0.2 (the shipped configs/cispo.yaml sets clip_eps_hi "
        "0.4).",
    ),
    Preset(
        "value_token_loss", {"clip": 0.2},
        "code/policy_gradients/loss.py:279-353 @ a66b0bf: 0.5 * max((R - V)^2, (R - clip(V, V_old +- "
        "0.2))^2); clip_eps_val default 0.2 (config.py).",
    ),
    Preset(
        "gae", {"gamma": 0.99, "lam": 0.95},
        "code/policy_gradients/utils.py:211-238 @ a66b0bf: defaults gamma 0.99, lam 0.95 "
        "(config.py).",
    ),
    # Canonical, so absent: ppo_token_loss (loss.py:93-128, 279-353: 0.2/0.2, no clamp);
    # rloo_advantages (utils.py:205-208: K/(K-1)(r - mean) = leave-one-out). kl_penalty's default
    # kl3 (and kl1) are not Schulman's estimators: see NOT_EXPRESSIBLE.
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # code/policy_gradients/loss.py:93-235 @ a66b0bf: masked_mean(..., dim=-1).mean(0) in every loss
        # class except DAPO.
        "aggregate": {"mode": "seq_mean_token_mean"},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
    }
