"""GMPO divides its row sums by n_b + 1e-8 (verl 0.9.1, finding gmpo-row-sum-epsilon).

compute_policy_loss_geo_mean takes each row's mean log-ratio and mean advantage as sum / (n_b + 1e-8)
(trainer/ppo/core_algos.py:1984, :1987): the geometric-mean ratio and the row advantage are a relative ~1e-8 / n_b
off, visible in float64 (float32 precision), invisible in float32 (n_b + 1e-8 rounds to n_b). The right quantity;
the guard only keeps an empty row finite. verl's actor computes its losses in float32.

Run: pip install verl==0.9.1 torch numpy; python gmpo-row-sum-epsilon.py

Expected (spec loss.gmpo, eps 0.4 (nothing clipped), float64, by hand): one row of two tokens with log-ratios
[0.1, 0.3] and A = +1: L = -exp((0.1 + 0.3) / 2) = -exp(0.2) = -1.221402758160 (12 digits).

Actual:
    float64: -1.221402750832
    float32: -1.221402764320
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=0.4, clip_ratio_low=0.4,
                     clip_ratio_high=0.4, policy_loss=PolicyLossConfig(loss_mode="geo_mean"))
for dtype in (torch.float64, torch.float32):
    log_prob = torch.full((1, 2), -1.0, dtype=dtype)
    old_log_prob = log_prob - torch.tensor([[0.1, 0.3]], dtype=dtype)
    loss, _ = get_policy_loss_fn("geo_mean")(old_log_prob=old_log_prob, log_prob=log_prob,
                                             advantages=torch.ones(1, 2, dtype=dtype),
                                             response_mask=torch.ones(1, 2, dtype=dtype), loss_agg_mode="token-mean",
                                             config=config)
    print(f"{str(dtype).replace('torch.', '')}: {float(loss):.12f}")
