"""GPG's alpha counts the non-zero rewards, not the samples of groups with a reward spread (verl 0.9.1, finding
gpg-alpha-counts-nonzero-rewards).

compute_gpg_outcome_advantage sets alpha = bsz / torch.count_nonzero(scores).clamp(min=1) (trainer/ppo/core_algos.py:
810-811) and returns alpha * (score - group mean) (:827). The GPG authors' code (AMAP-ML/GPG,
open-r1/src/open_r1/gpg_trainer.py, commit e096da8) computes inverse_alpha = (#groups - #groups whose rewards have
zero std) / #groups (:541-554, :625) and divides the loss by it (:315-316): alpha = B / (B - M), M the samples of
the all-equal groups, which carry no gradient. The two agree when every zero reward sits in a group with a spread
and no all-equal group has a non-zero reward; they differ as soon as a group is all-correct (or all-wrong with a
non-zero reward).

Run: pip install verl==0.9.1 torch numpy; python gpg-alpha-counts-nonzero-rewards.py

Expected (spec adv.gpg, alpha="groups", the paper's code, by hand): three groups of two with rewards [1, 0 | 1, 1 |
0, 0]: two of the three groups are all-equal, alpha = 6 / 2 = 3, A = [1.5, -1.5, 0, 0, 0, 0].

Actual:
    A: 1.0 -1.0 0.0 0.0 0.0 0.0
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

advantages, _ = get_adv_estimator_fn("gpg")(
    token_level_rewards=torch.tensor([[1.0], [0.0], [1.0], [1.0], [0.0], [0.0]]),
    response_mask=torch.ones(6, 1), index=np.array(["p0", "p0", "p1", "p1", "p2", "p2"], dtype=object))
print("A:", " ".join(f"{float(x):.1f}" for x in advantages[:, 0]))
