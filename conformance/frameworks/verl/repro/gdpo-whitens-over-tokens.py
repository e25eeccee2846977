"""GDPO's batch normalisation is a whitening over tokens (verl 0.9.1, finding gdpo-whitens-over-tokens).

compute_gdpo_outcome_advantage runs GRPO per reward key, sums the weighted results and then normalises the batch
with masked_whiten over the response tokens (trainer/ppo/core_algos.py:446-466; its docstring, :388-389: "Batch-
level normalization (via masked_whiten)"): every token is one sample, so a long response weighs more in the mean
and the std than a short one. The GDPO paper (arXiv:2601.05242) normalises the per-sequence sums over the batch's
sequences. A documented choice: the spec's composition whiten(gdpo_advantages(batch_normalize=False,
singleton="raw")) on the tokens (preset verl). Reached with algorithm.adv_estimator=gdpo whenever the responses
of a batch differ in length. Called as ray_trainer.compute_advantage calls it (:260-263: non_tensor_batch and
batch passed, the per-key scores placed at each row's last response token, :420-433).

Run: pip install verl==0.9.1 torch numpy; python gdpo-whitens-over-tokens.py

Expected (spec adv.gdpo, batch_normalize over sequences, by hand): two groups of two, key a = [1, 0, 1, 0], key
b = [1, 1, 0, 1]. Per key and group, GRPO gives +-a' with a' = 0.7071 / (1 + 1e-6) for a split pair and 0 for
an equal pair: sums s = [a', -a', 0, 0] (key a in group 0; key b's group 1 [-a', a'] plus key a's [a', -a']
cancel). Over the 4 sequences: mean 0, unbiased std a' sqrt(2/3), so A = [1.2247, -1.2247, 0, 0] on every token
of each row. verl's whitening counts row 0's three tokens three times: mean a'/3, unbiased std a' sqrt(2/3),
giving row 0 [0.8165] x 3, row 1 -1.633, rows 2 and 3 -0.4082.

Actual:
    advantages row 0: [0.8165, 0.8165, 0.8165]
    advantages row 1: [-1.633, 0.0, 0.0]
    advantages row 2: [-0.4082, 0.0, 0.0]
    advantages row 3: [-0.4082, 0.0, 0.0]
"""
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.trainer.config.algorithm import AlgoConfig  # noqa: E402
from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: E402

response_mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
batch = {"prompts": torch.zeros(4, 1, dtype=torch.long),  # a one-token prompt, then the response
         "attention_mask": torch.cat([torch.ones(4, 1), response_mask], dim=1).long()}
non_tensor_batch = {"a": np.array([1.0, 0.0, 1.0, 0.0]), "b": np.array([1.0, 1.0, 0.0, 1.0])}
advantages, _ = get_adv_estimator_fn("gdpo")(
    token_level_rewards=torch.zeros(4, 3), response_mask=response_mask, index=np.array(["p0", "p0", "p1", "p1"], dtype=object),
    config=AlgoConfig(gdpo_reward_keys=["a", "b"]), non_tensor_batch=non_tensor_batch, batch=batch)
for b in range(4):
    print(f"advantages row {b}:", [round(float(x), 4) + 0.0 for x in advantages[b]])
