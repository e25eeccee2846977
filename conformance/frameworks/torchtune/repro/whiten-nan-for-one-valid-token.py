"""whiten, and so estimate_advantages, is NaN for a batch with one valid token (torchtune 0.6.1, finding whiten-nan-for-one-valid-token).

`masked_var` (torchtune/rlhf/rewards.py:133-135) applies the Bessel factor `mask_sum / (mask_sum - 1)` with
`mask_sum = mask.sum() + 1e-8`: an integer sum plus a Python float, a float32 tensor whatever x's dtype, so for one
valid token it is exactly 1.0, the factor 1/0 = inf and the variance 0 * inf = NaN. The PPO recipe whitens the
advantages of the whole trajectory batch (`masks=~response_padding_masks`, recipes/ppo_full_finetune_single_device.py:
954-960); every response keeps at least its first token (a first-token stop token is kept,
torchtune/rlhf/sequence_processing.py:79), so a batch has one valid token exactly when `batch_size=1` (the recipe's
checks ask only divisibility, :394-425) and the policy's first token is a stop token.

Run: pip install torchtune==0.6.1 torchao==0.15.0 (with torch); python whiten-nan-for-one-valid-token.py

Expected (spec adv.whiten, by hand): one valid value has variance 0 (n - ddof <= 0 gives 0), so it whitens to
(A - A) / sqrt(0 + eps) = 0, or to A itself where the mean is kept (torchtune's own shift_mean=True): finite
either way; the return is r = 1 (V = 0).

Actual:
    response mask: [True, False, False]
    advantages: [nan, 0.0, 0.0]
    returns: [1.0, 0.0, 0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from torchtune import rlhf

# batch_size = 1: the policy's first generated token is the stop token 2 (the rest is truncated to padding)
responses = torch.tensor([[2, 7, 8]])
padding, _ = rlhf.truncate_sequence_at_first_stop_token(responses, torch.tensor([2]), 0)
mask = ~padding
rewards = torch.tensor([[1.0, 0.0, 0.0]])  # the score at the last valid token
advantages, returns = rlhf.estimate_advantages(torch.zeros(1, 3), rewards, 1.0, 0.95, masks=mask)
print("response mask:", mask.flatten().tolist())
print("advantages:", [round(float(v), 4) for v in advantages.flatten()])
print("returns:", [round(float(v), 4) for v in returns.flatten()])
