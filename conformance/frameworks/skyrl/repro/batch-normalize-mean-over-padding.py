"""`advantage_batch_normalize` centres the advantages on a mean taken over the padding (skyrl 0.3.0, finding
batch-normalize-mean-over-padding).

`RayPPOTrainer._normalize_advantages` with `trainer.algorithm.advantage_batch_normalize` (off by default,
skyrl/train/config/config.py:617) computes `mean = advantages.mean()` over all B x T positions, while the
variance and the count are masked by `response_mask` (skyrl/train/trainer.py:1448-1454). The estimators return 0
at every position outside the response (e.g. GRPO's `scores.unsqueeze(-1) * response_mask`,
backends/skyrl_train/utils/ppo_utils.py:1334), and responses are right-aligned with the shorter ones left-padded
(skyrl/train/dataset/preprocess.py:128-130), so in any batch of responses of different lengths the mean is pulled
towards 0 by the padding and the advantages are not centred. Reached with `advantage_batch_normalize: true`.

Run: pip install skyrl==0.3.0 torch (its skyrl-train backend imports ray, omegaconf, loguru, jaxtyping,
transformers, datasets; see rlspec's conformance/frameworks/skyrl/requirements.txt); python
batch-normalize-mean-over-padding.py

Expected (spec adv.whiten, then the token_mean scaling 1 / N, by hand): a response of 2 tokens right-aligned
behind one padding column, mask [0, 1, 1], A = [0, 1, 3]: the mean over the N = 2 valid tokens is 2, the sample variance ((1 - 2)^2 + (3 - 2)^2) / 1 = 2: whitened
[-0.7071, 0.7071], over N: [-0.3536, 0.3536] (with SkyRL's population variance, 1: [-0.5, 0.5]). Either way the
two advantages are centred. SkyRL's mean is 4/3 (over the 3 positions), its variance ((1 - 4/3)^2 + (3 - 4/3)^2) / 2
= 13/9.

Actual:
    advantages at the valid tokens: [-0.1387, 0.6934]
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


from types import SimpleNamespace as ns  # noqa: E402

import torch  # noqa: E402

config = load("skyrl.train.config")
trainer = load("skyrl.train.trainer")
training_batch = load("skyrl.backends.skyrl_train.training_batch")

algorithm = config.AlgorithmConfig(advantage_batch_normalize=True)  # loss_reduction "token_mean" (the default)
# _normalize_advantages reads only self.cfg.trainer: a namespace holding it stands in for the trainer
me = ns(cfg=ns(trainer=ns(algorithm=algorithm, micro_train_batch_size_per_gpu=1)))
mask = torch.tensor([[0.0, 1.0, 1.0]])  # right-aligned: the padding leads (preprocess.py:129-130)
data = training_batch.TrainingInputBatch({"advantages": torch.tensor([[0.0, 1.0, 3.0]]), "response_mask": mask.clone(),
                                          "loss_mask": mask.clone()})
data.metadata = {}
out = trainer.RayPPOTrainer._normalize_advantages(me, data, [(0, 1)], None)["advantages"]
print("advantages at the valid tokens:", [round(float(x), 4) + 0.0 for x in out[0, 1:3]])
