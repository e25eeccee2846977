"""A response whose stop token falls in the last slot is penalised as "no EOS" (torchtune 0.6.1, finding eos-in-last-slot-counts-as-no-eos).

`get_reward_penalty_mask` decides "no EOS" as "no padding": `reward_penalty_mask = ~padding_masks.any(-1)`
(torchtune/rlhf/rewards.py:40-42, "since sequences will have been truncated at EOS"). A response whose first stop
token is its max_generated_tokens-th token has no padding after it, so with `penalise_no_eos=True` (the shipped
config recipes/configs/mistral/7B_full_ppo_low_memory.yaml:155) its score is replaced by `reward_penalty` like a
truncated one. The recipe's chain (recipes/ppo_full_finetune_single_device.py:820-849) is followed:
`truncate_sequence_at_first_stop_token`, `training.get_unmasked_sequence_lengths`, `get_reward_penalty_mask`.

Run: pip install torchtune==0.6.1 torchao==0.15.0 (with torch); python eos-in-last-slot-counts-as-no-eos.py

Expected (by hand, from the flag's meaning): max_generated_tokens = 4, stop token 2: [7, 8, 9, 2] ends with its stop
token and [7, 8, 2, 0] too, [7, 8, 9, 6] is truncated: only the third is "no EOS" -> penalised [False, False, True].

Actual:
    penalised: [True, False, True]
"""
import warnings

warnings.filterwarnings("ignore")

import torch
from torchtune import rlhf, training

responses = torch.tensor([[7, 8, 9, 2], [7, 8, 2, 5], [7, 8, 9, 6]])
padding, _ = rlhf.truncate_sequence_at_first_stop_token(responses, torch.tensor([2]), 0)
seq_lens = training.get_unmasked_sequence_lengths(padding)
penalised = rlhf.get_reward_penalty_mask(padding, seq_lens, penalise_no_eos=True, min_response_length=None)
print("penalised:", penalised.tolist())
