"""GAE counts the masked tool tokens inside a multi-turn response as steps and whitens over them (skyrl 0.3.0,
finding gae-counts-tool-tokens-as-steps).

The multi-turn generator appends each turn's observation tokens to the response with loss mask 0
(skyrl/train/generators/skyrl_gym_generator.py:1180-1181), while the batch's `response_mask` is 1 on every
response token (skyrl/train/dataset/preprocess.py:128-130, skyrl/train/trainer.py:917). The trainer hands GAE
that `response_mask` (trainer.py:1168-1170); `compute_gae_advantage_return` runs `delta = r_t + gamma V_{t+1} -
V_t` over every position without reading it (backends/skyrl_train/utils/ppo_utils.py:1274-1278) and whitens over
it (:1282). A tool token inside a response is therefore a step, with the critic's value there and reward 0, and
its advantage enters the whitening's mean and variance. Reached with `trainer.algorithm.advantage_estimator: gae`
on multi-turn rollouts (`generator.step_wise_trajectories` supports only outcome estimators,
skyrl/train/trainer.py:1128-1132); with
gamma = lambd = 1 (the defaults) the advantages before whitening agree, the whitening still differs.

Run: pip install skyrl==0.3.0 torch (its skyrl-train backend imports ray, omegaconf, loguru, jaxtyping,
transformers, datasets; see rlspec's conformance/frameworks/skyrl/requirements.txt); python
gae-counts-tool-tokens-as-steps.py

Expected (spec adv.gae, by hand): loss mask [0, 1, 0, 1] (position 2 a tool token), r = [., 0, ., 1],
V = [., 0.5, 0, 0.5], gamma 1, lambda 0.5. The spec skips the tool token: A_3 = 1 - 0.5 = 0.5, A_1 = (0 + 0.5 -
0.5) + 0.5 * 0.5 = 0.25; returns - values at the loss tokens: [0.25, 0.5]. Whitened over those 2 tokens (mean
0.375, sample std 0.1768): [-0.7071, 0.7071].

Actual:
    returns - values at the loss tokens: [-0.125, 0.5]
    whitened advantages at the loss tokens: [-1.1094, 0.2774]
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
rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])  # the turn's reward on its last response token
values = torch.tensor([[0.0, 0.5, 0.0, 0.5]])  # the critic's value at every response position
adv, ret = ppo.compute_advantages_and_returns(token_level_rewards=rewards, response_mask=response_mask, index=np.array(["0"]),
                                              adv_estimator="gae", config=config.AlgorithmConfig(), values=values,
                                              gamma=1.0, lambd=0.5)  # the trainer's call, trainer.py:1168-1178
valid = loss_mask[0].bool()
print("returns - values at the loss tokens:", [round(float(x), 4) for x in (ret - values)[0][valid]])
print("whitened advantages at the loss tokens:", [round(float(x), 4) for x in adv[0][valid]])
