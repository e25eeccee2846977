"""An alternate code path diverges from the reference one: the fused LM-head log-prob path (hidden
states and the head weight, no materialised logits) forgets the temperature that the plain path
applies.

verl 5deb8cc / verl#3133 (temperature applied on the FSDP path, not on Megatron's); Liger#1082 (the
fused GRPO path silently differed: IS not applied, normaliser); trl#6808 / #7270 (GMPO with
`use_liger_kernel` trains GRPO); unsloth#3527.
"""

import refimpl
from conformance.mutants.base import Mutant


def token_logprobs_from_hidden(hidden, weight, input_ids, mask, *, temperature=1.0):
    return refimpl.token_logprobs_from_hidden(hidden, weight, input_ids, mask)  # temperature dropped


MUTANT = Mutant(
    name="fused_temperature_missing",
    bug_class="fused LM-head log-prob path diverges from the plain path (temperature not applied)",
    catalogue=25,
    cites=("verl#3133 (5deb8cc)", "Liger#1082", "trl#7270"),
    signature={"token_logprobs_from_hidden": ("property", "golden")},
    replace={"token_logprobs_from_hidden": token_logprobs_from_hidden},
)
