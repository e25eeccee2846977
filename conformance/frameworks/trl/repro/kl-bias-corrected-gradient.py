"""The default KL term's gradient is beta*(logp - ref), not k3's (trl 1.16.0, finding kl-bias-corrected-gradient).

With beta > 0, GRPOTrainer._compute_loss adds beta * k3, k3 = exp(ref - logp) - (ref - logp) - 1, and with
use_bias_correction_kl=True (the default, trl/trainer/grpo_config.py:972-982) multiplies k3 by
coef_1 = exp(logp - old_logp) on the graph (trl/trainer/grpo_trainer.py:3095-3105). On-policy coef_1 is 1,
so the value is k3's, but its gradient adds k3 itself: d(k3·r)/dlogp = (1 - e^(ref - logp)) + k3 =
logp - ref. The docstring says so ("This changes the KL gradient whenever beta != 0, including
on-policy"): a documented choice (DeepSeek-V3.2's unbiased reverse-KL gradient). The script builds real
GRPOTrainers (beta=0.04, loss_type "dapo", the default) and calls _compute_loss on-policy with A = 0,
the model's forward replaced by fixed per-token log-probs.

Run: pip install trl==1.16.0; python kl-bias-corrected-gradient.py

Expected (spec kl.loss, by hand): kl_loss_term(estimator="k3") on-policy, token mean over N = 2, with
ref - logp = [-0.5, 0.5]: value 0.04·(0.106531 + 0.148721)/2 = 0.005105; canonical gradient (k3's own,
gradient="estimator") 0.04·(1 - e^(ref - logp))/2 = [0.007869, -0.012974]; preset trl
(gradient="bias_corrected") 0.04·(logp - ref)/2 = [0.01, -0.01].

Actual:
    use_bias_correction_kl=True: loss 0.005105 dL/dlogp [0.01, -0.01]
    use_bias_correction_kl=False: loss 0.005105 dL/dlogp [0.007869, -0.012974]
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

logp = [[-1.0, -2.0]]
ref = [[-1.5, -1.5]]  # ref - logp = -0.5, 0.5
for flag in (True, False):
    trainer = tiny_trainer(beta=0.04, **({} if flag else {"use_bias_correction_kl": False}))
    loss, g = compute_loss(trainer, logp, [0.0], ref=ref)  # on-policy (ratio 1), A = 0: only the KL term
    print(f"use_bias_correction_kl={trainer.args.use_bias_correction_kl}: loss", fmt(loss), "dL/dlogp", fmt(g[0]))
