"""PPO advantages are scaled but not centred: whiten's shift_mean=True adds the mean back (torchtune 0.6.1, finding whiten-shift-mean-inverted).

`rlhf.whiten(x, mask, shift_mean=True)` computes `(x - mean) * rsqrt(var + 1e-8)` and then `if shift_mean:
whitened += mean` (torchtune/rlhf/rewards.py:158-160), the reverse of TRL's `masked_whiten`, which its docstring
names as the source (:143) and where shift_mean=True centres. `estimate_advantages` "normalize[s] advantages
across the batch" with `whiten(advantages, mask=masks)` at that default (:215-216), and the PPO recipe calls
`estimate_advantages` on every batch (recipes/ppo_full_finetune_single_device.py:954-960).

Run: pip install torchtune==0.6.1 torchao==0.15.0 (with torch); python whiten-shift-mean-inverted.py

Expected (spec adv.whiten, canonical: centred, by hand): x = [1, 2, 3] has mean 2 and unbiased variance 1, so
whiten(x) = (x - 2) / 1 = [-1, 0, 1]; three one-token rows with r = 1, 2, 3, V = 0, gamma = lambda = 1 have raw
advantages [1, 2, 3] and whitened [-1, 0, 1] (mean 0).

Actual:
    whiten([1, 2, 3]): [1.0, 2.0, 3.0]
    estimate_advantages, rows r = 1, 2, 3: [1.0, 2.0, 3.0]
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from torchtune import rlhf

x = torch.tensor([1.0, 2.0, 3.0])
print("whiten([1, 2, 3]):", [round(float(v), 4) for v in rlhf.whiten(x, mask=torch.ones(3, dtype=torch.bool))])
rewards = torch.tensor([[1.0], [2.0], [3.0]])
advantages, _ = rlhf.estimate_advantages(torch.zeros(3, 1), rewards, 1.0, 1.0, masks=torch.ones(3, 1, dtype=torch.bool))
print("estimate_advantages, rows r = 1, 2, 3:", [round(float(v), 4) for v in advantages.flatten()])
