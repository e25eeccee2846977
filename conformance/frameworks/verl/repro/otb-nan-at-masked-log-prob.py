"""The optimal token baselines read the log-probs at masked positions (verl 0.9.1, finding
otb-nan-at-masked-log-prob).

compute_optimal_token_baseline_advantage and compute_multi_turn_optimal_token_baseline_advantage compute
w = 1 - 2 exp(old_log_probs) + sum_pi_squared at every position and mask it by multiplication before the
cumulative sum (trainer/ppo/core_algos.py:927-937, :1043-1053): a NaN (or inf) log-prob at a masked position
is NaN * 0 = NaN in the running W of its row, so the group's baseline is NaN at every later step, for every
member present there (and, in the position form, the masked positions of the other rows become NaN too:
(G - NaN) * 0, :985). verl's own trainer writes finite values there: old_log_probs are the actor's log-probs
of every response token, tool tokens included, padded (trainer/ppo/ray_trainer.py:1304-1318). The estimators run
in the legacy trainer (trainer.use_v1=False), which fetches sum_pi_squared (:1297-1322); the v1 trainer does not
(trainer/ppo/v1/trainer_base.py:1745), so the assert at ray_trainer.py:267 stops them there. Called here with
the trainer's keywords (ray_trainer.py:264-276: no handle_zero_tail, no epsilon).

Run: pip install verl==0.9.1 torch numpy; python otb-nan-at-masked-log-prob.py

Expected (spec adv.optimal_token_baseline, by hand; masked positions are never read): one group of two rows,
row 0 mask [1, 0, 1, 1] (a tool token at column 1, where its log-prob is NaN) with reward 1 at column 3, row 1
mask [1, 1, 1, 0] with reward 1 at column 2. Every return-to-go is 1, so every baseline (a W-weighted mean of
returns of 1) is 1 and every advantage is 1 - W/(W + 1e-8) = 0 to 4 decimals, in both forms (both rows have 3
tokens: no zero tail).

Actual:
    optimal_token_baseline row 0: [0.0, nan, nan, nan]
    optimal_token_baseline row 1: [0.0, nan, nan, nan]
    tir_optimal_token_baseline row 0: [0.0, 0.0, nan, nan]
    tir_optimal_token_baseline row 1: [0.0, nan, nan, 0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

response_mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
token_level_rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
old_log_probs = torch.full((2, 4), -1.0)
old_log_probs[0, 1] = float("nan")  # the tool token of row 0
sum_pi_squared = torch.full((2, 4), 0.5)
index = np.array(["p0", "p0"], dtype=object)

for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
    advantages, _ = get_adv_estimator_fn(name)(
        token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
        old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared, rollout_is_weights=None)
    for b in range(2):
        print(f"{name} row {b}:", [round(float(x), 4) + 0.0 for x in advantages[b]])
