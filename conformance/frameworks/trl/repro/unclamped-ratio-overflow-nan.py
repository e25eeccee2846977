"""No log-ratio clamp: a token with A = 0 and an overflowing ratio makes the loss or its gradient NaN (trl 1.16.0, finding unclamped-ratio-overflow-nan).

GRPOTrainer._compute_loss forms coef_1 = torch.exp(log_importance_weights) with no clamp
(trl/trainer/grpo_trainer.py:3083-3095): a log-ratio above 88.7 is inf in float32. The PPO family
(grpo, bnpo, dr_grpo, dapo, luspo) computes coef_1 * advantages (:3118), which is 0·inf = NaN at A = 0,
and torch.min keeps the NaN (:3120); at importance_sampling_level="sequence" (GSPO) the row's mean
log-ratio is exponentiated the same way (:3086-3088), so the whole row is NaN. SAPO's gate saturates
(sigmoid(inf) = 1, :3123), so its value is finite, but the gradient through exp is 0·inf = NaN. The
NaN loss or gradient reaches every parameter of the step. The script builds real GRPOTrainers and calls
_compute_loss with the model's forward replaced by fixed per-token log-probs (the log-ratios set exactly).

Run: pip install trl==1.16.0; python unclamped-ratio-overflow-nan.py

Expected (spec loss.ppo, loss.gspo, loss.sapo, by hand; golden vectors
ppo_token_loss/overflowing-ratio-zero-advantage, gspo_token_loss/overflowing-ratio-zero-advantage,
sapo_token_loss/overflowing-ratio): a token (or GSPO row) with A = 0 contributes 0 with a zero gradient
whatever its ratio (0·inf := 0). Row 1 (A = 1, ratios e^0.1, 1, e^-0.1, e^0.2): dapo (token mean over 8)
L = -(1.105171 + 1 + 0.904837 + 1.2)/8 = -0.526251, dL/dlogp row 1 = -r/8 unclipped, 0 for the clipped
e^0.2: [-0.138146, -0.125, -0.113105, 0]; GSPO (grpo's mean of row means) s = e^0.05 = 1.051271,
L = -s/2 = -0.525636, dL/dlogp = -s/8 = -0.131409 per token; SAPO (tau_pos 1) L = -(1/2)·mean_t
4·sigmoid(r - 1) = -1.028811, dL/dlogp = -(1/2)·sigmoid'(r - 1)·r = [-0.137765, -0.125, -0.112849,
-0.15082]; row 0's gradient is 0 everywhere.

Actual:
    loss_type=dapo: loss nan; dL/dlogp row 0 [nan, 0.0, 0.0, 0.0], row 1 [-0.138146, -0.125, -0.113105, 0.0]
    loss_type=grpo, importance_sampling_level=sequence: loss nan; dL/dlogp row 0 [nan, nan, nan, nan], row 1 [-0.131409, -0.131409, -0.131409, -0.131409]
    loss_type=sapo: loss -1.028811; dL/dlogp row 0 [nan, 0.0, 0.0, 0.0], row 1 [-0.137765, -0.125, -0.112849, -0.15082]
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

# row 0: A = 0 and log-ratios [800, 0.1, 0, -0.1]; row 1: A = 1 and log-ratios [0.1, 0, -0.1, 0.2]
logp = [[-1.0, -0.9, -1.1, -0.8], [-0.9, -1.0, -1.1, -0.8]]
old = [[-801.0, -1.0, -1.1, -0.7], [-1.0, -1.0, -1.0, -1.0]]
for config in ({"loss_type": "dapo"}, {"loss_type": "grpo", "importance_sampling_level": "sequence"},
               {"loss_type": "sapo"}):
    trainer = tiny_trainer(**config)
    loss, g = compute_loss(trainer, logp, [0.0, 1.0], old=old)
    name = ", ".join(f"{k}={v}" for k, v in config.items())
    print(f"{name}: loss {fmt(loss)}; dL/dlogp row 0 {fmt(g[0])}, row 1 {fmt(g[1])}")
