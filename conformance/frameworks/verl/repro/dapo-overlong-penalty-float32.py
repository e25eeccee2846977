"""DAPO's overlong penalty is a float32 value (verl 0.9.1, finding dapo-overlong-penalty-float32).

The penalty -exceed_len / buffer * penalty_factor divides an int64 length tensor by an int
(workers/reward_manager/dapo.py:82, :124-126; experimental/reward_loop/reward_manager/dapo.py:57, :111-113), which
torch returns as a float32 tensor, and the reward tensor it lands in is float32 as well (dapo.py:66;
experimental/reward_loop/reward_manager/base.py:78). The right quantity, rounded to float32: a spec value in
float64 (-1/3 below) meets only float32 precision. verl keeps every reward in float32, so this is the precision of
all its rewards, not a property of this formula alone.

Run: pip install verl==0.9.1 torch numpy; python dapo-overlong-penalty-float32.py

Expected (spec reward.overlong, by hand, float64): max_length 8, buffer 3, factor 1, a response of 6 tokens:
-(6 - 5) / 3 = -0.333333333333 (to 12 digits).

Actual:
    penalty: -0.333333343267 float32
"""
import warnings

warnings.filterwarnings("ignore")

import types  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.workers.reward_manager.dapo import DAPORewardManager  # noqa: E402

data = DataProto.from_dict(
    tensors={"prompts": torch.zeros(1, 1, dtype=torch.long), "responses": torch.zeros(1, 6, dtype=torch.long),
             "attention_mask": torch.ones(1, 7, dtype=torch.long)},
    non_tensors={"data_source": np.array(["x"], dtype=object),
                 "reward_model": np.array([{"ground_truth": ""}], dtype=object)})
# a stand-in tokenizer (the manager only decodes, for the score function) and a score function returning 0
tokenizer = types.SimpleNamespace(eos_token="</s>", decode=lambda ids, skip_special_tokens=True: "")
manager = DAPORewardManager(tokenizer=tokenizer, num_examine=0, compute_score=lambda **kwargs: 0.0, max_resp_len=8,
                            overlong_buffer_cfg=types.SimpleNamespace(enable=True, len=3, penalty_factor=1.0, log=False))
reward = manager(data, return_dict=True)["reward_tensor"]
print(f"penalty: {float(reward.sum()):.12f} {str(reward.dtype).replace('torch.', '')}")
