"""The truncation rule applied to the wrong completions: the flag is inverted (``finish_reason != "length"``,
or "has EOS" read as "no EOS"), so the rows that stopped properly are scaled, replaced or penalised and
the truncated ones keep their reward.

OpenRLHF reads ``finish_reason == "length"`` (``utils/agent.py:106``) and AReaL decides "no EOS" from the
sequence length (``trainer/ppo/actor.py:199-201``): deciding EOS from the wrong signal is the EOS-detection
mistake of bug-catalogue class 3.
"""

import refimpl
from conformance.mutants.base import Mutant


def shaped_rewards(rewards, truncated, **kwargs):
    refimpl.shaped_rewards(rewards, truncated, **kwargs)  # validation
    return refimpl.shaped_rewards(rewards, truncated.to(rewards.device) == 0, **kwargs)


MUTANT = Mutant(
    name="truncation_flag_inverted",
    bug_class="truncation rule applied to the completions that stopped properly (flag inverted)",
    catalogue=3,
    cites=("OpenRLHF utils/agent.py:106", "AReaL trainer/ppo/actor.py:199-201", "bug-catalogue class 3"),
    signature={"shaped_rewards": ("property", "golden")},
    replace={"shaped_rewards": shaped_rewards},
)
