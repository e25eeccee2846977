"""Old (sampling) and reference log-probs swapped: the PPO ratio is taken against the reference
policy and the KL penalty against the sampling policy. On-policy at step 0 (old = ref = current)
nothing shows; after training, the ratio is far from 1 while the KL reads 0.

THUDM/slime#774 (`ppo_kl` non-zero on-policy with a ref model); OctopusMind/RLHF_PPO#1 (a user
reports the ratio uses the reference probs); PaddleNLP#10596 (old, ref and current log-probs
differed at step 0). Catalogue class 14 test: a mutant that swaps old and ref gives ratio != 1 and KL 0.
"""

import refimpl
from conformance.mutants.base import Mutant


def policy_loss(logp, old_logp, ref_logp, advantages, mask, **kwargs):
    return refimpl.policy_loss(logp, ref_logp, old_logp, advantages, mask, **kwargs)


MUTANT = Mutant(
    name="policy_old_ref_swapped",
    bug_class="old (sampling) and reference log-probs swapped (ratio against the reference, KL against the sampler)",
    catalogue=14,
    cites=("slime#774", "RLHF_PPO#1", "PaddleNLP#10596"),
    signature={"policy_loss": ("property", "golden")},
    replace={"policy_loss": policy_loss},
)
