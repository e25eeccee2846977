"""REINFORCE++ reads the rewards at masked positions (verl 0.9.1, finding reinforce-pp-nan-at-masked-reward).

compute_reinforce_plus_plus_outcome_advantage adds every position's reward to the running return before it
looks at the mask (trainer/ppo/core_algos.py:721-726): at a masked position the return is carried over as
new * 0 + old * 1, which is NaN when the reward there is NaN or inf (NaN * 0). The NaN reaches the row's earlier
returns and, through masked_whiten's batch mean and variance (:728), every advantage of the batch. A finite
value at a masked position is ignored. verl's own pipeline writes finite values there: its reward managers put
the score at the last response token and zeros elsewhere (experimental/reward_loop/reward_manager/base.py:76-81,
workers/reward_manager/naive.py:153) and the trainer pads with zeros (to_padded_tensor,
trainer/ppo/v1/trainer_base.py:1749); the in-reward KL is
kl * response_mask of finite log-probs (trainer/ppo/ray_trainer.py:100-106). So only a custom reward manager or
reward tensor with NaN/inf at a masked position reaches it.

Run: pip install verl==0.9.1 torch numpy; python reinforce-pp-nan-at-masked-reward.py

Expected (spec adv.reinforce_pp, gap="skip", by hand; masked positions are never read): gamma 1, row 0 mask
[0, 1, 0, 1], rewards [0, 1, NaN, 1] -> returns at columns 1, 3: [2, 1]; row 1 mask [0, 1, 1, 0], rewards
[0, 1, 1, 0] -> returns at columns 1, 2: [2, 1]. Whitened over the four values (mean 1.5, unbiased std
sqrt(1/3)): +-0.5 / 0.5774 = +-0.866; advantages row 0 [0, 0.866, 0, -0.866], row 1 [0, 0.866, -0.866, 0].

Actual:
    returns row 0: [nan, nan, nan, 1.0]
    returns row 1: [0.0, 2.0, 1.0, 0.0]
    advantages row 0: [nan, nan, nan, nan]
    advantages row 1: [nan, nan, nan, nan]
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.config.algorithm import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

response_mask = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])  # row 0: a tool token at column 2
token_level_rewards = torch.tensor([[0.0, 1.0, float("nan"), 1.0], [0.0, 1.0, 1.0, 0.0]])
advantages, returns = get_adv_estimator_fn("reinforce_plus_plus")(
    token_level_rewards=token_level_rewards, response_mask=response_mask, config=AlgoConfig(gamma=1.0))
for name, x in (("returns", returns), ("advantages", advantages)):
    for b in range(2):
        print(f"{name} row {b}:", [round(float(v), 4) + 0.0 for v in x[b]])
