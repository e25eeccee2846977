"""masked_mean divides by n + 1e-8, which whitening amplifies on near-constant values (verl 0.9.1, finding
masked-mean-count-epsilon).

masked_mean returns sum / (mask.sum() + 1e-8) (utils/torch_functional.py:308): a mean a relative 1e-8 / n low in
float64 (in float32 n + 1e-8 rounds to n). masked_whiten subtracts that mean and divides by sqrt(var + 1e-8)
(:342-343), so the residue mu * 1e-8 / n is multiplied by up to 1 / sqrt(1e-8) = 1e4 when the values are (nearly)
equal: 5 values of 2.5 whiten to 5e-5 each instead of 0, bfloat16-level precision for float64 inputs. The same
mean feeds REINFORCE++ and REINFORCE++-baseline (their masked_whiten, trainer/ppo/core_algos.py:728, :582), GAE's
whitening (:262) and the rollout IS batch normalisation (trainer/ppo/rollout_corr_helper.py:636, :651-652:
weights (1 + 1e-8 / n) too large). The right quantities, at reduced precision in float64 only; verl's trainer holds
rewards, values and log-probs in float32.

Run: pip install verl==0.9.1 torch numpy; python masked-mean-count-epsilon.py

Expected (spec adv.whiten and offpolicy.is_weights, float64, by hand): whiten of five valid values all 2.5:
mean 2.5, every output 0 (0.000000000000 to 12 digits). Token TIS at 2 with batch normalisation on ratios
[3, 1]: truncated [2, 1], mean 1.5, normalised [4/3, 2/3] = 1.333333333333, 0.666666666667.

Actual:
    whiten: 0.000050000000 0.000050000000 0.000050000000 0.000050000000 0.000050000000
    is_weights: 1.333333340000 0.666666670000
"""
import warnings

warnings.filterwarnings("ignore")

import math  # noqa: E402

import torch  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask  # noqa: E402
from verl.utils.torch_functional import masked_whiten  # noqa: E402

x = torch.full((1, 5), 2.5, dtype=torch.float64)
out = masked_whiten(x, torch.ones(1, 5, dtype=torch.float64))
print("whiten:", " ".join(f"{float(v):.12f}" for v in out[0]))

rollout = torch.full((1, 2), -1.0, dtype=torch.float64)
old = rollout + torch.tensor([[math.log(3.0), 0.0]], dtype=torch.float64)
weights, _, _ = compute_rollout_correction_and_rejection_mask(
    old_log_prob=old, rollout_log_prob=rollout, response_mask=torch.ones(1, 2, dtype=torch.float64), rollout_is="token",
    rollout_is_threshold=2.0, rollout_is_batch_normalize=True)
print("is_weights:", " ".join(f"{float(v):.12f}" for v in weights.batch["rollout_is_weights"][0]))
