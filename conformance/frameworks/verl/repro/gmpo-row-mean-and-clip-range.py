"""GMPO (geo_mean) is a mean over rows whatever loss_agg_mode, with PPO's clip range 0.2 (verl 0.9.1, finding
gmpo-row-mean-and-clip-range).

compute_policy_loss_geo_mean forms one loss per row, -A_b * exp(mean of the sign-aware clipped log-ratios)
(trainer/ppo/core_algos.py:1978-1987), and returns torch.mean over the rows (:2000): it never calls agg_loss, so
loss_agg_mode and the global batch info are ignored and an empty row counts as a row with loss 0. Its log-space
clip range is clip_ratio_low / clip_ratio_high (:1959-1961, :1978), ActorConfig's 0.2 / 0.2
(workers/config/actor.py:158-160), where the GMPO paper (arXiv:2507.20673) uses 0.4. Both follow from the code as
written (preset verl: eps 0.2, reduction seq-mean-token-mean). Reached with actor.policy_loss.loss_mode=geo_mean.

Run: pip install verl==0.9.1 torch numpy; python gmpo-row-mean-and-clip-range.py

Expected (spec loss.gmpo, eps 0.4, with agg in the asked mode, by hand): row 0 has log-ratios [0.1, 0.3] and
A = +1, row 1 is empty. With eps 0.4 nothing is clipped: each of row 0's tokens carries -exp((0.1 + 0.3) / 2)
= -1.2214; token_mean -1.2214, seq_mean_token_mean (empty row counted) -0.6107, token_sum -2.4428. With ActorConfig's
0.2, 0.3 is clipped to 0.2: -exp(0.15) = -1.1618, and verl's row mean gives -0.5809 in every mode.

Actual:
    token-mean: -0.5809
    seq-mean-token-mean: -0.5809
    token-sum: -0.5809
    token-mean, clip_ratio 0.4: -0.6107
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

response_mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
log_prob = torch.full((2, 2), -1.0, dtype=torch.float64)
old_log_prob = log_prob - torch.tensor([[0.1, 0.3], [0.1, 0.3]], dtype=torch.float64)
advantages = torch.ones(2, 2, dtype=torch.float64)


def loss_of(mode, **clip):
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=mode,
                         policy_loss=PolicyLossConfig(loss_mode="geo_mean"), **clip)
    loss, _ = get_policy_loss_fn("geo_mean")(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                                             response_mask=response_mask, loss_agg_mode=mode, config=config)
    return round(float(loss), 4) + 0.0


for mode in ("token-mean", "seq-mean-token-mean", "token-sum"):
    print(f"{mode}:", loss_of(mode))
print("token-mean, clip_ratio 0.4:", loss_of("token-mean", clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4))
