"""The reward clip applied on one side only: rewards are capped at clip_high but never raised to
clip_low (``torch.clamp(r, max=c)`` / ``min(r, c)`` where ``clamp(r, -c, c)`` was meant), so a large
negative reward (a failed format check, a fixed truncation penalty below the range) passes unclipped
and dominates the group statistics.

OpenRLHF clamps to both ends of ``reward.clip_range`` (``models/utils.py:141-142``, default (-10, 10)) and
AReaL to ``±reward_clip`` (``trainer/ppo/actor.py:169-171``, default 20); a one-sided clamp is the clamp
mistake of bug-catalogue class 16 (a clamp missing where the formula has one).
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def shaped_rewards(rewards, truncated, *, truncated_scale=1.0, truncated_value=None, truncated_shift=0.0,
                   clip_low=None, clip_high=None):
    refimpl.shaped_rewards(rewards, truncated, truncated_scale=truncated_scale, truncated_value=truncated_value,
                           truncated_shift=truncated_shift, clip_low=clip_low, clip_high=clip_high)  # validation
    r = refimpl.shaped_rewards(rewards, truncated, truncated_scale=truncated_scale, truncated_value=truncated_value,
                               truncated_shift=truncated_shift)
    return r if clip_high is None else torch.clamp(r, max=clip_high)  # clip_low never applied


MUTANT = Mutant(
    name="reward_clip_one_sided",
    bug_class="reward clip applied on one side only (the lower bound ignored)",
    catalogue=16,
    cites=("OpenRLHF models/utils.py:141-142", "AReaL trainer/ppo/actor.py:169-171", "bug-catalogue class 16"),
    signature={"shaped_rewards": ("property", "golden", "preset:openrlhf", "preset:areal")},
    replace={"shaped_rewards": shaped_rewards},
)
