"""GAE bootstraps the row that fills the padded width (areal 1.0.4, finding gae-bootstrap-from-the-padded-width).

`PPOActor._compute_advantages` starts GAE from `nextvalues = values[:, max_seqlen - 1] * seq_no_eos_mask`
(areal/trainer/ppo/actor.py:223), with `seq_no_eos_mask = seqlens == attention_mask.shape[1]` (:199-201): the row
that fills the batch's padded width bootstraps from the critic's value at its last token, every other row from
nothing, whether it stopped with EOS or was truncated. This runs whenever the batch carries the critic's values (PPO
with a critic, trainer/rl_trainer.py:633-635), with or without mask_no_eos_with_zero. Below: row 0 hit
max_new_tokens = 4 behind a 1-token prompt (length 5); row 1 stopped with EOS after 3 tokens behind a 3-token
prompt (length 6, the width). gamma = lambda = 1 (the defaults), no KL; the critic's values per trajectory.

Run: pip install areal==1.0.4 torch (areal's full requirements do not install on CPU; what its import needs
there is listed in rlspec's conformance/frameworks/areal/requirements.txt); python gae-bootstrap-from-the-padded-width.py

Expected (spec gae, V = 0 after each row's last valid token, by hand): the advantage of each row's last action is
its score minus the value before it: row 0: 1.5 - 0.5 = 1.0; row 1: 2.0 - 1.0 = 1.0 (its episode ended with EOS).
AReaL gives row 1 2.0 + 4.0 - 1.0 = 5.0, bootstrapping from the value after its EOS; by AReaL's own rule (bootstrap
the rows without EOS) row 0 would get 1.5 + 3.0 - 0.5 = 4.0, and gets 1.0.

Actual:
    last-action advantages: [1.0, 5.0]
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


batch = concat_padded_tensors([trajectory(1, 4, 1.5, values=[0.0, 0.25, -0.25, 0.5, 3.0]),
                               trajectory(3, 3, 2.0, values=[0.0, 0.0, 0.25, -0.5, 1.0, 4.0])])
out = actor(kl_ctl=0.0, max_new_tokens=4)._compute_advantages(batch)
lengths = batch["attention_mask"].sum(-1)
# position t of AReaL's frame is the action that produces token t + 1: a row's last action is at length - 2
print("last-action advantages:", fmt(out["advantages"][torch.arange(2), lengths - 2]))
