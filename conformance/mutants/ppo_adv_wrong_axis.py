"""A per-sequence advantage [B] broadcast along the wrong axis: `advantages[None, :]` against the
[B, T] ratio, so token t of every row gets sequence t's advantage. Silent exactly when B == T (and
B == 1); otherwise the broadcast raises, as it does in the real code.

OpenRLHF b3d2927 / #1250 (the (batch,) mean broadcast along the wrong axis in `masked_normalize`);
trl 4db63af (a (B,) advantage no longer unsqueezed, a same-day regression of trl#4504).
"""

import refimpl
from conformance.mutants.base import Mutant


def ppo_token_loss(logp, old_logp, advantages, mask, **kwargs):
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(0).expand(logp.shape)  # [1, B] -> [B, T]: the time axis
    return refimpl.ppo_token_loss(logp, old_logp, advantages, mask, **kwargs)


MUTANT = Mutant(
    name="ppo_adv_wrong_axis",
    bug_class="per-sequence advantages broadcast along the time axis instead of the batch axis",
    catalogue=10,
    cites=("OpenRLHF#1250 (b3d2927)", "trl 4db63af"),
    signature={
        "ppo_token_loss": (
            "property", "golden", "invariant:mask", "invariant:on_policy", "preset:open_instruct",
            "preset:openrlhf", "preset:skyrl", "preset:torchtune", "preset:verl",
        ),
    },
    replace={"ppo_token_loss": ppo_token_loss},
)
