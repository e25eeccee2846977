"""open-instruct's presets: the keyword values with which open-instruct computes a spec quantity where its
default differs from the canonical definition, each with where it was read. Read in allenai/open-instruct @
e6c3044 (read from its source; no adapter).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "e6c3044"  # the version the presets were read for


SCOPE: tuple[str, ...] | None = None  # every function was read
# Added by spec v1.2 after the read: not read yet (neither canonical nor a preset).
UNREAD = ("sampling_logprobs", "sampling_log_mass", "support_logprobs", "mismatch_metric", "sequence_mismatch_metric")


PRESETS: tuple[Preset, ...] = (
    Preset(
        "grpo_advantages", {"scale": "none", "std_ddof": 0, "eps": 1e-08},
        'open_instruct/data_loader.py:1472-1484 @ e6c3044: numpy std, biased (ddof=0), "standard" is '
        '(r - mean) / (std + 1e-8); the default advantage_normalization_type is "centered" '
        '(data_loader.py:421), i.e. r - mean, scale="none". Override scale="group" for "standard".',
    ),
    Preset(
        "kl_penalty", {"estimator": "k3", "log_ratio_clamp": 40.0},
        "open_instruct/model_utils.py:793-818 and grpo_utils.py:530-538 @ e6c3044: default estimator "
        "index 2 = expm1(-d) + d (k3), with d clamped to +-40 first and no output clamp.",
    ),
    Preset(
        "kl_loss_term", {"log_ratio_clamp": 40.0},
        "spec v1.1 kl.loss: the same k3 in the loss, differentiated as computed "
        '(gradient="estimator").',
    ),
    Preset(
        "ppo_token_loss", {"eps_high": 0.272},
        "open_instruct/grpo_utils.py:504-538 @ e6c3044: clip(r, 1 - 0.2, 1 + 0.272), no clamp on r.",
    ),
    Preset(
        "cispo_token_loss", {"eps_high": 0.272},
        "open_instruct/grpo_utils.py:518-521 @ e6c3044: clamp(r.detach(), max=1 + clip_higher), one- "
        "sided, relative form; clip_higher default 0.272.",
    ),
    # No GAE/whitening in grpo_fast, no GSPO, no RLOO.
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # open_instruct/grpo_utils.py:651-689, rl_utils.py:426-448 @ e6c3044: loss_denominator="token".
        "aggregate": {"mode": "token_mean"},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
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
    }
