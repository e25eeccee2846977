"""PPOLoss is NaN for an overflowing ratio with A = 0 (torchtune 0.6.1, finding ppo-loss-nan-overflowing-ratio-zero-advantage).

`PPOLoss.forward` takes `ratios = torch.exp(pi_logprobs - pi_old_logprobs)` with no clamp (torchtune/rlhf/loss/ppo.py:79)
and multiplies by `-advantages` (:82-83): in float32 a log-ratio of 100 is inf, and A = 0 gives -0 * inf = NaN at
a valid token, which `torch.maximum` (:93) and `masked_mean` carry into the loss. Any `PPOLoss` configuration.

Run: pip install torchtune==0.6.1 torchao==0.15.0 (with torch); python ppo-loss-nan-overflowing-ratio-zero-advantage.py

Expected (spec loss.ppo, by hand): with A = 0 each token's loss is max(-0 * r, -0 * clip(r)) = 0 however large r, so
the policy loss (the token mean) is 0; the value terms are 0 here, so the loss is 0.

Actual:
    loss: nan
    policy_loss: nan
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from torchtune.rlhf.loss import PPOLoss

old = torch.tensor([[-100.0, -1.0]])
new = torch.tensor([[0.0, -1.0]])  # log-ratio 100 at the first token
zeros = torch.zeros(1, 2)
mask = torch.ones(1, 2, dtype=torch.bool)
loss, policy_loss, value_loss, ratios, clipfrac = PPOLoss()(old, new, zeros, zeros, zeros, zeros,
                                                            padding_masks=mask, value_padding_masks=mask)
print("loss:", round(float(loss), 4))
print("policy_loss:", round(float(policy_loss), 4))
