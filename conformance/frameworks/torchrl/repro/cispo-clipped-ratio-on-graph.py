"""torchrl's CISPO keeps the clipped ratio on the graph: a clipped token loses its gradient (torchrl 0.14.1, finding cispo-clipped-ratio-on-graph).

`CISPOLoss._compute_policy_objective` (objectives/llm/grpo.py:1008-1016) returns
`-exp(log_weight.clamp(log(1 - eps_low), log(1 + eps_high))) * A`: the clamp is on the graph, so a token whose ratio
is outside the range gets no gradient at all, and inside it the loss is -r A. CISPO's defining property
(MiniMax-M1, arXiv:2506.13585, eqs. 4-5, which the class docstring cites, :995-1004) is the opposite: the clipped
IS weight is a stop-gradient, sg(clip(r)), multiplying A * log pi, so every token keeps the REINFORCE gradient
-sg(clip(r)) A d log pi. Reached by every `CISPOLoss` (default clip_epsilon 0.2, :498).

The actor is a stand-in (rlspec's, not torchrl's): `GRPOLoss._get_cur_log_prob` falls back to the actor's
`get_dist` (objectives/llm/grpo.py:636-640) and reads `log_prob` and `mask` from what it returns; a real run
gets an `LLMMaskedCategorical` from `TransformersWrapper`.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python cispo-clipped-ratio-on-graph.py

Expected (spec loss.cispo, surrogate "logp", the paper's, by hand): eps 0.2, A = 2, ratios 1.5 (clipped to 1.2)
and 1.1: the gradient w.r.t. logp of -sg(clip(r)) A logp is -clip(r) A = [-2.4, -2.2] (the value -clip(r) A logp
depends on logp; with logp = -1 it is [2.4, 2.2]).

Actual:
    per-token loss: [-2.4, -2.2]
    d loss / d logp: [0.0, -2.2]
"""
import math
import warnings

warnings.filterwarnings("ignore")

import torch
from tensordict import TensorDict
from torchrl.objectives.llm.grpo import CISPOLoss


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
logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
old = logp.detach() - torch.log(torch.tensor([[1.5, 1.1]]))
out = CISPOLoss(Actor(logp, mask), entropy_bonus=False, aggregation="none")(batch(old, torch.full((1, 2), 2.0)))
out.loss_objective.sum().backward()
print("per-token loss:", [round(float(x) + 0.0, 4) for x in out.loss_objective.flatten()])
print("d loss / d logp:", [round(float(x) + 0.0, 4) for x in logp.grad.flatten()])
