"""`overlong_tokens = 0` divides by zero (areal 1.0.4, finding overlong-tokens-zero-nan).

`reward_overlong_penalty` computes `min(-exceed_len / overlong_tokens * overlong_penalty_factor, 0)`
(areal/utils/functional/functional.py:795-799). `PPOActorConfig` accepts `overlong_tokens=0` (the field has no
check, api/cli_args.py:1495-1498; `__post_init__`, :1611-1649, validates other settings; the actor only asserts it is
not None, trainer/ppo/actor.py:157): a completion of exactly `max_new_tokens` tokens, i.e. every truncated one, gets
-0/0 = NaN added to its reward, which the reward clip keeps (NaN) and GAE spreads over the row. Below, through
`PPOActor._compute_advantages` (:152-164) with `overlong_reward_penalty=True, overlong_tokens=0,
overlong_penalty_factor=1.0, max_new_tokens=4`: two trajectories with 3 and 4 output tokens, reward 1 each.

Run: pip install areal==1.0.4 torch (areal's full requirements do not install on CPU; what its import needs
there is listed in rlspec's conformance/frameworks/areal/requirements.txt); python overlong-tokens-zero-nan.py

Expected (spec overlong_penalty with buffer 0, DAPO eq. 13, by hand): no penalty up to max_length, -factor beyond:
lengths 3 and 4 both get 0, so the rewards stay [1.0, 1.0].

Actual:
    overlong_tokens: 0
    rewards after the penalty: [1.0, nan]
"""

import logging
import os
import warnings

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # the log-prob kernels are torch.compile'd; not needed here
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from areal.api.cli_args import PPOActorConfig  # noqa: E402
from areal.trainer.ppo.actor import PPOActor  # noqa: E402
from areal.utils.data import concat_padded_tensors  # noqa: E402

logging.disable(logging.CRITICAL)  # AReaL logs its configuration to stdout


def trajectory(prompt_len, output_len, reward, values=None):
    """One trajectory as AReaL's RLVR workflow builds it (areal/workflow/rlvr.py:165-175): prompt then output,
    loss_mask 0 on the prompt and 1 on the output, attention_mask all ones, batch dim 1."""
    n = prompt_len + output_len
    d = {"input_ids": torch.zeros(n, dtype=torch.int32),
         "loss_mask": torch.tensor([0] * prompt_len + [1] * output_len, dtype=torch.int32),
         "logprobs": torch.zeros(n, dtype=torch.float32),
         "versions": torch.tensor([-1] * prompt_len + [0] * output_len, dtype=torch.int32),
         "attention_mask": torch.ones(n, dtype=torch.bool),
         "rewards": torch.tensor(reward, dtype=torch.float32)}
    if values is not None:  # the critic's compute_values output for the trajectory (trainer/rl_trainer.py:633-635)
        d["values"] = torch.tensor(values, dtype=torch.float32)
    return {k: v.unsqueeze(0) for k, v in d.items()}


def actor(**config):
    """PPOActor(PPOActorConfig(...), engine=None): _compute_advantages never touches the engine."""
    return PPOActor(PPOActorConfig(**config), None)


def fmt(xs):
    return [round(float(x), 4) for x in xs]


config = dict(kl_ctl=0.0, overlong_reward_penalty=True, overlong_tokens=0, overlong_penalty_factor=1.0,
              max_new_tokens=4)
ppo_actor = actor(**config)
print("overlong_tokens:", ppo_actor.config.overlong_tokens)
batch = concat_padded_tensors([trajectory(2, 3, 1.0), trajectory(2, 4, 1.0)])
out = ppo_actor._compute_advantages(batch)
print("rewards after the penalty:", fmt(out["rewards"]))
