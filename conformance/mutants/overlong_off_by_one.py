"""The overlong penalty's boundaries one token late: the completion length is counted without its last
token (the EOS, or a mask shifted by one), so the ramp starts one token late (L_max − L_buf + 1 still
gets 0) and reaches −factor only at max_length + 1: a completion that exhausted the budget is not fully
penalised.

An off-by-one of the mask slicing kind (bug-catalogue class 6); the length a framework feeds the penalty
is its own count (verl: the response's attention-mask sum, ``workers/reward_manager/dapo.py:82``; TRL:
``len(completion_ids)``, EOS included; OpenRLHF#1252 on counting the span instead).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def overlong_penalty(lengths, *, max_length, buffer, factor=1.0, beyond="floor"):
    refimpl.overlong_penalty(lengths, max_length=max_length, buffer=buffer, factor=factor, beyond=beyond)  # validation
    one_short = torch.clamp(lengths - 1, min=0)
    return refimpl.overlong_penalty(one_short, max_length=max_length, buffer=buffer, factor=factor, beyond=beyond)


MUTANT = Mutant(
    name="overlong_off_by_one",
    bug_class="overlong penalty boundaries one token late (length counted without its last token)",
    catalogue=6,
    cites=("arXiv:2503.14476 eq. 13", "OpenRLHF#1252", "bug-catalogue class 6"),
    signature={"overlong_penalty": ("property", "golden", "preset:verl", "preset:areal", "preset:ms_swift")},
    replace={"overlong_penalty": overlong_penalty},
)
