"""agg_loss's seq-mean-token-mean divides each row by n_b + 1e-8 (verl 0.9.1, finding seq-mean-token-mean-epsilon).

The per-row token mean is sum / (seq_mask + 1e-8) (trainer/ppo/core_algos.py:1195-1196): a relative 1e-8 / n_b
below the spec's mean, visible in float64 (float32 precision), invisible in float32, where n_b + 1e-8 rounds to
n_b. The right quantity; the guard only matters for an empty row, which the mode then excludes (:1197). Reached
with loss_agg_mode=seq-mean-token-mean (and by SAPO, which always uses it, :1688-1690) on float64 inputs; verl's
actor computes its losses in float32.

Run: pip install verl==0.9.1 torch numpy; python seq-mean-token-mean-epsilon.py

Expected (spec agg, seq_mean_token_mean, float64, by hand): one row with token losses [1, 2]: (1 + 2) / 2 = 1.5
(to 12 digits 1.500000000000).

Actual:
    float64: 1.499999992500
    float32: 1.500000000000
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss  # noqa: E402

for dtype in (torch.float64, torch.float32):
    loss = agg_loss(loss_mat=torch.tensor([[1.0, 2.0]], dtype=dtype), loss_mask=torch.ones(1, 2, dtype=dtype),
                    loss_agg_mode="seq-mean-token-mean", dp_size=1, batch_num_tokens=2, global_batch_size=1)
    print(f"{str(dtype).replace('torch.', '')}: {float(loss):.12f}")
