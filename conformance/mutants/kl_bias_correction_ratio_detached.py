"""TRL's bias-corrected KL (``use_bias_correction_kl``) with the importance ratio detached: the value
K·r is right, but the gradient is r·∂K/∂logp, without the K·∂r/∂logp = K·r term of the product rule
(the score-function term that makes the k3 gradient r·d, the unbiased reverse-KL gradient of
DeepSeek-V3.2, arXiv:2512.02556 eq. 7). On-policy (r = 1) it is exactly the uncorrected estimator's
gradient, which is why "the ratio is 1, so it is a no-op on-policy" is wrong.

TRL computes ``per_token_kl * coef_1`` with ``coef_1`` on the graph (grpo_trainer.py:3095, :3104-3105);
trl#6503 (2026-07-29) corrected its docs after the review found ~21% of the on-policy KL gradient in
that term ("coef_1 is differentiable, so it changes the KL gradient even where the ratio is exactly
1"). Bug-catalogue class 7 (the KL differentiated without its score-function term).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant, upcast


def kl_loss_term(logp, ref_logp, mask, old_logp=None, *, gradient="estimator", **kwargs):
    if gradient != "bias_corrected" or old_logp is None:  # (None: the refimpl's error)
        return refimpl.kl_loss_term(logp, ref_logp, mask, old_logp, gradient=gradient, **kwargs)
    K = refimpl.kl_loss_term(logp, ref_logp, mask, old_logp, gradient="estimator", **kwargs)
    m = mask.bool()
    (lp, old), _ = upcast(logp, old_logp)
    r = torch.exp(torch.where(m, lp - old, 0.0)).detach()  # the bug: r a constant
    (Kf,), out_dtype = upcast(K)
    return torch.where(m & (Kf != 0), Kf * r, 0.0).to(out_dtype)


MUTANT = Mutant(
    name="kl_bias_correction_ratio_detached",
    bug_class="bias-corrected KL (k3 times pi/pi_old) with the ratio detached: no gradient through the ratio",
    catalogue=7,
    cites=("trl grpo_trainer.py:3095-3105", "trl#6503", "arXiv:2512.02556", "bug-catalogue class 7"),
    signature={"kl_loss_term": ("property", "golden", "preset:trl")},
    replace={"kl_loss_term": kl_loss_term},
)
