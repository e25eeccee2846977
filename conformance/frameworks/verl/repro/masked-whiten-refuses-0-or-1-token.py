"""masked_whiten refuses a batch with 0 or 1 valid tokens (verl 0.9.1, finding masked-whiten-refuses-0-or-1-token).

masked_var raises ValueError when the mask sums to 0 or 1 (utils/torch_functional.py:317-324: "note that if
mask_sum == 1, then there is a division by zero issue; to avoid it you just need to use a larger
minibatch_size"), so masked_whiten (:329-345), and with it compute_gae_advantage_return (trainer/ppo/
core_algos.py:262), REINFORCE++ (:728), REINFORCE++-baseline (:582) and GDPO (:466), refuse such a batch. A
deliberate refusal with a clear message, not a silent divergence: rlspec's adapter declares those cases not
offered. The spec's whiten gives 0 (no valid token) and 0 for a single token (var 0 -> (x - x) / sqrt(eps)).
The whitening runs over the whole training batch (trainer/ppo/ray_trainer.py:218-226), so only a batch with at most one
response token, e.g. after rollout rejection has masked all but one token (rollout_corr_helper.py:412), meets it.

Run: pip install verl==0.9.1 torch numpy; python masked-whiten-refuses-0-or-1-token.py

Expected (spec adv.whiten, by hand): x = [0, 3, 0] with only the middle position valid: mu = 3, var = 0 (n - 1 = 0),
output [0, 0, 0]; with no valid position: [0, 0, 0].

Actual:
    one valid token: ValueError: The sum of the mask is one, which can cause a division by zero.
    no valid token: ValueError: At least one element in the mask has to be 1.
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.utils.torch_functional import masked_whiten  # noqa: E402

for label, mask in (("one valid token", torch.tensor([[0.0, 1.0, 0.0]])), ("no valid token", torch.zeros(1, 3))):
    try:
        out = masked_whiten(torch.tensor([[0.0, 3.0, 0.0]]), mask)
        print(f"{label}:", [round(float(x), 4) + 0.0 for x in out[0]])
    except ValueError as exc:
        print(f"{label}: ValueError: {exc}")
