"""An overflowing ratio with A = 0 gives a NaN GRPO loss (torchrl 0.14.1, finding overflowing-ratio-zero-advantage-nan).

`GRPOLoss._compute_policy_objective` forms `gain1 = log_weight.exp() * advantage` (objectives/llm/grpo.py:776) with no
clamp on the log-ratio (`_log_weight`, :918-983): in float32 a log-ratio of 100 is exp = inf, inf * 0 = NaN, the
min (:781) keeps the NaN and the token mean (:784-817) spreads it to the whole loss. A = 0 is what every member of
an all-equal GRPO group gets (`MCAdvantage`, :1511); nothing in torchrl's configuration keeps the log-ratio
finite (GRPOLoss, DAPO and CISPOLoss share this forward; CISPO clamps before exp, :1012).

The actor is a stand-in (rlspec's, not torchrl's): `GRPOLoss._get_cur_log_prob` falls back to the actor's
`get_dist` (objectives/llm/grpo.py:636-640) and reads `log_prob` and `mask` from what it returns; a real run
gets an `LLMMaskedCategorical` from `TransformersWrapper`.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python overflowing-ratio-zero-advantage-nan.py

Expected (spec loss.ppo, by hand): with A = 0 every token's loss is -min(r * 0, clip(r) * 0) = 0, however large r,
so the per-token losses are [0, 0] and their token mean 0.

Actual:
    per-token loss: [nan, 0.0]
    token_mean loss: nan
"""
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


mask = torch.tensor([[False, True, True]])
logp = torch.tensor([[0.0, -1.0, -1.0]])
old = torch.tensor([[0.0, -101.0, -1.0]])  # log-ratio 100 at the first response token
A = torch.zeros(1, 3)
per_token = GRPOLoss(Actor(logp, mask), entropy_bonus=False, aggregation="none")(batch(old, A)).loss_objective
print("per-token loss:", [round(float(x) + 0.0, 4) for x in per_token.flatten()[1:]])
mean = GRPOLoss(Actor(logp, mask), entropy_bonus=False)(batch(old, A)).loss_objective
print("token_mean loss:", round(float(mean), 4))
