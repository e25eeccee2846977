"""OPO divides 0 by 0 for a group whose responses were all rejected (verl 0.9.1, finding
opo-group-without-response-tokens-nan).

compute_opo_outcome_advantage's baseline is sum(len * score) / sum(len) over the group, with len the response
mask's count (trainer/ppo/core_algos.py:664, :683): a group whose rows have no response token gives 0 / 0 =
NaN, and NaN * response_mask stays NaN at every position of those rows (:688). The trainer reaches it with
rollout rejection on: compute_rollout_correction_and_add_to_batch writes the rejection into response_mask
(trainer/ppo/rollout_corr_helper.py:412, :1061) before compute_advantage (decoupled mode, trainer/ppo/v1/trainer_base.py:1770-1784;
legacy ray_trainer.py:1658-1674), so a prompt whose every sample is rejected at sequence level (seq_sum_*,
seq_mean_*, seq_max_*) is such a group. The policy loss then stays finite (agg_loss's masked_sum drops masked
values, utils/torch_functional.py:290-291) but its gradient at those positions is 0 * NaN = NaN, so the step's
gradient norm is not finite and the engine skips the update (workers/engine/fsdp/transformer_impl.py:822-825).
This script runs the three steps: the rejection with rollout_rs="seq_mean_k3" (threshold 0.5), the "opo"
estimator on the modified mask, and the default policy loss ("vanilla", token-mean) with the actor's boolean
response mask (workers/utils/losses.py:93).

Run: pip install verl==0.9.1 torch numpy; python opo-group-without-response-tokens-nan.py

Expected (spec adv.opo, by hand; a row without response tokens carries no advantage): group 0 (rows 0-1, every
token with log(pi_old / pi_rollout) = 2, k3 = e^2 - 1 - 2 = 4.39 > 0.5) is rejected: all its advantages are 0.
Group 1 (rows 2-3, on-policy, kept) has lengths 2 and 1 and scores 1 and 0: baseline (2 * 1 + 1 * 0) / 3 = 2/3,
advantages 1/3 on both tokens of row 2 and -2/3 on the token of row 3. On-policy (ratio 1) the token-mean loss is
-(1/3 + 1/3 - 2/3) / 3 = 0 and its gradient -A / 3: [-0.1111, -0.1111] (row 2), [0.2222, 0] (row 3) and 0 on the
rejected rows.

Actual:
    kept rows: [0.0, 0.0, 1.0, 1.0]
    advantages row 0: [nan, nan]
    advantages row 1: [nan, nan]
    advantages row 2: [0.3333, 0.3333]
    advantages row 3: [-0.6667, 0.0]
    loss: 0.0
    grad row 0: [nan, nan]
    grad row 1: [nan, nan]
    grad row 2: [-0.1111, -0.1111]
    grad row 3: [0.2222, 0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

response_mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
rollout_log_probs = torch.full((4, 2), -1.0)
old_log_probs = rollout_log_probs + torch.tensor([[2.0], [2.0], [0.0], [0.0]])  # group 0 far off-policy
# the score on each row's last response token, zeros elsewhere (as verl's reward managers place it)
token_level_rewards = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
index = np.array(["p0", "p0", "p1", "p1"], dtype=object)  # the trainer's uid per row

_, modified_mask, _ = compute_rollout_correction_and_rejection_mask(
    old_log_prob=old_log_probs, rollout_log_prob=rollout_log_probs, response_mask=response_mask,
    rollout_rs="seq_mean_k3", rollout_rs_threshold=0.5)
advantages, _ = get_adv_estimator_fn("opo")(token_level_rewards=token_level_rewards, response_mask=modified_mask,
                                            index=index)
print("kept rows:", [round(float(x), 4) for x in modified_mask.amax(dim=-1)])
for b in range(4):
    print(f"advantages row {b}:", [round(float(x), 4) + 0.0 for x in advantages[b]])

log_prob = old_log_probs.clone().requires_grad_()  # on-policy: the actor's new log-probs equal the old ones
config = ActorConfig(strategy="fsdp", rollout_n=2, ppo_micro_batch_size_per_gpu=1)  # defaults: vanilla, token-mean
loss, _ = get_policy_loss_fn("vanilla")(old_log_prob=old_log_probs, log_prob=log_prob, advantages=advantages,
                                        response_mask=modified_mask.bool(), loss_agg_mode="token-mean", config=config)
loss.backward()
print("loss:", round(float(loss), 4) + 0.0)
for b in range(4):
    print(f"grad row {b}:", [round(float(x), 4) + 0.0 for x in log_prob.grad[b]])
