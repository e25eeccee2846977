"""The rewards become float32 (tinker-cookbook 0.6.1, finding rewards-become-float32).

`compute_advantages` builds `torch.tensor(traj_group.get_total_rewards())` from Python floats, a float32 tensor
(tinker_cookbook/rl/data_processing.py:38), and centres it with a float32 mean (:40). The trajectory rewards are
Python floats (float64), so the advantages carry float32 rounding: an all-equal group whose reward a float32 sum
does not keep exact (six rewards of 0.3) gives every member +2^-25 = 2.98e-08, not 0. Within the float32
tolerance and harmless in training (remove_constant_reward_groups, off by default, would drop the group); a
precision finding. Reached by every call (compute_advantages has no dtype setting).

Run: pip install tinker-cookbook==0.6.1 tinker==0.38.0 torch; python rewards-become-float32.py

Expected (spec grpo_advantages(scale="none") in the rewards' float64, by hand): r - mean(r) = 0 for an all-equal
group; [0.1, 0.2] gives [-0.05, 0.05] to float64 precision.

Actual:
    dtype: torch.float32
    six rewards of 0.3: ['2.980e-08', '2.980e-08', '2.980e-08', '2.980e-08', '2.980e-08', '2.980e-08']
    [0.1, 0.2] centred, minus the float64 result: ['-4.470e-09', '-2.980e-09']
"""



import warnings

warnings.filterwarnings("ignore")

import tinker  # noqa: E402
from tinker_cookbook.rl import data_processing  # noqa: E402
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup  # noqa: E402


def group(rewards):
    """A group whose trajectories' total rewards are `rewards` (the group rewards; no per-step rewards)."""
    empty = tinker.ModelInput.empty()
    return TrajectoryGroup(trajectories_G=[Trajectory(transitions=[], final_ob=empty) for _ in rewards],
                           final_rewards_G=list(rewards), metrics_G=[{} for _ in rewards])


(adv,) = data_processing.compute_advantages([group([0.3] * 6)])
print("dtype:", adv.dtype)
print("six rewards of 0.3:", [f"{float(x):.3e}" for x in adv])
(adv,) = data_processing.compute_advantages([group([0.1, 0.2])])
print("[0.1, 0.2] centred, minus the float64 result:", [f"{float(a) - e:.3e}" for a, e in zip(adv, (-0.05, 0.05))])
