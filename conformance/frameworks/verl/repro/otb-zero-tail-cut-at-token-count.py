"""The position-aligned optimal token baseline cuts its zero tail at a token count used as a column (verl 0.9.1,
finding otb-zero-tail-cut-at-token-count).

compute_optimal_token_baseline_advantage documents handle_zero_tail as zeroing "the portion of the longest
trajectory that extends beyond the second-longest trajectory in the prompt group" (trainer/ppo/core_algos.py:
906-907), but it takes the lengths as token counts (response_mask.sum, :975) and zeroes
baselines[longest, second_max_length:] (:982), the count used as a column. On a contiguous response starting at
column 0 the two agree; on a multi-turn response (tool tokens masked inside it) the count is smaller than the
row's extent, so the longest row loses its baseline at columns where the second-longest row is still present.
The trainer always zeroes the tail (it passes no handle_zero_tail, ray_trainer.py:264-276; default True, :879).
compute_multi_turn_optimal_token_baseline_advantage ("tir_optimal_token_baseline") compacts each row's valid
tokens first (:1063-1069), where the count is the right cut (:1108).

Run: pip install verl==0.9.1 torch numpy; python otb-zero-tail-cut-at-token-count.py

Expected (spec adv.optimal_token_baseline, by hand): one group, row 0 mask [1, 1, 1, 1] with reward 1 at column 3,
row 1 mask [1, 0, 1, 0] (a tool token at column 1) with reward 1 at column 2; pi = 0.5, sum pi^2 = 0.5, so every
w = 0.5. Every return-to-go is 1, so the baseline is 1 wherever a row is present and A = 0 there. Position
alignment: row 1's last position is column 2, so row 0's tail (baseline 0, A = 1) is column 3 alone:
row 0 [0, 0, 0, 1], row 1 [0, 0, 0, 0]. Valid-token alignment (the TIR form): row 0's 3rd and 4th tokens have no
counterpart in row 1's two tokens: row 0 [0, 0, 1, 1], row 1 [0, 0, 0, 0].

Actual:
    optimal_token_baseline row 0: [0.0, 0.0, 1.0, 1.0]
    optimal_token_baseline row 1: [0.0, 0.0, 0.0, 0.0]
    tir_optimal_token_baseline row 0: [0.0, 0.0, 1.0, 1.0]
    tir_optimal_token_baseline row 1: [0.0, 0.0, 0.0, 0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import math  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

response_mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
token_level_rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
old_log_probs = torch.full((2, 4), math.log(0.5))
sum_pi_squared = torch.full((2, 4), 0.5)
index = np.array(["p0", "p0"], dtype=object)

for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
    advantages, _ = get_adv_estimator_fn(name)(
        token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
        old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared, rollout_is_weights=None)
    for b in range(2):
        print(f"{name} row {b}:", [round(float(x), 4) + 0.0 for x in advantages[b]])
