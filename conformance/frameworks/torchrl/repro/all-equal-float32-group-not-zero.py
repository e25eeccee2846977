"""An all-equal float32 group gets non-zero GRPO advantages (torchrl 0.14.1, finding all-equal-float32-group-not-zero).

`MCAdvantage` computes `(reward - reward.mean()) / reward.std().clamp_min(1e-6)` in the rewards' dtype
(objectives/llm/grpo.py:1508-1511 per step, :1583 with `trajectory_return`). The float32 mean of equal rewards is
often one ulp off the common value, the std is then about one ulp, the clamp makes the denominator 1e-6, and
every member gets (r - mean) / 1e-6. The LLM reward parsers give float32 rewards (`Unbounded` specs,
envs/llm/reward/gsm8k.py:224) and a formatted-but-wrong answer 0.1 (`format_reward`, gsm8k.py:55); torchrl's
GRPO recipe builds `MCAdvantage(grpo_size=cfg.env.repeats)` with repeats 16 (sota-implementations/grpo), so a
group in which all 16 answers are formatted but wrong reaches it.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python all-equal-float32-group-not-zero.py

Expected (spec adv.grpo, by hand): an all-equal group has r_i - mean = 0 for every member, so A = 0 exactly
(0 / (0 + eps) = 0), whatever the common value, the group size and the mode.

Actual:
    16 x 0.1, per step: [-0.0075]
    16 x 0.1, trajectory_return=sum: [-0.0075]
    3 x 2.9, per step: [-0.2384]
    3 x 100.3, per step: [-0.8165]
    16 x 0.1 in float64, per step: [0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from tensordict import TensorDict
from torchrl.objectives.llm import MCAdvantage


def advantages(value, n, dtype=torch.float32, trajectory_return=None):
    """n one-step trajectories (the single-turn layout) of one group, each with reward `value`."""
    transform = MCAdvantage(grpo_size=n, prompt_key="group_id", trajectory_return=trajectory_return)
    out = None
    for _ in range(n):
        traj = TensorDict({"group_id": torch.tensor([0]),
                           "next": {"reward": torch.tensor([[value]], dtype=dtype), "done": torch.tensor([[True]])}},
                          batch_size=[1])
        out = transform.inv(traj)
    return sorted({round(float(a), 4) for a in out["advantage"].flatten()})


print("16 x 0.1, per step:", advantages(0.1, 16))
print("16 x 0.1, trajectory_return=sum:", advantages(0.1, 16, trajectory_return="sum"))
print("3 x 2.9, per step:", advantages(2.9, 3))
print("3 x 100.3, per step:", advantages(100.3, 3))
print("16 x 0.1 in float64, per step:", advantages(0.1, 16, dtype=torch.float64))
