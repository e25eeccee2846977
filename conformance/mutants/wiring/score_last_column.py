"""PPO's sequence score placed on the last column of the padded batch instead of each row's last valid
token: for every completion shorter than the longest, the reward lands on padding and GAE never sees it.

The bug catalogue's class 5 (score placement); OpenRLHF/TRL PPO rewards at ``[:, -1]`` with right padding.
"""

import refimpl
from conformance.mutants.wiring.base import WiringMutant, replace_attr
from refimpl.trainer import loop, step


def plant(stack, cfg):
    def gae_advantages(cfg, scores, old_logp, ref_logp, values, mask):
        R = refimpl.rlhf_token_rewards(scores * 0, old_logp, ref_logp, mask, kl_coef=cfg.kl_reward_coef,
                                       estimator=cfg.kl_reward_estimator)
        R[:, -1] = R[:, -1] + scores
        A, returns = refimpl.gae(R, values, mask, gamma=cfg.gamma, lam=cfg.lam)
        adv = refimpl.whiten(A, mask) if cfg.whiten_advantages else A
        return step.GaeResult(R, A, adv, returns)

    replace_attr(stack, loop, "gae_advantages", gae_advantages)


MUTANT = WiringMutant(
    name="score_last_column",
    bug_class="PPO score on the last column instead of each row's last valid token",
    cites=("bug catalogue: score placement",),
    link="trace.rewards",
    identifies="score on the last column instead of the last valid token",
    plant=plant,
    config=dict(algo="ppo", value_clip=None, max_new_tokens=12, prompts_per_step=8),  # rows that stop early, with partial credit
)
