"""float64 inputs meet float32 discount factors and clip bounds (torchrl 0.14.1, finding float32-discount-and-clip-bounds).

`generalized_advantage_estimate` forms `gamma * not_terminated` and `lmbda * gamma * not_done` from a Python float
and an int tensor (objectives/value/functional.py:163-172): torch's default dtype, float32, whatever the values'
dtype. The `GAE` / `TDLambdaEstimator` modules hold gamma and lmbda in `torch.tensor(...)` buffers, float32
(objectives/value/advantages.py:2134-2145, :1760-1761); `_fast_vec_gae` keeps only the terms of the (gamma*lmbda)^k
series above 1e-7 (functional.py:200-204). `GRPOLoss` registers `clip_epsilon_low/high` as `torch.tensor(eps)`,
float32 (objectives/llm/grpo.py:536-537), so the clip bounds are float32 for float64 log-probs. The right
quantities, at float32 precision on float64 data.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python float32-discount-and-clip-bounds.py

Expected (spec adv.gae in float64, by hand): two steps, r = 0, V = [0, 100], the second terminal, gamma 0.99,
lambda 0.95: A_1 = -100, A_0 = 0.99 * 100 + 0.99 * 0.95 * (-100) = 4.95 to float64 precision (|error| < 1e-14);
gamma * lmbda = 0.1 with a reward of 1 eight steps ahead: A_0 = 0.1^8 = 1e-08 (the loop gives it); the clip
bound 1 + 0.2 in float64.

Actual:
    generalized_advantage_estimate A_0 - 4.95 (float64 inputs): -1.144e-06
    vec_generalized_advantage_estimate A_0, reward 8 steps ahead, gamma*lmbda = 0.1: 0.0
    generalized_advantage_estimate A_0, the same: 1e-08
    GRPOLoss clip_epsilon_high dtype: torch.float32
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from torchrl.objectives.llm.grpo import GRPOLoss
from torchrl.objectives.value import functional as F

f64 = torch.float64
value = torch.tensor([0.0, 100.0], dtype=f64).reshape(1, 2, 1)
next_value = torch.tensor([100.0, 0.0], dtype=f64).reshape(1, 2, 1)
reward = torch.zeros(1, 2, 1, dtype=f64)
done = torch.tensor([False, True]).reshape(1, 2, 1)
adv, _ = F.generalized_advantage_estimate(0.99, 0.95, value, next_value, reward, done, done)
print(f"generalized_advantage_estimate A_0 - 4.95 (float64 inputs): {float(adv[0, 0, 0]) - 4.95:.3e}")

T = 9
reward = torch.zeros(1, T, 1, dtype=f64)
reward[0, T - 1, 0] = 1.0
zeros = torch.zeros(1, T, 1, dtype=f64)
done = torch.zeros(1, T, 1, dtype=torch.bool)
done[0, T - 1, 0] = True
vec, _ = F.vec_generalized_advantage_estimate(0.1, 1.0, zeros, zeros, reward, done, done)
loop, _ = F.generalized_advantage_estimate(0.1, 1.0, zeros, zeros, reward, done, done)
print("vec_generalized_advantage_estimate A_0, reward 8 steps ahead, gamma*lmbda = 0.1:", float(f"{float(vec[0, 0, 0]):.4g}"))
print("generalized_advantage_estimate A_0, the same:", float(f"{float(loop[0, 0, 0]):.4g}"))
print("GRPOLoss clip_epsilon_high dtype:", GRPOLoss(None).clip_epsilon_high.dtype)
