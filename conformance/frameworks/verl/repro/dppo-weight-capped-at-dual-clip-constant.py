"""DPPO's weight is truncated at the dual-clip constant 3, not at its own 20 (verl 0.9.1, finding
dppo-weight-capped-at-dual-clip-constant).

compute_policy_loss_dppo_tv (and _dppo_kl) truncates the detached importance weight at
config.get("clip_ratio_c", 20.0) (trainer/ppo/core_algos.py:1427-1428, :1508-1509), after a comment that "a large
threshold is recommended to avoid performance degradation due to the truncation bias" (:1424-1426). But
ActorConfig always defines clip_ratio_c = 3.0, vanilla PPO's dual-clip constant (workers/config/actor.py:163), so
the 20.0 fallback is never used from the trainer and a kept token's weight is capped at 3. The spec's DPPO
(loss.dppo) keeps the weight uncapped (ratio_cap=None); verl computes ratio_cap=3.0 (preset verl). Reached with
actor.policy_loss.loss_mode=dppo_tv or dppo_kl and the default clip_ratio_c; setting actor.clip_ratio_c moves
the cap.

Run: pip install verl==0.9.1 torch numpy; python dppo-weight-capped-at-dual-clip-constant.py

Expected (spec loss.dppo, divergence "tv", delta 0.2, no cap, by hand): p_old = 0.1, p = 0.4, A = -1: r = 4 and
p - p_old = 0.3 is beyond delta but with A < 0 the token moving up is kept (the mask drops only moves in the
advantage's direction), so the loss is -A * r * log p = 4 log 0.4 = -3.6652 (token-sum). With the cap 3:
3 log 0.4 = -2.7489.

Actual:
    clip_ratio_c: 3.0
    loss: -2.7489
"""
import warnings

warnings.filterwarnings("ignore")

import math  # noqa: E402

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

log_prob = torch.tensor([[math.log(0.4)]], dtype=torch.float64)
old_log_prob = torch.tensor([[math.log(0.1)]], dtype=torch.float64)
config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode="token-sum",
                     policy_loss=PolicyLossConfig(loss_mode="dppo_tv"))
loss, _ = get_policy_loss_fn("dppo_tv")(old_log_prob=old_log_prob, log_prob=log_prob,
                                        advantages=torch.tensor([[-1.0]], dtype=torch.float64),
                                        response_mask=torch.ones(1, 1), loss_agg_mode="token-sum", config=config)
print("clip_ratio_c:", float(config.clip_ratio_c))
print("loss:", round(float(loss), 4))
