"""Clip-Cov and KL-Cov read the advantages the trainer has already scaled (skyrl 0.3.0, finding
clip-cov-kl-cov-read-scaled-advantages).

The trainer divides the advantages by the loss reduction's counts before the loss
(`RayPPOTrainer._normalize_advantages`, skyrl/train/trainer.py:1456-1478: under the default
`loss_reduction="token_mean"`, skyrl/train/config/config.py:621, A / N with N the mini-batch's loss tokens,
backends/skyrl_train/utils/ppo_utils.py:1123-1124), and every loss then sums (`reduce_loss`, :1088-1092).
`compute_policy_loss_clip_cov` compares the covariance of those scaled advantages with `clip_cov_lb` /
`clip_cov_ub` (:911-919), so its (1, 5) window (config.py:524-529) applies to cov / N: on the true covariance it
is (N, 5N), and with thousands of tokens in a mini-batch Clip-Cov cuts almost nothing.
`compute_policy_loss_kl_cov` adds `ppo_kl_coef * |d|` unscaled to the selected tokens' scaled loss (:966-991),
so after the sum the KL term weighs N times its share. Reached with `trainer.algorithm.policy_loss_type`
"clip_cov" or "kl_cov" under any `loss_reduction` (under "sequence_mean" the scaling differs per row and changes
the selection itself).

Run: pip install skyrl==0.3.0 torch (its skyrl-train backend imports ray, omegaconf, loguru, jaxtyping,
transformers, datasets; see rlspec's conformance/frameworks/skyrl/requirements.txt); python
clip-cov-kl-cov-read-scaled-advantages.py

Expected (spec loss.clip_cov and loss.kl_cov, token mean, by hand). Clip-Cov: one row, 4 tokens, ratio 1,
logp = [-1, -3, -1, -3] (mean -2), A = [3, -0.5, -1.5, -1] (mean 0): covariances A * (logp + 2) =
[3, 0.5, -1.5, 1]; only token 0 lies strictly inside (1, 5), and the spec cuts n = max(int(2e-4 * 4), 1) = 1 of
the candidates: token 0, a quarter of the tokens. Loss: the token mean of -A over the kept tokens,
(0.5 + 1.5 + 1) / 4 = 0.75. KL-Cov (kl_cov_frac 0.25, ppo_kl_coef 1): logp = [-1, -2, -1, -2], d = logp -
old_logp = [0.5, 0, 0, 0], A = [2, -1, -1, 0]: covariances A * (logp + 1.5) = [1, 0.5, -0.5, 0], the top token 0
gets the KL term: (-2 e^0.5 + 0.5 + 1 + 1 + 0) / 4 = -0.1994.

Actual:
    clip_cov on the raw advantages: fraction cut 0.25
    clip_cov on the trainer's path: fraction cut 0.0, loss 0.0
    kl_cov on the trainer's path: loss 0.1756
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

torch.manual_seed(0)  # Clip-Cov draws its cut with torch.randperm (:923); here only one token is a candidate
ppo = load("skyrl.backends.skyrl_train.utils.ppo_utils")
config = load("skyrl.train.config")
trainer = load("skyrl.train.trainer")
training_batch = load("skyrl.backends.skyrl_train.training_batch")


def trainer_path(algorithm, log_probs, old_log_probs, advantages, loss_mask):
    """RayPPOTrainer._normalize_advantages (one mini-batch) then the registered loss, as the worker calls it.
    The method reads only self.cfg.trainer: a namespace holding it stands in for the trainer."""
    me = ns(cfg=ns(trainer=ns(algorithm=algorithm, micro_train_batch_size_per_gpu=1)))
    data = training_batch.TrainingInputBatch({"advantages": advantages.clone(), "response_mask": loss_mask.clone(),
                                              "loss_mask": loss_mask.clone()})
    data.metadata = {}
    scaled = trainer.RayPPOTrainer._normalize_advantages(me, data, [(0, advantages.shape[0])], None)["advantages"]
    loss_fn = ppo.PolicyLossRegistry.get(algorithm.policy_loss_type)
    return loss_fn(log_probs, old_log_probs, scaled, config=algorithm, loss_mask=loss_mask)


mask = torch.ones(1, 4)
clip_cov = config.AlgorithmConfig(policy_loss_type="clip_cov")  # ClipCovConfig defaults 2e-4, (1, 5)
logp = torch.tensor([[-1.0, -3.0, -1.0, -3.0]])
A = torch.tensor([[3.0, -0.5, -1.5, -1.0]])
_, metrics = ppo.PolicyLossRegistry.get("clip_cov")(logp, logp.clone(), A, config=clip_cov, loss_mask=mask)
print("clip_cov on the raw advantages: fraction cut", round(metrics["clip_ratio"], 4))
loss, metrics = trainer_path(clip_cov, logp, logp.clone(), A, mask)
print(f"clip_cov on the trainer's path: fraction cut {round(metrics['clip_ratio'], 4)}, loss {round(float(loss), 4) + 0.0}")

kl_cov = config.AlgorithmConfig(policy_loss_type="kl_cov", kl_cov=config.KLCovConfig(kl_cov_frac=0.25, ppo_kl_coef=1.0))
logp = torch.tensor([[-1.0, -2.0, -1.0, -2.0]])
old = logp - torch.tensor([[0.5, 0.0, 0.0, 0.0]])
A = torch.tensor([[2.0, -1.0, -1.0, 0.0]])
loss, _ = trainer_path(kl_cov, logp, old, A, mask)
print("kl_cov on the trainer's path: loss", round(float(loss), 4))
