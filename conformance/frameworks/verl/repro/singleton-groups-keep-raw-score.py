"""A group of one keeps its raw score in GRPO, REINFORCE++-baseline, OPO and GPG (verl 0.9.1, finding
singleton-groups-keep-raw-score).

Each estimator gives a one-sample group a baseline of 0 instead of leaving it without signal: "grpo" mean 0 and
std 1 (trainer/ppo/core_algos.py:315-317, so A = r / (1 + 1e-6)), "grpo_vectorized" the same through
group_mean_std (utils/groupwise.py:214-220), "reinforce_plus_plus_baseline" mean 0 (:572-573) before its token
whitening (:582), "opo" baseline 0 (:678-679), "gpg" mean 0 (:817-819, times alpha = B / #nonzero scores,
:810-811). The code says so explicitly: the spec's singleton="raw" (preset verl for each). Reached with
actor_rollout_ref.rollout.n = 1, RolloutConfig's default (workers/config/rollout.py:167; no config check refuses
it: utils/config.py validates only batch divisibility, :123-127).

Run: pip install verl==0.9.1 torch numpy; python singleton-groups-keep-raw-score.py

Expected (spec adv.grpo / adv.reinforce_pp_baseline / adv.opo / adv.gpg, singleton="zero", by hand): two groups of
one with scores 1 and 2 (one response token each) have no other member to compare with: every advantage 0
(REINFORCE++-baseline whitens those zeros: still 0). With singleton="raw": [1, 2] (GRPO [1/(1+1e-6), 2/(1+1e-6)],
GPG alpha = 2/2 = 1 in both of the spec's alpha counts), and REINFORCE++-baseline whitens [1, 2] to [-0.7071, 0.7071].

Actual:
    grpo: [1.0, 2.0]
    grpo_vectorized: [1.0, 2.0]
    reinforce_plus_plus_baseline: [-0.7071, 0.7071]
    opo: [1.0, 2.0]
    gpg: [1.0, 2.0]
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.config.algorithm import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

index = np.array(["p0", "p1"], dtype=object)  # the trainer's uid: two prompts, one sample each
for name in ("grpo", "grpo_vectorized", "reinforce_plus_plus_baseline", "opo", "gpg"):
    advantages, _ = get_adv_estimator_fn(name)(token_level_rewards=torch.tensor([[1.0], [2.0]]),
                                               response_mask=torch.ones(2, 1), index=index, config=AlgoConfig())
    print(f"{name}:", [round(float(x), 4) + 0.0 for x in advantages[:, 0]])
