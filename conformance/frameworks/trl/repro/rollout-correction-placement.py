"""The rollout corrections scale the policy term only, and rejected tokens still count (trl 1.16.0, finding rollout-correction-placement).

GRPOTrainer._compute_loss multiplies the per-token policy loss by the off-policy sequence mask
(:3140-3141) and by the vLLM importance-sampling ratio (:3146-3147), then adds beta * KL unweighted
(:3149-3150), and reduces over the loss mask taken before any correction (bnpo :3159; dapo/cispo divide
by num_items_in_batch, counted at :2497-2498): a rejected (or zero-weight) token is a zero policy term that
still counts in the denominator, and its KL term stays. verl instead removes rejected tokens from the
response mask. A deliberate placement (spec offpolicy.loss: rejected="zero", the KL unweighted, preset
trl), not a bug. The script builds a real GRPOTrainer with off_policy_mask_threshold=0.1, beta=0.04 and
use_bias_correction_kl=False (the plain k3) and calls _compute_loss with the model's forward replaced by
fixed per-token log-probs.

Run: pip install trl==1.16.0; python rollout-correction-placement.py

Expected (spec offpolicy.loss corrected_policy_loss, by hand): row 0 rejected (A < 0, mean drift
0.5 > 0.1), row 1 kept with PPO token loss -1 (on-policy, A = 1); every token's KL term 0.04·0.106531 =
0.004261. Canonical (rejected="drop"): row 0 leaves the loss and the count, L = (-1 + 0.004261) =
-0.995739, dL/dlogp = [[0, 0], [-0.492131, -0.492131]] (-1/2 policy part + 0.04·(1 - e^-0.5)/2 = 0.007869 KL part).
Preset trl (rejected="zero"): L = (4·0.004261 - 2)/4 = -0.495739, dL/dlogp =
[[0.003935, 0.003935], [-0.246065, -0.246065]].

Actual:
    loss -0.495739 dL/dlogp [[0.003935, 0.003935], [-0.246065, -0.246065]]
"""

import logging
import os
import tempfile
import warnings

warnings.simplefilter("ignore")
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

hf_logging.set_verbosity_error()
logging.getLogger("trl").setLevel(logging.ERROR)


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


def tiny_trainer(reward_func=zero_reward, **config):
    """A real GRPOTrainer(GRPOConfig(**config)) on a random-weight 1-layer Llama saved to a temporary folder
    (so a reference model can be loaded from it) with a word-level tokenizer built in memory: no download."""
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": 3 + i for i in range(13)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    path = tempfile.mkdtemp()
    LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, pad_token_id=0, eos_token_id=1,
                                 bos_token_id=None)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, bf16=False, report_to=[], per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=4, logging_strategy="no", save_strategy="no",
                      disable_tqdm=True, **config)
    trainer = GRPOTrainer(model=path, reward_funcs=reward_func, args=args, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": ["w0 w1"] * 2}))
    trainer.current_gradient_accumulation_steps = 1  # what Trainer.train() sets for one micro-batch per step
    trainer.model.train()
    return trainer


def compute_loss(trainer, logp, advantages, old=None, ref=None, dtype=torch.float32):
    """trainer._compute_loss on one micro-batch whose current per-token log-probs are `logp` ([B, T], all
    completion tokens valid): the model's forward (_get_per_token_logps_and_entropies) is replaced by these
    log-probs, so the script sets the log-ratios exactly; everything after it is TRL's. Returns the loss and
    its gradient with respect to `logp`."""
    logp = torch.tensor(logp, dtype=dtype, requires_grad=True)
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logp, torch.zeros_like(logp), None)
    B, T = logp.shape
    inputs = {"prompt_ids": torch.full((B, 1), 3), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.full((B, T), 4), "completion_mask": torch.ones(B, T, dtype=torch.long),
              "advantages": torch.tensor(advantages, dtype=dtype), "num_items_in_batch": torch.tensor(B * T)}
    if old is not None:  # absent: _compute_loss uses per_token_logps.detach() (ratio exactly 1)
        inputs["old_per_token_logps"] = torch.tensor(old, dtype=dtype)
    if ref is not None:
        inputs["ref_per_token_logps"] = torch.tensor(ref, dtype=dtype)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss, logp.grad


def fmt(x, digits=6):
    """Rounded floats (nan printed as nan, -0.0 as 0.0)."""
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, list):
        return "[" + ", ".join(fmt(v, digits) for v in x) + "]"
    return str(round(float(x), digits) + 0.0)

# OPSM (DeepSeek-V3.2's off-policy sequence mask) without vLLM reads old_per_token_logps (:3073): row 0
# (A = -1) drifted by mean(old - logp) = 0.5 > 0.1 and is rejected; row 1 (A = 1) is on-policy
logp = [[-1.0, -1.0], [-1.0, -1.0]]
old = [[-0.5, -0.5], [-1.0, -1.0]]
ref = [[-1.5, -1.5], [-1.5, -1.5]]  # ref - logp = -0.5: k3 = e^-0.5 + 0.5 - 1 = 0.106531
trainer = tiny_trainer(loss_type="bnpo", beta=0.04, use_bias_correction_kl=False, off_policy_mask_threshold=0.1)
loss, g = compute_loss(trainer, logp, [-1.0, 1.0], old=old, ref=ref)
print("loss", fmt(loss), "dL/dlogp", fmt(g))
