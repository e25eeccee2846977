"""GRPOLoss's KL terms are averaged over every position, prompt and padding included (torchrl 0.14.1, finding kl-averaged-over-every-position).

`GRPOLoss._kl_to_ref` (objectives/llm/grpo.py:868-916) zeroes the masked positions and then takes
`(diff.expm1() - diff).mean()` over all B*T positions of `("tokens", "full")` (:914-915), while the policy
term is a masked token mean (:784-817). The same function makes `loss_kl_to_ref` (kl_to_ref_coeff, :747-755)
and `loss_kl_to_inference` (kl_to_inference_coeff, :756-765). With the default `masking_strategy="sft"` the
mask is the response (`_get_dist_with_prompt_mask`, modules/llm/policies/common.py:1215), so the prompt
columns count in the denominator in every batch, and the padding too.

The actor here is a stand-in (rlspec's, not torchrl's): `GRPOLoss._get_cur_log_prob` falls back to the
actor's `get_dist` (:636-640) and reads `log_prob` and `mask` from what it returns; a real run gets an
`LLMMaskedCategorical` from `TransformersWrapper` with the same mask.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python kl-averaged-over-every-position.py

Expected (spec kl.loss with aggregate token_mean, by hand): one row of T = 5, column 0 the prompt, columns 1-2 the
response, 3-4 padding; logp - ref = logp - old = log 2 on the response, so each response token has
k3 = exp(-log 2) - 1 + log 2 = 0.19315 and the token mean over the 2 response tokens is 0.1931 for both
terms (torchrl's B*T mean: 2 * 0.19315 / 5 = 0.0773). A = 0, so the policy term is 0.

Actual:
    loss_objective: 0.0
    loss_kl_to_ref: 0.0773
    loss_kl_to_inference: 0.0773
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


mask = torch.tensor([[False, True, True, False, False]])
logp = torch.tensor([[0.0, -1.0, -2.0, 0.0, 0.0]])
shifted = torch.where(mask, logp - math.log(2.0), torch.zeros(()))
loss = GRPOLoss(Actor(logp, mask), entropy_bonus=False, kl_to_ref_coeff=1.0, kl_to_inference_coeff=1.0)
batch = TensorDict({("tokens", "full"): torch.zeros(1, 5, dtype=torch.long), ("log_probs", "full"): shifted,
                    ("next", "ref_log_probs", "full"): shifted, "advantage": torch.zeros(1, 5, 1)}, batch_size=[1])
out = loss(batch)
for key in ("loss_objective", "loss_kl_to_ref", "loss_kl_to_inference"):
    print(f"{key}: {round(float(getattr(out, key)), 4)}")
