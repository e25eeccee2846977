"""CISPO implemented as a PPO-style clip: clipped tokens get a zero gradient, which is exactly what
CISPO exists to avoid (it keeps every token's gradient with the clipped weight as a coefficient).

MiniMax-M1 (arXiv:2506.13585): PPO/GRPO clipping drops the gradients of the clipped tokens; CISPO
clips the IS weight instead and keeps them; tinker-cookbook#763 (a misused CISPO bound floors the
coefficient). Catalogue class 28 test: r = 2.0 with ε_h = 0.28 must give a gradient of -1.28; the
PPO-clip mutant gives 0.
"""

import refimpl
from conformance.mutants.base import Mutant


def cispo_token_loss(logp, old_logp, advantages, mask, *, eps_low=None, eps_high=0.28, bound="relative",
                     surrogate="logp"):
    if surrogate != "logp":  # the bug is in the paper's surrogate; torchrl's has no stop-gradient weight
        return refimpl.cispo_token_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high,
                                        bound=bound, surrogate=surrogate)
    high = eps_high if bound == "relative" else eps_high - 1.0
    low = 1.0 if eps_low is None else eps_low  # no lower bound: ratio >= 0
    return refimpl.ppo_token_loss(logp, old_logp, advantages, mask, eps_low=low, eps_high=high)


MUTANT = Mutant(
    name="cispo_as_ppo_clip",
    bug_class="CISPO computed as a PPO clip: clipped tokens lose their gradient",
    catalogue=28,
    cites=("arXiv:2506.13585", "tinker-cookbook#763"),
    signature={"cispo_token_loss": ("property", "golden", "invariant:on_policy", "preset:trl", "preset:verl",
                                    "preset:open_instruct", "preset:rlhf_book", "preset:skyrl", "preset:skyrl@a956457",
                                    "preset:ms_swift")},
    replace={"cispo_token_loss": cispo_token_loss},
)
