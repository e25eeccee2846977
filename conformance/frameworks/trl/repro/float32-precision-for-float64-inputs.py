"""float64 inputs get float32 precision: rewards, the fused LM head and SAPO's temperatures (trl 1.16.0, finding float32-precision-for-float64-inputs).

GRPOTrainer stores the reward functions' values in a float32 tensor (trl/trainer/grpo_trainer.py:1581,
:1637), so every advantage is computed in float32; its fused LM head (add_fused_lm_head, the only way
GRPO/RLOO score tokens, grpo_trainer.py:1066-1077) accumulates the log-sum-exp statistics in float32
whatever the model's dtype (trl/kernels/chunked_logprob.py:340-346, :378-380); and loss_type="sapo" builds
its temperatures with torch.where on Python floats (grpo_trainer.py:3122), a float32 tensor, so
tau_neg = 1.05 is 1.0499999523. The right quantities, float32-precise; with a float32 or bfloat16 model
(the usual case) nothing is lost beyond the model's own dtype, except in the rewards. The script builds
a real GRPOTrainer to score two rewards, puts TRL's fused head on a float64 random-weight Llama, and
runs _compute_loss with float64 log-probs and advantages (the model's forward replaced by them).

Run: pip install trl==1.16.0; python float32-precision-for-float64-inputs.py

Expected (spec adv.grpo, logprob.fused, loss.sapo, float64 by hand): the rewards 1/3 = 0.333333333333 and
0.1 = 0.100000000000; the fused head's log-probs equal the float64 log-softmax of the model's logits to
about 1e-15; the SAPO loss on-policy with A = -1 is -sigmoid(0)·4/tau_neg·A = 2/1.05 = 1.904761904762.

Actual:
    rewards: torch.float32 ['0.333333343267', '0.100000001490']
    fused log-probs of a float64 model: torch.float32 max |diff| from its float64 logits 2.0e-07
    sapo loss, float64 inputs: torch.float64 1.904761991263
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

# 1. rewards: the reward functions' Python floats are stored in float32 (grpo_trainer.py:1581, :1637)
trainer = tiny_trainer(reward_func=lambda completions, **kwargs: [1 / 3, 0.1])
rewards = trainer._calculate_rewards([{"prompt": "w0"}] * 2, ["w0"] * 2, ["w1"] * 2, [[4]] * 2)
print("rewards:", rewards.dtype, [f"{v:.12f}" for v in rewards[:, 0].tolist()])

# 2. the fused LM head of a float64 model: float32 statistics (kernels/chunked_logprob.py:340-346)
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, pad_token_id=0, eos_token_id=1,
                                     bos_token_id=None)).double()
ids = torch.tensor([[3, 4, 5, 6, 7]])
with torch.no_grad():
    full = model(input_ids=ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]  # float64
from trl.trainer.utils import add_fused_lm_head  # noqa: E402

add_fused_lm_head(model)  # what GRPOTrainer.__init__ does (grpo_trainer.py:1066-1077)
with torch.no_grad():
    fused = model(input_ids=ids, labels=ids, fused_lm_head=True).log_probs[0]
print("fused log-probs of a float64 model:", fused.dtype, f"max |diff| from its float64 logits {float((fused - full).abs().max()):.1e}")

# 3. SAPO's temperatures: torch.where on Python floats, a float32 tensor (grpo_trainer.py:3122)
trainer = tiny_trainer(loss_type="sapo")
loss, _ = compute_loss(trainer, [[-1.0, -2.0]], [-1.0], dtype=torch.float64)  # on-policy, A = -1: L = 2/tau_neg
print("sapo loss, float64 inputs:", loss.dtype, f"{float(loss):.12f}")
