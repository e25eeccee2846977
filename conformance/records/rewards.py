"""Record of the per-token RLHF reward: a KL penalty on every token and the score on the last one
(reward.rlhf)."""

from __future__ import annotations

import numpy as np

from conformance.records.builders import Catalogue, build, f64, inf, mask, nan
from conformance.records.inputs import Inputs, batch_dims, logprobs_like, nearby, ragged_mask
from conformance.records.keywords import KL_COEF, KL_ESTIMATOR
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# rlhf_token_rewards (reward.rlhf)
# ---------------------------------------------------------------------------------------------------


def _rlhf_token_rewards_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return (
        {
            "scores": rng.normal(0.0, 2.0, size=B),
            "logp": logp,
            "ref_logp": nearby(rng, logp),
            "mask": mask,
        },
        {
            "kl_coef": float(rng.choice([0.0, 0.01, 0.05, 0.5])),
            "estimator": str(rng.choice(["k1", "k2", "k3"])),
        },
    )


LOGP6 = [-0.5, -1.0, -0.3, -2.0, -0.7, -1.5]
REF6 = [-0.6, -0.8, -0.3, -2.5, -0.2, -1.0]  # d = logp - ref = [0.1, -0.2, 0, 0.5, -0.5, -0.5]


def _rlhf(scores, logp, ref, m, **kw):
    return lambda: build(
        "rlhf_token_rewards",
        {"scores": f64(scores), "logp": f64(logp), "ref_logp": f64(ref), "mask": m},
        kw,
    )


add("rlhf_token_rewards/k1-right-padding",
    "k1: -kl_coef * (logp - ref) on valid tokens, the score added at the last valid token",
    _rlhf([2.0], [LOGP6], [REF6], mask("..xxx."), kl_coef=0.1))
add("rlhf_token_rewards/k2",
    "k2 estimator: -kl_coef * d^2 / 2",
    _rlhf([2.0], [LOGP6], [REF6], mask("..xxx."), kl_coef=0.1, estimator="k2"))
add("rlhf_token_rewards/k3",
    "k3 estimator: -kl_coef * (exp(-d) - 1 + d)",
    _rlhf([2.0], [LOGP6], [REF6], mask("..xxx."), kl_coef=0.1, estimator="k3"))
add("rlhf_token_rewards/kl-coef-0",
    "kl_coef 0: only the score, placed at the last valid token",
    _rlhf([2.0], [LOGP6], [REF6], mask("..xxx."), kl_coef=0.0),
    expect=f64([[0.0, 0.0, 0.0, 0.0, 2.0, 0.0]]))
add("rlhf_token_rewards/left-padding",
    "left padding: the last valid token is the last position of the row",
    _rlhf([-1.0], [LOGP6], [REF6], mask("...xxx"), kl_coef=0.05))
add("rlhf_token_rewards/multi-turn-gap",
    "a masked tool token inside the completion gets 0; the score goes to the last valid token",
    _rlhf([1.5], [LOGP6], [REF6], mask("..x.x."), kl_coef=0.1))
add("rlhf_token_rewards/empty-mask-row",
    "a row with no valid token is all 0 (its score is not placed anywhere)",
    _rlhf([1.0, 5.0], [LOGP6, LOGP6], [REF6, REF6], mask("..xxx.", "......"), kl_coef=0.1))
add("rlhf_token_rewards/all-rows-masked",
    "no valid token in the batch: all 0",
    _rlhf([1.0, 5.0], [LOGP6, LOGP6], [REF6, REF6], mask("......", "......"), kl_coef=0.1),
    expect=np.zeros((2, 6)))
add("rlhf_token_rewards/nonfinite-at-masked",
    "NaN, +-inf and 1e30 in logp and ref_logp at masked positions change nothing",
    _rlhf([2.0], [[nan, 1e30, -0.3, -2.0, -0.7, inf]], [[-inf, nan, -0.3, -2.5, -0.2, 1e30]],
          mask("..xxx."), kl_coef=0.1))
add("rlhf_token_rewards/t2-single-token",
    "T = 2: the single valid token carries both its KL term and the score",
    _rlhf([0.5, -0.5], [[-1.0, -0.25], [-1.0, -2.0]], [[-1.0, -0.5], [-1.0, -1.0]], mask(".x", ".x"),
          kl_coef=0.2),
    expect=f64([[0.0, 0.5 - 0.2 * 0.25], [0.0, -0.5 + 0.2 * 1.0]]))
add("rlhf_token_rewards/on-policy",
    "ref_logp == logp: every KL term is 0, only the score remains",
    _rlhf([3.0], [LOGP6], [LOGP6], mask(".xxxx."), kl_coef=0.1, estimator="k3"),
    expect=f64([[0.0, 0.0, 0.0, 0.0, 3.0, 0.0]]))


RLHF_TOKEN_REWARDS = Quantity(
    "rlhf_token_rewards",
    "reward.rlhf",
    returns="`[B,T]`",
    args=(
        Arg("scores", "[B]", "seq", constant=True), Arg("logp", "[B, T]", "token", constant=True),
        Arg("ref_logp", "[B, T]", "token", constant=True), Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(KL_COEF(), KL_ESTIMATOR("k1")),
    inputs=_rlhf_token_rewards_inputs,
    invariants=("mask", "on_policy"),
    question=("kl_coef", "estimator"),
    golden=entries("rlhf_token_rewards"),
    golden_seeds=(1, 2, 3),
)


RECORDS = (RLHF_TOKEN_REWARDS,)
