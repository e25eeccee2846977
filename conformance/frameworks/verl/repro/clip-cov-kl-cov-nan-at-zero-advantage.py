"""Clip-Cov and KL-Cov are NaN at a zero advantage with an overflowing ratio (verl 0.9.1, finding
clip-cov-kl-cov-nan-at-zero-advantage).

compute_policy_loss_clip_cov and compute_policy_loss_kl_cov form ratio = exp(log_prob - old_log_prob) with no
log-ratio clamp (trainer/ppo/core_algos.py:1797-1801, :1889-1893; vanilla PPO clamps at +-20, :1336-1339). A
valid token with A = 0 and a log-ratio above 88.7 (float32's exp range) gives -A * ratio = 0 * inf = NaN; Clip-Cov's
torch.maximum keeps it (:1832), agg_loss keeps a NaN at a valid token (:1175), so the loss is NaN and so is the
gradient at that token, which back-propagates into every parameter of the model. A = 0 is what GRPO gives every token of a group with equal rewards. Called as the actor calls the
loss (workers/utils/losses.py:101-112): get_policy_loss_fn(loss_mode) with an ActorConfig and its
PolicyLossConfig defaults.

Run: pip install verl==0.9.1 torch numpy; python clip-cov-kl-cov-nan-at-zero-advantage.py

Expected (spec loss.kl_cov / select.clip_cov with loss.ppo, by hand; the ratio term of a token with A = 0 is 0):
three valid tokens, d = log_prob - old_log_prob = [100, -0.3, 0], A = [0, -1, 1], token-mean over 3.
Token 0: 0. Token 1: A < 0, r = e^-0.3 = 0.7408 is clipped up to 0.8, loss max(0.7408, 0.8) = 0.8 (Clip-Cov) and
-A * r = 0.7408 (KL-Cov, not selected). Token 2: r = 1, loss -1. The covariances (A - mean A)(logp - mean logp)
are [0, 0, 0.5]: KL-Cov's one selected token (max(1, int(3 * 2e-4)) = 1) is token 2, which adds 0.1 * |0| = 0;
no covariance lies in Clip-Cov's (1, 5), so it cuts nothing. Clip-Cov (0 + 0.8 - 1) / 3 = -0.0667, KL-Cov
(0 + 0.7408 - 1) / 3 = -0.0864, and vanilla (which clamps) -0.0667; gradients d loss / d log_prob
[0, 0, -0.3333] (Clip-Cov, vanilla: token 1 is clipped) and [0, 0.2469, -0.3333] (KL-Cov: d(r / 3)/d logp = r / 3).

Actual:
    clip_cov loss: nan grad: [nan, 0.0, -0.3333]
    kl_cov loss: nan grad: [nan, 0.2469, -0.3333]
    vanilla loss: -0.0667 grad: [0.0, 0.0, -0.3333]
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

torch.manual_seed(0)  # Clip-Cov draws its cut with torch.randperm (none is cut here)
old = torch.tensor([[-102.0, -1.2, -1.0]])
advantages = torch.tensor([[0.0, -1.0, 1.0]])
mask = torch.ones(1, 3)


def r4(x):
    return round(float(x), 4) + 0.0


for mode in ("clip_cov", "kl_cov", "vanilla"):
    log_prob = torch.tensor([[-2.0, -1.5, -1.0]], requires_grad=True)
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode="token-mean",
                         policy_loss=PolicyLossConfig(loss_mode=mode))
    loss, _ = get_policy_loss_fn(mode)(old_log_prob=old, log_prob=log_prob, advantages=advantages,
                                       response_mask=mask, loss_agg_mode="token-mean", config=config)
    loss.backward()
    print(f"{mode} loss: {r4(loss)} grad: {[r4(g) for g in log_prob.grad[0]]}")
