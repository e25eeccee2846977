"""The KL penalty is *subtracted* from the policy loss: `policy_loss - kl_coef * kl`, so the
optimiser maximises the divergence from the reference policy.

verl a65c915 / verl#179 (2025-02-01; introduced by verl#124 on 2025-01-23): `pg_loss - kl_loss *
kl_coef`; it persisted in forks pinned to that verl (Logic-RL#58, RAGEN#58: "loss blows up much
earlier"); marin#1742.
"""

import refimpl
from conformance.mutants.base import Mutant


def policy_loss(logp, old_logp, ref_logp, advantages, mask, *, kl_coef=0.0, **kwargs):
    return refimpl.policy_loss(logp, old_logp, ref_logp, advantages, mask, kl_coef=-kl_coef, **kwargs)


MUTANT = Mutant(
    name="kl_sign_flipped",
    bug_class="KL penalty added with the wrong sign (divergence from the reference is rewarded)",
    catalogue=7,
    cites=("verl#179 (a65c915)", "Logic-RL#58", "RAGEN#58", "marin#1742"),
    signature={"policy_loss": ("property", "golden", "invariant:on_policy")},
    replace={"policy_loss": policy_loss},
)
