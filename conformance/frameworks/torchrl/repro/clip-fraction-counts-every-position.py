"""GRPOLoss's logged clip_fraction is divided by every position, prompt and padding included (torchrl 0.14.1, finding clip-fraction-counts-every-position).

`_compute_policy_objective` logs `clip_fraction = (log_weight_clip != log_weight).mean()` over all B*T positions
of `("tokens", "full")` (objectives/llm/grpo.py:778; CISPOLoss the same, :1013). `_log_weight` sets the log-weight
of every masked position to 0 (:961-967), so those are never clipped but are counted: the fraction is
(clipped response tokens) / (B * T). With `masking_strategy="sft"` (the default) the mask is the response
(`_get_dist_with_prompt_mask`, modules/llm/policies/common.py:1215), so the prompt columns are always in the
denominator; the ESS logged beside it is taken over the mask (:713-715).

The actor is a stand-in (rlspec's, not torchrl's): `GRPOLoss._get_cur_log_prob` falls back to the actor's
`get_dist` (objectives/llm/grpo.py:636-640) and reads `log_prob` and `mask` from what it returns; a real run
gets an `LLMMaskedCategorical` from `TransformersWrapper`.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python clip-fraction-counts-every-position.py

Expected (spec metric.clip: the token mean over the trained tokens of ppo_clipped_mask, by hand): one row of T = 5,
column 0 the prompt, columns 1-2 the response with ratios 2 (outside [0.8, 1.2], A > 0: clipped) and 1, columns
3-4 padding: 1 of 2 response tokens clipped, 0.5 (torchrl's B*T mean: 1/5 = 0.2).

Actual:
    clip_fraction: 0.2
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


mask = torch.tensor([[False, True, True, False, False]])
logp = torch.tensor([[0.0, -1.0, -1.0, 0.0, 0.0]])
old = torch.tensor([[0.0, -1.0 - math.log(2.0), -1.0, 0.0, 0.0]])
out = GRPOLoss(Actor(logp, mask), entropy_bonus=False)(batch(old, torch.ones(1, 5)))
print("clip_fraction:", round(float(out.clip_fraction), 4))
