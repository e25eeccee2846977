"""GRPOLoss's clip_fraction counts every ratio outside the clip range, whatever the advantage's sign (torchrl 0.14.1, finding clip-fraction-ignores-advantage-sign).

`clip_fraction = (log_weight_clip != log_weight).mean()` (objectives/llm/grpo.py:778) counts a token whose ratio
is outside [1 - eps_low, 1 + eps_high] even when the min picks the unclipped branch (A < 0 with r > 1 + eps, or
A > 0 with r < 1 - eps), where PPO's gradient is not zero. That is the usual PPO logging convention
(stable-baselines3 and CleanRL log mean(|r - 1| > eps)) and torchrl's own `ClipPPOLoss` logs the same
(objectives/ppo.py:1632): a convention, not a bug.

The actor is a stand-in (rlspec's, not torchrl's): `GRPOLoss._get_cur_log_prob` falls back to the actor's
`get_dist` (objectives/llm/grpo.py:636-640) and reads `log_prob` and `mask` from what it returns; a real run
gets an `LLMMaskedCategorical` from `TransformersWrapper`.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python clip-fraction-ignores-advantage-sign.py

Expected (spec metric.clip: the token mean of ppo_clipped_mask, the tokens whose gradient the clip removes, by hand):
two valid tokens, both with ratio 2 (outside [0.8, 1.2]); A = +1: the min is clip(r) A, clipped; A = -1: the
min is r A = -2 < -1.2, not clipped: 1/2 = 0.5 (the sign-blind convention: 2/2 = 1.0).

Actual:
    clip_fraction: 1.0
"""
import math
import warnings

warnings.filterwarnings("ignore")

import torch
from tensordict import TensorDict
from torchrl.objectives.llm.grpo import GRPOLoss


class GivenLogProbs(torch.distributions.Distribution):
    """Stand-in for the actor's LLMMaskedCategorical: the current log-probs of the sampled tokens and the mask."""
    arg_constraints = {}

    def __init__(self, log_probs, mask):
        self._log_probs, self.mask = log_probs, mask
        super().__init__(batch_shape=log_probs.shape, validate_args=False)

    def log_prob(self, value):
        return self._log_probs


class Actor(torch.nn.Module):
    def __init__(self, log_probs, mask):
        super().__init__()
        self.dist = GivenLogProbs(log_probs, mask)

    def get_dist(self, tensordict, **kwargs):
        return self.dist


def batch(old, advantage):
    B, T = old.shape
    return TensorDict({("tokens", "full"): torch.zeros(B, T, dtype=torch.long), ("log_probs", "full"): old,
                       "advantage": advantage.reshape(B, T, 1)}, batch_size=[B])


mask = torch.tensor([[True, True]])
logp = torch.tensor([[-1.0, -1.0]])
old = logp - math.log(2.0)
out = GRPOLoss(Actor(logp, mask), entropy_bonus=False)(batch(old, torch.tensor([[1.0, -1.0]])))
print("clip_fraction:", round(float(out.clip_fraction), 4))
