"""The adaptive KL controller without the clip of its proportional error: β·(1 + (KL/target − 1)·n/H).
A KL far above the target (a collapse, a bad batch) multiplies β by an unbounded factor, and a KL far
below it (k1 estimates can be negative) can drive β negative in one update; Ziegler et al. clip the
error to ±0.2 so that one update moves β by at most 0.2·n/H of itself.

arXiv:1909.08593 §2.2 (e_t = clip(·, −0.2, 0.2)); the clip is in verl core_algos.py:172 and OpenRLHF
kl_controller.py:17 (np.clip(current / target - 1, -0.2, 0.2)).
"""

import refimpl
from conformance.mutants.base import Mutant


def kl_controller_update(kl_coef, current_kl, n_steps, *, target, horizon):
    refimpl.kl_controller_update(kl_coef, current_kl, n_steps, target=target, horizon=horizon)  # validation
    return float(kl_coef) * (1.0 + (float(current_kl) / float(target) - 1.0) * int(n_steps) / float(horizon))


MUTANT = Mutant(
    name="kl_controller_unclipped_error",
    bug_class="adaptive KL controller without the +-0.2 clip of its proportional error",
    catalogue=7,
    cites=("arXiv:1909.08593 §2.2", "verl core_algos.py:172", "openrlhf kl_controller.py:17"),
    signature={"kl_controller_update": ("property", "golden")},
    replace={"kl_controller_update": kl_controller_update},
)
