"""Rollout correction refuses a batch without a valid token (verl 0.9.1, finding
rollout-correction-refuses-empty-batch).

compute_rollout_correction_and_rejection_mask raises ValueError("response_mask must contain at least one valid
token (1).") (trainer/ppo/rollout_corr_helper.py:837-838) before computing IS weights or a rejection mask; the
spec gives all-zero weights and an all-False keep mask. A deliberate refusal with a clear message (rlspec's
adapter declares those cases not offered). The trainer calls it on the whole training batch
(trainer/ppo/v1/trainer_base.py:1770-1771, ray_trainer.py:1658), a batch of generated responses, so in practice it is
not met (rejection runs inside this call, after the check).

Run: pip install verl==0.9.1 torch numpy; python rollout-correction-refuses-empty-batch.py

Expected (spec offpolicy.is_weights / offpolicy.rejection, by hand): one row of 4 masked positions: weights
[0, 0, 0, 0], keep mask [False] * 4.

Actual:
    ValueError: response_mask must contain at least one valid token (1).
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask  # noqa: E402

old = torch.full((1, 4), -1.0)
try:
    weights, mask, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old, rollout_log_prob=old - 0.1, response_mask=torch.zeros(1, 4), rollout_is="token",
        rollout_is_threshold=2.0)
    print("weights:", [round(float(x), 4) for x in weights.batch["rollout_is_weights"][0]])
except ValueError as exc:
    print(f"ValueError: {exc}")
