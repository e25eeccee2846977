"""OPSM under dapo keeps rejected tokens in the count (ms-swift 4.6.0, finding opsm-dapo-counts-rejected-tokens).

`off_policy_sequence_mask_delta` drops a sequence by editing `completion_mask` (swift/rlhf_trainers/grpo_trainer.py:
1069-1080), but dapo/cispo divide by `num_items_in_batch`, counted from the masks before that edit (:795-801,
:1126-1129), so the rejected tokens still count. grpo and bnpo divide by the edited mask. A rejected row of 2
tokens beside a kept row with per-token losses 1, 1. Reached with off_policy_sequence_mask_delta set and
loss_type dapo or cispo.

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python opsm-dapo-counts-rejected-tokens.py

Expected (spec off_policy_sequence_mask + aggregate, rejected sequences dropped, by hand): the kept row's token mean,
(1 + 1) / 2 = 1.0. ms-swift's dapo gives 2 / 4 = 0.5 (TRL does the same: the spec's variant rejected="zero");
bnpo gives 1.0.

Actual:
    rejected rows: [False, True]
    dapo loss: 0.5
    bnpo loss: 1.0
"""

import tempfile
import types
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from swift.rl_core.data import GRPOBatch  # noqa: E402
from swift.rlhf_trainers.arguments import GRPOConfig  # noqa: E402
from swift.rlhf_trainers.grpo_trainer import GRPOTrainer  # noqa: E402


def trainer(batch_size, num_processes=1, grad_accum=1, **settings):
    """GRPOTrainer.__init__ needs a registered model, a template, datasets and a rollout engine, none of them loss
    math: a stand-in made with __new__ gets what __init__ would set, from ms-swift's own code where it computes it
    (GRPOConfig, _prepare_algorithm_params, _prepare_metrics); the rest as the mixins set it on a plain run."""
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], num_generations=1,
                      per_device_train_batch_size=batch_size, gradient_accumulation_steps=grad_accum, **settings)
    t = GRPOTrainer.__new__(GRPOTrainer)
    t.args, t.beta = args, args.beta
    t._prepare_algorithm_params()
    t._prepare_metrics()
    t.num_generations, t.temperature = args.num_generations, args.temperature
    t.max_completion_length = args.max_completion_length
    t.disable_rollout_importance_sampling, t.dynamic_num_samples, t._has_teacher = False, False, False
    t.chord_sft_iterator, t.model_accepts_loss_kwargs, t.compute_loss_func = None, False, None
    t.model = torch.nn.Linear(1, 1).train()  # only model.training is read
    t.template = types.SimpleNamespace(padding_free=False, sequence_parallel_size=1)
    t.accelerator = types.SimpleNamespace(num_processes=num_processes, device=torch.device("cpu"),
                                          is_main_process=True, gather_for_metrics=lambda x: x)
    t.current_gradient_accumulation_steps = grad_accum
    return t


def loss(settings, logp, old, adv, mask=None, entropies=None, num_items=None, grad_accum=1, **batch_fields):
    """_compute_loss_and_metrics on one micro-batch; returns (loss, d loss / d logp)."""
    mask = torch.ones(logp.shape, dtype=torch.bool) if mask is None else mask
    t = trainer(logp.shape[0], grad_accum=grad_accum, **settings)
    logp = logp.clone().requires_grad_(True)
    # the model forward is replaced: it returns the log-probs the gradient is taken at (and the entropies)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropies)
    batch = GRPOBatch(completion_mask=mask, truncated_mask=torch.zeros(mask.shape[0], dtype=torch.bool),
                      seq_lengths=mask.sum(-1), old_per_token_logps=old, advantages=adv,
                      num_items_in_batch=mask.sum() if num_items is None else torch.tensor(float(num_items)),
                      **batch_fields)
    value, _ = t._compute_loss_and_metrics(t.model, {}, batch)
    value.backward()
    return value, logp.grad


def fmt(xs):
    return [round(float(x), 4) for x in xs]


lp = torch.full((2, 2), -1.0)
old = lp.clone()
old[1] = -0.5  # row 1: mean(old - logp) = 0.5 > delta = 0.1 with A < 0: rejected
adv = torch.full((2, 2), -1.0)  # row 0 on-policy: per-token loss -r A = 1
t = trainer(2, loss_type="dapo", off_policy_sequence_mask_delta=0.1)
kept = t._compute_off_policy_sequence_mask(lp, old, torch.ones(2, 2, dtype=torch.bool), adv[:, 0])
print("rejected rows:", [not bool(k) for k in kept])
for loss_type in ("dapo", "bnpo"):
    value, _ = loss({"loss_type": loss_type, "off_policy_sequence_mask_delta": 0.1}, lp, old, adv)
    print(f"{loss_type} loss:", round(float(value), 4))
