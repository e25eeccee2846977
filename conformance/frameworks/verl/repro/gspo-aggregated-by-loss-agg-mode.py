"""GSPO is aggregated with the actor's loss_agg_mode, token-mean by default (verl 0.9.1, finding
gspo-aggregated-by-loss-agg-mode).

compute_policy_loss_gspo builds the GSPO-token objective (the sequence ratio with a stop-gradient times
pi / sg(pi) per token, trainer/ppo/core_algos.py:1589-1597) and hands it to agg_loss with loss_agg_mode
(:1603-1607), which defaults to "token-mean" (workers/config/actor.py:164). The code says so: "differ from GSPO
original paper that aggregate the loss at the sequence level (seq-mean-token-mean) ... default is token-mean"
(:1603-1604; the docstring recommends seq-mean-token-mean, :1570). So on ragged rows a long response weighs more than in the paper's per-sequence mean. Reached with
actor.policy_loss.loss_mode=gspo and the default loss_agg_mode; loss_agg_mode=seq-mean-token-mean gives the
paper's objective.

Run: pip install verl==0.9.1 torch numpy; python gspo-aggregated-by-loss-agg-mode.py

Expected (spec loss.gspo with agg seq_mean_token_mean, the paper's objective, by hand): on-policy (every ratio
1, inside the clip range), row 0 one token with A = +1, row 1 three tokens with A = -1: the per-token loss is -A,
so the sequence mean is (-1 + 1) / 2 = 0. token_mean gives (-1 + 3) / 4 = 0.5.

Actual:
    token-mean: 0.5
    seq-mean-token-mean: 0.0
"""
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

response_mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
log_prob = torch.full((2, 3), -1.0)
advantages = torch.tensor([[1.0] * 3, [-1.0] * 3])
for mode in ("token-mean", "seq-mean-token-mean"):
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=mode,
                         policy_loss=PolicyLossConfig(loss_mode="gspo"))
    loss, _ = get_policy_loss_fn("gspo")(old_log_prob=log_prob, log_prob=log_prob, advantages=advantages,
                                         response_mask=response_mask, loss_agg_mode=mode, config=config)
    print(f"{mode}:", round(float(loss), 4) + 0.0)
