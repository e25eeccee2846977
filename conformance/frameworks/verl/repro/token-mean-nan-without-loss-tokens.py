"""token-mean over a mini-batch without a loss token is 0 / 0 = NaN (verl 0.9.1, finding
token-mean-nan-without-loss-tokens).

agg_loss's token-mean divides the masked sum by batch_num_tokens (trainer/ppo/core_algos.py:1175), the global
mini-batch's loss-mask count the engine computes (workers/engine/fsdp/transformer_impl.py:730-734), with no guard:
a mini-batch whose every token is masked gives a loss of 0 / 0 = NaN (its gradient is 0: masked_sum's torch.where
passes none to masked positions, utils/torch_functional.py:290). Rollout rejection can empty a mini-batch: in
the legacy trainer (trainer.use_v1=False) the rejection rewrites response_mask (trainer/ppo/rollout_corr_helper.py:
412, :1061) and the engine's loss_mask is taken from it (trainer/ppo/ray_trainer.py:1335,
workers/utils/padding.py:71). The update itself is unaffected (a zero gradient); the step's loss and its logged
actor/pg_loss are NaN (workers/utils/losses.py:119).
This script rejects every row with rollout_rs="seq_mean_k3" and runs the default policy loss with the global
batch info the actor sets (workers/utils/losses.py:64-67).

Run: pip install verl==0.9.1 torch numpy; python token-mean-nan-without-loss-tokens.py

Expected (spec agg, mode token_mean, by hand: an empty token mean is 0): both rows rejected (every token has
log(pi_old / pi_rollout) = 2, k3 = e^2 - 3 = 4.39 > 0.5), so the loss is 0 and its gradient 0.

Actual:
    loss tokens after rejection: 0
    loss: nan
    grad: [0.0, 0.0, 0.0, 0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

response_mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
rollout_log_probs = torch.full((2, 2), -1.0)
old_log_probs = rollout_log_probs + 2.0
_, loss_mask, _ = compute_rollout_correction_and_rejection_mask(
    old_log_prob=old_log_probs, rollout_log_prob=rollout_log_probs, response_mask=response_mask,
    rollout_rs="seq_mean_k3", rollout_rs_threshold=0.5)
print("loss tokens after rejection:", int(loss_mask.sum()))

config = ActorConfig(strategy="fsdp", rollout_n=2, ppo_micro_batch_size_per_gpu=1)  # vanilla, token-mean
config.global_batch_info.update(dp_size=1, batch_num_tokens=int(loss_mask.sum()), global_batch_size=2)
log_prob = old_log_probs.clone().requires_grad_()
loss, _ = get_policy_loss_fn("vanilla")(old_log_prob=old_log_probs, log_prob=log_prob,
                                        advantages=torch.tensor([[1.0, 1.0], [-1.0, 0.0]]),
                                        response_mask=loss_mask.bool(), loss_agg_mode="token-mean", config=config)
loss.backward()
print("loss:", round(float(loss), 4))
print("grad:", [round(float(x), 4) + 0.0 for x in log_prob.grad.flatten()])
