"""selective_log_softmax's row_mask does not skip the excluded rows on the CPU path: a NaN there reaches the gradient (trl 1.16.0, finding row-mask-nan-gradient).

selective_log_softmax documents row_mask as "Rows containing zero are skipped and return zero
log-probability" (trl/trainer/utils.py:563-564). TRL's Triton kernel skips them (utils.py:572-574, CUDA
or XPU with Triton only, :510-535); the torch path computes every row and only then fills the excluded
ones with 0 (:598-599), so the backward of log_softmax still runs through them: a non-finite logit in an
excluded row gives NaN gradients there, which the LM head then spreads to its weights.
selective_log_softmax_and_entropy has the same path (:702-711); TRL's only caller with row_mask in
1.16.0 is the experimental TPOTrainer (experimental/tpo/tpo_trainer.py:655-656).

Run: pip install trl==1.16.0; python row-mask-nan-gradient.py

Expected (the docstring's contract; spec logprob.token: masked positions are never read, so NaN there
changes nothing): log-probs finite at the kept positions and 0 at the excluded one, and a zero
gradient at the excluded position ([0.0, 0.0, 0.0, 0.0, 0.0]).

Actual:
    log-probs: [-2.3257, -0.8127, 0.0]
    gradient finite at the kept positions: True
    gradient at the excluded position: [nan, nan, nan, nan, nan]
"""

import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402
from trl.trainer.utils import selective_log_softmax  # noqa: E402

torch.manual_seed(0)
logits = torch.randn(1, 3, 5)
logits[0, 2] = float("nan")  # the position row_mask excludes holds NaN (e.g. garbage padding)
logits.requires_grad_(True)
logp = selective_log_softmax(logits, torch.tensor([[1, 2, 3]]), row_mask=torch.tensor([[1, 1, 0]]))
print("log-probs:", [round(float(v), 4) for v in logp[0]])
logp.sum().backward()
print("gradient finite at the kept positions:", bool(torch.isfinite(logits.grad[0, :2]).all()))
print("gradient at the excluded position:", [round(float(v), 4) for v in logits.grad[0, 2]])
