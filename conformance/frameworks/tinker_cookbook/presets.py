"""tinker-cookbook's presets: the keyword values with which tinker-cookbook computes a spec quantity where its
default differs from the canonical definition, each with where it was read. Read in tinker-cookbook 0.6.1 (the
release wheel).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "0.6.1"  # the version the presets were read for


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = (
    "grpo_advantages", "kl_penalty",
)


PRESETS: tuple[Preset, ...] = (
    Preset(
        "grpo_advantages", {"scale": "none"},
        "tinker-cookbook 0.6.1 (the release wheel, conformance/frameworks/tinker_cookbook/): "
        "tinker_cookbook/rl/data_processing.py:24-43 compute_advantages: rewards_G - "
        "rewards_G.mean() per TrajectoryGroup (:38-40), no standard deviation and no setting for "
        'one; a one-sample group gives 0 (singleton "zero", canonical). The policy losses run on the '
        "Tinker service (not read).",
    ),
    # Canonical, so absent: kl_penalty (rl/metrics.py:208-213: the KL penalty folded into the advantages
    # is built from k1 = sampled logp - reference logp, no clamp; see NOT_EXPRESSIBLE).
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {}


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
        "grpo_advantages": (
            "the rewards become a float32 tensor (rl/data_processing.py:38) and the group mean a float32 sum / G: "
            "an all-equal group whose reward a float32 sum does not keep exact (0.3 x 6) gets a residue of one "
            "ulp (2.98e-08) on every member, not 0; remove_constant_reward_groups (:305-332, off by default) "
            "drops all-equal groups (group 0 alone if every group is), which adv.grpo does not do.",
        ),
        "kl_penalty": (
            "the KL penalty is folded into the advantages (rl/metrics.py:165-225): A + c*(token mean of k1 - k1) "
            "(a composition of kl_penalty, aggregate and, with kl_discount_factor > 0, reinforce_pp_advantages("
            "gap='discount') returns); the discounted sum also lands on the mask-0 positions before a trained "
            "token (:219-220), where the spec has 0.",
        ),
    }
