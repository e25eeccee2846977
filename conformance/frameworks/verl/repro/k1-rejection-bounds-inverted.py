"""verl's k1 rejection bounds act on the inverse ratio (verl 0.9.1, finding k1-rejection-bounds-inverted).

`rollout_rs="token_k1"` (and `"seq_sum_k1"`, `"seq_mean_k1"`) takes a `"lower_upper"` threshold that verl
documents as bounds on the ratio r = pi_train / pi_rollout (trainer/config/algorithm.py:107-118, "ratio
thresholds"; log_ratio is "Log ratio of training policy probability to rollout policy probability",
trainer/ppo/rollout_corr_helper.py:219). It computes k1 = -log_ratio (:263) and keeps
log(lower) <= k1 <= log(upper) (:300-301, :316, :330, :349), i.e. 1/upper <= r <= 1/lower: bounds on
pi_rollout / pi_train. The same config's IS threshold of the same form ("lower_upper", IcePop) keeps
lower <= r <= upper (:599-601). Reached with algorithm.rollout_correction.rollout_rs set to a k1 option and an
asymmetric threshold; symmetric bounds (lower * upper = 1, or a single number, :162-164) are unaffected.
Called here as the trainer calls it (compute_rollout_correction_and_rejection_mask, :786, with log_ratio =
old - rollout, :849).

Run: pip install verl==0.9.1 torch numpy; python k1-rejection-bounds-inverted.py

Expected (spec offpolicy.rejection, the documented reading: keep lower <= r <= upper): three one-token rows with
r = 3, 0.3, 1 and "0.5_5.0" keep [1, 0, 1] (3 is inside [0.5, 5], 0.3 is below 0.5); verl's own IS "0.5_5.0"
keeps [1, 0, 1] too (weights [3, 0, 1]).

Actual:
    token_k1 keep: [0.0, 1.0, 1.0]
    seq_sum_k1 keep: [0.0, 1.0, 1.0]
    seq_mean_k1 keep: [0.0, 1.0, 1.0]
    IS 0.5_5.0 weights: [3.0, 0.0, 1.0]
"""
import warnings

warnings.filterwarnings("ignore")

import math  # noqa: E402

import torch  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask  # noqa: E402

r = [3.0, 0.3, 1.0]
rollout = torch.full((3, 2), -1.0, dtype=torch.float64)
old = rollout + torch.tensor([[0.0, math.log(x)] for x in r], dtype=torch.float64)
mask = torch.tensor([[0.0, 1.0]] * 3, dtype=torch.float64)  # one valid token per row (column 1)

for option in ("token_k1", "seq_sum_k1", "seq_mean_k1"):
    _, keep, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old, rollout_log_prob=rollout, response_mask=mask, rollout_rs=option, rollout_rs_threshold="0.5_5.0")
    print(f"{option} keep:", [round(float(x), 4) for x in keep[:, 1]])
weights, _, _ = compute_rollout_correction_and_rejection_mask(
    old_log_prob=old, rollout_log_prob=rollout, response_mask=mask, rollout_is="token", rollout_is_threshold="0.5_5.0")
print("IS 0.5_5.0 weights:", [round(float(x), 4) for x in weights.batch["rollout_is_weights"][:, 1]])
