"""The DAPO overlong penalty added with the wrong sign: R = +factor·(L − L_start)/buffer (and +factor beyond
max_length), a length *bonus* that pays the policy to run into the generation budget instead of
punishing it (the same wiring mistake as a KL penalty added with the wrong sign, bug-catalogue class 7).

The penalty is ``min(-exceed / buffer * factor, 0)`` in verl (``workers/reward_manager/dapo.py:126``,
0.9.1) and ``(L_start - L) / L_cache`` in DAPO eq. 13 (arXiv:2503.14476): the minus sign is the whole
difference between shaping toward shorter and toward longer completions.
"""

import refimpl
from conformance.mutants.base import Mutant


def overlong_penalty(lengths, *, max_length, buffer, factor=1.0, beyond="floor"):
    return -refimpl.overlong_penalty(lengths, max_length=max_length, buffer=buffer, factor=factor, beyond=beyond) + 0.0


MUTANT = Mutant(
    name="overlong_penalty_sign",
    bug_class="DAPO overlong penalty added with the wrong sign (a bonus for running into the length budget)",
    catalogue=7,
    cites=("arXiv:2503.14476 eq. 13", "verl workers/reward_manager/dapo.py:126", "bug-catalogue class 7"),
    signature={"overlong_penalty": ("property", "golden", "preset:verl", "preset:areal", "preset:ms_swift")},
    replace={"overlong_penalty": overlong_penalty},
)
