"""REINFORCE++ counts the masked tool tokens inside a multi-turn response as steps and whitens over them (skyrl
0.3.0, finding reinforce-pp-whitens-over-tool-tokens).

`compute_reinforce_plus_plus_outcome_advantage` accumulates `r_t + gamma * G` over every position, resets the
running return where `response_mask` is 0 and whitens the returns over `response_mask`
(backends/skyrl_train/utils/ppo_utils.py:1190-1197). The trainer hands it the batch's `response_mask`
(skyrl/train/trainer.py:1168-1170), which is 1 on every response token (skyrl/train/dataset/preprocess.py:128-130,
trainer.py:917), tool and observation tokens included (they have loss mask 0,
skyrl/train/generators/skyrl_gym_generator.py:1180-1181). Responses are right-aligned, so that mask has no gap:
the reset only ever meets the leading padding, and a tool token is a step of the return (reward 0, one factor
gamma) whose return enters the whitening's mean and variance. Reached with
`trainer.algorithm.advantage_estimator: "reinforce++"` on multi-turn rollouts, at any gamma
(`generator.step_wise_trajectories` supports only outcome estimators, trainer.py:1128-1132).

Run: pip install skyrl==0.3.0 torch (its skyrl-train backend imports ray, omegaconf, loguru, jaxtyping,
transformers, datasets; see rlspec's conformance/frameworks/skyrl/requirements.txt); python
reinforce-pp-whitens-over-tool-tokens.py

Expected (spec adv.reinforce_pp, by hand): loss mask [0, 1, 0, 1] (position 2 a tool token), r = [., 1, ., 1],
gamma 1: returns G_3 = 1, G_1 = 1 + 1 = 2 (the same under every gap rule at gamma 1), whitened over the 2 valid
tokens (mean 1.5, sample std 0.7071): advantages [0.7071, -0.7071].

Actual:
    returns at the loss tokens: [2.0, 1.0]
    advantages at the loss tokens: [1.1547, -0.5774]
"""

import importlib
import sys
import typing


def load(name):
    """Import skyrl module `name`. skyrl 0.3.0 declares Python >= 3.11, but on 3.11 `import skyrl.backends` fails:
    pydantic refuses the `typing.TypedDict` field type of skyrl/tinker/types.py:132-139 before Python 3.12 (finding
    skyrl-backends-import-fails-on-python-311). Only then is it imported with `typing.TypedDict` bound to
    `typing_extensions.TypedDict`, restored afterwards; every SkyRL module loads unmodified."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # pydantic's PydanticUserError
        if "typing_extensions.TypedDict" not in str(exc):
            raise
    for key in [k for k in sys.modules if k == "skyrl" or k.startswith("skyrl.")]:
        del sys.modules[key]  # the half-imported package of the failed attempt
    import typing_extensions

    real = typing.TypedDict
    typing.TypedDict = typing_extensions.TypedDict
    try:
        return importlib.import_module(name)
    finally:
        typing.TypedDict = real


import numpy as np  # noqa: E402
import torch  # noqa: E402

ppo = load("skyrl.backends.skyrl_train.utils.ppo_utils")
config = load("skyrl.train.config")

# One response of 3 tokens after 1 padding column (right-aligned, as preprocess.py lays it out):
# response_mask covers the response, the loss mask leaves out the tool token at position 2.
response_mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
loss_mask = torch.tensor([[0.0, 1.0, 0.0, 1.0]])
rewards = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # each turn's reward on its last response token
adv, ret = ppo.compute_advantages_and_returns(token_level_rewards=rewards, response_mask=response_mask, index=np.array(["0"]),
                                              adv_estimator="reinforce++", config=config.AlgorithmConfig(), values=None,
                                              gamma=1.0, lambd=1.0)  # the trainer's call, trainer.py:1168-1178
valid = loss_mask[0].bool()
print("returns at the loss tokens:", [round(float(x), 4) for x in ret[0][valid]])
print("advantages at the loss tokens:", [round(float(x), 4) for x in adv[0][valid]])
