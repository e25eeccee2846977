"""A group of one sample gets NaN GRPO advantages (torchrl 0.14.1, finding group-of-one-nan).

In its default per-step mode (`trajectory_return=None`) `MCAdvantage` normalises by the unbiased std of the
group's rewards (objectives/llm/grpo.py:1508-1511); with `grpo_size=1` and one-step trajectories (a single-turn
completion) that is the std of one reward, NaN, and `NaN.clamp_min(1e-6)` stays NaN. `__init__` refuses
`grpo_size < 2` only when `trajectory_return` is set (:1165-1170, "undefined for a single trajectory"); the
per-step mode accepts it (a multi-step trajectory has a std over its steps), and torchrl's GRPO recipe passes
`grpo_size=cfg.env.repeats` unchecked (sota-implementations/grpo/grpo-sync.py), so `env.repeats=1` on a
single-turn task reaches it.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python group-of-one-nan.py

Expected (spec adv.grpo, by hand): a group of one has r - mean = 0 and A = 0 (singleton="zero").

Actual:
    per step, grpo_size=1: [nan]
    trajectory_return=sum, grpo_size=1: ValueError: trajectory_return requires grpo_size >= 2
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from tensordict import TensorDict
from torchrl.objectives.llm import MCAdvantage

traj = TensorDict({"group_id": torch.tensor([0]),
                   "next": {"reward": torch.tensor([[1.0]]), "done": torch.tensor([[True]])}}, batch_size=[1])
out = MCAdvantage(grpo_size=1, prompt_key="group_id").inv(traj)
print("per step, grpo_size=1:", [round(float(a), 4) for a in out["advantage"].flatten()])
try:
    MCAdvantage(grpo_size=1, prompt_key="group_id", trajectory_return="sum")
except ValueError as exc:
    print("trajectory_return=sum, grpo_size=1: ValueError:", str(exc).split(":")[0])
