"""The PPO recipe puts the score one slot after the last valid token and bootstraps GAE from the value there (torchtune 0.6.1, finding score-one-past-the-last-token).

`generate_trajectory` (recipes/ppo_full_finetune_single_device.py:856-865) sets `value_seq_idxs = seq_lens + 1`
where `0 < seq_lens < max_generated_tokens - 1`, else `seq_lens` (seq_lens = the 0-indexed last valid token), and
keeps the value at that slot (`value_padding_masks` False there); `train` passes `value_seq_idxs` to
`get_rewards_ppo` as `valid_score_idxs` (:945-951), so the score lands on the first padding slot, and GAE
(:954-960) bootstraps the last token from the value there. The older TRL PPOTrainer did the same
(`sequence_lengths_p1`, `padding_mask_p1`): a convention, not a bug; torchtune differs from it only for a
one-token response (`seq_lens > 0`), whose score stays on its token.

Stand-ins (rlspec's, not torchtune's): the recipe object is made with `__new__` and given only the attributes
`generate_trajectory` reads; `generation.generate` is replaced by a function returning three scripted responses
(the policy's sampling), the reference, value and reward models by modules returning zeros, values 0.5 and the
score 1 everywhere. Everything from the generated tokens on (truncation, lengths, value_seq_idxs, masks) is the
recipe's.

Run: pip install torchtune==0.6.1 torchao==0.15.0 omegaconf (with torch); python score-one-past-the-last-token.py

Expected (spec reward.rlhf, by hand): the score goes on the last valid token, i.e. the stop token: responses
[7, 2, pad, pad], [7, 8, 9, 2] and [2, pad, pad, pad] get it at positions 1, 3 and 0; with KL 0 the token rewards
are [0, 1, 0, 0], [0, 0, 0, 1] and [1, 0, 0, 0].

Actual:
    seq_lens: [1, 3, 0]
    value_seq_idxs: [2, 3, 0]
    rewards: [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]]
    values kept: [[0.5, 0.5, 0.5, 0.0], [0.5, 0.5, 0.5, 0.5], [0.5, 0.0, 0.0, 0.0]]
"""
import contextlib
import importlib.util
import types
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import torch
import torchtune
from torchtune import generation, rlhf

path = Path(torchtune.__file__).resolve().parent.parent / "recipes" / "ppo_full_finetune_single_device.py"
spec = importlib.util.spec_from_file_location("ppo_recipe", path)  # loaded by path, as `tune run` does
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

PROMPT, MAX_NEW, VOCAB = 2, 4, 12
SCRIPT = torch.tensor([[7, 2, 5, 6], [7, 8, 9, 2], [2, 4, 4, 4]])  # what the policy "samples"; stop token 2


def scripted_generate(model, prompt, *, max_generated_tokens, **kwargs):
    return torch.cat([prompt, SCRIPT], dim=1), torch.zeros(prompt.shape[0], max_generated_tokens, VOCAB)


class Const(torch.nn.Module):
    def __init__(self, value, width):
        super().__init__()
        self.value, self.width = value, width

    def forward(self, tokens, input_pos=None, mask=None):
        return torch.full((*tokens.shape, self.width), self.value)


generation.generate = scripted_generate  # stand-in for the policy's sampling
recipe = module.PPOFullFinetuneRecipeSingleDevice.__new__(module.PPOFullFinetuneRecipeSingleDevice)
recipe.cache_ctx_manager = lambda enable_kv_cache, decoder_max_seq_len: contextlib.nullcontext()
recipe.enable_kv_cache = False
recipe._policy_model = None
recipe._ref_policy_model = Const(0.0, VOCAB)
recipe._value_model = Const(0.5, 1)
recipe._reward_model = Const(1.0, 1)
recipe._max_generated_tokens, recipe._temperature, recipe._top_k, recipe._rng = MAX_NEW, 1.0, None, None
recipe._tokenizer = types.SimpleNamespace(pad_id=0)
recipe._stop_token_ids = torch.tensor([2])
recipe._penalise_no_eos, recipe._min_response_length, recipe._reward_penalty = False, None, -3.0

trajectory = recipe.generate_trajectory(torch.ones(3, PROMPT, dtype=torch.long))
# train(), :945-951: the score at valid_score_idxs = value_seq_idxs; kl_coeff 0 (the KL terms are 0 here anyway)
rewards, _, _ = rlhf.get_rewards_ppo(trajectory.scores, trajectory.logprobs, trajectory.ref_logprobs, 0.0,
                                     trajectory.value_seq_idxs)
print("seq_lens:", trajectory.seq_lens.tolist())
print("value_seq_idxs:", trajectory.value_seq_idxs.tolist())
print("rewards:", [[round(float(v) + 0.0, 4) for v in row] for row in rewards])
print("values kept:", [[round(float(v) + 0.0, 4) for v in row] for row in trajectory.values])
