"""OAT's presets: the keyword values with which OAT computes a spec quantity where its default differs from the
canonical definition, each with where it was read. Read in sail-sg/oat @ 08379c6 (read from its source; no
adapter).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "08379c6"  # the version the presets were read for


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = (
    "shaped_rewards",
)


PRESETS: tuple[Preset, ...] = (
    # Canonical, so absent: shaped_rewards (sail-sg/oat @ 08379c6, oat/algorithms/ppo.py PPOActor.step:
    # a completion with finish_reason == "length" gets reward = non_stop_fixed_reward when set
    # (truncated_value, PPOArgs default None), then += non_stop_penalty (truncated_shift, default 0);
    # no reward clip. The learner then multiplies by reward_scale (default 1), after the rule.
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {}


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
        "shaped_rewards": (
            "the learner multiplies the shaped reward by reward_scale (oat/algorithms/ppo.py "
            "PPOLearner.learning_step) after the rule: scale the output.",
            "ignore_no_eos=True drops truncated completions from the loss (loss_mask = not no_eos, "
            "PPOActor.step): a loss-mask rule, not a reward.",
        ),
    }
