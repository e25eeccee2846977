"""No log-ratio clamp in the policy losses: NaN at an overflowing ratio (areal 1.0.4, finding overflowing-ratio-nan).

`ppo_actor_loss_fn` takes `torch.exp(logprobs - proximal_logprobs)` of the raw log-ratio (areal/utils/functional/
functional.py:509; GSPO's sequence ratio at :136) and `sapo_loss_fn` likewise (:601). In float32 a log-ratio above
~88.7 is inf: with A = 0 the PPO/GSPO term is -0 * inf = NaN; with A = 1 the clipped branch wins the value but the
gradient is 0 * inf = NaN; SAPO's saturated gate has gradient sigma'(.) * r = 0 * inf = NaN. The loss is summed over
the micro-batch (:542, :623), so one such token makes its loss or gradient NaN. Reached by any PPO/GRPO/GSPO/SAPO
run once the policy has moved far from the proximal policy (nothing in the configuration bounds the log-ratio;
verl and OpenRLHF clamp it at +-20).

Run: pip install areal==1.0.4 torch (areal's full requirements do not install on CPU; what its import needs
there is listed in rlspec's conformance/frameworks/areal/requirements.txt); python overflowing-ratio-nan.py

Expected (spec ppo_token_loss / gspo_token_loss / sapo_token_loss, by hand; token 0 has log-ratio 100, token 1 r = 1;
the loss is the token mean over 2 tokens):
PPO, A = [0, 1]: 0 and -1, loss -0.5. PPO, A = [1, 1]: token 0 clipped at 1.2, loss (-1.2 - 1)/2 = -1.1, gradient
[0, -0.5] (the clipped branch has none). GSPO, row 0 (mean log-ratio 100, A = 0) beside row 1 (r = 1, A = 1): loss
(0 + 0 - 1 - 1)/4 = -0.5. SAPO (tau_pos 1), A = [1, 1]: values -4 and -2, loss -3, gradient [-A 4 sigma(1 - sigma) r
-> 0, -1/2] = [0, -0.5].

Actual:
    PPO A=[0, 1] loss: nan
    PPO A=[1, 1] loss: -1.1
    PPO A=[1, 1] grad: [nan, -0.5]
    GSPO loss: nan
    SAPO loss: -3.0
    SAPO grad: [nan, -0.5]
"""

import logging
import os
import warnings

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # the log-prob kernels are torch.compile'd; not needed here
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from areal.utils.functional import ppo_actor_loss_fn, sapo_loss_fn  # noqa: E402

logging.disable(logging.CRITICAL)  # AReaL logs its configuration to stdout


def fmt(xs):
    return [round(float(x), 4) for x in xs]


MASK = torch.ones(1, 2, dtype=torch.bool)
PROX = torch.tensor([[-101.0, -1.0]])


def ppo(adv, logp=None, prox=PROX, mask=MASK, **kw):
    logp = torch.full(prox.shape, -1.0, requires_grad=True) if logp is None else logp
    value, _ = ppo_actor_loss_fn(logprobs=logp, proximal_logprobs=prox, old_logprobs=prox, advantages=adv,
                                 eps_clip=0.2, loss_mask=mask, **kw)
    value.backward()
    return value, logp.grad


value, _ = ppo(torch.tensor([[0.0, 1.0]]))
print("PPO A=[0, 1] loss:", round(float(value), 4))
value, grad = ppo(torch.tensor([[1.0, 1.0]]))
print("PPO A=[1, 1] loss:", round(float(value), 4))
print("PPO A=[1, 1] grad:", fmt(grad[0]))
value, _ = ppo(torch.tensor([[0.0, 0.0], [1.0, 1.0]]), prox=torch.tensor([[-101.0, -101.0], [-1.0, -1.0]]),
               mask=torch.ones(2, 2, dtype=torch.bool), importance_sampling_level="sequence")
print("GSPO loss:", round(float(value), 4))
logp = torch.full((1, 2), -1.0, requires_grad=True)
value, _ = sapo_loss_fn(logprobs=logp, old_logprobs=PROX, advantages=torch.tensor([[1.0, 1.0]]), tau_pos=1.0,
                        tau_neg=1.05, loss_mask=MASK)
value.backward()
print("SAPO loss:", round(float(value), 4))
print("SAPO grad:", fmt(logp.grad[0]))
