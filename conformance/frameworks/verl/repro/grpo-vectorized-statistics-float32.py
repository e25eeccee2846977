"""The vectorised GRPO computes its group statistics in float32 (verl 0.9.1, finding
grpo-vectorized-statistics-float32).

compute_grpo_vectorized_outcome_advantage takes the group mean and std from group_mean_std (trainer/ppo/
core_algos.py:352), which casts the scores to float32 before summing (utils/groupwise.py:191, :203-212; its
docstring: "mean_g: (G,) float32"). float64 rewards thus get float32-precise advantages, in both settings of
norm_adv_by_std_in_grpo (the mean alone is off). The loop "grpo" computes in the rewards' dtype. verl's trainer
holds rewards in float32 (experimental/reward_loop/reward_manager/base.py:78), where the two agree.

Run: pip install verl==0.9.1 torch numpy; python grpo-vectorized-statistics-float32.py

Expected (spec adv.grpo, scale="none", float64, by hand): one group of two with rewards 0.1 and 0.2: mean 0.15,
advantages -0.05 and 0.05 (to 12 digits: -0.050000000000, 0.050000000000).

Actual:
    grpo_vectorized: -0.050000005960 0.049999994040
    grpo: -0.050000000000 0.050000000000
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

for name in ("grpo_vectorized", "grpo"):
    advantages, _ = get_adv_estimator_fn(name)(
        token_level_rewards=torch.tensor([[0.1], [0.2]], dtype=torch.float64),
        response_mask=torch.ones(2, 1, dtype=torch.float64), index=np.array(["p0", "p0"], dtype=object),
        norm_adv_by_std_in_grpo=False)
    print(f"{name}:", " ".join(f"{float(x):.12f}" for x in advantages[:, 0]))
