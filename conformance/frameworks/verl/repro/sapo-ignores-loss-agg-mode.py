"""SAPO always reduces seq-mean-token-mean, whatever loss_agg_mode (verl 0.9.1, finding sapo-ignores-loss-agg-mode).

compute_policy_loss_sapo takes loss_agg_mode but calls agg_loss with loss_agg_mode="seq-mean-token-mean"
(trainer/ppo/core_algos.py:1687-1690, "for SAPO, we need to aggregate the loss at the sequence level"). A
deliberate choice (the SAPO paper's sequence-level objective), but actor.loss_agg_mode is silently ignored for
loss_mode=sapo: "token-mean" (the default, workers/config/actor.py:164) and "token-sum" give the same loss as
seq-mean-token-mean.

Run: pip install verl==0.9.1 torch numpy; python sapo-ignores-loss-agg-mode.py

Expected (spec loss.sapo with agg in the asked mode, by hand): on-policy the SAPO gate is (4 / tau) sigmoid(0) =
2 / tau, the loss -A * 2 / tau with tau = 1 (A > 0) and 1.05 (A <= 0, actor.py:167-168). Row 0: one token,
A = +1: -2. Row 1: three tokens, A = -1: 1.9048 each. token_mean (-2 + 3 * 1.9048) / 4 = 0.9286; seq_mean_token_mean
(-2 + 1.9048) / 2 = -0.0476; token_sum -2 + 5.7143 = 3.7143.

Actual:
    token-mean: -0.0476
    seq-mean-token-mean: -0.0476
    token-sum: -0.0476
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

response_mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
log_prob = torch.full((2, 3), -1.0)
advantages = torch.tensor([[1.0] * 3, [-1.0] * 3])
for mode in ("token-mean", "seq-mean-token-mean", "token-sum"):
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=mode,
                         policy_loss=PolicyLossConfig(loss_mode="sapo"))
    loss, _ = get_policy_loss_fn("sapo")(old_log_prob=log_prob, log_prob=log_prob, advantages=advantages,
                                         response_mask=response_mask, loss_agg_mode=mode, config=config)
    print(f"{mode}:", round(float(loss), 4) + 0.0)
