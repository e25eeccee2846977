"""torchrl's presets: the keyword values with which torchrl computes a spec quantity where its default differs
from the canonical definition, each with where it was read. Read in torchrl 0.14.1 (the release wheel).

A function this framework computes that is absent here is canonical for everything the spec's keywords can
express (the comments say where that was read); what no keyword can express is in `NOT_EXPRESSIBLE`.
"""

from conformance.records.presets import Preset

VERSION = "0.14.1"  # the version the presets were read for


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = (
    "token_logprobs", "token_entropy", "grpo_advantages", "gae", "kl_penalty", "kl_loss_term",
    "ppo_token_loss", "cispo_token_loss", "aggregate", "policy_loss", "entropy_bonus",
)


PRESETS: tuple[Preset, ...] = (
    Preset(
        "cispo_token_loss", {"eps_low": 0.2, "eps_high": 0.2, "surrogate": "ratio"},
        "torchrl 0.14.1 (the release wheel, checked through conformance/frameworks/torchrl/): "
        "torchrl/objectives/llm/grpo.py:1008-1016 CISPOLoss._compute_policy_objective: the loss "
        "-exp(clamp(log w, log(1 - eps_low), log(1 + eps_high))) * A, the clamped ratio on the graph "
        "and no log-prob factor; clip_epsilon default 0.2 (GRPOLoss.__init__, :498, symmetric). What torchrl "
        "computes, not a recipe: a clipped token loses its gradient, which CISPO (arXiv:2506.13585 eqs. 4-5) "
        "keeps (finding cispo-clipped-ratio-on-graph, a bug).",
    ),
    Preset(
        "grpo_advantages", {"eps": 0.0},
        "grpo.py:1508-1511 MCAdvantage (per-step, the LLM collector's single-step trajectories) and "
        ":1583 (trajectory_return): (r - mean) / std.clamp_min(1e-6), torch.std unbiased: eps = 0 "
        "wherever the group std is 0 or >= 1e-6 (NOT_EXPRESSIBLE: the clamp in between, the "
        "singleton).",
    ),
    # Canonical, so absent: ppo_token_loss (GRPOLoss/DAPO, grpo.py:769-782: clip_epsilon 0.2, no dual clip,
    # no log-ratio clamp), gae (objectives/value/functional.py:120-180, gamma/lmbda required), kl_penalty and
    # kl_loss_term (k3 only, its own gradient, grpo.py:913-915), aggregate (token_mean / prompt_mean,
    # grpo.py:784-817), token_logprobs / token_entropy (LLMMaskedCategorical, no temperature).
)


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {
        # torchrl 0.14.1 torchrl/objectives/llm/grpo.py GRPOLoss.__init__ (:498-503): entropy_bonus=True,
        # entropy_coeff=0.01, aggregation="token_mean"; loss_entropy = -entropy_coeff * entropy (:735), aggregated
        # like the policy term (:737-745): an entropy bonus on by default.
        "aggregate": {"mode": "token_mean"},
        "entropy_bonus": {"entropy_coef": 0.01, "mode": "token_mean"},
    }


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
        "grpo_advantages": (
            "MCAdvantage clamps the std at 1e-6 (grpo.py:1511, :1583) instead of adding eps: a group std in "
            "(0, 1e-6) divides by 1e-6. In float32 an all-equal group whose mean rounds 1 ulp off its value "
            "(e.g. [2.9, 2.9, 2.9]) gets (r - mean) / 1e-6 = -0.24 each, and -sqrt((G-1)/G) = -0.82 each once "
            "that rounding exceeds 1e-6 ([100.3, 100.3, 100.3]), not 0.",
            "grpo_size = 1 (per-step mode) gives NaN (the unbiased std of one reward); trajectory_return "
            "refuses grpo_size < 2 (grpo.py:1165-1170).",
        ),
        "policy_loss": (
            "the KL term is kl_to_ref_coeff * mean over all B*T positions of k3, the masked ones holding 0 "
            "(_kl_to_ref, grpo.py:907-915): aggregate(kl_penalty(k3), mask, mode='token_sum') / (B*T), not the "
            "policy term's aggregation; it shrinks with the prompt columns and the padding.",
        ),
        "ppo_token_loss": (
            "exp(log-ratio) * A with no log-ratio clamp (grpo.py:776): a ratio that overflows with A = 0 gives "
            "NaN (inf * 0), and the min picks it.",
        ),
        "token_logprobs": (
            "LLMMaskedCategorical scores the wrapper's logits as they are: no temperature in the loss path "
            "(also token_entropy).",
        ),
        "gae": (
            "vec_generalized_advantage_estimate and vec_td_lambda_return_estimate (the vectorised paths, "
            "TDLambdaEstimator's default) drop the terms of the (gamma*lmbda)^k series below 1e-7 "
            "(functional.py:183-208) and raise IndexError when gamma*lmbda = 0.",
        ),
    }
