"""A straight-through KL term ("k3+", "k1+", ...) that back-propagates the estimator's own gradient:
the value is right, but the gradient is ∂K/∂logp (k3: 1 − e^(−d); k1: 1) instead of the d of ½d², i.e.
the straight-through step (``½d² − sg(½d²) + sg(K)``) is dropped and K is differentiated as computed.

verl's "+" suffix exists because k3's gradient is a biased estimate of the reverse-KL gradient and k2's
is not (core_algos.py:2200-2213; the derivation in verl#2953); OpenRLHF#1101 proposed the same
straight-through form; trl#4967 reports k3-in-the-loss's biased gradient (arXiv:2512.21852).
Bug-catalogue class 7 (the KL differentiated without the score-function form: NeMo-RL#2506, the k2
gradient "acted like k1").
"""

import refimpl
from conformance.mutants.base import Mutant


def kl_loss_term(logp, ref_logp, mask, old_logp=None, *, gradient="estimator", **kwargs):
    if gradient == "straight_through":
        gradient = "estimator"  # the "+" read, the straight-through step forgotten
    return refimpl.kl_loss_term(logp, ref_logp, mask, old_logp, gradient=gradient, **kwargs)


MUTANT = Mutant(
    name="kl_straight_through_estimator_grad",
    bug_class="straight-through KL term (k*+) back-propagates the estimator's gradient instead of ½d²'s",
    catalogue=7,
    cites=("verl core_algos.py:2200-2213", "verl#2953", "OpenRLHF#1101", "trl#4967", "NeMo-RL#2506"),
    signature={"kl_loss_term": ("property", "golden")},
    replace={"kl_loss_term": kl_loss_term},
)
