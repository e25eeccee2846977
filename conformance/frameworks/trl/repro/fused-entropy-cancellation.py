"""The fused head's entropy cancels in float32 for confident rows with large logits (trl 1.16.0, finding fused-entropy-cancellation).

The fused LM head GRPO and RLOO score tokens with computes the entropy as log Z - sum_v p_v z_v
(trl/kernels/chunked_logprob.py:378-380), two float32 numbers of the size of the largest logit whose
difference is the (small) entropy: its absolute error is a few float32 ulps of max|z/T|, not of H.
Directly computing -sum p log p in float32 keeps the error relative to H. The entropy feeds the
top-entropy mask, the entropy bonus and the adaptive entropy controller (grpo_trainer.py:3049-3052,
:3186-3240). The script calls ChunkedLogProbFunction as add_fused_lm_head's forward does
(trl/trainer/utils.py:1644-1654), on one position whose logits are z (hidden = z, head = identity).

Run: pip install trl==1.16.0; python fused-entropy-cancellation.py

Expected (spec logprob.fused, by hand in float64): z = [40, 30, 28, 25]: H = -sum p log p =
5.841395e-04 (float32 -sum p log p on the same logits is within 2e-7 of it, 0.02%).

Actual:
    fused head entropy (float32): 5.912781e-04
    float32 -sum p log p on the same logits: 5.842648e-04
"""

import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402
from trl.kernels import ChunkedLogProbFunction  # noqa: E402

z = [40.0, 30.0, 28.0, 25.0]  # one position's logits: hidden = z, LM head = the identity
hidden, weight = torch.tensor([z]), torch.eye(len(z))
# the call add_fused_lm_head's forward makes (trl/trainer/utils.py:1644-1654): no bias, temperature 1, no softcap
log_probs, entropy, *_ = ChunkedLogProbFunction.apply(hidden, weight, None, torch.tensor([0]), 1.0, 32768, None, 1.0,
                                                      ("log_probs", "entropy"))
print("fused head entropy (float32):", f"{float(entropy[0]):.6e}")
lp = torch.tensor([z]).log_softmax(-1)
print("float32 -sum p log p on the same logits:", f"{float(-(lp.exp() * lp).sum()):.6e}")
