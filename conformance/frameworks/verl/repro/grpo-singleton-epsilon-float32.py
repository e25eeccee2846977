"""GRPO adds its epsilon to a float32 std for a group of one (verl 0.9.1, finding grpo-singleton-epsilon-float32).

compute_grpo_outcome_advantage gives a one-sample group id2std = torch.tensor(1.0), a float32 0-d tensor
(trainer/ppo/core_algos.py:315-317), so 1 + epsilon is formed in float32: 1.00000095367 instead of 1.000001
(:326). A float64 reward then gets r / 1.00000095367, a relative 4.6e-8 off the float64 r / (1 + 1e-6): float32
precision. Groups of two or more use torch.std of the rewards' own dtype (:321) and are unaffected. verl's
trainer holds rewards in float32 (experimental/reward_loop/reward_manager/base.py:78), where the two agree.

Run: pip install verl==0.9.1 torch numpy; python grpo-singleton-epsilon-float32.py

Expected (spec adv.grpo, singleton="raw" (preset verl), float64, by hand): A = r / (1 + 1e-6); r = 1 gives
0.999999000001 (to 12 digits).

Actual:
    A: 0.999999046327 float64
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: E402

advantages, _ = compute_grpo_outcome_advantage(token_level_rewards=torch.tensor([[1.0]], dtype=torch.float64),
                                               response_mask=torch.ones(1, 1, dtype=torch.float64),
                                               index=np.array(["p0"], dtype=object))
print(f"A: {float(advantages[0, 0]):.12f} {str(advantages.dtype).replace('torch.', '')}")
