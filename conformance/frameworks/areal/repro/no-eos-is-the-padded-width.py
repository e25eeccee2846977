""""No EOS" is read as "fills the padded width" (areal 1.0.4, finding no-eos-is-the-padded-width).

`PPOActor._compute_advantages` marks a row as having no EOS when `seqlens == attention_mask.shape[1]`
(areal/trainer/ppo/actor.py:199-201). The trainer hands it the rollout batch concatenated and right-padded to its
longest trajectory (`batched_call` -> `concat_padded_tensors`, utils/data.py:403-429, :241-291), so the "no EOS"
row is whichever trajectory is longest, truncated or not. With `mask_no_eos_with_zero=True` (documented as "Mask
truncated generations (no EOS token)", api/cli_args.py:1503-1508; applied at actor.py:207-210) a completion that
stopped with EOS but is the batch's longest loses its reward, and a truncated one behind a shorter prompt keeps it.
Below: row 0 hit max_new_tokens = 4 behind a 1-token prompt (length 5); row 1 stopped with EOS after 3 tokens behind
a 3-token prompt (length 6, the padded width). Scores 1.5 and 2.0.

Run: pip install areal==1.0.4 torch (areal's full requirements do not install on CPU; what its import needs
there is listed in rlspec's conformance/frameworks/areal/requirements.txt); python no-eos-is-the-padded-width.py

Expected (spec shaped_rewards with truncated=[True, False], truncated_value=0, by hand): the truncated row 0 gets 0,
the EOS-terminated row 1 keeps 2.0: row rewards [0.0, 2.0].

Actual:
    padded width: 6, lengths: [5, 6]
    row rewards: [1.5, 0.0]
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


batch = concat_padded_tensors([trajectory(1, 4, 1.5), trajectory(3, 3, 2.0)])
print(f"padded width: {batch['attention_mask'].shape[1]}, lengths: {batch['attention_mask'].sum(-1).tolist()}")
out = actor(kl_ctl=0.0, mask_no_eos_with_zero=True, max_new_tokens=4)._compute_advantages(batch)
print("row rewards:", fmt(out["tot_rewards"].sum(-1)))
