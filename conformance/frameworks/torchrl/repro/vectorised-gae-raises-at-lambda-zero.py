"""Vectorised GAE and TD(lambda) raise IndexError at lambda = 0 (torchrl 0.14.1, finding vectorised-gae-raises-at-lambda-zero).

For gamma * lmbda == 0, `_geom_series_like` returns `torch.zeros_like(t)` (objectives/value/functional.py:197-198),
a 1-D tensor where a [lim, 1] filter is expected, and `_custom_conv1d` reads `filter.shape[-2]`
(objectives/value/utils.py:77). `vec_generalized_advantage_estimate`, `vec_td_lambda_return_estimate`,
`TDLambdaEstimator` (vectorized=True is its default, objectives/value/advantages.py:1727) and
`GAE(vectorized=True)` take that path; nothing rejects lmbda = 0 (TD(0)) or gamma = 0. The loop
`generalized_advantage_estimate` is right.

Run: pip install torchrl==0.14.1 (with tensordict 0.14.3, torch); python vectorised-gae-raises-at-lambda-zero.py

Expected (spec adv.gae, by hand): lambda = 0 makes the advantage the TD error, A_t = r_t + gamma V_{t+1} - V_t with
V after the terminal step 0: r = [0, 1, -1, 2], V = [0.5, 0.25, 1, -0.5], gamma = 0.5 give
A = [0 + 0.125 - 0.5, 1 + 0.5 - 0.25, -1 - 0.25 - 1, 2 - 0 + 0.5] = [-0.375, 1.25, -2.25, 2.5] from every path.

Actual:
    generalized_advantage_estimate: [-0.375, 1.25, -2.25, 2.5]
    vec_generalized_advantage_estimate: IndexError: tuple index out of range
    vec_td_lambda_return_estimate: IndexError: tuple index out of range
    TDLambdaEstimator: IndexError: tuple index out of range
    GAE(vectorized=True): IndexError: tuple index out of range
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from tensordict import TensorDict
from torchrl.objectives.value import functional as F
from torchrl.objectives.value.advantages import GAE, TDLambdaEstimator

torch.set_default_dtype(torch.float64)
gamma, lmbda = 0.5, 0.0
reward = torch.tensor([0.0, 1.0, -1.0, 2.0]).reshape(1, 4, 1)
value = torch.tensor([0.5, 0.25, 1.0, -0.5]).reshape(1, 4, 1)
next_value = torch.tensor([0.25, 1.0, -0.5, 0.0]).reshape(1, 4, 1)
done = torch.tensor([False, False, False, True]).reshape(1, 4, 1)


def show(name, fn):
    try:
        print(f"{name}: {[round(float(x), 4) for x in fn().flatten()]}")
    except IndexError as exc:
        print(f"{name}: IndexError: {exc}")


show("generalized_advantage_estimate",
     lambda: F.generalized_advantage_estimate(gamma, lmbda, value, next_value, reward, done, done)[0])
show("vec_generalized_advantage_estimate",
     lambda: F.vec_generalized_advantage_estimate(gamma, lmbda, value, next_value, reward, done, done)[0])
show("vec_td_lambda_return_estimate",
     lambda: F.vec_td_lambda_return_estimate(gamma, lmbda, next_value, reward, done, done) - value)


def module(cls, **kw):
    def run():
        td = TensorDict({"state_value": value, "next": {"state_value": next_value, "reward": reward, "done": done,
                                                         "terminated": done}}, batch_size=[1, 4])
        cls(gamma=gamma, lmbda=lmbda, value_network=None, **kw)(td)
        return td["advantage"]
    return run


show("TDLambdaEstimator", module(TDLambdaEstimator))
show("GAE(vectorized=True)", module(GAE, vectorized=True))
