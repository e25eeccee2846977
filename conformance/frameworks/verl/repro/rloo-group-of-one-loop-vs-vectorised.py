"""verl's two RLOO estimators disagree on a group of one (verl 0.9.1, finding rloo-group-of-one-loop-vs-vectorised).

"rloo" (compute_rloo_outcome_advantage) gives a one-sample group mean 0 (trainer/ppo/core_algos.py:622-623) and
skips the n / (n - 1) leave-one-out rescaling (:630), so the advantage is the raw score; "rloo_vectorized"
(compute_rloo_vectorized_outcome_advantage) multiplies by (c > 1) (:864), so it is 0. Both rules are explicit in
the code: the loop form is the spec's singleton="raw" (preset verl), the vectorised form the canonical
singleton="zero". Reached with actor_rollout_ref.rollout.n = 1, RolloutConfig's default
(workers/config/rollout.py:167; no config check refuses it, utils/config.py:123-127).

Run: pip install verl==0.9.1 torch numpy; python rloo-group-of-one-loop-vs-vectorised.py

Expected (spec adv.rloo, by hand): two groups of one with scores 1 and 2: canonical (singleton="zero", no other
member to leave out) [0, 0]; singleton="raw" [1, 2].

Actual:
    rloo: [1.0, 2.0]
    rloo_vectorized: [0.0, 0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

for name in ("rloo", "rloo_vectorized"):
    token_level_rewards = torch.tensor([[1.0], [2.0]])  # one response token each, the score on it
    advantages, _ = get_adv_estimator_fn(name)(token_level_rewards=token_level_rewards,
                                               response_mask=torch.ones(2, 1), index=np.array(["p0", "p1"], dtype=object))
    print(f"{name}:", [round(float(x), 4) + 0.0 for x in advantages[:, 0]])
