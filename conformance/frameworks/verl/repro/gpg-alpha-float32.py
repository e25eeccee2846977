"""GPG's alpha is a float32 scalar (verl 0.9.1, finding gpg-alpha-float32).

compute_gpg_outcome_advantage sets alpha = bsz / torch.count_nonzero(scores).clamp(min=1) (trainer/ppo/core_algos.py:
810-811): an int divided by an int64 tensor, which torch returns in float32 whatever the rewards' dtype, and
multiplies every advantage by it (:827). float64 rewards get float32-precise advantages whenever B / #nonzero is
not a short binary fraction (4/3 below). The right quantity; verl's trainer holds rewards in float32
(experimental/reward_loop/reward_manager/base.py:78), where nothing changes.

Run: pip install verl==0.9.1 torch numpy; python gpg-alpha-float32.py

Expected (spec adv.gpg, alpha="nonzero_rewards" (preset verl), float64, by hand): one group of four with scores [1, 2, 3, 0]: alpha = 4 / 3 (three
non-zero scores), mean 1.5, A = alpha (r - mean) = [-0.666666666667, 0.666666666667, 2.0, -2.0] to 12 digits.

Actual:
    A: -0.666666686535 0.666666686535 2.000000059605 -2.000000059605
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

advantages, _ = get_adv_estimator_fn("gpg")(
    token_level_rewards=torch.tensor([[1.0], [2.0], [3.0], [0.0]], dtype=torch.float64),
    response_mask=torch.ones(4, 1, dtype=torch.float64), index=np.array(["p0"] * 4, dtype=object))
print("A:", " ".join(f"{float(x):.12f}" for x in advantages[:, 0]))
