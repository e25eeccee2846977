"""Gradient accumulation averages each micro-batch over its own tokens (torchtune 0.6.1, finding gradient-accumulation-local-token-counts).

`ppo_step` computes `PPOLoss` on one micro-batch (a `masked_mean`, the token mean over that micro-batch,
torchtune/rlhf/loss/ppo.py:93-98) and divides it by `gradient_accumulation_steps` before `backward()`
(recipes/ppo_full_finetune_single_device.py:1107-1119); `train` runs `ppo_step` on each micro-batch of a PPO
mini-batch (:971-995). So the accumulated gradient is the mean of the micro-batches' token means, not the token
mean of the mini-batch: the usual per-micro-batch recipe (a convention, bug-catalogue #1), which the recipe's
docstring presents as simulating a larger `ppo_batch_size` (:66-69).

Stand-ins (rlspec's, not torchtune's): the recipe object is made with `__new__` and given only the attributes
`ppo_step` reads; the policy model returns uniform logits from one parameter (current = old log-probs, ratio 1),
the value model returns 0 (= the returns: no value loss). The micro-batches are cut with `torch.index_select` on
the `Trajectory` as `train` cuts them.

Run: pip install torchtune==0.6.1 torchao==0.15.0 omegaconf (with torch); python gradient-accumulation-local-token-counts.py

Expected (spec agg token_mean over the PPO mini-batch, by hand): ratio 1, so each token's loss is -A: row 0 has 3
tokens with A = -1 (loss 1 each), row 1 one token with A = -5 (loss 5): (1 + 1 + 1 + 5) / 4 = 2.0.

Actual:
    micro-batch losses: [0.5, 2.5]
    accumulated: 3.0
"""
import importlib.util
import warnings
from functools import partial
from pathlib import Path

warnings.filterwarnings("ignore")

import torch
import torchtune
from torchtune import rlhf
from torchtune.rlhf import Trajectory
from torchtune.rlhf.loss import PPOLoss

path = Path(torchtune.__file__).resolve().parent.parent / "recipes" / "ppo_full_finetune_single_device.py"
spec = importlib.util.spec_from_file_location("ppo_recipe", path)  # loaded by path, as `tune run` does
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

PROMPT, VOCAB = 2, 12


class Uniform(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.z = torch.nn.Parameter(torch.zeros(width))

    def forward(self, tokens, input_pos=None, mask=None):
        return self.z * torch.ones(*tokens.shape, self.z.shape[0])


recipe = module.PPOFullFinetuneRecipeSingleDevice.__new__(module.PPOFullFinetuneRecipeSingleDevice)
recipe._policy_model, recipe._value_model = Uniform(VOCAB), Uniform(1)
recipe._temperature, recipe._gradient_accumulation_steps = 1.0, 2
recipe._loss_fn = PPOLoss()

responses = torch.tensor([[7, 8, 2, 0], [2, 0, 0, 0]])
padding = torch.tensor([[False, False, False, True], [False, True, True, True]])
query_responses = torch.cat([torch.ones(2, PROMPT, dtype=torch.long), responses], dim=1)
logprobs = rlhf.logits_to_logprobs(torch.zeros(2, 4, VOCAB), responses, 1.0)
logprobs[padding] = 1.0  # as generate_trajectory sets it (:852)
value_padding = padding.clone()
trajectory = Trajectory(query_responses=query_responses, logprobs=logprobs, ref_logprobs=logprobs.clone(),
                        values=torch.zeros(2, 4), masks=torch.ones(2, 6, 6, dtype=torch.bool),
                        position_ids=torch.arange(6).expand(2, 6), response_padding_masks=padding,
                        value_padding_masks=value_padding, value_seq_idxs=torch.tensor([2, 0]),
                        scores=torch.zeros(2), seq_lens=torch.tensor([2, 0]))
advantages = torch.tensor([[-1.0, -1.0, -1.0, 0.0], [-5.0, 0.0, 0.0, 0.0]])
returns = torch.zeros(2, 4)
losses = []
for row in ([0], [1]):  # ppo_backward_batch_size = ppo_batch_size / gradient_accumulation_steps = 1
    idx = torch.tensor(row)
    micro = Trajectory(*map(partial(torch.index_select, dim=0, index=idx), trajectory))
    losses.append(float(recipe.ppo_step(micro, advantages[idx], returns[idx], PROMPT).loss))
print("micro-batch losses:", [round(x, 4) for x in losses])
print("accumulated:", round(sum(losses), 4))
