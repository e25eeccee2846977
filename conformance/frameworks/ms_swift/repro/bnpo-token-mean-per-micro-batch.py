"""bnpo is a mean of micro-batch token means (ms-swift 4.6.0, finding bnpo-token-mean-per-micro-batch).

loss_type "bnpo" divides each micro-batch's token sum by that micro-batch's own token count
(swift/rlhf_trainers/grpo_trainer.py:1085-1086), and the Trainer then averages the accumulation steps; "dapo"
divides by `num_items_in_batch`, the tokens of the whole accumulation window across processes (:795-801,
:1126-1132). Two accumulation steps of 1 and 3 tokens with per-token losses 1 | 0, 0, 0. Reached with
loss_type="bnpo" and micro-batches of unequal token counts (gradient accumulation or several processes).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python bnpo-token-mean-per-micro-batch.py

Expected (spec aggregate token_mean over the optimizer step's batch, by hand): (1 + 0 + 0 + 0) / 4 = 0.25.
ms-swift's bnpo gives (1/1 + 0/3) / 2 = 0.5; dapo gives 0.25.

Actual:
    bnpo: 0.5
    dapo: 0.25
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


lp = torch.full((1, 3), -1.0)
steps = ((torch.tensor([[True, False, False]]), -1.0), (torch.tensor([[True, True, True]]), 0.0))
for loss_type in ("bnpo", "dapo"):
    total = 0.0
    for mask, a in steps:  # per-token loss -r A = -A on-policy
        value, _ = loss({"loss_type": loss_type}, lp, lp.clone(), torch.full((1, 3), a), mask=mask, num_items=4,
                        grad_accum=2)
        total += float(value) / 2  # the Trainer divides each step's loss by the accumulation steps
    print(f"{loss_type}:", round(total, 4))
