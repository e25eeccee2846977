"""A rejected token still sends NaN back through the gradient (areal 1.0.4, finding rejected-token-nan-gradient).

With the decoupled loss and rejection sampling (`rejection_sampling` with action "mask"), `ppo_actor_loss_fn` removes
a token whose pi_proximal / pi_behave exceeds `upper` from `loss_mask` (areal/utils/functional/functional.py:486-496)
and then selects with `torch.where(loss_mask, torch.exp(logprobs - proximal_logprobs), 0)` (:509) and
`torch.where(loss_mask, pg_loss * behave_imp_weight, 0)` (:539-542). The value at the rejected token is 0, but if its
PPO log-ratio overflows float32 (> ~88.7) the unselected branch's gradient is 0 * exp(100) = 0 * inf = NaN, and it
reaches the micro-batch's gradient. Reached with use_decoupled_loss=True and a rejection_sampling config (AReaL's
staleness filter for asynchronous rollouts), on a token whose ratio overflows (nothing bounds the log-ratio).

Run: pip install areal==1.0.4 torch (areal's full requirements do not install on CPU; what its import needs
there is listed in rlspec's conformance/frameworks/areal/requirements.txt); python rejected-token-nan-gradient.py

Expected (spec decoupled_ppo_token_loss with behav_mode="mask", by hand): token 0 (pi_prox / pi_behave = e^3 > 2) is
rejected: its value and gradient are 0; token 1 (all ratios 1, A = 1) has value -1 and gradient -1. Over AReaL's
token count of 2 (rejected tokens stay in it): loss -0.5, gradient [0, -0.5].

Actual:
    rejected (loss_mask after rejection): [False, True]
    loss: -0.5
    grad: [nan, -0.5]
"""

import logging
import os
import warnings

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # the log-prob kernels are torch.compile'd; not needed here
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from areal.api.cli_args import RejectionSamplingConfig  # noqa: E402
from areal.utils.functional import apply_rejection_sampling, ppo_actor_loss_fn  # noqa: E402

logging.disable(logging.CRITICAL)  # AReaL logs its configuration to stdout


def fmt(xs):
    return [round(float(x), 4) for x in xs]


rs = RejectionSamplingConfig(level="token", action="mask", metric="ratio", upper=2.0)
mask = torch.ones(1, 2, dtype=torch.bool)
prox = torch.tensor([[-101.0, -1.0]])  # token 0: current/proximal log-ratio 100
behave = torch.tensor([[-104.0, -1.0]])  # token 0: proximal/behaviour ratio e^3 > upper = 2
kept = apply_rejection_sampling(proximal_logprobs=prox, old_logprobs=behave, loss_mask=mask, cu_seqlens=None,
                                config=rs).loss_mask
print("rejected (loss_mask after rejection):", [bool(k) for k in kept[0]])
logp = torch.full((1, 2), -1.0, requires_grad=True)
value, _ = ppo_actor_loss_fn(logprobs=logp, proximal_logprobs=prox, old_logprobs=behave,
                             advantages=torch.tensor([[1.0, 1.0]]), eps_clip=0.2, loss_mask=mask,
                             rejection_sampling=rs)
value.backward()
print("loss:", round(float(value), 4))
print("grad:", fmt(logp.grad[0]))
