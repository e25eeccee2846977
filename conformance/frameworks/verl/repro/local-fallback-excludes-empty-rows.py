"""agg_loss's local fallback leaves fully masked rows out of the sequence count (verl 0.9.1, finding
local-fallback-excludes-empty-rows).

Without global_batch_size, the seq-mean modes of agg_loss divide by seq_mask.sum(), the number of rows with at
least one valid token ("exclude fully masked sequences", trainer/ppo/core_algos.py:1183-1187, :1197-1201); the
spec counts every row of the batch. A deliberate choice, stated in the code. The trainer's losses never take
this path: the actor passes global_batch_size = ppo_mini_batch_size x rollout.n (trainer/ppo/v1/trainer_base.py:
1851, workers/utils/losses.py:67), which counts every row (canonical). Only calls without the global batch info
reach it: the logged actor/entropy metric (trainer_base.py:1677-1682) and direct calls.

Run: pip install verl==0.9.1 torch numpy; python local-fallback-excludes-empty-rows.py

Expected (spec agg, by hand): rows [1, 3] (2 valid tokens) and an empty row; seq_mean_token_mean
= ((1 + 3) / 2 + 0) / 2 = 1.0, seq_mean_token_sum = (4 + 0) / 2 = 2.0. With global_batch_size = 2 verl agrees
(up to its n_b + 1e-8); the local fallback divides by 1 row: 2.0 and 4.0.

Actual:
    seq-mean-token-mean local: 2.0 global: 1.0
    seq-mean-token-sum local: 4.0 global: 2.0
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss  # noqa: E402

loss_mat = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
loss_mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])  # row 1 fully masked
for mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
    local = agg_loss(loss_mat=loss_mat, loss_mask=loss_mask, loss_agg_mode=mode)
    glob = agg_loss(loss_mat=loss_mat, loss_mask=loss_mask, loss_agg_mode=mode, dp_size=1, batch_num_tokens=2,
                    global_batch_size=2)
    print(f"{mode} local: {round(float(local), 4)} global: {round(float(glob), 4)}")
