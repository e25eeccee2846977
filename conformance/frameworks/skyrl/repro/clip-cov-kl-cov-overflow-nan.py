"""Clip-Cov and KL-Cov are NaN at a zero advantage with an overflowing ratio (skyrl 0.3.0, finding
clip-cov-kl-cov-overflow-nan).

`compute_policy_loss_clip_cov` and `compute_policy_loss_kl_cov` take `exp(log_probs - old_log_probs)` with no
log-ratio clamp (backends/skyrl_train/utils/ppo_utils.py:902-905, :962-967; the "regular" loss clamps at 20
through `safe_exp_delta`, :566) and form `-A * ratio`: a valid token with A = 0 and a log-ratio above 88.7
(float32) gives 0 * inf = NaN, which `torch.maximum` (Clip-Cov, :937) keeps, and `reduce_loss` sums into the
loss (:1088-1092), so the step's loss and every gradient are NaN. The same as verl's Clip-Cov / KL-Cov, from
which these were adapted. Reached with `trainer.algorithm.policy_loss_type` "clip_cov" or "kl_cov" whenever such
a token occurs: an extreme input, but nothing in the configuration prevents it.

Run: pip install skyrl==0.3.0 torch (its skyrl-train backend imports ray, omegaconf, loguru, jaxtyping,
transformers, datasets; see rlspec's conformance/frameworks/skyrl/requirements.txt); python
clip-cov-kl-cov-overflow-nan.py

Expected (spec loss.clip_cov and loss.kl_cov with SkyRL's defaults, summed as reduce_loss sums, by hand): logp =
[-1, -2, -3], log-ratios d = [800, 0.2, 0.1], A = [0, 1, 2]. Token 0 has A = 0: its loss -0 * s is 0. Clip-Cov
(eps 0.2): token 1 max(-e^0.2, -1.2) = -1.2, token 2 -2 e^0.1 = -2.2103; the covariances (A - 1)(logp + 2) of the
unclipped tokens 0 and 2 are -1, outside (1, 5): nothing cut. Sum -3.4103. KL-Cov (kl_cov_frac 0.2: one token):
the covariances [-1, 0, -1] select token 1, which gets |d| = 0.2: 0 + (-e^0.2 + 0.2) - 2 e^0.1 = -3.2317.

Actual:
    clip_cov loss: nan
    kl_cov loss: nan
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


import torch  # noqa: E402

ppo = load("skyrl.backends.skyrl_train.utils.ppo_utils")
config = load("skyrl.train.config")

loss_mask = torch.ones(1, 3)
log_probs = torch.tensor([[-1.0, -2.0, -3.0]])
old_log_probs = log_probs - torch.tensor([[800.0, 0.2, 0.1]])
advantages = torch.tensor([[0.0, 1.0, 2.0]])
for name in ("clip_cov", "kl_cov"):
    algorithm = config.AlgorithmConfig(policy_loss_type=name)  # ClipCovConfig / KLCovConfig defaults
    loss, _ = ppo.PolicyLossRegistry.get(name)(log_probs, old_log_probs, advantages, config=algorithm, loss_mask=loss_mask)
    print(f"{name} loss:", round(float(loss), 4))
