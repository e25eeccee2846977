"""DAPO's overlong penalty keeps growing past the maximum length (verl 0.9.1, finding dapo-overlong-no-floor).

DAPORewardManager adds min(-(L - (max_resp_len - buffer)) / buffer * penalty_factor, 0) to the score
(workers/reward_manager/dapo.py:121-127; the reward-loop twin used by the v1 trainer,
experimental/reward_loop/reward_manager/dapo.py:108-114), with no floor: beyond max_resp_len the penalty goes
past -penalty_factor, where DAPO's soft overlong punishment (arXiv:2503.14476, eq. 13) stays at -1 x factor.
A formula choice (preset verl: beyond="linear", as AReaL and ms-swift). It matters only for a response longer than
max_resp_len, a reward_kwargs value nothing ties to the rollout's response_length
(experimental/reward_loop/reward_manager/dapo.py:35): with max_resp_len equal to the generation limit no response
exceeds it and both rules agree.

Run: pip install verl==0.9.1 torch numpy; python dapo-overlong-no-floor.py

Expected (spec reward.overlong, DAPO eq. 13, by hand): max_length 8, buffer 4, factor 1, score 0: lengths
[4, 6, 8, 9, 12, 20] get 0 up to 8 - 4 = 4, then -(L - 4) / 4 up to 8, then -1: [0, -0.5, -1, -1, -1, -1].

Actual:
    rewards: [0.0, -0.5, -1.0, -1.25, -2.0, -4.0]
"""
import warnings

warnings.filterwarnings("ignore")

import types  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.workers.reward_manager.dapo import DAPORewardManager  # noqa: E402

lengths = torch.tensor([4, 6, 8, 9, 12, 20])
B, R = len(lengths), int(lengths.max())
valid = (torch.arange(R)[None, :] < lengths[:, None]).long()
data = DataProto.from_dict(
    tensors={"prompts": torch.zeros(B, 1, dtype=torch.long), "responses": torch.zeros(B, R, dtype=torch.long),
             "attention_mask": torch.cat([torch.ones(B, 1, dtype=torch.long), valid], dim=1)},
    non_tensors={"data_source": np.array(["x"] * B, dtype=object),
                 "reward_model": np.array([{"ground_truth": ""} for _ in range(B)], dtype=object)})
# a stand-in tokenizer (the manager only decodes, for the score function) and a score function returning 0
tokenizer = types.SimpleNamespace(eos_token="</s>", decode=lambda ids, skip_special_tokens=True: "")
manager = DAPORewardManager(tokenizer=tokenizer, num_examine=0, compute_score=lambda **kwargs: 0.0, max_resp_len=8,
                            overlong_buffer_cfg=types.SimpleNamespace(enable=True, len=4, penalty_factor=1.0, log=False))
reward = manager(data, return_dict=True)["reward_tensor"].sum(dim=-1)
print("rewards:", [round(float(x), 4) + 0.0 for x in reward])
