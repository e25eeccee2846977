"""CISPO without epsilon_high caps every importance weight at 0.2 (trl 1.16.0, finding cispo-default-cap-0-2).

GRPOTrainer.__init__ sets epsilon_high = args.epsilon_high if given, else args.epsilon (0.2)
(trl/trainer/grpo_trainer.py:946), and loss_type="cispo" uses it as an absolute cap on the detached ratio:
w = clamp(r, max=epsilon_high) (:3110-3111). GRPOConfig documents both the fallback ("If not specified, it
defaults to the same value as ... epsilon") and, for cispo, "the recommended value is 5.0"
(trl/trainer/grpo_config.py:184-188, :705-713), but does not apply 5.0: GRPOConfig(loss_type="cispo")
trains with w = min(r, 0.2). The script builds real GRPOTrainers (a random-weight 1-layer Llama, a
tokenizer built in memory) and calls their _compute_loss with the model's forward replaced by fixed
per-token log-probs.

Run: pip install trl==1.16.0 (it brings torch, transformers, datasets, accelerate); python cispo-default-cap-0-2.py

Expected (spec loss.cispo, by hand; TRL's absolute bound is preset trl): L = -sg(w)·A·logp, dapo's
token mean over N = 3 tokens, so dL/dlogp = -w·A/N. On-policy r = 1 gives w = 1 under any cap >= 1
(canonical min(r, 1 + 0.28); TRL's recommended absolute 5.0): dL/dlogp = -1/3 = -0.333333 per token,
REINFORCE's. Off-policy, ratios [1.5, 1, 0.1] give w = [1.28, 1, 0.1] canonically and [1.5, 1, 0.1]
with the cap 5.0. The default cap 0.2 gives w = 0.2 wherever r >= 0.2: on-policy -0.066667, a fifth of
REINFORCE's gradient, and no importance correction above r = 0.2.

Actual:
    GRPOConfig(loss_type='cispo').epsilon_high: None
    trainer.epsilon_high (the cap): 0.2
    on-policy dL/dlogp, default: [-0.066667, -0.066667, -0.066667]
    on-policy dL/dlogp, epsilon_high=5.0: [-0.333333, -0.333333, -0.333333]
    ratios [1.5, 1.0, 0.1]: weights -N*dL/dlogp, default: [0.2, 0.2, 0.1]
    ratios [1.5, 1.0, 0.1]: weights -N*dL/dlogp, epsilon_high=5.0: [1.5, 1.0, 0.1]
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

# the default config: loss_type="cispo", nothing else
default = tiny_trainer(loss_type="cispo")
print("GRPOConfig(loss_type='cispo').epsilon_high:", default.args.epsilon_high)
print("trainer.epsilon_high (the cap):", default.epsilon_high)
logp = [[-1.0, -2.0, -0.5]]
_, g = compute_loss(default, logp, [1.0])  # on-policy: ratio 1
print("on-policy dL/dlogp, default:", fmt(g[0]))
recommended = tiny_trainer(loss_type="cispo", epsilon_high=5.0)
_, g = compute_loss(recommended, logp, [1.0])
print("on-policy dL/dlogp, epsilon_high=5.0:", fmt(g[0]))
# off-policy: ratios 1.5, 1, 0.1 (old = logp - log r)
ratios = [1.5, 1.0, 0.1]
old = [[lp - torch.log(torch.tensor(r)).item() for lp, r in zip(logp[0], ratios)]]
for name, trainer in (("default", default), ("epsilon_high=5.0", recommended)):
    _, g = compute_loss(trainer, logp, [1.0], old=old)
    print(f"ratios {ratios}: weights -N*dL/dlogp, {name}:", fmt(-3 * g[0], 4))
